//! The code arena with real kernels: clang output linked by the core into an [`Arena`],
//! externals resolved in the process, called and checked; mappings read back from
//! `/proc/self/maps`. Runs natively and under qemu-user (`--target aarch64-...`). Linux
//! only (`/proc`, `fork`); on Windows the arena is tested by `windows.rs`.
#![cfg(target_os = "linux")]

mod common;

use common::{check_saxpy, compile, load_in, maps, InArena, SAXPY};
use elfjit_core::{Error, Plan, SegmentKind};
use elfjit_os::Resource;
use elfjit_os::{Arena, ArenaBackend, ArenaConfig, ArenaError, ArenaStats, Mode, ProcessResolver};
use std::sync::OnceLock;

fn saxpy() -> &'static [u8] {
    static OBJECT: OnceLock<Vec<u8>> = OnceLock::new();
    OBJECT.get_or_init(|| compile(SAXPY, "-O2"))
}

/// A page-granular and (where the system runs it) a packed arena.
fn both() -> Vec<Arena> {
    [Mode::PageGranular, Mode::Packed]
        .into_iter()
        .filter_map(|m| common::arena(ArenaConfig::new(m)))
        .collect()
}

fn load(arena: &Arena) -> InArena {
    load_in(arena, saxpy(), "saxpy").unwrap_or_else(|e| panic!("load: {} ({:?})", e.0, e.1))
}

/// The permissions `/proc/self/maps` shows for the page holding `address`.
fn permissions(address: usize) -> String {
    let text = std::fs::read_to_string("/proc/self/maps").expect("maps");
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (lo, hi) = fields
            .next()
            .and_then(|r| r.split_once('-'))
            .expect("range");
        let lo = usize::from_str_radix(lo, 16).expect("hex");
        let hi = usize::from_str_radix(hi, 16).expect("hex");
        if (lo..hi).contains(&address) {
            return fields.next().expect("perms").to_string();
        }
    }
    panic!("{address:#x} is not mapped");
}

/// Statistics that a failed load must leave as they were (the protect counter moves).
fn settled(stats: ArenaStats) -> ArenaStats {
    ArenaStats {
        protect_calls: 0,
        ..stats
    }
}

#[test]
fn saxpy_runs_in_both_modes_and_nothing_is_writable_and_executable() {
    for arena in both() {
        let modules: Vec<InArena> = (0..3).map(|_| load(&arena)).collect();
        for (i, m) in modules.iter().enumerate() {
            for count in 1..=i as i32 + 1 {
                // SAFETY: `entry` is a live saxpy; each module counts its own calls.
                unsafe { check_saxpy(m.entry, count) };
            }
        }
        let m = &modules[0];
        let (code, _) = m.memory.segment(SegmentKind::Code).expect("code");
        let (ro, _) = m.memory.segment(SegmentKind::ReadOnly).expect("read-only");
        let (data, _) = m.memory.segment(SegmentKind::Data).expect("data");
        let shared = if arena.mode() == Mode::Packed {
            's'
        } else {
            'p'
        };
        assert_eq!(
            permissions(code),
            format!("r-x{shared}"),
            "{:?}",
            arena.mode()
        );
        let ro_perms = permissions(ro);
        // qemu-user reports read-only guest pages as "r-x" on some targets.
        assert!(
            ro_perms.starts_with('r') && !ro_perms.contains('w'),
            "{ro_perms}"
        );
        assert_eq!(permissions(data), "rw-p");
        let summary = maps(&arena.regions());
        assert_eq!(summary.writable_and_executable, 0);
        assert_eq!(arena.stats().modules, 3);
        drop(modules);
        let stats = arena.stats();
        assert_eq!((stats.modules, stats.requested, stats.held), (0, 0, 0));
    }
}

#[test]
fn many_modules_share_a_few_mappings_and_packed_ones_share_pages() {
    let n = 2000;
    for arena in both() {
        let modules: Vec<InArena> = (0..n).map(|_| load(&arena)).collect();
        let summary = maps(&arena.regions());
        // Packed: four mappings per chunk. Page-granular: one per class region, and while
        // the code and read-only regions each have an opened stretch (free pages made
        // writable ahead of the next loads) two more for each: published pages, the
        // stretch, the rest.
        let most = match arena.mode() {
            Mode::Packed => 4,
            Mode::PageGranular => 3 + 2 * 2,
        };
        assert!(summary.vmas <= most, "{:?}: {summary:?}", arena.mode());
        let stats = arena.stats();
        let page = arena.page_size() as u64;
        match arena.mode() {
            Mode::PageGranular => assert_eq!(stats.held, n as u64 * 3 * page),
            Mode::Packed => assert!(
                stats.held < 2 * stats.requested,
                "packed holds {} bytes for {} asked",
                stats.held,
                stats.requested
            ),
        }
        let mut code_pages: Vec<usize> = modules
            .iter()
            .map(|m| m.memory.segment(SegmentKind::Code).expect("code").0 / page as usize)
            .collect();
        code_pages.sort_unstable();
        code_pages.dedup();
        match arena.mode() {
            Mode::PageGranular => assert_eq!(code_pages.len(), n),
            Mode::Packed => assert!(code_pages.len() * 4 <= n, "{} code pages", code_pages.len()),
        }
        for m in modules.iter().step_by(97) {
            // SAFETY: a live saxpy, not called before.
            unsafe { check_saxpy(m.entry, 1) };
        }
    }
}

#[test]
fn unloaded_memory_is_reused() {
    for arena in both() {
        let cycles = 96;
        let mut code_pages = std::collections::BTreeSet::new();
        let mut protects_late = 0;
        for cycle in 0..cycles {
            let before = arena.stats().protect_calls;
            let m = load(&arena);
            let code = m.memory.segment(SegmentKind::Code).expect("code").0;
            code_pages.insert(code / arena.page_size());
            // SAFETY: a live saxpy; a reused slot's counter starts at zero again.
            unsafe { check_saxpy(m.entry, 1) };
            drop(m);
            let stats = arena.stats();
            assert_eq!((stats.modules, stats.held), (0, 0));
            if cycle >= cycles / 2 {
                protects_late += stats.protect_calls - before;
            }
        }
        let late = (cycles / 2) as u64;
        match arena.mode() {
            // One packed slot, used again and again.
            Mode::Packed => {
                assert_eq!(code_pages.len(), 1);
                assert_eq!(protects_late, 0);
            }
            // Freed pages collect in the dirty pool and are made writable sixteen at a
            // time: a warm load pays one mprotect per class to publish, not two.
            Mode::PageGranular => {
                assert!(code_pages.len() <= 17, "{} code pages", code_pages.len());
                assert!(arena.stats().pooled > 0);
                assert!(
                    protects_late <= late * 2 + late / 8 + 4,
                    "{protects_late} mprotects in {late} warm cycles"
                );
            }
        }
    }
}

const UNDEFINED: &str = r#"
extern int nowhere(int);
static const float lut[4] = {1, 2, 3, 4};
int state = 3;
int f(int x) { return nowhere(x) + (int)lut[x & 3] + state++; }
"#;

#[test]
fn a_load_that_fails_halfway_leaves_the_arena_as_it_was() {
    let bad = compile(UNDEFINED, "-O2");
    for mode in [Mode::PageGranular, Mode::Packed] {
        let config = ArenaConfig::new(mode);
        // Failing on an arena with no chunk yet: the chunk made for it goes again.
        let Some(empty) = common::arena(config) else {
            continue;
        };
        let Err(e) = load_in(&empty, &bad, "f") else {
            panic!("loaded with an undefined symbol");
        };
        assert!(matches!(*e, (Error::UndefinedSymbol { .. }, None)), "{e:?}");
        assert!(empty.regions().is_empty(), "{mode:?}");
        assert_eq!(settled(empty.stats()), ArenaStats::default());

        // Failing next to a live module: same statistics and mappings after, and the next
        // load lands where it would have without the failure.
        let (Some(arena), Some(witness)) = (common::arena(config), common::arena(config)) else {
            continue;
        };
        let live = load(&arena);
        let live_witness = load(&witness);
        let before = (
            settled(arena.stats()),
            maps(&arena.regions()),
            arena.regions(),
        );
        for _ in 0..3 {
            assert!(load_in(&arena, &bad, "f").is_err());
        }
        let after = (
            settled(arena.stats()),
            maps(&arena.regions()),
            arena.regions(),
        );
        assert_eq!(before, after, "{mode:?}");
        let next = load(&arena);
        let next_witness = load(&witness);
        let offset = |m: &InArena, base: &InArena| {
            SegmentKind::ALL.map(|k| {
                m.memory.segment(k).expect("segment").0 as isize
                    - base.memory.segment(k).expect("segment").0 as isize
            })
        };
        assert_eq!(
            offset(&next, &live),
            offset(&next_witness, &live_witness),
            "{mode:?}"
        );
        // SAFETY: live saxpys.
        unsafe {
            check_saxpy(next.entry, 1);
            check_saxpy(live.entry, 1);
        }
    }
}

/// Plans `objects`, allocates them as one batch, links each, publishes them together.
fn load_batch(arena: &Arena, objects: &[&[u8]]) -> Vec<(ArenaBackend, usize)> {
    let page = arena.page_size() as u64;
    let mut plans: Vec<Plan> = objects
        .iter()
        .map(|o| Plan::new(&[o], page).expect("plan"))
        .collect();
    let layouts: Vec<_> = plans.iter().map(|p| p.layout()).collect();
    let mut backends = arena.allocate_batch(&layouts).expect("batch");
    let mut entries = Vec::new();
    for (plan, backend) in plans.iter_mut().zip(&mut backends) {
        let image = plan.link(backend, &mut ProcessResolver).expect("link");
        let entry = image.globals().find(|g| g.name == b"saxpy").expect("saxpy");
        entries.push(entry.address as usize);
        assert!(
            !backend.is_published(),
            "a batch member waits for publish_all"
        );
    }
    if arena.mode() == Mode::PageGranular {
        let (code, _) = backends[0].segment(SegmentKind::Code).expect("code");
        assert_eq!(permissions(code), "rw-p", "not runnable before publish_all");
    }
    ArenaBackend::publish_all(&mut backends).expect("publish");
    backends.into_iter().zip(entries).collect()
}

#[test]
fn a_batch_publishes_with_one_protect_per_class() {
    let n = 16;
    for arena in both() {
        drop(load(&arena)); // the chunk exists: its setup is not counted below
        let page = arena.page_size() as u64;
        // The first load opened the 16 pages after its own in the code and the read-only
        // region (data pages rest writable, packed ones are never opened).
        let opened = match arena.mode() {
            Mode::PageGranular => 2 * 16 * page,
            Mode::Packed => 0,
        };
        assert_eq!(arena.stats().opened, opened);
        let singles_start = arena.stats().protect_calls;
        let singles: Vec<InArena> = (0..n).map(|_| load(&arena)).collect();
        let singles_cost = arena.stats().protect_calls - singles_start;
        // The singles took them all, one page per class each.
        assert_eq!(arena.stats().opened, 0);
        let batch_start = arena.stats().protect_calls;
        let objects = vec![saxpy(); n];
        let mut batch = load_batch(&arena, &objects);
        let batch_cost = arena.stats().protect_calls - batch_start;
        match arena.mode() {
            // Final protection per class for each single: the first load opened the
            // pages after its own ahead of need (`OPEN_AHEAD`, 16 per class), so the 16
            // singles write without making pages writable. Read/write then final for the
            // whole batch.
            Mode::PageGranular => {
                assert_eq!(singles_cost, 2 * n as u64);
                assert_eq!(batch_cost, 4);
            }
            Mode::Packed => assert_eq!((singles_cost, batch_cost), (0, 0)),
        }
        for (_, entry) in &batch {
            // SAFETY: a live saxpy.
            unsafe { check_saxpy(*entry, 1) };
        }
        // Freed one by one, out of order.
        let mut odd = Vec::new();
        for (i, member) in batch.drain(..).enumerate() {
            if i % 2 == 1 {
                odd.push(member);
            }
        }
        drop(odd);
        drop(singles);
        assert_eq!(arena.stats().modules, 0);
        // The pages written are merged into their region's mapping again, except stretches
        // of freed pages already made writable for the next loads (at most 32 per class).
        let vmas = maps(&arena.regions()).vmas;
        let expect = arena.stats().chunks as u64 * vmas_per_chunk(&arena);
        assert!(
            vmas <= expect + READY_MAPPINGS,
            "{vmas} > {expect} + {READY_MAPPINGS}"
        );
    }
}

#[test]
fn prepare_makes_the_first_chunk_and_leaves_the_first_load_only_its_publish() {
    for arena in both() {
        assert_eq!(arena.stats().chunks, 0);
        arena.prepare().expect("prepare");
        let prepared = arena.stats();
        assert_eq!((prepared.chunks, prepared.modules), (1, 0));
        // Once there is a chunk, nothing more.
        arena.prepare().expect("prepare again");
        assert_eq!(arena.stats(), prepared);
        let m = load(&arena);
        // SAFETY: a live saxpy, called for the first time.
        unsafe { check_saxpy(m.entry, 1) };
        let cost = arena.stats().protect_calls - prepared.protect_calls;
        assert_eq!(arena.stats().chunks, 1);
        match arena.mode() {
            // Its pages were opened ahead by the preparation: the final protection of the
            // code and of the read-only data, nothing else.
            Mode::PageGranular => assert_eq!(cost, 2),
            Mode::Packed => assert_eq!(cost, 0),
        }
    }
}

/// After `prepare` the pages a first page-granular load writes are in the page tables
/// already: the three `prepare` wrote, and the opened stretches after them, which it faults
/// in (`MADV_POPULATE_WRITE`); no other page of the chunk. (A packed arena opens nothing:
/// its slabs are per size class, so a load of other sizes takes pages of its own.)
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "qemu-user ignores the advice, and its /proc/self/pagemap is the host's"
)]
#[test]
fn prepare_faults_in_the_pages_the_next_loads_take() {
    for arena in both() {
        arena.prepare().expect("prepare");
        let stats = arena.stats();
        if arena.mode() == Mode::Packed {
            assert_eq!(stats.opened, 0);
            continue;
        }
        let page = arena.page_size();
        let chunk = arena.regions()[0];
        let present = common::present_pages(chunk.0, chunk.1);
        assert_eq!(
            stats.opened,
            2 * 16 * page as u64,
            "code and read-only data"
        );
        assert_eq!(present, 3 + stats.opened as usize / page);
        let m = load(&arena);
        assert_eq!(
            common::present_pages(chunk.0, chunk.1),
            present,
            "the first load wrote only pages already present"
        );
        // SAFETY: a live saxpy, called for the first time.
        unsafe { check_saxpy(m.entry, 1) };
    }
}

#[test]
fn prepare_in_an_arena_too_small_for_a_chunk_is_the_typed_error_and_changes_nothing() {
    for mode in [Mode::PageGranular, Mode::Packed] {
        let config = ArenaConfig {
            class_bytes: 2 << 20,
            max_reserved: 1 << 20, // a chunk is three regions of 2 MiB
            ..ArenaConfig::new(mode)
        };
        let Some(arena) = common::arena(config) else {
            continue;
        };
        let before = arena.stats();
        let error = arena.prepare().expect_err("no chunk fits");
        let ArenaError::Exhausted {
            resource, limit, ..
        } = error
        else {
            panic!("{mode:?}: {error:?}");
        };
        assert_eq!(resource, Resource::ArenaLimit);
        assert_eq!(limit, config.max_reserved as u64);
        assert_eq!(settled(arena.stats()), settled(before));
        // A load meets the same error, and prepare can be asked again.
        assert!(load_in(&arena, saxpy(), "saxpy").is_err());
        assert!(arena.prepare().is_err());
    }
}

/// Mappings a chunk's ready pool may add: up to 32 writable stretches in each of the code
/// and read-only regions, each splitting its region's mapping.
const READY_MAPPINGS: u64 = 2 * 2 * 32;

fn vmas_per_chunk(arena: &Arena) -> u64 {
    match arena.mode() {
        Mode::PageGranular => 3,
        Mode::Packed => 4,
    }
}

#[test]
fn exhausting_the_arena_limit_is_a_typed_error_and_recoverable() {
    for mode in [Mode::PageGranular, Mode::Packed] {
        let config = ArenaConfig {
            class_bytes: 2 << 20,
            max_reserved: match mode {
                Mode::PageGranular => 6 << 20,
                Mode::Packed => 10 << 20,
            },
            ..ArenaConfig::new(mode)
        };
        let Some(arena) = common::arena(config) else {
            continue;
        };
        let mut live = Vec::new();
        let error = loop {
            match load_in(&arena, saxpy(), "saxpy") {
                Ok(m) => live.push(m),
                Err(e) => break e,
            }
            assert!(live.len() < 200_000, "the limit never hit");
        };
        let (Error::Backend(backend), Some(arena_error)) = *error else {
            panic!("{mode:?}: not an arena error: {error:?}");
        };
        let ArenaError::Exhausted {
            resource,
            requested,
            limit,
            ..
        } = arena_error
        else {
            panic!("{arena_error:?}");
        };
        assert_eq!(resource, Resource::ArenaLimit);
        assert_eq!(limit, config.max_reserved as u64);
        assert_eq!(requested, backend.size);
        assert!(requested > 0 && requested < 4096, "{requested}");
        let text = arena_error.to_string();
        assert!(text.contains("reservation limit"), "{text}");
        assert!(text.contains(&config.max_reserved.to_string()), "{text}");
        assert!(text.contains(&requested.to_string()), "{text}");
        let stats = arena.stats();
        assert_eq!(stats.modules, live.len() as u64);
        live.truncate(live.len() / 2);
        let again = load(&arena);
        // SAFETY: a live saxpy.
        unsafe { check_saxpy(again.entry, 1) };
    }
}

#[test]
fn segments_aligned_beyond_a_page_and_larger_than_a_region_are_placed() {
    const SOURCE: &str = r#"
        static char big[3 << 20];
        __attribute__((aligned(16384))) static const int aligned[4] = {1, 2, 3, 4};
        long probe(int i) { big[i] += 1; return (long)&aligned[0] + big[i] + aligned[i & 3]; }
    "#;
    let object = compile(SOURCE, "-O2");
    for mode in [Mode::PageGranular, Mode::Packed] {
        let config = ArenaConfig {
            class_bytes: 2 << 20,
            ..ArenaConfig::new(mode)
        };
        let Some(arena) = common::arena(config) else {
            continue;
        };
        let m = load_in(&arena, &object, "probe").expect("load");
        // SAFETY: matches `long probe(int)`.
        let probe: extern "C" fn(i32) -> i64 = unsafe { std::mem::transmute(m.entry) };
        let r = probe(2);
        let address = r - 1 - 3;
        assert_eq!(address % 16384, 0, "{mode:?}: {address:#x}");
        assert_eq!(probe(2), address + 2 + 3);
    }
}

/// Page-granular memory an earlier module wrote is not `zero_filled` when it is handed out
/// again (the linker then writes every byte of each segment's size), and a module loaded
/// into it finds zeros past its segments' sizes in the pages it holds, not what the
/// earlier one left. Fresh memory is `zero_filled`. (A packed arena puts the small module
/// in slots of another size than the freed pages: it only has to load and run.)
#[test]
fn reused_memory_is_written_or_zeroed_not_left() {
    use elfjit_core::{Layout, MemoryBackend, SegmentRequest};
    for arena in both() {
        let page = arena.page_size();
        let whole = SegmentRequest {
            size: page as u64,
            align: 16,
        };
        let mut first = arena.backend();
        first.allocate(&Layout::new([whole; 3])).expect("allocate");
        assert!(first.zero_filled(), "{:?}: fresh memory", arena.mode());
        for kind in SegmentKind::ALL {
            if let Some(bytes) = first.segment_mut(kind) {
                bytes.fill(0xa5);
            }
        }
        first.publish().expect("publish");
        drop(first); // into the pool, written
        let m = load(&arena);
        if arena.mode() == Mode::PageGranular {
            assert!(!m.memory.zero_filled(), "the pooled pages were reused");
            for kind in SegmentKind::ALL {
                let Some((start, size)) = m.memory.segment(kind) else {
                    continue;
                };
                let end = (start + size).next_multiple_of(page);
                // SAFETY: the module's published pages: `[start, end)` lies in the whole
                // pages its segment holds, all readable (RX, R or RW).
                let tail = unsafe {
                    std::slice::from_raw_parts((start + size) as *const u8, end - start - size)
                };
                assert!(
                    tail.iter().all(|&b| b == 0),
                    "{kind:?}: leftovers past the size"
                );
            }
        }
        // SAFETY: a live saxpy, not called before.
        unsafe { check_saxpy(m.entry, 1) };
    }
}
