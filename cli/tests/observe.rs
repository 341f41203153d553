//! The observers through the `elfjit` command: `elfjit run --debug` under gdb stops in the
//! kernel at its source line; `ELFJIT_PERF=map` lets perf name a kernel `elfjit run` spins
//! in (the library's unwinding is tested in elfjit's tests/observe.rs); a FIFO or another
//! user's file planted at `/tmp/perf-<pid>.map` costs one note, never a hang or a failed
//! run.

use elfjit::Arch;
use std::process::{Command, Output};
use std::time::Duration;

mod support;
use support::{json, lines_with, stderr, wait_with_watchdog, Scratch, OTHER_UID};

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn tool(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(name);
    command.args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name} (./scripts/setup installs it): {e}"))
}

#[test]
fn gdb_stops_in_a_kernel_run_with_debug_at_its_source_line() {
    let dir = Scratch::new("gdb");
    let source = dir.join("my_kernel.c");
    std::fs::write(
        &source,
        "int my_kernel(int x) {\n    int y = x * 3;\n    return y + 1;\n}\n",
    )
    .unwrap();
    let output = tool(
        "gdb",
        &[
            "-batch",
            "-nx",
            "-iex",
            "set auto-load off",
            "-iex",
            "set debuginfod enabled off",
            "-ex",
            "set breakpoint pending on",
            "-ex",
            "break my_kernel",
            "-ex",
            "run",
            "-ex",
            "bt",
            "-ex",
            "info line *$pc",
            "-ex",
            "kill",
            "--args",
            env!("CARGO_BIN_EXE_elfjit"),
            "run",
            source.to_str().unwrap(),
            "--debug",
            "--ret",
            "i32",
            "--arg",
            "i32:4",
        ],
        &[],
    );
    let text = text(&output);
    let frame0 = text
        .lines()
        .find(|l| l.starts_with("#0 "))
        .unwrap_or_else(|| panic!("gdb did not stop:\n{text}"));
    assert!(
        frame0.contains("my_kernel (x=4)") && frame0.contains("my_kernel.c:"),
        "not stopped in my_kernel at a source line: {frame0}\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("Line "))
        .unwrap_or_else(|| panic!("no `info line` answer:\n{text}"));
    assert!(
        line.contains(source.to_str().unwrap())
            && (line.starts_with("Line 2 ") || line.starts_with("Line 3 ")),
        "info line: {line}"
    );
    // The backtrace continues into the caller: libffi's call, then elfjit's.
    assert!(
        text.contains("#1 ") && text.contains("elfjit::native::"),
        "{text}"
    );
}

#[test]
fn debug_is_refused_for_an_emulated_run() {
    let foreign = if Arch::host() == Some(Arch::Aarch64) {
        "x86_64"
    } else {
        "aarch64"
    };
    let output = tool(
        env!("CARGO_BIN_EXE_elfjit"),
        &["run", "-", "--lang", "c", "--debug", "--target", foreign],
        &[],
    );
    assert!(!output.status.success());
    assert!(
        text(&output).contains("debugging runs on the host only"),
        "{}",
        text(&output)
    );
}

#[test]
// The dlopen-fallback writes no perf map: its kernel is a file-backed mapping of a shared
// library removed right after dlopen, so perf looks for its symbols in that (gone) file.
#[cfg_attr(
    feature = "dlopen-fallback",
    ignore = "dlopen-fallback kernels are in a removed shared library, not in perf-mapped memory"
)]
fn perf_names_a_kernel_elfjit_run_spins_in_with_elfjit_perf_map() {
    let dir = Scratch::new("perf");
    let source = dir.join("spin.c");
    std::fs::write(
        &source,
        "long spin(long n) { long s = 0; for (long i = 0; i < n; i++) { s = s * 31 + i; \
         __asm__ volatile(\"\" : \"+r\"(s)); } return s; }\n",
    )
    .unwrap();
    let data = dir.join("perf.data");
    let data = data.to_str().unwrap();
    let record = tool(
        "perf",
        &[
            "record",
            "-B",
            "-e",
            "cpu-clock",
            "-o",
            data,
            "--",
            env!("CARGO_BIN_EXE_elfjit"),
            "run",
            source.to_str().unwrap(),
            "--ret",
            "i64",
            "--arg",
            "i64:400000000",
        ],
        &[("ELFJIT_PERF", "map")],
    );
    assert!(
        record.status.success(),
        "perf record failed:\n{}",
        text(&record)
    );
    let report = tool(
        "perf",
        &["report", "-i", data, "--stdio", "--sort", "sym"],
        &[],
    );
    assert!(
        report.status.success(),
        "perf report failed:\n{}",
        text(&report)
    );
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    let share: f64 = report
        .lines()
        .filter(|l| !l.starts_with('#') && l.split_whitespace().last() == Some("spin"))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .trim_end_matches('%')
                .parse::<f64>()
                .ok()
        })
        .sum();
    assert!(share > 50.0, "spin has {share}% of the samples:\n{report}");
    // The recorded process's perf map stays in /tmp for perf: remove it.
    let script = tool("perf", &["script", "-i", data, "-F", "pid"], &[]);
    let pid = String::from_utf8_lossy(&script.stdout)
        .split_whitespace()
        .next()
        .map(str::to_string)
        .expect("a sample's pid");
    std::fs::remove_file(format!("/tmp/perf-{pid}.map")).unwrap();
}

/// What another user plants at `/tmp/perf-<pid>.map` before elfjit opens it.
#[derive(Clone, Copy, Debug)]
enum Planted {
    /// A FIFO nobody reads: a blocking open for writing waits forever.
    Fifo,
    /// A regular file of theirs (mode 0600).
    File,
}

/// `/tmp/perf-<pid>.map` NUL-terminated in `buf`, without allocating (it is built in a
/// forked child, before exec).
fn perf_map_path_of(pid: u32, buf: &mut [u8; 32]) {
    const PREFIX: &[u8] = b"/tmp/perf-";
    const SUFFIX: &[u8] = b".map\0";
    let mut digits = [0u8; 10];
    let mut n = pid;
    let mut count = 0;
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let bytes = PREFIX
        .iter()
        .chain(digits[..count].iter().rev())
        .chain(SUFFIX);
    for (slot, &b) in buf.iter_mut().zip(bytes) {
        *slot = b;
    }
}

/// `elfjit run` with `ELFJIT_PERF=map`, after another user planted `what` at the perf map
/// path of the very process (planted between fork and exec, when its pid is known).
fn run_with_planted_perf_map(source: &std::path::Path, what: Planted) -> (Output, bool) {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_elfjit"));
    command
        .arg("run")
        .arg(source)
        .args([
            "--ret", "i32", "--arg", "i32:40", "--arg", "i32:2", "--json",
        ])
        .env("ELFJIT_PERF", "map")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: the hook runs in the forked child before exec and only makes system calls
    // (getpid, mkfifo/open, close, lchown) on a path built in a stack buffer: nothing that
    // allocates or takes a lock.
    unsafe {
        command.pre_exec(move || {
            let mut path = [0u8; 32];
            perf_map_path_of(libc::getpid() as u32, &mut path);
            let path = path.as_ptr().cast::<libc::c_char>();
            match what {
                Planted::Fifo => {
                    if libc::mkfifo(path, 0o600) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Planted::File => {
                    let fd = libc::open(path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o600);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                }
            }
            if libc::lchown(path, OTHER_UID, OTHER_UID) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .expect("spawn elfjit (planting needs root, as CI runs)");
    let planted = format!("/tmp/perf-{}.map", child.id());
    let result = wait_with_watchdog(child, Duration::from_secs(60));
    std::fs::remove_file(&planted).unwrap_or_else(|e| panic!("remove {planted}: {e}"));
    result
}

#[test]
fn a_fifo_or_foreign_file_at_the_perf_map_path_costs_one_note_not_a_hang() {
    let dir = Scratch::new("planted-perf-map");
    let source = dir.join("add.c");
    std::fs::write(&source, "int add(int a, int b) { return a + b; }\n").unwrap();
    for (what, problem) in [
        (Planted::Fifo, "FIFO"),
        (Planted::File, "owned by another user"),
    ] {
        let (output, killed) = run_with_planted_perf_map(&source, what);
        assert!(
            !killed,
            "{what:?}: elfjit hung opening the planted perf map; stderr: {}",
            stderr(&output)
        );
        assert_eq!(json(&output)["return"], 42, "{what:?}");
        let err = stderr(&output);
        // The dlopen-fallback writes no perf map (see above), so it opens nothing there
        // and has nothing to say; it must still not hang.
        let notes = usize::from(!cfg!(feature = "dlopen-fallback"));
        assert_eq!(lines_with(&err, "perf map"), notes, "{what:?}: {err}");
        assert_eq!(
            lines_with(
                &err,
                "elfjit: note: ELFJIT_PERF=map: not writing a perf map"
            ),
            notes,
            "{what:?}: {err}"
        );
        assert_eq!(lines_with(&err, problem), notes, "{what:?}: {err}");
    }
}
