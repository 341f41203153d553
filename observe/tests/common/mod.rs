//! What the observer tests share: kernels compiled by clang for the architecture the test
//! runs on (the OS crate's helper), linked by the core into an `MmapBackend`, and published.

#![allow(dead_code)] // each test binary uses its own subset

#[path = "../../../os/tests/common/mod.rs"]
mod clang;

pub use clang::{compile_with, target_flags};
use elfjit_core::Plan;
use elfjit_observe::Registration;
use elfjit_os::{MmapBackend, ProcessResolver};
use std::path::PathBuf;
use std::process::{Command, Output};

/// Compiles C `source` at `opt` for this architecture with `extra` flags (`-g`, ...).
pub fn compile(source: &str, opt: &str, extra: &[&str]) -> Vec<u8> {
    let mut flags = target_flags();
    flags.extend_from_slice(extra);
    compile_with(&flags, source, opt)
}

/// A linked, published kernel that stays mapped (and registered) while the test uses it.
pub struct Loaded {
    // Dropped first: the registration refers to the memory.
    pub registration: Option<Registration>,
    _memory: MmapBackend,
    pub functions: Vec<(String, u64, u64)>,
}

impl Loaded {
    /// Links `object` and publishes it to the observers switched on.
    pub fn new(object: &[u8]) -> Loaded {
        let mut memory = MmapBackend::new();
        let plan = Plan::new(&[object], memory.page_size()).expect("plan");
        let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
        // SAFETY: `memory` holds the image and outlives the registration (field order).
        let registration =
            unsafe { elfjit_observe::observe_image("test", &[object], &image) }.expect("publish");
        let functions = image
            .functions()
            .map(|g| {
                (
                    String::from_utf8_lossy(g.name).into_owned(),
                    g.address,
                    g.size,
                )
            })
            .collect();
        Loaded {
            registration,
            _memory: memory,
            functions,
        }
    }

    /// The address of function `name`.
    pub fn get(&self, name: &str) -> usize {
        self.range(name).0 as usize
    }

    /// The start and size of function `name`.
    pub fn range(&self, name: &str) -> (u64, u64) {
        self.functions
            .iter()
            .find(|(n, ..)| n == name)
            .map(|&(_, a, s)| (a, s))
            .unwrap_or_else(|| panic!("no {name}"))
    }
}

/// Runs this test binary again as a child that runs only `test` (an ignored test), with
/// `env` set, under `wrapper` (a tool and its arguments, which end with where the program
/// goes). Returns the tool's output.
pub fn rerun_under(wrapper: &[&str], test: &str, env: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    let (tool, args) = wrapper.split_first().expect("a tool");
    let mut command = Command::new(tool);
    command.args(args).arg(&exe).args([
        test,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (key, value) in env {
        command.env(key, value);
    }
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool} (./scripts/setup installs it): {e}"))
}

/// A fresh scratch directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("elfjit-observe-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
