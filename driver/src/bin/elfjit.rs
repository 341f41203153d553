//! The `elfjit` command-line tool: `run`, `demo`, `inspect`.

use elfjit::args::{ArgSpec, RetType};
use elfjit::cache::{self, Cache};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::flags::HostInfo;
use elfjit::run::{run_cached, run_with, RunRequest};
use elfjit::{Arch, Error};
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "\
elfjit: compile C or LLVM IR with clang on a pipe, link it in memory, call it

usage:
  elfjit run FILE [options]           compile, load and call one kernel
  elfjit demo                         run the built-in kernels and check their results
  elfjit inspect FILE [--target ARCH] describe how an object (.o, or .c/.ll compiled
                                      for ARCH) would be laid out and relocated
  elfjit help | --help                this text (`elfjit run --help` for run's options)
  elfjit cache clear                  remove the compile cache's objects (`run --cache`)
  elfjit --version                    versions of elfjit and the clang it would use

clang: $ELFJIT_CLANG if set, else `clang` in PATH, else the newest `clang-NN` in PATH.
";

const RUN_USAGE: &str = "\
elfjit run FILE [--lang c|ir] [--entry NAME] [--target ARCH] [--emulate] [--ret TYPE] [--arg SPEC]... [--cache] [--debug] [--json]
  FILE        .c (C), .ll (LLVM IR), or '-' for stdin (then --lang is required)
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
              to 64-byte-aligned memory
  -O0..-O3, --opt-level N
              clang optimisation level (default 2)
  --cache     take the object from the on-disk compile cache, or compile and store it
              ($ELFJIT_CACHE_DIR/objects, else ~/.cache/elfjit/objects; keyed by source,
              language, flags, target and clang version); --json then adds
              \"cache\": \"hit\"|\"miss\", and a hit's compile time is the lookup
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
    let args: Vec<String> = match std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect::<Result<_, _>>()
    {
        Ok(a) => a,
        Err(bad) => {
            return fail(&usage(format!(
                "argument {} is not valid UTF-8",
                bad.to_string_lossy()
            )))
        }
    };
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
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::Run(Error::Io {
            context: "cannot write to stdout".into(),
            source: e,
        })),
    }
}

fn dispatch(args: &[String]) -> Result<(), Failure> {
    let Some(cmd) = args.first() else {
        return out(USAGE);
    };
    let rest = &args[1..];
    match cmd.as_str() {
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

/// Splits `--name=value` or takes the next argument as the value.
struct Cursor<'a> {
    args: &'a [String],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let a = self.args.get(self.pos)?;
        self.pos += 1;
        Some(a)
    }

    fn value(&mut self, flag: &str, inline: Option<&'a str>) -> Result<&'a str, Failure> {
        if let Some(v) = inline {
            return Ok(v);
        }
        self.next()
            .ok_or_else(|| usage(format!("{flag} needs a value")))
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

fn read_input(file: &str) -> Result<Vec<u8>, Failure> {
    let io = |source| {
        Failure::Run(Error::Io {
            context: if file == "-" {
                "cannot read stdin".to_string()
            } else {
                format!("cannot read `{file}`")
            },
            source,
        })
    };
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map_err(io)?;
        Ok(buf)
    } else {
        std::fs::read(file).map_err(io)
    }
}

fn cmd_run(args: &[String]) -> Result<(), Failure> {
    let mut file: Option<&str> = None;
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
    while let Some(a) = cur.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (a, None),
        };
        match flag {
            "--help" | "-h" => return out(RUN_USAGE),
            "--json" => json = true,
            "--emulate" => emulate = true,
            "--cache" => use_cache = true,
            "--debug" => debug = true,
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
            "-" => file = set_file(file, "-")?,
            f if f.starts_with('-') => return Err(usage(format!("unknown option `{a}` for run"))),
            _ => file = set_file(file, a)?,
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
                "cannot tell the language of `{file}` from its extension; use --lang c or --lang ir"
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
    let (outcome, status) = if use_cache {
        let (o, s) = run_cached(&compiler, &Cache::from_env(), &req)?;
        (o, Some(s))
    } else {
        (run_with(&compiler, &req)?, None)
    };
    if json {
        out(&format!("{}\n", outcome.to_json_with_cache(status)))
    } else {
        let cache_line = status.map_or_else(String::new, |s| format!("\n  cache   {s}"));
        out(&format!("{}{cache_line}\n", outcome.summary()))
    }
}

const CACHE_USAGE: &str = "\
elfjit cache clear    remove every compiled object from the on-disk compile cache
                      ($ELFJIT_CACHE_DIR/objects, else $XDG_CACHE_HOME/elfjit/objects,
                      else ~/.cache/elfjit/objects) and say how many and how large; the
                      emulated runners cached beside it are kept
elfjit cache dir      print that directory
";

fn cmd_cache(args: &[String]) -> Result<(), Failure> {
    match args {
        [] => Err(usage("cache needs a subcommand: clear or dir")),
        [h] if h == "--help" || h == "-h" || h == "help" => out(CACHE_USAGE),
        [c] if c == "clear" => {
            let dir = cache::default_dir();
            let cleared = cache::clear_dir(&dir)?;
            out(&format!(
                "removed {} cached object{} ({} bytes) from {}\n",
                cleared.files,
                if cleared.files == 1 { "" } else { "s" },
                cleared.bytes,
                dir.display()
            ))
        }
        [d] if d == "dir" => out(&format!("{}\n", cache::default_dir().display())),
        [other, ..] => Err(usage(format!(
            "unknown cache command `{other}` (expected clear or dir)"
        ))),
    }
}

fn set_file<'a>(current: Option<&'a str>, new: &'a str) -> Result<Option<&'a str>, Failure> {
    match current {
        None => Ok(Some(new)),
        Some(f) => Err(usage(format!("run takes one FILE, got `{f}` and `{new}`"))),
    }
}

fn cmd_demo(args: &[String]) -> Result<(), Failure> {
    if let Some(a) = args.first() {
        if a == "--help" || a == "-h" {
            return out("elfjit demo: compile, load and run the built-in kernels, checking each against Rust\n");
        }
        return Err(usage(format!("demo takes no arguments, got `{a}`")));
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

fn cmd_inspect(args: &[String]) -> Result<(), Failure> {
    let mut file: Option<&str> = None;
    let mut target: Option<Arch> = None;
    let mut cur = Cursor { args, pos: 0 };
    while let Some(a) = cur.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (a, None),
        };
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
                    return Err(usage(format!("inspect takes one FILE, got `{prev}` and `{a}`")));
                }
                file = Some(a);
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
