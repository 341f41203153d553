//! Arena modules and the observers: a module linked into an arena is told to the perf
//! map, the jitdump, GDB and the unwinder once it is published, and untold when it is
//! dropped; a range the arena gives to a later module gets a new perf-map line and jitdump
//! record; a batch (`Module::load_each_in`) is told once the batch is published. A test
//! binary of its own: the observers it switches on are process-wide. (With the
//! dlopen-fallback the dynamic linker, not elfjit, tells the tools about a module.)
// Perf maps and jitdumps are Linux perf's files, refused on Windows (docs/os-support.md).
#![cfg(unix)]
#![cfg(not(feature = "dlopen-fallback"))]

use elfjit::observe::{self, Features};
use elfjit::{Arch, CompileOptions, Compiler, Lang, Module};
use elfjit_os::{Arena, ArenaConfig, Mode};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The observers on for the whole binary, with their files in a scratch directory; the
/// guard serialises the tests (they count the process's GDB registrations).
fn observed() -> (MutexGuard<'static, ()>, &'static PathBuf) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = DIR.get_or_init(|| {
        // Under cargo's scratch space for these tests: the directory lives as long as the
        // process (a static), so it is left for the next build's clean, not in /tmp.
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("observe-arena-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        observe::enable_with(
            Features::PERF_MAP | Features::JITDUMP | Features::GDB,
            &dir.join("perf.map"),
            &dir,
        )
        .unwrap();
        dir
    });
    (guard, dir)
}

fn compile(source: &str, unwind_tables: bool) -> Vec<u8> {
    let mut opts = CompileOptions::new(Lang::C, Arch::host().expect("a supported host"));
    opts.unwind_tables = unwind_tables;
    Compiler::find()
        .expect("clang")
        .compile(source.as_bytes(), &opts)
        .expect("compile")
}

fn call(module: &Module, name: &str, x: i32) -> i32 {
    // SAFETY: every kernel here is `int NAME(int)`; `module` is alive.
    let f: extern "C" fn(i32) -> i32 =
        unsafe { std::mem::transmute(module.symbol(name).expect(name)) };
    f(x)
}

/// The names on the perf map's lines for `address` that start with `prefix`, in file
/// order (an arena dropped by another test may have held the same addresses).
fn perf_map_names_at(dir: &std::path::Path, address: usize, prefix: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("perf.map")).unwrap();
    let start = format!("{address:x} ");
    text.lines()
        .filter_map(|l| l.strip_prefix(&start))
        .filter_map(|rest| rest.split(' ').nth(1))
        .filter(|name| name.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// The jitdump's `JIT_CODE_LOAD` records as (code address, name, code bytes).
fn jitdump_loads() -> Vec<(u64, String, Vec<u8>)> {
    let bytes = std::fs::read(observe::jitdump_path().expect("a jitdump")).unwrap();
    let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap());
    let mut out = Vec::new();
    let mut at = u32_at(8) as usize; // the file header's size
    while at + 16 <= bytes.len() {
        let (id, size) = (u32_at(at), u32_at(at + 4) as usize);
        if id == 0 {
            // pid, tid, vma, code_addr, code_size, code_index, name\0, code.
            let body = at + 16;
            let (address, code_size) = (u64_at(body + 16), u64_at(body + 24) as usize);
            let name_end = body + 40 + bytes[body + 40..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&bytes[body + 40..name_end]).into_owned();
            // The code ends the record (the name may be padded).
            let code = bytes[at + size - code_size..at + size].to_vec();
            out.push((address, name, code));
        }
        at += size;
    }
    assert_eq!(at, bytes.len(), "records do not end where the file does");
    out
}

/// Loads two kernels of one size into `arena` in turn, each dropped before the next, until
/// the arena gives a kernel's code range to a later module; then checks that every load
/// at that address has its own perf-map line and jitdump record, in load order.
fn a_reused_range_is_told_again(arena: &Arena) {
    let (_serial, dir) = observed();
    let kernels = [
        (
            "arena_reuse_first",
            compile("int arena_reuse_first(int x) { return x + 1; }", false),
        ),
        (
            "arena_reuse_second",
            compile("int arena_reuse_second(int x) { return x + 2; }", false),
        ),
    ];
    let gdb_before = observe::registered_entries();
    let mut loads: Vec<(usize, &str)> = Vec::new();
    let reused = loop {
        let (name, object) = &kernels[loads.len() % 2];
        let module = Module::load_in(arena, object).expect("load");
        assert_eq!(call(&module, name, 40), 41 + (loads.len() % 2) as i32);
        assert_eq!(module.observed().map(|o| o.debugger_entries()), Some(1));
        assert_eq!(observe::registered_entries(), gdb_before + 1);
        let address = module.symbol(name).unwrap() as usize;
        let again = loads.iter().any(|&(a, _)| a == address);
        loads.push((address, name));
        drop(module);
        assert_eq!(
            observe::registered_entries(),
            gdb_before,
            "not unregistered"
        );
        if again {
            break address;
        }
        assert!(loads.len() < 5_000, "the arena never reused a range");
    };
    let expected: Vec<&str> = loads
        .iter()
        .filter(|&&(a, _)| a == reused)
        .map(|&(_, name)| name)
        .collect();
    assert!(expected.len() >= 2);
    assert_eq!(
        perf_map_names_at(dir, reused, "arena_reuse_"),
        expected,
        "perf map lines at {reused:x}"
    );
    let records: Vec<String> = jitdump_loads()
        .into_iter()
        .filter(|(address, name, _)| *address == reused as u64 && name.starts_with("arena_reuse_"))
        .map(|(_, name, _)| name)
        .collect();
    assert_eq!(records, expected, "jitdump records at {reused:x}");
}

#[test]
fn a_range_a_page_granular_arena_reuses_gets_a_new_perf_map_line_and_jitdump_record() {
    // Small regions, so fresh pages run out (and freed ones are reused) soon.
    let arena = Arena::with_config(ArenaConfig {
        class_bytes: 2 << 20,
        ..ArenaConfig::new(Mode::PageGranular)
    })
    .expect("arena");
    a_reused_range_is_told_again(&arena);
}

#[test]
fn a_range_a_packed_arena_reuses_gets_a_new_perf_map_line_and_jitdump_record() {
    // Natively (the driver's tests do not run under qemu-user) a packed arena is available.
    a_reused_range_is_told_again(&Arena::packed().expect("packed arena"));
}

extern "C-unwind" fn panics(x: i32) -> i32 {
    panic!("callback saw {x}");
}

#[test]
fn a_batch_is_told_once_it_is_published_and_untold_when_dropped() {
    let (_serial, dir) = observed();
    let names = ["arena_batch_a", "arena_batch_b", "arena_batch_c"];
    let objects: Vec<Vec<u8>> = names
        .iter()
        .map(|n| {
            compile(
                &format!("int {n}(int (*cb)(int), int x) {{ return cb(x + 1) * 2; }}"),
                true,
            )
        })
        .collect();
    let slices: Vec<&[u8]> = objects.iter().map(Vec::as_slice).collect();
    let gdb_before = observe::registered_entries();
    let arena = Arena::new();
    let modules = Module::load_each_in(&arena, &slices, &mut |_| None).expect("load");
    assert_eq!(observe::registered_entries(), gdb_before + names.len());
    let records = jitdump_loads();
    for (module, name) in modules.iter().zip(names) {
        let observed = module.observed().expect("observed");
        assert!(observed.unwinds() && observed.debugger_entries() == 1);
        let address = module.symbol(name).unwrap() as usize;
        assert_eq!(perf_map_names_at(dir, address, "arena_batch_"), [name]);
        // The record was written from the published code: the bytes that run.
        let (_, _, code) = records
            .iter()
            .find(|(a, n, _)| *a == address as u64 && n == name)
            .unwrap_or_else(|| panic!("no jitdump record for {name}"));
        // SAFETY: the record's range is the module's code, mapped readable while it lives.
        let running = unsafe { std::slice::from_raw_parts(address as *const u8, code.len()) };
        assert_eq!(code.as_slice(), running);
        // The unwinder knows the batch member: a panic in the callback crosses it.
        type Through = extern "C-unwind" fn(extern "C-unwind" fn(i32) -> i32, i32) -> i32;
        // SAFETY: the kernel has this signature; `module` outlives the call.
        let through: Through = unsafe { std::mem::transmute(module.symbol(name).unwrap()) };
        let caught = catch_unwind(AssertUnwindSafe(|| through(panics, 1)));
        let message = caught.expect_err("the panic did not arrive");
        assert_eq!(
            message.downcast_ref::<String>().map(String::as_str),
            Some("callback saw 2")
        );
    }
    drop(modules);
    assert_eq!(observe::registered_entries(), gdb_before);
    assert_eq!(arena.stats().modules, 0);
}
