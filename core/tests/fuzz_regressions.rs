//! Replays the fuzz targets' inputs under plain `cargo test`: every saved regression input
//! (fuzz/regressions/<target>/<name>, each with the outcome it must have in
//! <name>.expected), every seed object, and a few thousand deterministic structure-aware
//! mutations of the seeds. Nothing may panic; the bodies check the plan's invariants.
//!
//! `ELFJIT_BLESS=1 cargo test -p elfjit-core --test fuzz_regressions` rewrites the
//! .expected files from what the inputs do now (after a deliberate change of outcome).

#[path = "../../fuzz/src/body.rs"]
#[allow(dead_code)]
mod body;

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `dir` other than .gitkeep and the .expected outcomes, sorted.
fn paths(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.retain(|p| {
        p.is_file()
            && p.file_name().is_some_and(|n| n != ".gitkeep")
            && p.extension().is_none_or(|e| e != "expected")
    });
    paths.sort();
    paths
}

fn files(dir: &Path) -> Vec<Vec<u8>> {
    paths(dir)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

fn seeds() -> Vec<Vec<u8>> {
    let seeds = files(&fuzz_dir().join("seeds"));
    assert!(
        seeds.len() >= 50,
        "fuzz/seeds holds the committed clang objects"
    );
    seeds
}

/// Every saved input of `target` has the outcome recorded beside it; a target with no
/// saved inputs, or an input with no recorded outcome, fails.
fn replay(target: &str, run: &dyn Fn(&[u8]) -> String) -> usize {
    let dir = fuzz_dir().join("regressions").join(target);
    let inputs = paths(&dir);
    assert!(
        !inputs.is_empty(),
        "{} holds no inputs: save minimized ones there (see scripts/fuzz-smoke)",
        dir.display()
    );
    let bless = std::env::var_os("ELFJIT_BLESS").is_some();
    let mut wrong = Vec::new();
    for input in &inputs {
        let outcome = run(&std::fs::read(input).unwrap());
        let expected_path = input.with_extension("expected");
        if bless {
            std::fs::write(&expected_path, format!("{outcome}\n")).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        if expected.trim_end() != outcome {
            wrong.push(format!(
                "{}: expected `{}`, got `{outcome}`",
                input.display(),
                expected.trim_end()
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    inputs.len()
}

#[test]
fn saved_parse_plan_inputs_replay() {
    replay("parse_plan", &|input| body::run_parse_plan(input));
}

#[test]
fn saved_link_inputs_replay() {
    replay("link", &|input| body::run_link(input));
}

#[test]
fn saved_mutate_objects_inputs_replay() {
    let seeds = seeds();
    let seed_refs: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
    replay("mutate_objects", &|input| {
        body::run_mutate(input, &seed_refs)
    });
}

#[test]
fn every_seed_plans_and_links_at_every_page_size() {
    for seed in seeds() {
        // Every seed plans (its link may meet a name the fuzz resolver leaves undefined).
        let outcome = body::run_parse_plan(&seed);
        assert!(outcome.starts_with("link: "), "{outcome}");
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
        let _ = body::run_mutate(&input, &seed_refs);
    }
}
