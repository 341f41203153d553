//! The `elfjit` command-line tool: `run`, `demo`, `inspect`.

use elfjit::args::{ArgSpec, RetType};
use elfjit::bounded::{self, describe_size};
use elfjit::cache::{self, Cache};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::emulate::runner;
use elfjit::flags::HostInfo;
use elfjit::run::{run_cached, run_with, RunRequest};
use elfjit::{Arch, Error};
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// The most bytes `run` and `inspect` read from FILE or stdin.
const MAX_INPUT: u64 = 64 << 20;

const USAGE: &str = "\
elfjit: compile C or LLVM IR with clang on a pipe, link it in memory, call it

usage:
  elfjit run FILE [options]           compile, load and call one kernel
  elfjit demo                         run the built-in kernels and check their results
  elfjit inspect FILE [--target ARCH] describe how an object (.o, or .c/.ll compiled
                                      for ARCH) would be laid out and relocated
  elfjit help | --help                this text (`elfjit run --help` for run's options)
  elfjit cache clear                  remove the compile cache's objects (`run --cache`)
                                      and the emulated runners
  elfjit --version                    versions of elfjit and the clang it would use

clang: $ELFJIT_CLANG if set, else the first `clang` in PATH, else a `clang-NN`: the
first PATH directory holding one decides, and in it the highest NN.
FILE (or stdin) is read up to 64 MiB.
A native kernel that crashes is reported (signal, kernel, fault address) on stderr.
";

const RUN_USAGE: &str = "\
elfjit run FILE [--lang c|ir] [--entry NAME] [--target ARCH] [--emulate] [--ret TYPE] [--arg SPEC]... [--cache] [--debug] [--json]
  FILE        .c (C), .ll (LLVM IR), or '-' for stdin (then --lang is required);
              at most 64 MiB
  --entry     default: the object's only global function; several -> error listing them
  --target    x86_64 | aarch64 | riscv64 | loongarch64 | ppc64le; default: the host.
              A foreign target is compiled for a generic CPU, linked on the host and
              run under qemu-user (qemu-ARCH) by elfjit's own runner (built with clang
              and lld on first use, cached in $ELFJIT_CACHE_DIR or ~/.cache/elfjit)
  --emulate   run through that runner even for the host (also: ELFJIT_EMULATE=1)
  --ret       void (default) | i32 | i64 | u32 | u64 | f32 | f64
  --arg SPEC  repeated, in call order:
              TYPE:VALUE          scalar, e.g. i32:1024  f32:2.5
              TYPE[N]             buffer of N zeros
              TYPE[N]=v0,v1,...   exactly N values
              TYPE[N]=iota        0,1,...,N-1
              TYPE[N]=fill:V      N copies of V
              TYPE: i8 u8 i16 u16 i32 u32 i64 u64 f32 f64; buffers are passed as pointers
              to 64-byte-aligned memory; at most 2^28 elements each, 2 GiB in all
  -O0..-O3, --opt-level N
              clang optimisation level (default 2)
  --cache     take the object from the on-disk compile cache, or compile and store it
              ($ELFJIT_CACHE_DIR/objects, else ~/.cache/elfjit/objects; keyed by source,
              language, flags, target, clang version and the contents of every file
              the source #included); --json then adds \"cache\": \"hit\"|\"miss\", and a
              hit's compile time is the lookup. The directory is used only if it is
              yours alone (owner you, not group- or world-writable); else a note says
              why and nothing is cached
  --debug     compile with -g and register the kernel with the GDB JIT interface, so
              `gdb --args elfjit run k.c --debug ...` can `break KERNEL` (pending) and
              stop at its source line (host only). ELFJIT_GDB=1 registers without -g;
              ELFJIT_PERF=map|jitdump writes perf's symbol files (see the README)
  --json      exactly one JSON object on stdout:
              {\"target\": \"...\", \"entry\": \"...\", \"return\": <number>|null,
               \"args\": [<scalar as given> | [<buffer values after the call>], ...],
               \"timings_us\": {\"compile\": <f64>, \"load\": <f64>, \"call\": <f64>}}
              floats as shortest round-trip decimals; NaN/infinities as \"nan\", \"inf\", \"-inf\"
  exit 0 on success; otherwise non-zero and one clear error on stderr
";

/// Why the tool stopped: a usage mistake (exit 2) or a failure while working (exit 1).
enum Failure {
    Usage(String),
    Run(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            Error::BadArgument { .. } => Failure::Usage(e.to_string()),
            other => Failure::Run(other),
        }
    }
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure::Usage(msg.into())
}

fn main() -> ExitCode {
    // Say which kernel crashed, and where, instead of dying silently. Without the
    // reporter the run still works; the crash is then only the signal.
    let _ = elfjit::crash::install();
    // Children run in their own process groups: take them down on Ctrl-C too.
    let _ = elfjit::child::stop_children_on_termination_signals();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => fail(&f),
    }
}

fn fail(f: &Failure) -> ExitCode {
    let (msg, code, hint) = match f {
        Failure::Usage(m) => (m.clone(), 2, "\n(see `elfjit --help`)"),
        Failure::Run(e) => (e.to_string(), 1, ""),
    };
    let _ = writeln!(std::io::stderr(), "elfjit: error: {msg}{hint}");
    ExitCode::from(code)
}

/// Writes to stdout; a closed pipe (`elfjit ... | head`) is not worth a panic.
fn out(text: &str) -> Result<(), Failure> {
    write_out(|w| w.write_all(text.as_bytes()))
}

/// Runs `write` on buffered stdout and flushes it; a closed pipe is fine.
fn write_out(write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<(), Failure> {
    let mut stdout = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    match write(&mut stdout).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::Run(Error::Io {
            context: "cannot write to stdout".into(),
            source: e,
        })),
    }
}

fn dispatch(args: &[OsString]) -> Result<(), Failure> {
    let Some(cmd) = args.first() else {
        return out(USAGE);
    };
    let rest = args.get(1..).unwrap_or_default();
    let Some(cmd) = cmd.to_str() else {
        return Err(usage(format!(
            "unknown command `{}`",
            cmd.to_string_lossy()
        )));
    };
    match cmd {
        "help" | "--help" | "-h" => out(USAGE),
        "--version" | "-V" | "version" => version(),
        "run" => cmd_run(rest),
        "demo" => cmd_demo(rest),
        "inspect" => cmd_inspect(rest),
        "cache" => cmd_cache(rest),
        other => Err(usage(format!("unknown command `{other}`"))),
    }
}

fn version() -> Result<(), Failure> {
    let clang = match Compiler::find() {
        Ok(c) => match c.version() {
            Ok(v) => format!("{} ({v})", c.path().display()),
            Err(e) => format!("{}: {e}", c.path().display()),
        },
        Err(e) => e.to_string(),
    };
    out(&format!(
        "elfjit {}\nclang: {clang}\n",
        env!("CARGO_PKG_VERSION")
    ))
}

/// Splits `--name=value` or takes the next argument as the value. Arguments need not be
/// UTF-8 (file names are bytes); flags and their values must be.
struct Cursor<'a> {
    args: &'a [OsString],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<&'a OsStr> {
        let a = self.args.get(self.pos)?;
        self.pos += 1;
        Some(a)
    }

    fn value(&mut self, flag: &str, inline: Option<&'a str>) -> Result<&'a str, Failure> {
        if let Some(v) = inline {
            return Ok(v);
        }
        let v = self
            .next()
            .ok_or_else(|| usage(format!("{flag} needs a value")))?;
        v.to_str().ok_or_else(|| {
            usage(format!(
                "the value of {flag} (`{}`) is not valid UTF-8",
                v.to_string_lossy()
            ))
        })
    }
}

/// A switch (`--json`, `--cache`, `--emulate`) given as `--switch=VALUE` is a mistake,
/// not a way to turn it off: `--cache=no` must not turn the cache on.
fn switch(flag: &str, inline: Option<&str>, whole: &str) -> Result<bool, Failure> {
    match inline {
        None => Ok(true),
        Some(_) => Err(usage(format!("{flag} takes no value (got `{whole}`)"))),
    }
}

/// Splits an argument into its flag and inline value (`--name=value`).
fn split_flag(a: &str) -> (&str, Option<&str>) {
    match a.split_once('=') {
        Some((f, v)) if f.starts_with("--") => (f, Some(v)),
        _ => (a, None),
    }
}

fn parse_target(name: &str) -> Result<Arch, Failure> {
    Arch::from_name(name).ok_or_else(|| {
        usage(format!(
            "unknown --target `{name}` (expected x86_64, aarch64, riscv64, loongarch64 or ppc64le)"
        ))
    })
}

fn parse_lang(name: &str) -> Result<Lang, Failure> {
    Lang::from_name(name)
        .ok_or_else(|| usage(format!("unknown --lang `{name}` (expected c or ir)")))
}

fn host_arch() -> Result<Arch, Failure> {
    HostInfo::current().arch.ok_or_else(|| {
        Failure::Run(Error::Unsupported(format!(
            "this host ({}) is not an architecture elfjit runs on; pass --target",
            std::env::consts::ARCH
        )))
    })
}

/// FILE's bytes (or stdin's for `-`), at most [`MAX_INPUT`]; a larger input is refused
/// before it is read (a file) or as soon as it passes the cap (a pipe).
fn read_input(file: &OsStr) -> Result<Vec<u8>, Failure> {
    let stdin = file == "-";
    let fail = |e: bounded::ReadError| {
        let why = match e {
            bounded::ReadError::TooLarge { .. } => format!(
                "{e} (elfjit reads at most {} of FILE or stdin)",
                describe_size(MAX_INPUT)
            ),
            other => other.to_string(),
        };
        Failure::Run(Error::Io {
            context: if stdin {
                "cannot read stdin".to_string()
            } else {
                format!("cannot read `{}`", Path::new(file).display())
            },
            source: std::io::Error::other(why),
        })
    };
    if stdin {
        bounded::read_to_end(&mut std::io::stdin().lock(), MAX_INPUT, None).map_err(fail)
    } else {
        let mut f = std::fs::File::open(file).map_err(|e| fail(bounded::ReadError::Io(e)))?;
        let hint = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        bounded::read_to_end(&mut f, MAX_INPUT, hint).map_err(fail)
    }
}

fn cmd_run(args: &[OsString]) -> Result<(), Failure> {
    let mut file: Option<&OsStr> = None;
    let mut lang: Option<Lang> = None;
    let mut entry: Option<String> = None;
    let mut target: Option<Arch> = None;
    let mut ret = RetType::Void;
    let mut specs: Vec<ArgSpec> = Vec::new();
    let mut json = false;
    let mut emulate = false;
    let mut opt_level = 2u8;
    let mut use_cache = false;
    let mut debug = false;

    let mut cur = Cursor { args, pos: 0 };
    while let Some(raw) = cur.next() {
        let Some(a) = raw.to_str() else {
            // Not UTF-8: only a file name can be that.
            file = set_file(file, raw)?;
            continue;
        };
        let (flag, inline) = split_flag(a);
        match flag {
            "--help" | "-h" => return out(RUN_USAGE),
            "--json" => json = switch(flag, inline, a)?,
            "--emulate" => emulate = switch(flag, inline, a)?,
            "--cache" => use_cache = switch(flag, inline, a)?,
            "--debug" => debug = switch(flag, inline, a)?,
            "--lang" => lang = Some(parse_lang(cur.value(flag, inline)?)?),
            "--entry" => entry = Some(cur.value(flag, inline)?.to_string()),
            "--target" => target = Some(parse_target(cur.value(flag, inline)?)?),
            "--ret" => ret = RetType::parse(cur.value(flag, inline)?)?,
            "--arg" => specs.push(ArgSpec::parse(cur.value(flag, inline)?)?),
            "--opt-level" => {
                let v = cur.value(flag, inline)?;
                opt_level = match v {
                    "0" | "1" | "2" | "3" => v.parse().unwrap_or(2),
                    _ => return Err(usage(format!("--opt-level `{v}`: expected 0, 1, 2 or 3"))),
                }
            }
            "-O0" => opt_level = 0,
            "-O1" => opt_level = 1,
            "-O2" => opt_level = 2,
            "-O3" => opt_level = 3,
            "-" => file = set_file(file, raw)?,
            f if f.starts_with('-') => return Err(usage(format!("unknown option `{a}` for run"))),
            _ => file = set_file(file, raw)?,
        }
    }
    let file = file.ok_or_else(|| usage("run needs a FILE (.c, .ll, or - for stdin)"))?;
    let lang = match lang {
        Some(l) => l,
        None if file == "-" => {
            return Err(usage("reading from stdin (-) needs --lang c or --lang ir"))
        }
        None => Lang::from_path(Path::new(file)).ok_or_else(|| {
            usage(format!(
                "cannot tell the language of `{}` from its extension; use --lang c or --lang ir",
                Path::new(file).display()
            ))
        })?,
    };
    let target = match target {
        Some(t) => t,
        None => host_arch()?,
    };
    let mut source = read_input(file)?;
    if debug && lang == Lang::C && file != "-" {
        // clang reads the source from a pipe: name the file for the debug information.
        source = elfjit::clang::with_file_name(&source, Path::new(file));
    }

    let mut req = RunRequest::new(source, lang);
    req.entry = entry;
    req.target = target;
    req.ret = ret;
    req.args = specs;
    req.opt_level = opt_level;
    req.emulate = emulate;
    req.debug = debug;
    let compiler = Compiler::find()?;
    // SAFETY: `elfjit run` calls FILE's entry with the signature --arg/--ret declare, on
    // the word of the person who typed them: that is what the command is for. A wrong
    // signature makes the kernel misbehave in this process, which the crash reporter
    // then names.
    let (outcome, status) = if use_cache {
        let (o, s) = unsafe { run_cached(&compiler, &Cache::from_env(), &req) }?;
        (o, Some(s))
    } else {
        (unsafe { run_with(&compiler, &req) }?, None)
    };
    if json {
        // Streamed: a large buffer is printed element by element, never held as text.
        write_out(|w| {
            outcome.write_json(status, w)?;
            w.write_all(b"\n")
        })
    } else {
        let cache_line = status.map_or_else(String::new, |s| format!("\n  cache   {s}"));
        out(&format!("{}{cache_line}\n", outcome.summary()))
    }
}

const CACHE_USAGE: &str = "\
elfjit cache clear    remove every compiled object from the on-disk compile cache
                      ($ELFJIT_CACHE_DIR/objects, else $XDG_CACHE_HOME/elfjit/objects,
                      else ~/.cache/elfjit/objects, else $TMPDIR/elfjit-UID/objects) and
                      the emulated runners (with their digests and any leftover build
                      directories) cached beside it, and say how many and how large
elfjit cache dir      print the objects directory
";

fn cmd_cache(args: &[OsString]) -> Result<(), Failure> {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match words.as_slice() {
        [] => Err(usage("cache needs a subcommand: clear or dir")),
        [h] if h == "--help" || h == "-h" || h == "help" => out(CACHE_USAGE),
        [c] if c == "clear" => {
            let dir = cache::default_dir();
            let objects = cache::clear_dir(&dir)?;
            let root = runner::cache_dir();
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
        [d] if d == "dir" => out(&format!("{}\n", cache::default_dir().display())),
        [sub, extra, ..] if sub == "clear" || sub == "dir" => Err(usage(format!(
            "cache {sub} takes no arguments, got `{extra}`"
        ))),
        [other, ..] => Err(usage(format!(
            "unknown cache command `{other}` (expected clear or dir)"
        ))),
    }
}

fn set_file<'a>(current: Option<&'a OsStr>, new: &'a OsStr) -> Result<Option<&'a OsStr>, Failure> {
    match current {
        None => Ok(Some(new)),
        Some(f) => Err(usage(format!(
            "run takes one FILE, got `{}` and `{}`",
            Path::new(f).display(),
            Path::new(new).display()
        ))),
    }
}

fn cmd_demo(args: &[OsString]) -> Result<(), Failure> {
    if let Some(a) = args.first() {
        if a == "--help" || a == "-h" {
            return out("elfjit demo: compile, load and run the built-in kernels, checking each against Rust\n");
        }
        return Err(usage(format!(
            "demo takes no arguments, got `{}`",
            a.to_string_lossy()
        )));
    }
    let compiler = Compiler::find()?;
    let version = compiler.version().unwrap_or_else(|e| e.to_string());
    out(&format!(
        "clang: {} ({version})\n",
        compiler.path().display()
    ))?;
    let results = elfjit::demo::run_all(&compiler)?;
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

fn cmd_inspect(args: &[OsString]) -> Result<(), Failure> {
    let mut file: Option<&OsStr> = None;
    let mut target: Option<Arch> = None;
    let mut cur = Cursor { args, pos: 0 };
    while let Some(raw) = cur.next() {
        let Some(a) = raw.to_str() else {
            if let Some(prev) = file {
                return Err(usage(format!(
                    "inspect takes one FILE, got `{}` and `{}`",
                    Path::new(prev).display(),
                    Path::new(raw).display()
                )));
            }
            file = Some(raw);
            continue;
        };
        let (flag, inline) = split_flag(a);
        match flag {
            "--help" | "-h" => {
                return out("elfjit inspect FILE [--target ARCH]\n  FILE: .c or .ll (compiled for ARCH first) or an ELF object\n")
            }
            "--target" => target = Some(parse_target(cur.value(flag, inline)?)?),
            f if f.starts_with('-') && f != "-" => {
                return Err(usage(format!("unknown option `{a}` for inspect")))
            }
            _ => {
                if let Some(prev) = file {
                    return Err(usage(format!(
                        "inspect takes one FILE, got `{}` and `{a}`",
                        Path::new(prev).display()
                    )));
                }
                file = Some(raw);
            }
        }
    }
    let file = file.ok_or_else(|| usage("inspect needs a FILE (.c, .ll or .o)"))?;
    let target = match target {
        Some(t) => t,
        None => host_arch()?,
    };
    let bytes = read_input(file)?;
    let object = match Lang::from_path(Path::new(file)) {
        Some(lang) => Compiler::find()?.compile(&bytes, &CompileOptions::new(lang, target))?,
        None => bytes,
    };
    let report = elfjit::inspect::report(&object, target)?;
    out(&report)?;
    if !report.ends_with('\n') {
        out("\n")?;
    }
    Ok(())
}
