//! `elfjit._native`: the Python extension module behind the `elfjit` package
//! (`python/pysrc/elfjit`). See `_native.pyi` for the Python-side signatures.
//!
//! - `load(objects, resolver=None) -> Module` links ELF objects given through the buffer
//!   protocol, read in place (no copy).
//! - `compile(source, lang="c", opt=2, target=None, cache=False, flags=None) -> bytes`
//!   runs clang with the GIL released.
//! - The library's errors are raised as `elfjit.Error` subclasses carrying the library's
//!   own message.

use elfjit::Module as LoadedModule;
use elfjit_bindings::{parse_lang, parse_target, CompileRequest, ErrorKind, Failure};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyMapping, PyString};
use std::collections::HashMap;

create_exception!(
    elfjit,
    Error,
    PyException,
    "Any elfjit failure; the message is the library's."
);
create_exception!(
    elfjit,
    ArgumentError,
    Error,
    "A malformed argument: unknown target or language, opt level out of range."
);
create_exception!(
    elfjit,
    CompileError,
    Error,
    "clang failed (its diagnostics are in the message) or overran its deadline."
);
create_exception!(
    elfjit,
    ClangNotFoundError,
    CompileError,
    "No clang was found ($ELFJIT_CLANG, `clang`, `clang-NN` in PATH)."
);
create_exception!(
    elfjit,
    LinkError,
    Error,
    "The loader rejected an object: malformed ELF, an unsupported or out-of-range relocation, an undefined symbol."
);
create_exception!(
    elfjit,
    SymbolNotFoundError,
    Error,
    "The module defines no symbol of that name."
);
create_exception!(
    elfjit,
    UnsupportedError,
    Error,
    "A request elfjit cannot serve, e.g. loading an object for another architecture."
);
create_exception!(
    elfjit,
    ResourceError,
    Error,
    "The operating system refused: memory, pipes, starting clang."
);
create_exception!(
    elfjit,
    InternalError,
    Error,
    "A bug in elfjit; please report the message."
);

/// The exception for a failure: its category's class, the library's message.
fn raise(failure: Failure) -> PyErr {
    let message = failure.to_string();
    match failure.kind() {
        ErrorKind::Argument | ErrorKind::NullPointer => ArgumentError::new_err(message),
        ErrorKind::ClangNotFound => ClangNotFoundError::new_err(message),
        ErrorKind::Compile => CompileError::new_err(message),
        ErrorKind::Link => LinkError::new_err(message),
        ErrorKind::NotFound => SymbolNotFoundError::new_err(message),
        ErrorKind::Unsupported => UnsupportedError::new_err(message),
        ErrorKind::System => ResourceError::new_err(message),
        ErrorKind::Internal => InternalError::new_err(message),
    }
}

/// Linked code and data in this process. The memory goes back to the code arena when the
/// object is garbage-collected: keep it alive while any address from it may be called.
#[pyclass(frozen, module = "elfjit", name = "Module")]
struct Module {
    module: LoadedModule,
}

#[pymethods]
impl Module {
    /// The address of the global symbol `name` (function or data); raises
    /// `SymbolNotFoundError` naming the module's functions if there is none.
    fn address(&self, name: &str) -> PyResult<usize> {
        elfjit_bindings::symbol(&self.module, name).map_err(raise)
    }

    /// The global functions the module defines, in symbol-table order.
    #[getter]
    fn functions(&self) -> Vec<String> {
        self.module.functions().to_vec()
    }

    /// The module's code as `(address, length)`.
    #[getter]
    fn region(&self) -> (usize, usize) {
        self.module.region()
    }

    /// The architecture the module was linked for (`"x86_64"`, ...).
    #[getter]
    fn arch(&self) -> &'static str {
        self.module.arch().name()
    }

    fn __contains__(&self, name: &str) -> bool {
        self.module.symbol(name).is_some()
    }

    fn __repr__(&self) -> String {
        let (address, length) = self.module.region();
        format!(
            "<elfjit.Module {} functions={:?} region=0x{address:x}+{length}>",
            self.module.arch(),
            self.module.functions()
        )
    }
}

/// How undefined symbols are resolved before the process is searched.
enum Resolver<'py> {
    None,
    /// A mapping's entries, copied before linking, so no Python code runs during it.
    Table(HashMap<String, u64>),
    /// A callable `(name) -> int | None`, called during the link.
    Callable(Bound<'py, PyAny>),
}

impl<'py> Resolver<'py> {
    fn of(resolver: Option<&Bound<'py, PyAny>>) -> PyResult<Resolver<'py>> {
        let Some(resolver) = resolver.filter(|r| !r.is_none()) else {
            return Ok(Resolver::None);
        };
        if let Ok(mapping) = resolver.cast::<PyMapping>() {
            let mut table = HashMap::new();
            for item in mapping.items()?.iter() {
                let (name, address): (String, Bound<'py, PyAny>) = item.extract()?;
                table.insert(name.clone(), address_of(&name, &address)?);
            }
            return Ok(Resolver::Table(table));
        }
        if resolver.is_callable() {
            return Ok(Resolver::Callable(resolver.clone()));
        }
        Err(PyTypeError::new_err(format!(
            "resolver must be a mapping of names to addresses or a callable (name) -> int | None, not {}",
            type_name(resolver)
        )))
    }
}

/// A resolver's answer for `name` as an address.
fn address_of(name: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    value.extract::<u64>().map_err(|_| {
        PyTypeError::new_err(format!(
            "the resolver's address for `{name}` must be an int from 0 to 2**64-1, not {}",
            type_name(value)
        ))
    })
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// One object's bytes: exported by a Python object and read in place, or copied.
enum ObjectBytes {
    Exported(PyUntypedBuffer),
    Copied(Vec<u8>),
}

impl ObjectBytes {
    fn get(object: &Bound<'_, PyAny>, callable_resolver: bool) -> PyResult<ObjectBytes> {
        let buffer = PyUntypedBuffer::get(object)?;
        if !buffer.is_c_contiguous() {
            return Err(PyTypeError::new_err(
                "an object's buffer must be C-contiguous bytes",
            ));
        }
        // A callable resolver runs Python code during the link, which could write to a
        // mutable buffer while it is being read; only immutable `bytes` stay in place.
        if callable_resolver && !object.is_instance_of::<PyBytes>() {
            return Ok(ObjectBytes::Copied(buffer_slice(&buffer).to_vec()));
        }
        Ok(ObjectBytes::Exported(buffer))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            ObjectBytes::Exported(buffer) => buffer_slice(buffer),
            ObjectBytes::Copied(bytes) => bytes,
        }
    }
}

/// The bytes of a C-contiguous buffer.
fn buffer_slice(buffer: &PyUntypedBuffer) -> &[u8] {
    let length = buffer.len_bytes();
    if length == 0 {
        return &[];
    }
    // SAFETY: the buffer is C-contiguous (checked by the caller, ObjectBytes::get), so its
    // `len_bytes` bytes start at `buf_ptr`; the export is held until `buffer` is dropped,
    // which outlives the returned borrow. The bytes are only read while the GIL is held
    // and no Python code runs (mapping resolvers are copied up front; with a callable
    // resolver only immutable `bytes` are read in place), so nothing writes them
    // meanwhile.
    unsafe { std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), length) }
}

/// Links ELF objects for this host into the process-wide code arena and returns the
/// `Module`.
///
/// `objects` is one bytes-like object (bytes, bytearray, memoryview, a uint8 numpy array,
/// mmap, ...) or a sequence of them; they are read in place through the buffer protocol.
/// Undefined symbols are resolved across the objects, then by `resolver` (a mapping of
/// names to int addresses, or a callable `(name) -> int | None`), then in the process
/// (dlsym, libm, compiler-rt helpers).
#[pyfunction]
#[pyo3(signature = (objects, resolver = None))]
fn load(objects: &Bound<'_, PyAny>, resolver: Option<&Bound<'_, PyAny>>) -> PyResult<Module> {
    if objects.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "objects must be bytes-like ELF objects (or a sequence of them), not str",
        ));
    }
    let resolver = Resolver::of(resolver)?;
    let callable = matches!(resolver, Resolver::Callable(_));
    let mut held = Vec::new();
    if PyUntypedBuffer::get(objects).is_ok() {
        held.push(ObjectBytes::get(objects, callable)?);
    } else {
        let items = objects.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "objects must be a bytes-like ELF object or a sequence of them, not {}",
                type_name(objects)
            ))
        })?;
        for item in items {
            held.push(ObjectBytes::get(&item?, callable)?);
        }
    }
    let slices: Vec<&[u8]> = held.iter().map(ObjectBytes::bytes).collect();

    // A resolver's Python exception stops at the first one and is raised after the load.
    let mut raised: Option<PyErr> = None;
    let mut resolve = |name: &str| -> Option<u64> {
        match &resolver {
            Resolver::None => None,
            Resolver::Table(table) => table.get(name).copied(),
            Resolver::Callable(callable) => {
                if raised.is_some() {
                    return None;
                }
                let answer = callable
                    .call1((name,))
                    .and_then(|value| match value.is_none() {
                        true => Ok(None),
                        false => address_of(name, &value).map(Some),
                    });
                answer.unwrap_or_else(|e| {
                    raised = Some(e);
                    None
                })
            }
        }
    };
    let loaded = LoadedModule::load_objects(&slices, &mut resolve);
    if let Some(e) = raised {
        return Err(e);
    }
    Ok(Module {
        module: loaded.map_err(|e| raise(e.into()))?,
    })
}

/// Source text as given: a `str` (UTF-8) or bytes.
#[derive(FromPyObject)]
enum Source {
    Text(PyBackedStr),
    Bytes(PyBackedBytes),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Text(text) => text.as_bytes(),
            Source::Bytes(bytes) => bytes,
        }
    }
}

/// `compile`'s `memory_limit`: bytes (0: none) or a size such as `"1G"`.
#[derive(FromPyObject)]
enum MemoryLimit {
    Bytes(i128),
    Text(PyBackedStr),
}

impl MemoryLimit {
    /// The limit in bytes, `None` for none.
    fn bytes(&self) -> PyResult<Option<u64>> {
        let bad = |reason: String| raise(elfjit_bindings::bad_argument("memory_limit", reason));
        match self {
            MemoryLimit::Bytes(n) => u64::try_from(*n)
                .map(|n| (n != 0).then_some(n))
                .map_err(|_| bad(format!("{n} (0 for no limit, or a number of bytes)"))),
            MemoryLimit::Text(text) => elfjit::memory_limit::parse_memory_size(text)
                .map_err(|reason| bad(format!("`{}`: {reason}", &**text))),
        }
    }
}

/// Compiles C (`lang="c"`) or LLVM IR (`lang="ir"`) to a relocatable ELF object with the
/// clang elfjit finds ($ELFJIT_CLANG, `clang`, the newest `clang-NN` in PATH), through
/// pipes, with the GIL released. `target` is an architecture name (`"x86_64"`,
/// `"aarch64"`, ...; None is the host); `cache=True` uses elfjit's compile cache (in
/// memory and in its cache directory); `flags` are extra clang arguments;
/// `memory_limit` bounds clang's memory (bytes or `"1G"`, 0 for none; None is
/// $ELFJIT_COMPILE_MEMORY, else 4 GiB).
#[pyfunction]
#[pyo3(signature = (
    source, lang = "c", opt = 2, target = None, cache = false, flags = None, memory_limit = None
))]
#[allow(clippy::too_many_arguments)]
fn compile<'py>(
    py: Python<'py>,
    source: Source,
    lang: &str,
    opt: i64,
    target: Option<&str>,
    cache: bool,
    flags: Option<Vec<String>>,
    memory_limit: Option<MemoryLimit>,
) -> PyResult<Bound<'py, PyBytes>> {
    if !(0..=i64::from(elfjit_bindings::MAX_OPT_LEVEL)).contains(&opt) {
        return Err(raise(elfjit_bindings::bad_argument(
            "opt level",
            format!("{opt} (0 to {})", elfjit_bindings::MAX_OPT_LEVEL),
        )));
    }
    let request = CompileRequest {
        lang: parse_lang(lang).map_err(raise)?,
        target: target.map(parse_target).transpose().map_err(raise)?,
        opt_level: u32::try_from(opt).unwrap_or(u32::MAX),
        cache,
        flags: flags.unwrap_or_default(),
        memory_limit: memory_limit.map(|m| m.bytes()).transpose()?,
    };
    let object = py
        .detach(|| elfjit_bindings::compile(source.bytes(), &request))
        .map_err(raise)?;
    Ok(PyBytes::new(py, &object))
}

/// The host architecture's name (`"x86_64"`, ...), or None where elfjit does not
/// support the host.
#[pyfunction]
fn host() -> Option<&'static str> {
    elfjit::Arch::host().map(|a| a.name())
}

/// Takes a fresh process's one-time costs off its first load: the loader's code pages,
/// what symbol lookups read, the process-wide code arena's first chunk and pages, and one
/// link of a built-in object. Optional; later calls return at once.
#[pyfunction]
fn prepare(py: Python<'_>) -> PyResult<()> {
    py.detach(elfjit::prepare).map_err(|e| raise(e.into()))
}

/// The path of the clang elfjit uses (found on first use and kept for the process).
#[pyfunction]
fn clang_path(py: Python<'_>) -> PyResult<String> {
    let compiler = py.detach(elfjit_bindings::compiler).map_err(raise)?;
    Ok(compiler.path().display().to_string())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Module>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(host, m)?)?;
    m.add_function(wrap_pyfunction!(clang_path, m)?)?;
    m.add_function(wrap_pyfunction!(prepare, m)?)?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("ArgumentError", py.get_type::<ArgumentError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("ClangNotFoundError", py.get_type::<ClangNotFoundError>())?;
    m.add("LinkError", py.get_type::<LinkError>())?;
    m.add("SymbolNotFoundError", py.get_type::<SymbolNotFoundError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("ResourceError", py.get_type::<ResourceError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}
