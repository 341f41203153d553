//! The `dlopen-fallback` feature: the classic way to run a compiled kernel, behind the same
//! [`Module`](crate::Module) API. The objects are written into a fresh private temporary
//! directory, linked into a shared library with
//! `clang -shared -fuse-ld=lld -nostdlib -Wl,-Bsymbolic -Wl,-z,text ... -lm`, loaded with
//! `dlopen(RTLD_NOW | RTLD_LOCAL)` (libloading), and the directory is removed before
//! `load` returns. The [`libloading::Library`] lives in the module; dropping the module
//! closes it.
//!
//! The objects are first parsed and planned by the core exactly as the in-memory loader
//! does, so a malformed object or one for another architecture is refused with the same
//! error. Undefined symbols are then settled before clang runs, in the in-memory path's
//! order:
//! 1. the caller's resolver ([`Module::load_objects`](crate::Module::load_objects)): the
//!    address is bound through a GNU indirect function (IFUNC) in a small generated C file
//!    linked into the library, whose resolver returns that constant address;
//! 2. anything the dynamic linker will find itself — the process's exported symbols (libc)
//!    and libm (`-lm` makes it a dependency of the library) — stays undefined in the
//!    library and is bound by `dlopen`;
//! 3. compiler-rt helpers (`__udivti3`, `__extendhfsf2`, `__truncdfbf2`, ...) that no
//!    loaded library exports (Rust links its own copies, hidden): bound like 1., to the
//!    addresses [`elfjit_os::builtins`] finds in the running program. This needs no
//!    compiler-rt or libgcc archive on the machine and gives kernels the very same helpers
//!    as the in-memory path;
//! 4. anything else is `undefined symbol` (weak references stay undefined and read 0).
//!
//! `-Bsymbolic` binds the kernel's references to its own globals inside the library, so
//! code compiled without `-fPIC` (clang's default PIE code, PC-relative to its globals)
//! links. Code that would need relocations applied inside its text (absolute addresses in
//! `-mcmodel=large -fno-pic` code, 32-bit absolute addresses) is refused (`-z text`, an
//! [`Error::Unsupported`] naming the relocation): a library with text relocations has
//! its code mapped writable and executable while glibc relocates it, and W^X holds in
//! this mode as in the in-memory one. The in-memory loader links such code itself.
//!
//! clang runs as every clang run does (see [`crate::clang`]): own process group, bounded
//! output, the default compile timeout.
//!
//! Symbols are read with `dlsym` on the library's handle, so hidden-visibility globals,
//! which the in-memory loader exposes, are not found here.

use crate::clang::Compiler;
use crate::error::{Error, Result};
use crate::CompileError;
use elfjit_core::elf::Object;
use elfjit_core::{Arch, Plan};
use elfjit_os::builtins;
use elfjit_os::ProcessResolver;
use std::collections::HashMap;
use std::ffi::{CString, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A shared library built from the objects, open for the life of the module.
pub(crate) struct Loaded {
    pub library: libloading::Library,
    pub symbols: HashMap<String, u64>,
    pub functions: Vec<String>,
    pub region: (usize, usize),
}

/// A temporary directory removed (with its contents) on drop.
struct TempDir(PathBuf);

impl TempDir {
    /// A new directory with an unpredictable name, created (exclusively) `0700`.
    fn new() -> Result<TempDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = None;
        for _ in 0..16 {
            let suffix = crate::private_dir::random_hex()
                .map_err(|e| io("naming a temporary directory".into(), e))?;
            let dir = base.join(format!("elfjit-so-{suffix}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(TempDir(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(io(format!("creating {}", dir.display()), e)),
            }
        }
        Err(io(
            format!("creating a temporary directory in {}", base.display()),
            last.unwrap_or_else(|| std::io::Error::other("no free name")),
        ))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn io(context: String, source: std::io::Error) -> Error {
    Error::Io { context, source }
}

/// The clang that links the library (found once per process).
fn clang() -> Result<&'static Compiler> {
    static FOUND: OnceLock<Compiler> = OnceLock::new();
    if let Some(c) = FOUND.get() {
        return Ok(c);
    }
    let found = Compiler::find()?;
    Ok(FOUND.get_or_init(|| found))
}

/// A name that can go into an assembler label unquoted.
fn plain_symbol(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'$')
}

/// Undefined symbols bound to fixed addresses: the C source of their IFUNCs.
fn ifunc_source(bound: &[(String, u64)]) -> String {
    let mut s = String::from("/* elfjit dlopen-fallback: addresses bound at dlopen time */\n");
    for (i, (name, address)) in bound.iter().enumerate() {
        s.push_str(&format!(
            "static void *elfjit_resolve_{i}(void) {{ return (void *){address:#x}ULL; }}\n\
             __attribute__((visibility(\"hidden\"), ifunc(\"elfjit_resolve_{i}\")))\n\
             void elfjit_bound_{i}(void) __asm__(\"{name}\");\n"
        ));
    }
    s
}

/// Links `objects` (already planned by the core, for `arch`) into a shared library and
/// opens it.
pub(crate) fn load(
    plan: &Plan<'_>,
    arch: Arch,
    objects: &[&[u8]],
    resolver: &mut dyn FnMut(&str) -> Option<u64>,
) -> Result<Loaded> {
    let parsed: Vec<&Object<'_>> = plan.objects().collect();
    let mut defined: HashMap<&[u8], ()> = HashMap::new();
    let mut functions = Vec::new();
    let mut globals = Vec::new();
    for object in &parsed {
        for index in 1..object.symbol_count() {
            let sym = object.symbol(index)?;
            if sym.is_defined() && sym.is_global() && !sym.name.is_empty() {
                defined.insert(sym.name, ());
                if let Ok(name) = std::str::from_utf8(sym.name) {
                    if sym.kind == object::elf::STT_FUNC {
                        functions.push(name.to_string());
                    }
                    globals.push(name.to_string());
                }
            }
        }
    }

    // Settle every undefined name before clang runs (see the module doc for the order).
    let mut bound: Vec<(String, u64)> = Vec::new();
    let mut seen: HashMap<&[u8], ()> = HashMap::new();
    for object in &parsed {
        for index in 1..object.symbol_count() {
            let sym = object.symbol(index)?;
            let name = sym.name;
            if sym.is_defined()
                || name.is_empty()
                || defined.contains_key(name)
                // lld defines these for the code that refers to them, as the core does.
                || arch.linker_defined(name).is_some()
                || seen.insert(name, ()).is_some()
            {
                continue;
            }
            let text = std::str::from_utf8(name).ok();
            let from_caller = text.and_then(&mut *resolver);
            let address = match from_caller {
                Some(a) => Some(a),
                None => match ProcessResolver::lookup(name) {
                    // Found only among the Rust runtime's helpers: no library exports it.
                    Some(a) if builtins::lookup(name).map(|b| b as u64) == Some(a) => Some(a),
                    // The dynamic linker finds it (the process, or libm through -lm).
                    Some(_) => continue,
                    None if sym.bind == object::elf::STB_WEAK => continue,
                    None => {
                        return Err(Error::Link(elfjit_core::Error::UndefinedSymbol {
                            name: elfjit_core::Name::new(name),
                        }))
                    }
                },
            };
            match (text, address) {
                (Some(n), Some(a)) if plain_symbol(name) => bound.push((n.to_string(), a)),
                _ => {
                    return Err(Error::Unsupported(format!(
                        "dlopen-fallback cannot bind the symbol `{}`",
                        String::from_utf8_lossy(name)
                    )))
                }
            }
        }
    }

    let dir = TempDir::new()?;
    let mut args: Vec<OsString> = [
        "-shared",
        "-fuse-ld=lld",
        "-nostdlib",
        "-fPIC",
        "-O1",
        "-Wl,-Bsymbolic",
        // Text relocations would make the code writable: refuse them (lld's default for
        // shared libraries, said explicitly).
        "-Wl,-z,text",
        "-Wl,-z,now",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    for (i, bytes) in objects.iter().enumerate() {
        let path = dir.0.join(format!("object{i}.o"));
        std::fs::write(&path, bytes).map_err(|e| io(format!("writing {}", path.display()), e))?;
        args.push(path.into_os_string());
    }
    if !bound.is_empty() {
        let path = dir.0.join("bound.c");
        std::fs::write(&path, ifunc_source(&bound))
            .map_err(|e| io(format!("writing {}", path.display()), e))?;
        args.push(path.into_os_string());
    }
    let so = dir.0.join("kernel.so");
    args.push("-o".into());
    args.push(so.clone().into_os_string());
    args.push("-lm".into());
    let clang = clang()?;
    let out = clang.run_plain(args)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if stderr.contains("recompile with -fPIC") {
            return Err(Error::Unsupported(format!(
                "dlopen-fallback: the object is not position-independent code, so a shared \
                 library made from it would need text relocations (its code written, so \
                 mapped writable, at load time), which W^X forbids; compile it with -fPIC, \
                 or use the in-memory loader. lld said:\n{}",
                stderr.trim_end()
            )));
        }
        return Err(Error::Compile(CompileError::ClangFailed {
            clang: clang.path().to_path_buf(),
            status: out.status.to_string(),
            stderr,
        }));
    }

    let library = open(&so)?;
    let region = region_of(&so);
    drop(dir);

    let mut symbols = HashMap::new();
    for name in globals {
        let Ok(c_name) = CString::new(name.as_str()) else {
            continue;
        };
        // SAFETY: only the symbol's address is taken, as a pointer value; nothing is read
        // or called through it here.
        let address = unsafe { library.get::<*const u8>(c_name.as_bytes_with_nul()) }
            .ok()
            .map(|s| *s as u64);
        if let Some(a) = address.filter(|&a| a != 0) {
            symbols.entry(name).or_insert(a);
        }
    }
    functions.retain(|f| symbols.contains_key(f));
    Ok(Loaded {
        library,
        symbols,
        functions,
        region: region.unwrap_or((0, 0)),
    })
}

fn open(so: &Path) -> Result<libloading::Library> {
    // SAFETY: the library was just linked from the caller's objects with -nostdlib: it has
    // no constructors of ours to run beyond what the kernel's own code defines, which is
    // what loading a kernel means.
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(so),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
    }
    .map_err(|e| Error::Memory(format!("dlopen {}: {e}", so.display())))?;
    Ok(lib.into())
}

/// The address range of the loaded library `so` (its first to its last segment).
fn region_of(so: &Path) -> Option<(usize, usize)> {
    struct Find {
        name: CString,
        found: Option<(usize, usize)>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: glibc passes a valid dl_phdr_info for each loaded object and our `Find`
        // as `data`; the program headers array has dlpi_phnum entries.
        unsafe {
            let find = &mut *data.cast::<Find>();
            let info = &*info;
            if info.dlpi_name.is_null() || std::ffi::CStr::from_ptr(info.dlpi_name) != &*find.name {
                return 0;
            }
            let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let loads = phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
            let start = loads.clone().map(|p| p.p_vaddr).min().unwrap_or(0);
            let end = loads.map(|p| p.p_vaddr + p.p_memsz).max().unwrap_or(0);
            let base = info.dlpi_addr as usize + start as usize;
            find.found = Some((base, (end - start) as usize));
            1
        }
    }
    let mut find = Find {
        name: CString::new(so.as_os_str().as_encoded_bytes()).ok()?,
        found: None,
    };
    // SAFETY: `visit` only reads what glibc hands it and writes through `find`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut find as *mut Find).cast()) };
    find.found
}

#[cfg(test)]
mod tests {
    use crate::clang::{CompileOptions, Compiler, Lang};
    use crate::{Arch, Module};

    fn compile(source: &str) -> Vec<u8> {
        let host = Arch::host().expect("supported host");
        Compiler::find()
            .expect("clang")
            .compile(source.as_bytes(), &CompileOptions::new(Lang::C, host))
            .expect("compile")
    }

    /// The module's code is in the (already removed) shared library, helpers and the
    /// caller's symbols are bound, and the temporary directory is gone.
    #[test]
    fn loads_through_a_removed_shared_library() {
        let object = compile(
            "extern int from_caller(int);\n\
             unsigned __int128 q(unsigned __int128 a, unsigned __int128 b) { return a / b; }\n\
             int twice(int x) { return from_caller(x) * 2; }\n",
        );
        extern "C" fn from_caller(x: i32) -> i32 {
            x + 1
        }
        let address = from_caller as extern "C" fn(i32) -> i32 as usize as u64;
        let module =
            Module::load_objects(&[&object], &mut |n| (n == "from_caller").then_some(address))
                .expect("load");
        // SAFETY: matches `int twice(int)` and `unsigned __int128 q(...)`.
        let twice: extern "C" fn(i32) -> i32 =
            unsafe { std::mem::transmute(module.symbol("twice").expect("twice")) };
        assert_eq!(twice(20), 42);
        // SAFETY: as above.
        let q: extern "C" fn(u128, u128) -> u128 =
            unsafe { std::mem::transmute(module.symbol("q").expect("q")) };
        assert_eq!(q(1 << 100, 3), (1u128 << 100) / 3);

        let (start, len) = module.region();
        assert!(len > 0);
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let line = maps
            .lines()
            .find(|l| {
                let range = l.split_whitespace().next().unwrap_or("");
                let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
                let a = usize::from_str_radix(a, 16).unwrap_or(0);
                let b = usize::from_str_radix(b, 16).unwrap_or(0);
                a <= start && start < b
            })
            .expect("region is mapped");
        assert!(line.contains("elfjit-so-"), "{line}");
        assert!(line.ends_with("(deleted)"), "{line}");
    }
}
