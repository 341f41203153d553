//! Modules in code arenas: the process-wide default, arenas chosen per load, several
//! modules published together, and what a module keeps alive.
//! (Not with the dlopen-fallback: its modules are shared libraries, in no arena.)
#![cfg(not(feature = "dlopen-fallback"))]

use elfjit::{Arch, CompileOptions, Error, Lang, Module};
use elfjit_os::{Arena, ArenaConfig, ArenaError, Mode, Resource};

#[path = "common/objects.rs"]
mod objects;

const SAXPY: &str = r#"
extern float expf(float);
static const float table[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
int saxpy_calls;
int saxpy(int n, float a, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = a * x[i] + table[i & 15] * expf(y[i]);
    return ++saxpy_calls;
}
"#;

/// `source` compiled with the driver's flags for this machine (on Windows: read from what a
/// Linux run stored, `common/objects.rs`).
fn compile(source: &str) -> Vec<u8> {
    let host = Arch::host().expect("a supported host");
    objects::driver_object(source, &CompileOptions::new(Lang::C, host))
}

/// An arena other than the process's: a packed one where the OS has packed mode; on
/// Windows, which refuses it (`Unsupported`, docs/os-support.md), that refusal is checked
/// and a second page-granular arena stands in.
fn packed_or_refused() -> Arena {
    match Arena::packed() {
        Ok(arena) if !cfg!(windows) => arena,
        Err(ArenaError::Unsupported { .. }) if cfg!(windows) => Arena::new(),
        Ok(_) => panic!("packed mode is documented as unsupported on Windows"),
        Err(e) => panic!("packed arena: {e}"),
    }
}

/// Calls the module's saxpy once (its `calls`-th call) and checks the result.
fn check(module: &Module, calls: i32) {
    let entry = module.symbol("saxpy").expect("saxpy");
    // SAFETY: matches `int saxpy(int, float, const float *, float *)`; `module` is alive.
    let f: extern "C" fn(i32, f32, *const f32, *mut f32) -> i32 =
        unsafe { std::mem::transmute(entry) };
    let x = [1.0f32, 2.0, 3.0];
    let mut y = [0.0f32; 3];
    assert_eq!(f(3, 2.0, x.as_ptr(), y.as_mut_ptr()), calls);
    assert_eq!(y, [3.0, 6.0, 9.0]);
}

fn inside(address: usize, arena: &Arena) -> bool {
    arena
        .regions()
        .iter()
        .any(|&(start, len)| (start..start + len).contains(&address))
}

#[test]
fn load_uses_the_process_arena_and_load_in_the_one_named() {
    let object = compile(SAXPY);
    let default = Module::load(&object).expect("load");
    check(&default, 1);
    assert!(inside(default.region().0, Arena::process()));
    assert_eq!(
        default.arena().map(Arena::mode),
        Some(Mode::PageGranular),
        "the default arena is page-granular"
    );

    let packed = packed_or_refused();
    let module = Module::load_in(&packed, &object).expect("load_in");
    check(&module, 1);
    assert!(inside(module.region().0, &packed));
    assert!(!inside(module.region().0, Arena::process()));
    assert_eq!(packed.stats().modules, 1);
    drop(module);
    assert_eq!(packed.stats().modules, 0);
}

#[test]
fn prepare_readies_the_process_arena_and_loads_still_run() {
    elfjit::prepare().expect("prepare");
    assert!(Arena::process().stats().chunks >= 1);
    elfjit::prepare().expect("prepare again");
    let module = Module::load(&compile(SAXPY)).expect("load");
    check(&module, 1);
    let entry = module.symbol("saxpy").expect("saxpy") as usize;
    assert!(inside(entry, Arena::process()));
}

#[test]
fn a_module_keeps_its_arena_alive() {
    let object = compile(SAXPY);
    let arena = packed_or_refused();
    let modules: Vec<Module> = (0..3)
        .map(|_| Module::load_in(&arena, &object).expect("load"))
        .collect();
    let regions = arena.regions();
    drop(arena);
    // The arena's memory is still mapped and the modules still run.
    for module in &modules {
        check(module, 1);
    }
    let arena = modules[0].arena().expect("an arena").clone();
    assert_eq!(arena.regions(), regions);
    assert_eq!(arena.stats().modules, 3);
}

#[test]
fn modules_loaded_together_publish_together_and_free_alone() {
    let object = compile(SAXPY);
    let arena = Arena::new();
    drop(Module::load_in(&arena, &object).expect("load")); // make the chunk
    let objects = vec![object.as_slice(); 12];
    let before = arena.stats().protect_calls;
    let mut modules = Module::load_each_in(&arena, &objects, &mut |_| None).expect("load");
    assert_eq!(
        arena.stats().protect_calls - before,
        4,
        "two per class for the batch"
    );
    assert_eq!(modules.len(), 12);
    for module in &modules {
        check(module, 1);
    }
    modules.truncate(5);
    assert_eq!(arena.stats().modules, 5);
    for module in &modules {
        check(module, 2);
    }

    // One bad object: nothing is loaded, and the arena is as it was.
    let bad = compile("extern int nowhere(void); int saxpy(void) { return nowhere(); }");
    let stats = arena.stats();
    let mixed = [object.as_slice(), bad.as_slice(), object.as_slice()];
    let err = Module::load_each_in(&arena, &mixed, &mut |_| None)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("nowhere"), "{err}");
    let after = arena.stats();
    assert_eq!(
        (after.modules, after.held, after.pooled),
        (stats.modules, stats.held, stats.pooled)
    );
}

#[test]
fn an_exhausted_arena_is_a_typed_error() {
    let object = compile(SAXPY);
    let config = ArenaConfig {
        class_bytes: 2 << 20,
        max_reserved: 6 << 20,
        ..ArenaConfig::new(Mode::PageGranular)
    };
    let arena = Arena::with_config(config).expect("arena");
    let mut live = Vec::new();
    let err = loop {
        match Module::load_in(&arena, &object) {
            Ok(m) => live.push(m),
            Err(e) => break e,
        }
        assert!(live.len() <= 1024, "the limit never hit");
    };
    let Error::Arena(ArenaError::Exhausted {
        resource: Resource::ArenaLimit,
        limit,
        requested,
        ..
    }) = err
    else {
        panic!("not an exhausted arena: {err:?}");
    };
    assert_eq!(limit, 6 << 20);
    assert!(requested > 0);
    assert!(err.to_string().contains("reservation limit"), "{err}");
    live.pop();
    check(&Module::load_in(&arena, &object).expect("room again"), 1);
}
