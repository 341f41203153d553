//! elfjit-core embedded in a `#![no_std]`, `#![no_main]` loongarch64 Linux program: no Rust
//! standard library, no C library, no allocator. It is the example for anyone putting the
//! relocator in a unikernel or a sandbox.
//!
//! build.rs compiles corpus kernels (tests/kernels) with clang for loongarch64; the objects
//! are embedded with `include_bytes!`. At run time, for each kernel, the program:
//! 1. plans the link (`Plan::new_in`: layout, GOT, stubs; no memory yet) into static
//!    tables that every kernel reuses (no allocator: the plan's storage is lent),
//! 2. links it into memory it maps itself (`MmapBackend`: mmap, mprotect, `ibar 0` over raw
//!    system calls), resolving the kernel's external calls (`resolve`),
//! 3. calls the entry with the corpus's arguments and prints what came back.
//!
//! Build and run (from this directory; nightly for `-Zbuild-std`, qemu-user for the run):
//!
//! ```text
//! cargo +nightly build -Zbuild-std=core --target loongarch64-unknown-none --release
//! qemu-loongarch64 target/loongarch64-unknown-none/release/elfjit-nostd-loongarch
//! ```
//!
//! Output, one block per kernel (bit patterns in hex, little-endian elements):
//!
//! ```text
//! case softmax_expf softmax_expf.c
//! entry softmax_expf
//! spec void f32[10]=0.5,-1,2,3.25,0,-4,1.5,2,-0.75,6 f32[10] i32:10
//! ret void
//! arg 0 f32[10] 0x3f000000 0xbf800000 ...
//! arg 2 i32 0xa
//! end
//! ```
//!
//! and a last line `done: N linked and called, M failed`; the exit status is 0 when M is 0.
#![no_std]
#![no_main]

mod args;
mod cases;
mod sys;

use args::{Arena, Arg, Registers};
use core::fmt::Write;
use elfjit_core::plan::{
    HighHalf, LowHalf, NameEntry, ObjectEntry, PlanStorage, SectionPlace, SymbolEntry,
};
use elfjit_core::{
    BackendError, Layout, MemoryBackend, Placement, Plan, Protection, Segment, SegmentKind,
};
use sys::Stdout;

mod kernels {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    let mut out = Stdout::new();
    let _ = writeln!(out, "panic: {info}");
    out.flush();
    sys::exit(101)
}

// ---------------------------------------------------------------------------------------
// The memory backend: the part of elfjit an embedder writes.
// ---------------------------------------------------------------------------------------

/// An image in one anonymous mapping of this process, its segments one after another on
/// whole pages (`Layout::contiguous`): the bytes are written where they will run, so the
/// target addresses are the mapping's own.
struct MmapBackend {
    page_size: u64,
    base: usize,
    size: usize,
    segments: [Segment; 3],
    published: bool,
}

impl MmapBackend {
    fn new(page_size: u64) -> MmapBackend {
        MmapBackend {
            page_size,
            base: 0,
            size: 0,
            segments: [Segment::default(); 3],
            published: false,
        }
    }
}

impl MemoryBackend for MmapBackend {
    fn allocate(&mut self, layout: &Layout) -> Result<Placement, BackendError> {
        let (segments, size) = layout
            .contiguous(self.page_size)
            .ok_or(BackendError::new("lay out", 0, 0))?;
        let len = usize::try_from(size.max(self.page_size))
            .map_err(|_| BackendError::new("map", size, 0))?;
        let base = sys::mmap_anonymous(len).map_err(|code| BackendError::new("map", size, code))?;
        (self.base, self.size, self.segments) = (base, len, segments);
        let mut targets = [0u64; 3];
        for (target, segment) in targets.iter_mut().zip(&segments) {
            if segment.size != 0 {
                *target = base as u64 + segment.offset;
            }
        }
        Ok(Placement::new(targets))
    }

    fn segment_mut(&mut self, kind: SegmentKind) -> Option<&mut [u8]> {
        let segment = self.segments.get(kind.index())?;
        if self.published || segment.size == 0 {
            return None;
        }
        // SAFETY: the segment lies inside this backend's own read/write mapping (the layout
        // it was mapped from), it is not published yet, and the returned borrow of `self`
        // keeps anything else from using it meanwhile.
        Some(unsafe {
            core::slice::from_raw_parts_mut(
                (self.base + segment.offset as usize) as *mut u8,
                segment.size as usize,
            )
        })
    }

    fn zero_filled(&self) -> bool {
        true // fresh anonymous pages
    }

    fn publish(&mut self) -> Result<(), BackendError> {
        self.published = true;
        for kind in SegmentKind::ALL {
            let Some(segment) = self.segments.get(kind.index()).copied() else {
                continue;
            };
            if segment.mapped == 0 {
                continue;
            }
            let prot = match kind.protection() {
                Protection::ReadExecute => sys::PROT_READ | sys::PROT_EXEC,
                Protection::ReadOnly => sys::PROT_READ,
                Protection::ReadWrite => sys::PROT_READ | sys::PROT_WRITE,
            };
            let start = self.base + segment.offset as usize;
            sys::mprotect(start, segment.mapped as usize, prot)
                .map_err(|code| BackendError::new("protect", segment.mapped, code))?;
        }
        sys::flush_icache();
        Ok(())
    }
}

impl Drop for MmapBackend {
    fn drop(&mut self) {
        if self.size != 0 {
            // SAFETY: dropping the backend ends every use of the image.
            unsafe { sys::munmap(self.base, self.size) };
        }
    }
}

// ---------------------------------------------------------------------------------------
// The plan's storage: static tables, lent to each kernel's plan in turn.
// ---------------------------------------------------------------------------------------

/// Room for the largest corpus kernel with margin (`PlanSizes::count` says what an object
/// needs; a bigger one fails with an error naming the table and the size it needs), and
/// for the addresses a link resolves its externals to. loongarch64 has no relocation
/// pairs, so their tables are empty.
struct Tables {
    sections: [SectionPlace; 64],
    symbols: [SymbolEntry; 256],
    names: [NameEntry; 64],
    externals: [u64; 32],
}

static mut TABLES: Tables = Tables {
    sections: [SectionPlace::NOT_LOADED; 64],
    symbols: [SymbolEntry::EMPTY; 256],
    names: [NameEntry::EMPTY; 64],
    externals: [0; 32],
};

// ---------------------------------------------------------------------------------------
// External symbols: what the kernels call.
// ---------------------------------------------------------------------------------------

// Provided by compiler-builtins, which `-Zbuild-std=core` builds and links.
extern "C" {
    fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8;
    fn memset(dest: *mut u8, c: i32, n: usize) -> *mut u8;
    fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8;
    fn __udivti3(a: u128, b: u128) -> u128;
    fn __divti3(a: i128, b: i128) -> i128;
    fn __umodti3(a: u128, b: u128) -> u128;
    fn __modti3(a: i128, b: i128) -> i128;
}

/// `expf` (there is no libm here): e^x = 2^k · e^r with r = x - k·ln 2, |r| <= ln 2 / 2,
/// e^r from its Taylor series in f64 (error below 1e-15), rounded once to f32.
extern "C" fn expf(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > 88.73 {
        return f32::INFINITY;
    }
    if x < -104.0 {
        return 0.0;
    }
    let x = f64::from(x);
    let t = x * core::f64::consts::LOG2_E;
    let k = if t < 0.0 { t - 0.5 } else { t + 0.5 } as i64; // round to nearest
    let r = x - k as f64 * core::f64::consts::LN_2;
    let mut sum = 1.0;
    for n in (1..=13).rev() {
        sum = 1.0 + r * sum / n as f64;
    }
    let scale = f64::from_bits(((k + 1023) as u64) << 52);
    (sum * scale) as f32
}

/// The resolver handed to the linker: external name → address.
fn resolve(name: &[u8]) -> Option<u64> {
    let address = match name {
        b"memcpy" => memcpy as *const () as usize,
        b"memset" => memset as *const () as usize,
        b"memmove" => memmove as *const () as usize,
        b"expf" => expf as *const () as usize,
        b"__udivti3" => __udivti3 as *const () as usize,
        b"__divti3" => __divti3 as *const () as usize,
        b"__umodti3" => __umodti3 as *const () as usize,
        b"__modti3" => __modti3 as *const () as usize,
        _ => return None,
    };
    Some(address as u64)
}

// ---------------------------------------------------------------------------------------
// Running the kernels.
// ---------------------------------------------------------------------------------------

/// Every kernel is called through one of these two types, with all eight integer and all
/// eight floating-point argument registers set: the kernel reads the ones it takes (see
/// `Registers::assign`). The result is `$a0` or `$fa0`.
type IntCall = unsafe extern "C" fn(
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    f64,
    f64,
    f64,
    f64,
    f64,
    f64,
    f64,
    f64,
) -> u64;
type FloatCall = unsafe extern "C" fn(
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    f64,
    f64,
    f64,
    f64,
    f64,
    f64,
    f64,
    f64,
) -> f64;

/// Calls the code at `entry`, returning the raw result register.
///
/// # Safety
/// `entry` must be a function taking the arguments in `regs` and returning in the register
/// `float` selects.
unsafe fn call(entry: u64, regs: &Registers, float: bool) -> u64 {
    let [a0, a1, a2, a3, a4, a5, a6, a7] = regs.int;
    let [f0, f1, f2, f3, f4, f5, f6, f7] = regs.float.map(f64::from_bits);
    if float {
        let f: FloatCall = core::mem::transmute(entry as usize);
        f(
            a0, a1, a2, a3, a4, a5, a6, a7, f0, f1, f2, f3, f4, f5, f6, f7,
        )
        .to_bits()
    } else {
        let f: IntCall = core::mem::transmute(entry as usize);
        f(
            a0, a1, a2, a3, a4, a5, a6, a7, f0, f1, f2, f3, f4, f5, f6, f7,
        )
    }
}

/// Links, calls and reports one kernel.
fn run(
    case: &cases::Case,
    object: &[u8],
    page_size: u64,
    tables: &mut Tables,
    out: &mut Stdout,
) -> Result<(), &'static str> {
    let _ = writeln!(out, "case {} {}", case.name, case.file);
    let mut entry = [ObjectEntry::EMPTY];
    let Tables {
        sections,
        symbols,
        names,
        externals,
    } = tables;
    let storage = PlanStorage {
        objects: &mut entry,
        sections,
        symbols,
        names,
        high_halves: &mut [] as &mut [HighHalf],
        low_halves: &mut [] as &mut [LowHalf],
    };
    let plan = match Plan::new_in(&[object], page_size, storage) {
        Ok(plan) => plan,
        Err(e) => {
            let _ = writeln!(out, "error {e}");
            return Err("plan");
        }
    };
    let mut backend = MmapBackend::new(page_size);
    let image = match plan.link_in(&mut backend, &mut resolve, externals) {
        Ok(image) => image,
        Err(e) => {
            let _ = writeln!(out, "error {e}");
            return Err("link");
        }
    };
    // The entry: the one named, else the object's only global function.
    let entry = match case.entry {
        Some(name) => image.functions().find(|f| f.name == name.as_bytes()),
        None => {
            let mut functions = image.functions();
            functions.next().filter(|_| functions.next().is_none())
        }
    };
    let Some(entry) = entry else {
        return Err("no entry");
    };
    let _ = writeln!(
        out,
        "entry {}",
        core::str::from_utf8(entry.name).unwrap_or("?")
    );
    let _ = write!(out, "spec {}", case.ret);
    for spec in case.args {
        let _ = write!(out, " {spec}");
    }
    let _ = writeln!(out);

    // Arguments, with their buffers in a fresh mapping.
    const ARENA: usize = 1 << 16;
    let arena_base = sys::mmap_anonymous(ARENA).map_err(|_| "arena")?;
    let mut arena = Arena::new(arena_base as *mut u8, ARENA);
    let mut parsed = [Arg::Scalar {
        ty: args::Ty::I32,
        bits: 0,
    }; 16];
    let count = case.args.len();
    if count > parsed.len() {
        return Err("too many arguments");
    }
    for (slot, spec) in parsed.iter_mut().zip(case.args) {
        *slot = args::parse(spec, &mut arena).ok_or("bad argument")?;
    }
    let parsed = &parsed[..count];
    let regs = Registers::assign(parsed).ok_or("arguments beyond the registers")?;
    let ret = match case.ret {
        "void" => None,
        name => Some(args::Ty::parse(name).ok_or("bad return type")?),
    };
    let float = matches!(ret, Some(args::Ty::F32 | args::Ty::F64));
    // SAFETY: the corpus declares this entry's signature by these argument and return
    // types; the buffers live in `arena`, the code in `backend`, both mapped until below.
    let raw = unsafe { call(entry.address, &regs, float) };

    match ret {
        None => {
            let _ = writeln!(out, "ret void");
        }
        Some(ty) => {
            let bits = if ty.size() == 8 {
                raw
            } else {
                raw & 0xffff_ffff
            };
            let _ = writeln!(out, "ret {} {bits:#x}", ty.name());
        }
    }
    for (i, arg) in parsed.iter().enumerate() {
        match *arg {
            Arg::Scalar { ty, bits } => {
                let _ = writeln!(out, "arg {i} {} {bits:#x}", ty.name());
            }
            Arg::Buffer { ty, len, .. } => {
                let _ = write!(out, "arg {i} {}[{len}]", ty.name());
                for k in 0..len {
                    let _ = write!(out, " {:#x}", arg.element(k));
                }
                let _ = writeln!(out);
            }
        }
    }
    let _ = writeln!(out, "end");
    // SAFETY: the call is over; nothing refers to the buffers any more.
    unsafe { sys::munmap(arena_base, ARENA) };
    drop(backend);
    Ok(())
}

/// The program: every kernel in `cases::CASES`. Returns the exit status.
fn main(page_size: u64) -> i32 {
    let mut out = Stdout::new();
    let _ = writeln!(
        out,
        "elfjit-core on loongarch64, no_std, page size {page_size}"
    );
    // SAFETY: `main` runs once, on the only thread, and this is the one reference to the
    // tables; each kernel's plan borrows them from it in turn.
    let tables = unsafe { &mut *core::ptr::addr_of_mut!(TABLES) };
    let (mut ok, mut failed) = (0, 0);
    for (case, object) in cases::CASES.iter().zip(kernels::OBJECTS) {
        match run(case, object, page_size, tables, &mut out) {
            Ok(()) => ok += 1,
            Err(why) => {
                let _ = writeln!(out, "failed {}: {why}", case.name);
                failed += 1;
            }
        }
        out.flush();
    }
    let _ = writeln!(out, "done: {ok} linked and called, {failed} failed");
    out.flush();
    i32::from(failed != 0)
}
