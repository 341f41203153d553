//! The arena's safe API never hands out memory outside the arena or overlapping a live
//! module, whatever layouts a caller asks for: regressions first, then properties over
//! arbitrary sequences of single and batch allocations, publishes and frees, in both modes.

mod common;

use elfjit_core::{Layout, MemoryBackend, SegmentKind, SegmentRequest};
use elfjit_os::{Arena, ArenaBackend, ArenaConfig, ArenaError, Mode};

fn request(size: u64, align: u64) -> SegmentRequest {
    SegmentRequest { size, align }
}

/// A layout with only a data segment of `size` bytes.
fn data_only(size: u64) -> Layout {
    Layout::new([request(0, 1), request(0, 1), request(size, 1)])
}

/// One published module with a page of data filled with `byte`.
fn live_module(arena: &Arena, byte: u8) -> ArenaBackend {
    let mut b = arena.backend();
    b.allocate(&data_only(arena.page_size() as u64))
        .expect("allocate");
    b.segment_mut(SegmentKind::Data).expect("data").fill(byte);
    b.publish().expect("publish");
    b
}

/// Issue 26: 4096 data segments of `u64::MAX` bytes in one batch made the per-class page
/// sum wrap to a page (release builds; debug builds panicked), and each page count was
/// truncated to 0 pages: the batch handed out `&mut [u8]` of `usize::MAX` bytes starting at
/// a live module's data. The batch must be refused, and the live module left alone.
#[test]
fn a_batch_whose_page_sum_wraps_is_refused() {
    let config = ArenaConfig {
        retain: 0,
        class_bytes: 2 << 20,
        ..ArenaConfig::new(Mode::PageGranular)
    };
    let arena = Arena::with_config(config).expect("arena");
    let page = arena.page_size();
    // A one-page hole at the region's start (nothing retained: the freed page is a free
    // extent again), then a live module right after it.
    let first = live_module(&arena, 0x11);
    let live = live_module(&arena, 0x5a);
    drop(first);
    let live_data = live.segment(SegmentKind::Data).expect("live data");
    let mut layouts = vec![data_only(page as u64)];
    layouts.extend(std::iter::repeat_n(data_only(u64::MAX), 4096));
    let spans = arena.regions();
    match arena.allocate_batch(&layouts) {
        Err(e) => assert_too_large(&e, u64::MAX, arena.request_limit()),
        Ok(mut batch) => {
            for (i, (b, layout)) in batch.iter_mut().zip(&layouts).enumerate() {
                b.allocate(layout).expect("the layout the batch reserved");
                let Some(bytes) = b.segment_mut(SegmentKind::Data) else {
                    continue;
                };
                let (start, len) = (bytes.as_ptr() as usize, bytes.len());
                let inside = spans
                    .iter()
                    .any(|&(s, l)| s <= start && len <= l && start - s <= l - len);
                let overlaps =
                    start < live_data.0 + live_data.1 && live_data.0 < start.saturating_add(len);
                assert!(
                    inside && !overlaps,
                    "module {i} got {len:#x} bytes at {start:#x}: inside the arena {inside}, \
                     over the live module's data at {:#x} {overlaps}",
                    live_data.0
                );
            }
            panic!(
                "a batch of {} u64::MAX-byte segments was accepted",
                layouts.len() - 1
            );
        }
    }
    let stats = arena.stats();
    assert_eq!(stats.modules, 1, "only the live module holds memory");
    // SAFETY: the live module's data is published read/write and a page long.
    let bytes = unsafe { std::slice::from_raw_parts(live_data.0 as *const u8, live_data.1) };
    assert!(
        bytes.iter().all(|&b| b == 0x5a),
        "the live module's data changed"
    );
}

/// `e` is a refusal of `size` bytes above `limit`, and its text names both.
fn assert_too_large(e: &ArenaError, size: u64, limit: u64) {
    let text = e.to_string();
    assert!(
        matches!(*e, ArenaError::TooLarge { size: s, limit: l, .. } if s == size && l == limit),
        "{e:?}"
    );
    assert!(text.contains(&size.to_string()), "{text}");
    assert!(text.contains(&limit.to_string()), "{text}");
}

/// Modules each within the limit whose pages in one class are not: refused as a batch,
/// before anything is reserved.
#[test]
fn a_batch_above_the_limit_is_refused_up_front() {
    for mode in [Mode::PageGranular, Mode::Packed] {
        let config = ArenaConfig {
            max_reserved: 64 << 20,
            class_bytes: 2 << 20,
            ..ArenaConfig::new(mode)
        };
        let Some(arena) = common::arena(config) else {
            continue;
        };
        let limit = arena.request_limit();
        assert_eq!(limit, 64 << 20);
        let module = data_only(4 << 20);
        let layouts = vec![module; 17];
        let e = arena.allocate_batch(&layouts).expect_err("refused");
        match mode {
            Mode::PageGranular => assert_too_large(&e, 68 << 20, limit),
            // Placed one by one: the limit is reached after 16 modules' chunks.
            Mode::Packed => assert!(matches!(e, ArenaError::Exhausted { .. }), "{e:?}"),
        }
        assert_eq!(arena.stats().modules, 0);
        // One module above the limit by a byte.
        let mut b = arena.backend();
        let _ = b.allocate(&data_only(limit + 1));
        assert_too_large(b.error().expect("error"), limit + 1, limit);
    }
}

mod arena_model;

use arena_model::{Op, Pick};
use proptest::prelude::*;

fn pick() -> impl Strategy<Value = Pick> {
    (any::<u8>(), any::<u8>(), any::<u64>()).prop_map(|(size, align, raw)| Pick {
        size,
        align,
        raw,
    })
}

fn op() -> impl Strategy<Value = Op> {
    let picks = || proptest::array::uniform3(pick());
    prop_oneof![
        4 => picks().prop_map(Op::Allocate),
        2 => proptest::collection::vec(picks(), 1..6).prop_map(Op::AllocateBatch),
        2 => any::<usize>().prop_map(Op::Publish),
        1 => Just(Op::PublishAll),
        2 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::AllocateAgain),
    ]
}

/// 64 cases per property unless `PROPTEST_CASES` says otherwise: a few seconds.
fn cases() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    ProptestConfig::with_cases(cases)
}

/// Runs `ops` on a fresh arena of `mode` keeping `retain` bytes of freed pages. A packed
/// arena the system cannot run is the typed refusal `common::arena` accepts (qemu-user on
/// a foreign architecture, said on stderr), natively a failure.
fn run(mode: Mode, retain: usize, ops: &[Op]) {
    if let Some(arena) = common::arena(arena_model::config(mode, retain)) {
        arena_model::run(arena, ops);
    }
}

/// The fuzz target's saved inputs (fuzz/regressions/arena_api/, run by `scripts/fuzz-smoke`
/// too) replay under plain `cargo test`: the model's checks are their oracle.
#[test]
fn saved_fuzz_inputs_replay() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/arena_api");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} holds no inputs", dir.display());
    for input in inputs {
        eprintln!("{}", input.display());
        arena_model::run_bytes(&std::fs::read(&input).expect("input"));
    }
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn page_granular_arena_hands_out_only_its_own_unshared_memory(
        ops in proptest::collection::vec(op(), 1..40),
        retain in prop_oneof![Just(0usize), Just(4usize << 20)],
    ) {
        run(Mode::PageGranular, retain, &ops);
    }

    #[test]
    fn packed_arena_hands_out_only_its_own_unshared_memory(
        ops in proptest::collection::vec(op(), 1..40),
        retain in prop_oneof![Just(0usize), Just(4usize << 20)],
    ) {
        run(Mode::Packed, retain, &ops);
    }
}
