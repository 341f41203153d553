//! Unix: the command's OS pieces. A crash of a native kernel is reported by name (a
//! signal handler, crash.rs); children run in their own process groups and are taken
//! down on Ctrl-C; orphans are adopted (Linux); emulated runs (qemu-user) and their
//! runner files; the object cache.

use crate::cli::CacheCommand;
use crate::{crash, demo, out, usage, Failure};
use elfjit::cache;
use elfjit::run::{Executor, RunRequest};
use elfjit::{Compiler, Error, Native};
use elfjit_emulate::runner;

/// What must live as long as `main`: the adopted orphans, killed and reaped on drop.
pub(crate) struct Guards {
    _orphans: Option<elfjit::orphans::Orphans>,
}

/// Installs the crash reporter and the Ctrl-C handler, and adopts orphans.
pub(crate) fn install_guards() -> Guards {
    // Say which kernel crashed, and where, instead of dying silently. Without the
    // reporter the run still works; the crash is then only the signal.
    let _ = crash::install();
    // Children run in their own process groups: take them down on Ctrl-C too.
    let _ = elfjit::child::stop_children_on_termination_signals();
    // What a child leaves behind outside its process group (an emulated kernel that forks
    // and calls setsid) is adopted by this process, and killed and reaped when the guards
    // are dropped at the end of main: nothing elfjit started outlives it. Without it
    // (prctl refused) such a process is left to init, as before.
    Guards {
        _orphans: elfjit::orphans::adopt_orphans().ok(),
    }
}

/// The native executor, with a crash of a native kernel reported by name.
pub(crate) fn native() -> Native {
    Native::with_observer(&crash::REPORTER)
}

/// The executor for `req`: `native`, or an emulator for another architecture.
pub(crate) fn executor_for<'a>(
    req: &RunRequest,
    native: &'a Native,
) -> Result<&'a dyn Executor, Failure> {
    Ok(elfjit_emulate::executor_for(req, native))
}

pub(crate) fn cmd_cache(command: CacheCommand) -> Result<(), Failure> {
    match command {
        CacheCommand::Clear { ref extra } | CacheCommand::Dir { ref extra }
            if !extra.is_empty() =>
        {
            let sub = if matches!(command, CacheCommand::Clear { .. }) {
                "clear"
            } else {
                "dir"
            };
            Err(usage(format!(
                "cache {sub} takes no arguments, got `{}`",
                extra
                    .first()
                    .map(|e| e.to_string_lossy())
                    .unwrap_or_default()
            )))
        }
        CacheCommand::Clear { .. } => {
            let root = cache::root_dir();
            let dir = cache::default_dir();
            let objects = cache::clear_objects_in(&root)?;
            let runners = runner::clear_dir(&root)?;
            let plural = |n: u64| if n == 1 { "" } else { "s" };
            out(&format!(
                "removed {} cached object{} ({} bytes) from {}\n\
                 removed {} runner file{} ({} bytes) from {}\n",
                objects.files,
                plural(objects.files),
                objects.bytes,
                dir.display(),
                runners.files,
                plural(runners.files),
                runners.bytes,
                root.display()
            ))
        }
        CacheCommand::Dir { .. } => out(&format!("{}\n", cache::default_dir().display())),
    }
}

pub(crate) fn cmd_demo() -> Result<(), Failure> {
    let compiler = Compiler::find()?;
    // The server first: finding it reads clang's version remembered on disk, which
    // `version` then answers without running clang.
    // As many servers as kernels (up to the pool's size), started together: the
    // kernels are compiled at once.
    let compiling = match elfjit::route::warm_up(&compiler, demo::kernel_count()) {
        Ok(by) => by.to_string(),
        Err(e) => return Err(Failure::Run(e.into())),
    };
    let version = compiler.version().unwrap_or_else(|e| e.to_string());
    out(&format!(
        "clang: {} ({version})\ncompiler: {compiling}\n",
        compiler.path().display()
    ))?;
    let results = demo::run_all(&compiler)?;
    let mut failed = 0;
    for r in &results {
        if !r.ok() {
            failed += 1;
        }
        out(&format!("{}\n", r.line()))?;
    }
    if failed > 0 {
        return Err(Failure::Run(Error::Unsupported(format!(
            "{failed} of {} demo kernels failed",
            results.len()
        ))));
    }
    Ok(())
}
