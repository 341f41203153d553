//! The `elfjit` command: compile, load and call one C or LLVM IR kernel (`run`), the
//! built-in examples (`demo`), the planned layout of an object (`inspect`), the on-disk
//! cache (`cache clear | dir`) and shell completions (`completions bash|zsh|fish`).
//!
//! ```text
//! $ elfjit run add.c --ret i32 --arg i32:2 --arg i32:40 --json
//! {"target": "x86_64", "entry": "add", "return": 42, "args": [2, 40], "timings_us": {...}}
//! $ elfjit run saxpy.c --target riscv64 --arg i32:4 --arg f32:2 --arg f32[4]=iota --arg f32[4]=fill:1
//! ```
//!
//! The parser is clap's ([`cli`]); `--json` is written with serde_json ([`json`]); a host
//! kernel runs on the library's native executor with the crash reporter ([`crash`])
//! watching, any other on `elfjit-emulate`'s.

mod cli;
#[cfg(unix)]
mod crash;
#[cfg(unix)]
mod demo;
mod inspect;
mod json;
// The command's OS-specific pieces, one file per OS.
#[cfg_attr(unix, path = "platform_unix.rs")]
#[cfg_attr(windows, path = "platform_windows.rs")]
mod platform;
mod text;

use clap::{CommandFactory, Parser};
use cli::{Cli, Command, CompileArgs, InspectArgs, RunArgs, Target};
use elfjit::bounded::{self, describe_size};
use elfjit::cache::Cache;
use elfjit::flags::HostInfo;
use elfjit::run::{run_on, RunRequest};
use elfjit::{Arch, CompileError, CompileOptions, Compiler, Error, Lang, RetType};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The most bytes `run` and `inspect` read from FILE or stdin.
const MAX_INPUT: u64 = 64 << 20;

/// Why the tool stopped: a usage mistake (exit 2) or a failure while working (exit 1).
enum Failure {
    Usage(String),
    Run(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            Error::BadArgument { .. } | Error::Compile(CompileError::BadArgument { .. }) => {
                Failure::Usage(e.to_string())
            }
            other => Failure::Run(other),
        }
    }
}

impl From<CompileError> for Failure {
    fn from(e: CompileError) -> Self {
        Failure::from(Error::from(e))
    }
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure::Usage(msg.into())
}

fn main() -> ExitCode {
    // Crash reports, children taken down on Ctrl-C, orphans adopted: the OS's part.
    // Kept to the end of main (dropping them kills and reaps adopted orphans).
    let _guards = platform::install_guards();
    let words: Vec<OsString> = std::env::args_os().skip(1).collect();
    let result = match Cli::try_parse_from(
        std::iter::once(OsString::from("elfjit")).chain(words.iter().cloned()),
    ) {
        Ok(cli) => dispatch(cli),
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                out(&e.render().to_string())
            }
            _ => Err(usage(cli::usage_message(&e, &words))),
        },
    };
    match result {
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

fn dispatch(cli: Cli) -> Result<(), Failure> {
    if cli.version {
        return version();
    }
    match cli.command {
        None => out(&Cli::command().render_help().to_string()),
        Some(Command::Version) => version(),
        Some(Command::Run(args)) => cmd_run(args),
        Some(Command::Demo { extra }) => match extra.first() {
            Some(a) => Err(usage(format!(
                "demo takes no arguments, got `{}`",
                a.to_string_lossy()
            ))),
            None => platform::cmd_demo(),
        },
        Some(Command::Inspect(args)) => cmd_inspect(args),
        Some(Command::Compile(args)) => cmd_compile(args),
        Some(Command::Cache { command }) => platform::cmd_cache(command),
        Some(Command::Completions { shell }) => write_out(|w| {
            clap_complete::generate(shell, &mut Cli::command(), "elfjit", w);
            Ok(())
        }),
    }
}

fn version() -> Result<(), Failure> {
    // One clang, asked for its version once: what would compile a kernel (a server,
    // started now if none runs, or a spawned clang) first, as finding the server reads
    // the version remembered on disk, which the `clang:` line then reuses.
    let (clang, compiler) = match Compiler::find() {
        Ok(c) => {
            let compiler = match elfjit::route::describe(&c) {
                Ok(by) => by.to_string(),
                Err(e) => format!("none ({e})"),
            };
            let clang = match c.version() {
                Ok(v) => format!("{} ({v})", c.path().display()),
                Err(e) => format!("{}: {e}", c.path().display()),
            };
            (clang, compiler)
        }
        Err(e) => (e.to_string(), format!("none ({e})")),
    };
    out(&format!(
        "elfjit {}\nclang: {clang}\ncompiler: {compiler}\n",
        env!("CARGO_PKG_VERSION")
    ))
}

fn host_arch() -> Result<Arch, Failure> {
    Arch::host().ok_or_else(|| {
        Failure::Run(Error::Unsupported(format!(
            "this host ({}) is not an architecture elfjit runs on; pass --target",
            std::env::consts::ARCH
        )))
    })
}

/// The one FILE of `run` or `inspect`.
fn one_file(command: &str, files: Vec<PathBuf>, what: &str) -> Result<PathBuf, Failure> {
    let mut files = files.into_iter();
    match (files.next(), files.next()) {
        (None, _) => Err(usage(format!("{command} needs a FILE ({what})"))),
        (Some(f), None) => Ok(f),
        (Some(a), Some(b)) => Err(usage(format!(
            "{command} takes one FILE, got `{}` and `{}`",
            a.display(),
            b.display()
        ))),
    }
}

/// FILE's bytes (or stdin's for `-`), at most [`MAX_INPUT`]; a larger input is refused
/// before it is read (a file) or as soon as it passes the cap (a pipe).
fn read_input(file: &Path) -> Result<Vec<u8>, Failure> {
    let stdin = file.as_os_str() == "-";
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
                format!("cannot read `{}`", file.display())
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

/// The architecture of `target` (default: the host's) and the description of the machine
/// its kernel runs on: this one, or for `ARCH-OS` naming another OS, that OS with a
/// generic CPU.
fn target_host(target: Option<Target>) -> Result<(Arch, HostInfo), Failure> {
    let host = HostInfo::current();
    match target {
        None => Ok((host_arch()?, host)),
        Some(Target { arch, os: None }) => Ok((arch, host)),
        Some(Target { arch, os: Some(os) }) if os == host.os => Ok((arch, host)),
        Some(Target { arch, os: Some(os) }) => Ok((arch, HostInfo { arch: None, os })),
    }
}

/// The language of FILE: `--lang`, else its extension.
fn file_lang(file: &Path, lang: Option<Lang>) -> Result<Lang, Failure> {
    match lang {
        Some(l) => Ok(l),
        None if file.as_os_str() == "-" => {
            Err(usage("reading from stdin (-) needs --lang c or --lang ir"))
        }
        None => Lang::from_path(file).ok_or_else(|| {
            usage(format!(
                "cannot tell the language of `{}` from its extension; use --lang c or --lang ir",
                file.display()
            ))
        }),
    }
}

fn cmd_compile(args: CompileArgs) -> Result<(), Failure> {
    let file = one_file("compile", args.files, ".c, .ll, or - for stdin")?;
    let lang = file_lang(&file, args.lang)?;
    let (arch, host) = target_host(args.target)?;
    let source = read_input(&file)?;
    let mut opts = CompileOptions::new(lang, arch);
    opts.opt_level = args.opt_level.unwrap_or(2);
    let object = Compiler::find()?.compile_for_host(&source, &opts, host)?;
    std::fs::write(&args.output, &object).map_err(|e| {
        Failure::Run(Error::Io {
            context: format!("cannot write `{}`", args.output.display()),
            source: e,
        })
    })
}

/// Whether FILE is a precompiled ELF object (`.o`).
fn is_object(file: &Path) -> bool {
    file.extension().is_some_and(|e| e == "o")
}

fn cmd_run(args: RunArgs) -> Result<(), Failure> {
    let file = one_file("run", args.files, ".c, .ll, .o, or - for stdin")?;
    if let Some(Target { os: Some(os), .. }) = args.target {
        if os != std::env::consts::OS {
            return Err(usage(format!(
                "run executes on this host ({}), not {os}: use `elfjit compile --target \
                 ARCH-{os}` and run the object there",
                std::env::consts::OS
            )));
        }
    }
    let object = is_object(&file) && args.lang.is_none();
    // A precompiled object has no source language (the request's is unused).
    let lang = if object {
        Lang::C
    } else {
        file_lang(&file, args.lang)?
    };
    let target = match args.target {
        Some(t) => t.arch,
        None => host_arch()?,
    };
    let mut source = read_input(&file)?;
    let object = object.then(|| std::mem::take(&mut source));
    if args.debug && lang == Lang::C && file.as_os_str() != "-" && object.is_none() {
        // clang reads the source from a pipe: name the file for the debug information.
        source = elfjit::clang::with_file_name(&source, &file);
    }

    let mut req = RunRequest::new(source, lang);
    req.object = object;
    req.entry = args.entry;
    req.target = target;
    req.ret = args.ret.unwrap_or(RetType::Void);
    req.args = args.args;
    req.opt_level = args.opt_level.unwrap_or(2);
    req.emulate = args.emulate;
    req.debug = args.debug;
    let compiler = Compiler::find()?;
    let cache = args.cache.then(Cache::from_env);
    let native = platform::native();
    // SAFETY: `elfjit run` calls FILE's entry with the signature --arg/--ret declare, on
    // the word of the person who typed them: that is what the command is for. A wrong
    // signature makes the kernel misbehave in this process, which the crash reporter
    // then names.
    let (outcome, status) = unsafe {
        run_on(
            platform::executor_for(&req, &native)?,
            &compiler,
            cache.as_ref(),
            &req,
        )
    }?;
    // What compiled the kernel (on a cache hit nothing did, whatever compiled an
    // emulated run's call shim).
    let compiled_by =
        elfjit::route::last_compile().filter(|_| status != Some(elfjit::CacheStatus::Hit));
    if args.json {
        // Streamed: a large buffer is printed element by element, never held as text.
        write_out(|w| {
            json::write(&outcome, status, compiled_by.as_ref(), w)?;
            w.write_all(b"\n")
        })
    } else {
        let cache_line = status.map_or_else(String::new, |s| format!("\n  cache   {s}"));
        out(&format!("{}{cache_line}\n", text::summary(&outcome)))
    }
}

fn cmd_inspect(args: InspectArgs) -> Result<(), Failure> {
    let file = one_file("inspect", args.files, ".c, .ll or .o")?;
    let (target, host) = target_host(args.target)?;
    let bytes = read_input(&file)?;
    let object = match Lang::from_path(&file) {
        Some(lang) => {
            Compiler::find()?.compile_for_host(&bytes, &CompileOptions::new(lang, target), host)?
        }
        None => bytes,
    };
    let report = inspect::report(&object, target)?;
    out(&report)?;
    if !report.ends_with('\n') {
        out("\n")?;
    }
    Ok(())
}
