//! Unwinding through kernels: a kernel compiled with `-funwind-tables` calls a Rust
//! callback that panics or takes a backtrace. With the kernel's `.eh_frame` registered, the
//! panic reaches the `catch_unwind` in the Rust caller and the backtrace continues past the
//! kernel frames into the caller's. Runs natively and under qemu-user (aarch64, riscv64,
//! ppc64le) like the OS crate's tests.

mod common;

use common::{compile, Loaded};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// Two kernel frames between the caller and the callback (`outer` → `inner` → callback);
/// neither call is a tail call.
const KERNEL: &str = r#"
typedef int (*callback)(int);
__attribute__((noinline)) int inner(callback cb, int x) { return cb(x + 1) * 3; }
int outer(callback cb, int x) { return inner(cb, x * 2) + 7; }
"#;

type Callback = extern "C-unwind" fn(i32) -> i32;
type Outer = extern "C-unwind" fn(Callback, i32) -> i32;

fn load() -> (Loaded, Outer) {
    let object = compile(KERNEL, "-O2", &["-funwind-tables"]);
    let loaded = Loaded::new(&object);
    let registration = loaded.registration.as_ref().expect("a registration");
    assert!(
        registration.unwinds(),
        "the kernel's .eh_frame was not registered"
    );
    // SAFETY: `outer` has this signature; the module stays loaded while it is called.
    let outer: Outer = unsafe { std::mem::transmute(loaded.get("outer")) };
    (loaded, outer)
}

extern "C-unwind" fn doubles(x: i32) -> i32 {
    x * 2
}

extern "C-unwind" fn panics(x: i32) -> i32 {
    panic!("callback panicked with {x}");
}

#[test]
fn a_panic_in_a_callback_unwinds_through_the_kernel() {
    let (_loaded, outer) = load();
    assert_eq!(outer(doubles, 5), (5 * 2 + 1) * 2 * 3 + 7);
    let caught = catch_unwind(AssertUnwindSafe(|| outer(panics, 5)));
    let payload = caught.expect_err("the panic did not reach catch_unwind");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert_eq!(message, "callback panicked with 11");
    // The kernel still works after a panic went through it.
    assert_eq!(outer(doubles, 3), (3 * 2 + 1) * 2 * 3 + 7);
}

// The unwinder's own walk, for the instruction addresses of every frame.
#[repr(C)]
struct UnwindContext {
    _private: [u8; 0],
}
type TraceFn = extern "C" fn(*mut UnwindContext, *mut c_void) -> i32;
extern "C" {
    fn _Unwind_Backtrace(trace: TraceFn, data: *mut c_void) -> i32;
    fn _Unwind_GetIP(context: *mut UnwindContext) -> usize;
}

extern "C" fn record_ip(context: *mut UnwindContext, data: *mut c_void) -> i32 {
    // SAFETY: `data` is the `Vec<usize>` passed to _Unwind_Backtrace below; `context` is the
    // unwinder's current frame.
    unsafe {
        let ips = &mut *(data as *mut Vec<usize>);
        ips.push(_Unwind_GetIP(context));
    }
    0 // _URC_NO_REASON: keep going
}

/// What the callback saw: every frame's instruction address and the symbolised backtrace.
static SEEN: Mutex<(Vec<usize>, String)> = Mutex::new((Vec::new(), String::new()));

extern "C-unwind" fn backtraces(x: i32) -> i32 {
    let mut ips: Vec<usize> = Vec::new();
    // SAFETY: `record_ip` matches the callback type and only writes to `ips`.
    unsafe { _Unwind_Backtrace(record_ip, &mut ips as *mut Vec<usize> as *mut c_void) };
    let text = std::backtrace::Backtrace::force_capture().to_string();
    *SEEN.lock().unwrap() = (ips, text);
    x
}

#[inline(never)]
fn caller_of_the_kernel(outer: Outer) -> i32 {
    std::hint::black_box(outer(backtraces, 1))
}

#[test]
fn a_backtrace_in_a_callback_continues_past_the_kernel() {
    let (loaded, outer) = load();
    assert_eq!(caller_of_the_kernel(outer), (2 + 1) * 3 + 7); // x = 1: inner gets 2
    let (ips, text) = SEEN.lock().unwrap().clone();
    let within = |name: &str| {
        let (start, size) = loaded.range(name);
        ips.iter()
            .position(|&ip| (start..start + size).contains(&(ip as u64)))
    };
    let inner = within("inner").unwrap_or_else(|| panic!("no frame in inner: {ips:x?}"));
    let outer_frame = within("outer").unwrap_or_else(|| panic!("no frame in outer: {ips:x?}"));
    assert!(
        inner < outer_frame,
        "inner is not called by outer: {ips:x?}"
    );
    // Frames past the kernel's: the unwinder got from `outer` back into Rust.
    assert!(
        ips.len() > outer_frame + 2,
        "the walk stopped at the kernel: {ips:x?}"
    );
    assert!(
        text.contains("caller_of_the_kernel"),
        "the backtrace does not reach the kernel's caller:\n{text}"
    );
}

extern "C" {
    fn _Unwind_Find_FDE(pc: *const c_void, bases: *mut [usize; 3]) -> *const c_void;
}

fn has_fde(address: usize) -> bool {
    let mut bases = [0usize; 3];
    // SAFETY: _Unwind_Find_FDE only reads the unwinder's tables and writes `bases`.
    !unsafe { _Unwind_Find_FDE(address as *const c_void, &mut bases) }.is_null()
}

#[test]
fn dropping_the_module_deregisters_its_frames() {
    let (mut loaded, _) = load();
    let inside = loaded.get("inner") + 1;
    assert!(has_fde(inside), "no FDE registered for the kernel");
    loaded.registration = None;
    assert!(
        !has_fde(inside),
        "the kernel's FDE outlived its registration"
    );
}

#[test]
fn objects_without_unwind_tables_register_nothing() {
    let object = compile(KERNEL, "-O2", &[]);
    let loaded = Loaded::new(&object);
    assert!(
        loaded.registration.is_none(),
        "nothing to observe, yet published"
    );
}
