//! With every observer off and no `.eh_frame` loaded, publishing a module costs nothing: no
//! allocation (counted by this binary's allocator), no system call (strace of the
//! program between two markers) and no file.

mod common;

use common::{compile, rerun_under, Loaded};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set while this thread measures. The allocator is the whole binary's, and the other
    /// tests' threads allocate at the same time (spawning strace, reading its log): counted
    /// too, they once made a run report 20 allocations while publishing.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator, counting the calls of a measuring thread (a
// const-initialised thread-local without a destructor: reading it does not allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MEASURING.try_with(Cell::get).unwrap_or(false) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const KERNEL: &str = "int add(int a, int b) { return a + b; }\n";

/// Links the kernel and publishes it `times` times between two markers (a `stat` of a
/// path no one has), returning the allocations made while publishing.
fn publish_between_markers(times: usize) -> usize {
    let object = compile(KERNEL, "-O2", &[]);
    let mut memory = elfjit_os::MmapBackend::new();
    let plan = elfjit_core::Plan::new(&[&object[..]], memory.page_size()).unwrap();
    let image = plan
        .link(&mut memory, &mut elfjit_os::ProcessResolver)
        .unwrap();
    // The first call reads the environment (once per process).
    // SAFETY: `memory` holds the image for the whole function.
    let first = unsafe { elfjit_observe::observe_image("off", &[&object[..]], &image) };
    assert!(first.unwrap().is_none());
    let _ = std::fs::metadata("/elfjit-observe-marker-begin");
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    MEASURING.set(true);
    for _ in 0..times {
        // SAFETY: as above.
        let published = unsafe { elfjit_observe::observe_image("off", &[&object[..]], &image) };
        assert!(published.unwrap().is_none());
    }
    MEASURING.set(false);
    let made = ALLOCATIONS.load(Ordering::Relaxed) - before;
    let _ = std::fs::metadata("/elfjit-observe-marker-end");
    made
}

#[test]
fn publishing_with_everything_off_allocates_nothing_and_writes_no_file() {
    assert!(std::env::var_os("ELFJIT_PERF").is_none() && std::env::var_os("ELFJIT_GDB").is_none());
    assert_eq!(
        publish_between_markers(100),
        0,
        "allocations while publishing"
    );
    assert!(elfjit_observe::features().unwrap().is_empty());
    let map = format!("/tmp/perf-{}.map", std::process::id());
    assert!(!std::path::Path::new(&map).exists(), "{map} was written");
    assert!(elfjit_observe::perf_map_path().is_none() && elfjit_observe::jitdump_path().is_none());
    // A kernel without unwind tables registers nothing either.
    assert!(Loaded::new(&compile(KERNEL, "-O2", &[]))
        .registration
        .is_none());
}

#[test]
#[ignore = "run by publishing_with_everything_off_makes_no_system_call, under strace"]
fn publish_child() {
    publish_between_markers(100);
}

#[test]
fn publishing_with_everything_off_makes_no_system_call() {
    let log = common::scratch("off-strace").join("strace.log");
    let output = rerun_under(
        &["strace", "-f", "-o", log.to_str().unwrap(), "--"],
        "publish_child",
        &[],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let trace = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    let at = |marker: &str| {
        lines
            .iter()
            .position(|l| l.contains(marker))
            .unwrap_or_else(|| panic!("no {marker} in the trace:\n{trace}"))
    };
    let (begin, end) = (
        at("elfjit-observe-marker-begin"),
        at("elfjit-observe-marker-end"),
    );
    assert!(begin < end);
    let between = &lines[begin + 1..end];
    assert!(
        between.is_empty(),
        "system calls while publishing:\n{}",
        between.join("\n")
    );
    std::fs::remove_dir_all(log.parent().unwrap()).unwrap();
}
