//! The limits an arena can run into besides its own (tested in `arena.rs`): the address
//! space (`RLIMIT_AS`) and the map count (`vm.max_map_count`). Each is a typed error naming
//! what ran out, the size asked for and the limit; the process goes on, and once the limit
//! is lifted the same arena loads again.
//!
//! One test binary of its own, one test function: both limits are process-wide.
//! Native only: qemu-user neither applies `RLIMIT_AS` to the guest nor shows the host's
//! mappings in the guest's `/proc/self/maps`. Linux only: the map count and `/proc` are
//! Linux's.
#![cfg(target_os = "linux")]

mod common;

use common::{check_saxpy, compile, load_in, SAXPY};
use elfjit_os::{Arena, ArenaError, Resource};

fn exhausted(arena: &Arena, object: &[u8]) -> (Resource, u64, u64) {
    let e = load_in(arena, object, "saxpy")
        .err()
        .expect("the load must fail");
    match e.1 {
        Some(ArenaError::Exhausted {
            resource,
            requested,
            limit,
            ..
        }) => {
            let text = e.1.map(|a| a.to_string()).unwrap_or_default();
            eprintln!("{text}");
            assert!(text.contains(&requested.to_string()), "{text}");
            assert!(text.contains(&limit.to_string()), "{text}");
            assert_eq!(e.0, elfjit_core::Error::Backend(e.1.expect("error").into()));
            (resource, requested, limit)
        }
        other => panic!("not an exhausted arena: {:?} / {other:?}", e.0),
    }
}

fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("VmSize")
        * 1024
}

fn maps_now() -> u64 {
    std::fs::read_to_string("/proc/self/maps")
        .expect("maps")
        .lines()
        .count() as u64
}

#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "qemu-user applies neither RLIMIT_AS nor the host's map count to the guest"
)]
#[test]
fn address_space_and_map_count_exhaustion_are_typed_errors() {
    let object = compile(SAXPY, "-O2");

    // The address space: room for less than the default chunk (three 256 MiB regions):
    // the arena reserves a smaller one and loads.
    let arena = Arena::new();
    let starved = Arena::new();
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on our own process with structs we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut old), 0);
        let tight = libc::rlimit {
            rlim_cur: vm_size() + (64 << 20),
            rlim_max: old.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &tight), 0);
        let loaded = load_in(&arena, &object, "saxpy").map(|m| m.entry);
        // Room for less than the smallest chunk (three 2 MiB regions): a typed error.
        let tighter = libc::rlimit {
            rlim_cur: vm_size() + (4 << 20),
            rlim_max: old.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &tighter), 0);
        let (resource, requested, limit) = exhausted(&starved, &object);
        assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &old), 0);
        assert!(loaded.is_ok(), "no smaller chunk under a tight RLIMIT_AS");
        assert!(arena.stats().reserved <= 64 << 20, "{:?}", arena.stats());
        assert_eq!(resource, Resource::AddressSpace);
        assert_eq!(limit, tighter.rlim_cur);
        assert!(requested > 0 && requested < 4096, "{requested}");
    }
    let m = load_in(&starved, &object, "saxpy").expect("loads once the limit is lifted");
    // SAFETY: a live saxpy.
    unsafe { check_saxpy(m.entry, 1) };

    // The map count: fill the process's mappings to one short of the limit with pages of
    // alternating protection (which the kernel cannot merge).
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .expect("max_map_count")
        .trim()
        .parse::<u64>()
        .expect("number");
    let fresh = Arena::new();
    let page = fresh.page_size();
    let pages = 2 * max as usize;
    // SAFETY: a fresh private PROT_NONE reservation that nothing else uses; its pages are
    // only protected and finally unmapped here.
    let filler = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * page,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(filler, libc::MAP_FAILED);
    let mut i = 1;
    let mut fill_to_one_short = || {
        while maps_now() + 1 < max && i < pages {
            // Every other page readable: each one is a mapping of its own. Checking the
            // count now and then keeps this linear.
            let batch = ((max - 1 - maps_now()) as usize)
                .min((pages - i) / 2)
                .max(1);
            for _ in 0..batch {
                // SAFETY: a page of our own reservation.
                unsafe {
                    libc::mprotect(
                        filler.cast::<u8>().add(i * page).cast(),
                        page,
                        libc::PROT_READ,
                    )
                };
                i += 2;
            }
        }
    };
    fill_to_one_short();
    let (resource, requested, limit) = exhausted(&fresh, &object);
    // The arena that already has a chunk: loads write the pages its first load made
    // writable ahead of need, and publishing them extends the code region's published
    // mapping, so they need no new mapping. Once those are used up, the next load makes
    // fresh pages writable in place, splitting the region's mapping: with the mappings
    // filled up again to one short of the limit after each load, that one fails.
    let mut kept = Vec::new();
    let live = loop {
        fill_to_one_short();
        match load_in(&arena, &object, "saxpy") {
            Ok(m) => kept.push(m),
            Err(_) => break exhausted(&arena, &object),
        }
        assert!(kept.len() <= 64, "loads never ran out of mappings");
    };
    let (resource_live, _, _) = live;
    let kept_count = kept.len() as u64;
    // SAFETY: unmapping the reservation made above; nothing refers to it.
    unsafe { libc::munmap(filler, pages * page) };
    assert_eq!(resource, Resource::MapCount);
    assert_eq!(resource_live, Resource::MapCount);
    assert_eq!(limit, max);
    assert!(requested > 0 && requested < 4096, "{requested}");
    assert!(
        kept_count >= 1,
        "the opened pages served a load at the limit"
    );
    assert_eq!(
        (arena.stats().modules, starved.stats().modules),
        (kept_count, 1),
        "the failed loads left nothing behind"
    );
    for m in &kept {
        // SAFETY: a live saxpy, loaded at the limit, not called before.
        unsafe { check_saxpy(m.entry, 1) };
    }
    drop(kept);
    for a in [&fresh, &arena] {
        let m = load_in(a, &object, "saxpy").expect("loads once mappings are free again");
        // SAFETY: a live saxpy.
        unsafe { check_saxpy(m.entry, 1) };
    }
}
