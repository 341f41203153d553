//! Replays the fuzz targets' inputs under plain `cargo test`: every saved regression input
//! (fuzz/regressions/<target>/), every seed object, and a few thousand deterministic
//! structure-aware mutations of the seeds. Nothing may panic; errors are fine.

#[path = "../../fuzz/src/body.rs"]
#[allow(dead_code)]
mod body;

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files(dir: &Path) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.retain(|p| p.is_file() && p.file_name().is_some_and(|n| n != ".gitkeep"));
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn seeds() -> Vec<Vec<u8>> {
    let seeds = files(&fuzz_dir().join("seeds"));
    assert!(
        seeds.len() >= 50,
        "fuzz/seeds holds the committed clang objects"
    );
    seeds
}

#[test]
fn saved_regression_inputs_replay() {
    let seeds = seeds();
    let seed_refs: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
    let dir = fuzz_dir().join("regressions");
    for input in files(&dir.join("parse_plan")) {
        body::run_parse_plan(&input);
    }
    for input in files(&dir.join("link")) {
        body::run_link(&input);
    }
    for input in files(&dir.join("mutate_objects")) {
        body::run_mutate(&input, &seed_refs);
    }
}

#[test]
fn every_seed_plans_and_links_at_every_page_size() {
    for seed in seeds() {
        body::run_parse_plan(&seed);
        for (i, &page) in body::PAGE_SIZES.iter().enumerate() {
            body::plan_and_link(&[&seed], 0x7fff_0000_0000 + i as u64 * 0x1234_5000, page, 7);
            body::plan_and_link(&[&seed], 0, page, 7);
            body::plan_and_link(&[&seed], u64::MAX, page, 7);
        }
    }
}

#[test]
fn deterministic_structure_aware_mutations() {
    let seeds = seeds();
    let seed_refs: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..4000 {
        let mut input = Vec::new();
        for _ in 0..(3 + next() % 6) {
            input.extend_from_slice(&next().to_le_bytes());
        }
        // Small values hit the interesting edges (0, 1, counts, indices) more often.
        for _ in 0..(1 + next() % 4) {
            let r = next();
            let value = match r % 4 {
                0 => r >> 60,
                1 => u64::MAX - (r >> 60),
                2 => 1 << (r % 64),
                _ => next(),
            };
            input.extend_from_slice(&[
                (r >> 8) as u8,
                (r >> 16) as u8,
                (r >> 24) as u8,
                (r >> 32) as u8,
            ]);
            input.extend_from_slice(&value.to_le_bytes());
        }
        body::run_mutate(&input, &seed_refs);
    }
}
