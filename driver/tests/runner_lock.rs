//! Issue 12: a runner build that hangs holds only its own slot, and has a deadline. Here
//! a "clang" that sleeps builds the x86_64 runner while a run needing the aarch64 runner
//! goes ahead. (Its own test binary: it sets ELFJIT_CACHE_DIR for [`runner`] before any
//! other thread exists.)

use elfjit::emulate::runner::runner;
use elfjit::{Arch, Compiler};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

#[test]
fn a_hung_runner_build_blocks_no_other_runner_and_is_stopped_at_its_deadline() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("runner-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("ELFJIT_CACHE_DIR", dir.join("cache"));
    let real = Compiler::find().expect("clang");
    // Built (and cached in this process) beforehand: asking again takes no time at all,
    // unless a lock held elsewhere makes it wait.
    runner(&real, Arch::Aarch64).unwrap();

    let slow = dir.join("slow-clang");
    std::fs::write(
        &slow,
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'slow clang 1'; exit 0; fi\nsleep 60\n",
    )
    .unwrap();
    std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).unwrap();
    let slow = Compiler::at(&slow)
        .unwrap()
        .with_timeout(Duration::from_secs(8));
    let hung = std::thread::spawn(move || {
        let t = Instant::now();
        let r = runner(&slow, Arch::X86_64);
        (r.map(|_| ()).map_err(|e| e.to_string()), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    runner(&real, Arch::Aarch64).unwrap();
    let waited = t.elapsed();
    let (built, took) = hung.join().unwrap();
    assert!(
        waited < Duration::from_secs(4),
        "waited {waited:?} for another runner's build"
    );
    let e = built.expect_err("the sleeping clang built nothing");
    assert!(e.contains("did not finish within 8 s"), "{e}");
    assert!(took < Duration::from_secs(30), "the build took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
