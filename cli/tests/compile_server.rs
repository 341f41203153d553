//! Which compiler the CLI uses (issue 27): a compile server where one can be had, a spawned
//! clang with one note where none can, `ELFJIT_COMPILER` to force either, and what
//! `--version` and `run --json` say about it. Real clang, real servers.

mod support;
use support::{bin, compiler, json, lines_with, run, stderr, stdout, Scratch};

const ADD_C: &str = "int add(int a, int b) { return a + b; }\n";

/// A clang for which no server can be had: it compiles as the host's clang does, but says
/// it is LLVM 99, for which there is no libclang-cpp.
fn clang_without_server(d: &Scratch) -> std::path::PathBuf {
    let real = compiler();
    d.script(
        "clang",
        &format!(
            "case \"$1\" in --version) echo 'Debian clang version 99.0.0'; exit 0;; esac\n\
             exec '{}' \"$@\"",
            real.path().display()
        ),
    )
}

#[test]
fn version_and_json_say_a_server_compiled() {
    let o = run(bin().arg("--version"));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(
        lines_with(&text, "compiler: compile server (pid "),
        1,
        "{text}"
    );

    let d = Scratch::new("cs-json");
    let k = d.write("k.c", ADD_C);
    // A fresh process's first compile spawns clang, and its server starts after it.
    let v = json(&run(bin().arg("run").arg(&k).args([
        "--ret", "i32", "--arg", "i32:2", "--arg", "i32:3", "--json",
    ])));
    assert_eq!(v["return"], 5);
    assert_eq!(v["compiler"]["kind"], "spawn", "{v}");
    assert!(
        v["compiler"]["reason"]
            .as_str()
            .unwrap()
            .contains("the compile server starts after it"),
        "{v}"
    );
    // ELFJIT_COMPILER=server waits for it.
    let v = json(&run(bin()
        .env("ELFJIT_COMPILER", "server")
        .arg("run")
        .arg(&k)
        .args([
            "--ret", "i32", "--arg", "i32:2", "--arg", "i32:3", "--json",
        ])));
    assert_eq!(v["return"], 5);
    assert_eq!(v["compiler"]["kind"], "server", "{v}");
    assert!(v["compiler"]["pid"].as_u64().unwrap() > 0, "{v}");
    assert!(v["compiler"]["binary"].is_string(), "{v}");

    let v = json(&run(bin()
        .env("ELFJIT_COMPILER", "spawn")
        .arg("run")
        .arg(&k)
        .args([
            "--ret", "i32", "--arg", "i32:2", "--arg", "i32:3", "--json",
        ])));
    assert_eq!(v["return"], 5);
    assert_eq!(
        v["compiler"],
        serde_json::json!({"kind": "spawn", "reason": "ELFJIT_COMPILER=spawn"})
    );
    let o = run(bin().env("ELFJIT_COMPILER", "spawn").arg("--version"));
    assert!(
        stdout(&o).contains("compiler: spawned clang (ELFJIT_COMPILER=spawn)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn without_a_server_compiles_spawn_clang_with_one_note() {
    let d = Scratch::new("cs-fallback");
    let clang = clang_without_server(&d);
    // The demo compiles five kernels: one note for all of them.
    let o = run(bin().env("ELFJIT_CLANG", &clang).arg("demo"));
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(lines_with(&err, "elfjit: note: "), 1, "{err}");
    assert_eq!(lines_with(&err, "compiling with a spawned"), 1, "{err}");
    assert!(err.contains("99"), "the note says why: {err}");

    let k = d.write("k.c", ADD_C);
    let v = json(&run(bin()
        .env("ELFJIT_CLANG", &clang)
        .arg("run")
        .arg(&k)
        .args([
            "--ret", "i32", "--arg", "i32:20", "--arg", "i32:22", "--json",
        ])));
    assert_eq!(v["return"], 42);
    assert_eq!(v["compiler"]["kind"], "spawn", "{v}");
    // --version waits for the verdict: no server for this clang, and why.
    let o = run(bin().env("ELFJIT_CLANG", &clang).arg("--version"));
    let text = stdout(&o);
    assert!(
        text.contains("compiler: spawned clang (no compile server: "),
        "{text}"
    );
}

#[test]
fn elfjit_compiler_server_without_a_server_is_an_error() {
    let d = Scratch::new("cs-required");
    let clang = clang_without_server(&d);
    let k = d.write("k.c", ADD_C);
    let o = run(bin()
        .env("ELFJIT_CLANG", &clang)
        .env("ELFJIT_COMPILER", "server")
        .arg("run")
        .arg(&k)
        .args(["--ret", "i32", "--arg", "i32:1", "--arg", "i32:2"]));
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.starts_with("elfjit: error: "), "{err}");
    assert!(
        err.contains("ELFJIT_COMPILER=server, but there is no server"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_settings_are_errors_naming_the_value() {
    let d = Scratch::new("cs-bad");
    let k = d.write("k.c", ADD_C);
    for (var, value, needle) in [
        ("ELFJIT_COMPILER", "fast", "ELFJIT_COMPILER `fast`"),
        ("ELFJIT_COMPILE_SERVERS", "0", "ELFJIT_COMPILE_SERVERS `0`"),
        (
            "ELFJIT_COMPILE_SERVERS",
            "lots",
            "ELFJIT_COMPILE_SERVERS `lots`",
        ),
    ] {
        let o = run(bin()
            .env(var, value)
            .arg("run")
            .arg(&k)
            .args(["--ret", "i32"]));
        let err = stderr(&o);
        assert!(!o.status.success(), "{var}={value}: {err}");
        assert!(err.contains(needle), "{var}={value}: {err}");
    }
}

#[test]
fn version_runs_clang_version_once() {
    let d = Scratch::new("cs-version-once");
    let log = d.join("version-runs");
    let real = compiler();
    // Counts its `--version` runs (and says LLVM 99: no server to build for it).
    let clang = d.script(
        "clang",
        &format!(
            "case \"$1\" in --version) echo run >> '{}'; \
             echo 'Debian clang version 99.0.0'; exit 0;; esac\n\
             exec '{}' \"$@\"",
            log.display(),
            real.path().display()
        ),
    );
    let o = run(bin()
        .env("ELFJIT_CLANG", &clang)
        .env("ELFJIT_CACHE_DIR", d.join("cache"))
        .arg("--version"));
    let text = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(text.contains("(Debian clang version 99.0.0)"), "{text}");
    assert!(text.contains("compiler: spawned clang"), "{text}");
    let runs = std::fs::read_to_string(&log).unwrap();
    assert_eq!(runs.lines().count(), 1, "clang --version ran {runs:?}");
}

/// The pid in a "compiler: compile server (pid N, ...)" line of `text`.
fn server_pid(text: &str) -> u32 {
    let after = text
        .split("compiler: compile server (pid ")
        .nth(1)
        .unwrap_or_else(|| panic!("no server named in:\n{text}"));
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|e| panic!("pid `{digits}`: {e}\n{text}"))
}

/// Whether `pid` is a live process (not gone, not a zombie waiting for init to reap it).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[test]
fn the_servers_of_a_cli_process_end_with_it() {
    // What `alive` says of a process that runs.
    assert!(alive(std::process::id()));
    for args in [&["--version"][..], &["demo"][..]] {
        let o = run(bin().args(args));
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let pid = server_pid(&stdout(&o));
        // The CLI kills its servers as it exits; a server whose parent is gone also ends
        // itself. Either way it is gone (or a zombie for init) moments later.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!alive(pid), "{args:?}: server {pid} outlived the CLI");
    }
}
