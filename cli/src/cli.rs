//! The command line, declared with clap: subcommands, options, their help, the value
//! parsers (through the library's `FromStr` grammars), and clap's errors reworded into
//! elfjit's one-line messages.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;
use elfjit::{Arch, ArgSpec, Lang, RetType};
use std::ffi::OsString;
use std::path::PathBuf;

const ABOUT: &str = "compile C or LLVM IR with clang on a pipe, link it in memory, call it";

const AFTER_HELP: &str = "\
clang: $ELFJIT_CLANG if set, else the first `clang` in PATH, else a `clang-NN`: the
first PATH directory holding one decides, and in it the highest NN. It runs under a
memory limit: $ELFJIT_COMPILE_MEMORY (e.g. 1G, 512M; 0 for none), else 4 GiB.
It compiles in a warm compile server where one can be had (built for that clang on first
use), else as a spawned clang, with a note why; ELFJIT_COMPILER=spawn or =server forces
either. --version says which.
FILE (or stdin) is read up to 64 MiB.
A native kernel that crashes is reported (signal, kernel, fault address) on stderr.";

const ARG_HELP: &str = "\
an argument, repeated in call order:
  TYPE:VALUE          scalar, e.g. i32:1024  f32:2.5
  TYPE[N]             buffer of N zeros
  TYPE[N]=v0,v1,...   exactly N values
  TYPE[N]=iota        0,1,...,N-1
  TYPE[N]=fill:V      N copies of V
TYPE: i8 u8 i16 u16 i32 u32 i64 u64 f32 f64; buffers are passed as pointers to
64-byte-aligned memory; at most 2^28 elements each, 2 GiB in all";

const RUN_AFTER_HELP: &str = "\
--json prints exactly one JSON object on stdout:
  {\"target\": \"...\", \"entry\": \"...\", \"return\": <number>|null,
   \"args\": [<scalar as given> | [<buffer values after the call>], ...],
   \"compiler\": {\"kind\": \"server\", \"pid\": <pid>, \"binary\": \"...\"}
             | {\"kind\": \"spawn\", \"reason\": \"...\"} (absent on a cache hit),
   \"timings_us\": {\"compile\": <f64>, \"load\": <f64>, \"call\": <f64>}}
floats as shortest round-trip decimals; NaN/infinities as \"nan\", \"inf\", \"-inf\".
Exit 0 on success; otherwise non-zero and one clear error on stderr.";

/// `elfjit`: the whole command line.
#[derive(Debug, Parser)]
#[command(
    name = "elfjit",
    about = ABOUT,
    after_help = AFTER_HELP,
    disable_version_flag = true,
    // `elfjit` alone prints the help on stdout and succeeds, as `elfjit --help` does.
    subcommand_required = false,
)]
pub struct Cli {
    /// versions of elfjit and the clang it would use
    #[arg(short = 'V', long = "version")]
    pub version: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// compile, load and call one kernel
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// run the built-in kernels and check their results
    #[command(
        long_about = "compile, load and run the built-in kernels, checking each against Rust"
    )]
    Demo {
        /// (none: a word here is an error)
        #[arg(hide = true, allow_hyphen_values = false)]
        extra: Vec<OsString>,
    },
    /// describe how an object (.o, or .c/.ll compiled for ARCH) would be laid out and
    /// relocated
    Inspect(InspectArgs),
    /// compile one kernel to an ELF object file (for `run FILE.o`, or another OS)
    Compile(CompileArgs),
    /// the on-disk compile cache (`run --cache`) and the emulated runners beside it
    #[command(subcommand_required = true)]
    Cache {
        /// What to do with it.
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell.
        shell: Shell,
    },
    /// versions of elfjit and the clang it would use (as --version)
    #[command(hide = true)]
    Version,
}

/// `elfjit run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// .c (C), .ll (LLVM IR), .o (an ELF object, from `elfjit compile`), or '-' for stdin
    /// (then --lang is required); at most 64 MiB
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// the source language (default: from FILE's extension)
    #[arg(long, value_name = "c|ir", value_parser = lang)]
    pub lang: Option<Lang>,
    /// the function to call (default: the object's only global function; several: an
    /// error listing them)
    #[arg(long, value_name = "NAME")]
    pub entry: Option<String>,
    /// x86_64 | aarch64 | riscv64 | loongarch64 | ppc64le (default: the host)
    #[arg(
        long,
        value_name = "ARCH",
        value_parser = target,
        long_help = "x86_64 | aarch64 | riscv64 | loongarch64 | ppc64le; default: the host.\n\
                     A foreign target is compiled for a generic CPU, linked on the host and\n\
                     run under qemu-user (qemu-ARCH) by elfjit's own runner (built with clang\n\
                     and lld on first use, cached in $ELFJIT_CACHE_DIR or ~/.cache/elfjit).\n\
                     ARCH-OS (OS: linux, windows, macos, freebsd) must name this host's OS"
    )]
    pub target: Option<Target>,
    /// run through that runner even for the host (also: ELFJIT_EMULATE=1)
    #[arg(long)]
    pub emulate: bool,
    /// void (default) | i32 | i64 | u32 | u64 | f32 | f64
    #[arg(long, value_name = "TYPE", value_parser = ret)]
    pub ret: Option<RetType>,
    /// an argument (repeated, in call order): TYPE:VALUE or TYPE[N][=...]
    #[arg(long = "arg", value_name = "SPEC", value_parser = arg_spec, long_help = ARG_HELP)]
    pub args: Vec<ArgSpec>,
    /// clang optimisation level, 0 to 3 (default 2; also -O0 .. -O3)
    #[arg(short = 'O', long = "opt-level", value_name = "N", value_parser = opt_level)]
    pub opt_level: Option<u8>,
    /// take the object from the on-disk compile cache, or compile and store it
    #[arg(
        long,
        long_help = "take the object from the on-disk compile cache, or compile and store it\n\
                     ($ELFJIT_CACHE_DIR/objects, else ~/.cache/elfjit/objects; keyed by source,\n\
                     language, flags, target, clang version and the contents of every file\n\
                     the source #included); --json then adds \"cache\": \"hit\"|\"miss\", and a\n\
                     hit's compile time is the lookup. The directory is used only if it is\n\
                     yours alone (owner you, not group- or world-writable); else a note says\n\
                     why and nothing is cached"
    )]
    pub cache: bool,
    /// compile with -g and register the kernel with the GDB JIT interface (host only)
    #[arg(
        long,
        long_help = "compile with -g and register the kernel with the GDB JIT interface, so\n\
                     `gdb --args elfjit run k.c --debug ...` can `break KERNEL` (pending) and\n\
                     stop at its source line (host only). ELFJIT_GDB=1 registers without -g;\n\
                     ELFJIT_PERF=map|jitdump writes perf's symbol files (see the README)"
    )]
    pub debug: bool,
    /// print exactly one JSON object on stdout (see below)
    #[arg(long)]
    pub json: bool,
}

/// `elfjit inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// .c or .ll (compiled for ARCH first) or an ELF object
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// the architecture, or ARCH-OS (default: the host)
    #[arg(long, value_name = "ARCH", value_parser = target)]
    pub target: Option<Target>,
}

/// `elfjit compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// .c (C), .ll (LLVM IR), or '-' for stdin (then --lang is required); at most 64 MiB
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// where to write the ELF object
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// the source language (default: from FILE's extension)
    #[arg(long, value_name = "c|ir", value_parser = lang)]
    pub lang: Option<Lang>,
    /// ARCH or ARCH-OS, e.g. x86_64-windows, aarch64-macos (default: the host)
    #[arg(
        long,
        value_name = "TARGET",
        value_parser = target,
        long_help = "ARCH (x86_64, aarch64, riscv64, loongarch64, ppc64le: for this host's OS)\n\
                     or ARCH-OS with OS one of linux, windows, macos, freebsd; the flags follow\n\
                     the OS (x86_64-windows: the Windows x64 calling convention; aarch64 on\n\
                     macos and windows: -ffixed-x18). The host's CPU is targeted only for\n\
                     the host itself; otherwise a generic CPU of ARCH"
    )]
    pub target: Option<Target>,
    /// clang optimisation level, 0 to 3 (default 2; also -O0 .. -O3)
    #[arg(short = 'O', long = "opt-level", value_name = "N", value_parser = opt_level)]
    pub opt_level: Option<u8>,
}

/// A `--target`: an architecture and, if named, the OS the kernel is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The architecture.
    pub arch: Arch,
    /// The OS as `std::env::consts::OS` spells it; `None`: this host's.
    pub os: Option<&'static str>,
}

/// The operating systems a `--target` may name.
const TARGET_OSES: [&str; 4] = ["linux", "windows", "macos", "freebsd"];

/// `elfjit cache ...`.
#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// remove every compiled object from the on-disk compile cache ($ELFJIT_CACHE_DIR/objects,
    /// else $XDG_CACHE_HOME/elfjit/objects, else ~/.cache/elfjit/objects, else
    /// $TMPDIR/elfjit-UID/objects) and the emulated runners (with their digests and any
    /// leftover build directories) cached beside it, and say how many and how large
    Clear {
        /// (none: a word here is an error)
        #[arg(hide = true)]
        extra: Vec<OsString>,
    },
    /// print the objects directory
    Dir {
        /// (none: a word here is an error)
        #[arg(hide = true)]
        extra: Vec<OsString>,
    },
}

fn lang(name: &str) -> Result<Lang, String> {
    Lang::from_name(name).ok_or_else(|| format!("unknown --lang `{name}` (expected c or ir)"))
}

fn target(name: &str) -> Result<Target, String> {
    let unknown = || {
        format!(
            "unknown --target `{name}` (expected x86_64, aarch64, riscv64, loongarch64 or \
             ppc64le, optionally followed by -linux, -windows, -macos or -freebsd)"
        )
    };
    if let Some(arch) = Arch::from_name(name) {
        return Ok(Target { arch, os: None });
    }
    let (arch, os) = name.rsplit_once('-').ok_or_else(unknown)?;
    let arch = Arch::from_name(arch).ok_or_else(unknown)?;
    let os = TARGET_OSES
        .into_iter()
        .find(|&o| o == os)
        .ok_or_else(unknown)?;
    Ok(Target { arch, os: Some(os) })
}

fn ret(name: &str) -> Result<RetType, String> {
    name.parse().map_err(|e: elfjit::Error| e.to_string())
}

fn arg_spec(spec: &str) -> Result<ArgSpec, String> {
    spec.parse().map_err(|e: elfjit::Error| e.to_string())
}

fn opt_level(v: &str) -> Result<u8, String> {
    match v {
        "0" | "1" | "2" | "3" => v.parse().map_err(|_| String::new()),
        _ => Err(format!("--opt-level `{v}`: expected 0, 1, 2 or 3")),
    }
}

/// The option a clap error is about (`--arg`, `-O`), from its `<VALUE>`-decorated name.
fn flag_of(e: &clap::Error) -> Option<String> {
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.split([' ', '=']).next().unwrap_or(s).to_string()),
        _ => None,
    }
}

fn value_of(e: &clap::Error) -> Option<String> {
    match e.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    }
}

fn subcommand_of(e: &clap::Error) -> String {
    match e.get(ContextKind::InvalidSubcommand) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    }
}

/// A clap error as elfjit's one-line usage message. `words` are the command line's
/// arguments (for the subcommand's name).
pub fn usage_message(e: &clap::Error, words: &[OsString]) -> String {
    let sub = words
        .first()
        .and_then(|w| w.to_str())
        .filter(|w| !w.starts_with('-'))
        .unwrap_or("elfjit");
    let flag = flag_of(e).unwrap_or_default();
    match e.kind() {
        ErrorKind::InvalidSubcommand if sub == "cache" => format!(
            "unknown cache command `{}` (expected clear or dir)",
            subcommand_of(e)
        ),
        ErrorKind::InvalidSubcommand => format!("unknown command `{}`", subcommand_of(e)),
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            if sub == "cache" =>
        {
            "cache needs a subcommand: clear or dir".to_string()
        }
        ErrorKind::UnknownArgument => {
            let whole = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => flag.clone(),
            };
            format!("unknown option `{whole}` for {sub}")
        }
        // A value given to a switch (`--cache=no`): not a way to turn it off.
        ErrorKind::TooManyValues if !flag.is_empty() => format!(
            "{flag} takes no value (got `{flag}={}`)",
            value_of(e).unwrap_or_default()
        ),
        ErrorKind::InvalidValue if value_of(e).is_none_or(|v| v.is_empty()) => {
            format!("{flag} needs a value")
        }
        ErrorKind::ValueValidation => match std::error::Error::source(e) {
            Some(cause) => cause.to_string(),
            None => first_line(e),
        },
        ErrorKind::ArgumentConflict => format!("{flag} was given more than once"),
        ErrorKind::InvalidUtf8 => format!("the value of {flag} is not valid UTF-8"),
        _ => first_line(e),
    }
}

/// clap's own message, its first line, without its `error: ` prefix.
fn first_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}
