//! elfjit's C ABI: `libelfjit.so` / `libelfjit.a` and the header `include/elfjit.h`
//! (generated from this file by cbindgen; `tests/header.rs` fails when it is stale).
//!
//! Conventions, the same for every function:
//! - Handles are opaque (`elfjit_module`, `elfjit_object`); no Rust type crosses the
//!   boundary, only integers, C strings, byte pointers and `#[repr(C)]` structs.
//! - Every fallible function returns an [`elfjit_status`] and writes its results through
//!   out-pointers; on failure the out-pointers hold NULL / 0 and [`elfjit_last_error`]
//!   tells why, in this thread. Every call except `elfjit_last_error` and
//!   `elfjit_version` resets that message (to NULL on success).
//! - Every pointer argument is checked: NULL is `ELFJIT_ERROR_NULL_POINTER`, never a
//!   crash. Pointers that are not NULL must be valid for what the function documents.
//! - A panic inside elfjit is caught and reported as `ELFJIT_ERROR_INTERNAL`; it never
//!   unwinds into C.
//! - Thread-safe: any function may be called from any thread; a module may be used by
//!   many threads at once, but freed only once nothing else uses it.
//! - Calls work from thread-local destructors (a `pthread_key_create` destructor) too,
//!   also after this thread's error slot is gone: the call does its work and returns its
//!   status, and `elfjit_last_error` then returns [`LOST_MESSAGE`] (the per-thread
//!   message is the one thing that cannot be kept there). Thread-locals are only ever
//!   reached with `try_with`, which cannot panic (a panic there, outside `catch_unwind`,
//!   aborted the process).

// The exported names are the C names: `elfjit_module`, `ELFJIT_OK`, ...
#![allow(non_camel_case_types)]

use elfjit_bindings::{
    bad_argument, panic_message, parse_target, CompileRequest, ErrorKind, Failure, Result,
};
use elfjit_lib::{Lang, Module};
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// What a call returned: `ELFJIT_OK`, or the category of its failure (the message is in
/// `elfjit_last_error()`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum elfjit_status {
    /// Success.
    ELFJIT_OK = 0,
    /// A pointer argument was NULL.
    ELFJIT_ERROR_NULL_POINTER = 1,
    /// A malformed argument: unknown target or language, opt level above 3, a name that
    /// is not UTF-8, an index out of range, a size too large.
    ELFJIT_ERROR_ARGUMENT = 2,
    /// No clang was found (`$ELFJIT_CLANG`, `clang`, `clang-NN` in `PATH`).
    ELFJIT_ERROR_CLANG_NOT_FOUND = 3,
    /// clang failed (its diagnostics are in the message) or overran its deadline.
    ELFJIT_ERROR_COMPILE = 4,
    /// The loader rejected an object: not ELF, malformed, an unsupported or
    /// out-of-range relocation, an undefined symbol.
    ELFJIT_ERROR_LINK = 5,
    /// No symbol of that name in the module.
    ELFJIT_ERROR_NOT_FOUND = 6,
    /// A request elfjit cannot serve, e.g. loading an object built for another
    /// architecture.
    ELFJIT_ERROR_UNSUPPORTED = 7,
    /// The operating system refused: memory, pipes, starting clang.
    ELFJIT_ERROR_SYSTEM = 8,
    /// A bug in elfjit (a caught panic); please report the message.
    ELFJIT_ERROR_INTERNAL = 9,
}

use elfjit_status::*;

impl elfjit_status {
    fn of(kind: ErrorKind) -> elfjit_status {
        match kind {
            ErrorKind::NullPointer => ELFJIT_ERROR_NULL_POINTER,
            ErrorKind::Argument => ELFJIT_ERROR_ARGUMENT,
            ErrorKind::ClangNotFound => ELFJIT_ERROR_CLANG_NOT_FOUND,
            ErrorKind::Compile => ELFJIT_ERROR_COMPILE,
            ErrorKind::Link => ELFJIT_ERROR_LINK,
            ErrorKind::NotFound => ELFJIT_ERROR_NOT_FOUND,
            ErrorKind::Unsupported => ELFJIT_ERROR_UNSUPPORTED,
            ErrorKind::System => ELFJIT_ERROR_SYSTEM,
            ErrorKind::Internal => ELFJIT_ERROR_INTERNAL,
        }
    }
}

/// `elfjit_compile_options.lang`: C source (freestanding, `-x c`).
pub const ELFJIT_LANG_C: u32 = 0;
/// `elfjit_compile_options.lang`: LLVM IR text (`-x ir`).
pub const ELFJIT_LANG_IR: u32 = 1;

/// How to compile. Start from `elfjit_compile_options_default()` and change fields.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct elfjit_compile_options {
    /// `ELFJIT_LANG_C` or `ELFJIT_LANG_IR`.
    pub lang: u32,
    /// `-O` level, 0 to 3.
    pub opt_level: u32,
    /// The architecture to compile for (`"x86_64"`, `"aarch64"`, `"riscv64"`,
    /// `"loongarch64"`, `"ppc64le"`), or NULL for the host.
    pub target: *const c_char,
    /// Nonzero: use the process-wide compile cache, in memory and on disk in elfjit's
    /// cache directory (`$ELFJIT_CACHE_DIR/objects`, else `$XDG_CACHE_HOME/elfjit/objects`,
    /// else `~/.cache/elfjit/objects`; the directory is read when the cache is first used).
    pub cache: u32,
    /// `flag_count` extra clang arguments (NUL-terminated), appended after elfjit's own;
    /// may be NULL when `flag_count` is 0.
    pub flags: *const *const c_char,
    /// How many entries `flags` has.
    pub flag_count: usize,
    /// The compiler memory limit for this compile, in bytes:
    /// `ELFJIT_COMPILE_MEMORY_DEFAULT` (0, the default) is the process's setting
    /// (`$ELFJIT_COMPILE_MEMORY`, e.g. `1G`, else 4 GiB), `ELFJIT_COMPILE_MEMORY_UNLIMITED`
    /// none. clang running out of it is `ELFJIT_ERROR_COMPILE`, with a message naming the
    /// limit.
    pub memory_limit: u64,
}

/// `elfjit_compile_options.memory_limit`: the process's setting (`$ELFJIT_COMPILE_MEMORY`,
/// else 4 GiB). Zero, so that a zero-filled options struct gets it.
pub const ELFJIT_COMPILE_MEMORY_DEFAULT: u64 = 0;
/// `elfjit_compile_options.memory_limit`: no limit.
pub const ELFJIT_COMPILE_MEMORY_UNLIMITED: u64 = u64::MAX;

/// A compiled object: the ELF bytes clang produced. Free with `elfjit_object_free`.
pub struct elfjit_object {
    bytes: Vec<u8>,
}

/// Linked code and data in this process, callable by symbol. Free with
/// `elfjit_module_free`, which gives its memory back to the code arena: no address from
/// it may be used afterwards.
pub struct elfjit_module {
    module: Module,
    /// The function names as C strings, owned here so the pointers handed out live as
    /// long as the module.
    function_names: Vec<CString>,
}

/// Resolves an undefined symbol for `elfjit_load_objects`: returns its address, or NULL
/// to let elfjit search the process (dlsym, libm, compiler-rt helpers). Called only
/// during the load, on the loading thread, with the `user_data` given to the load and a
/// NUL-terminated name that is valid only during the call. It must not unwind.
pub type elfjit_resolver =
    Option<unsafe extern "C" fn(user_data: *mut c_void, name: *const c_char) -> *const c_void>;

thread_local! {
    /// The message of this thread's last failed call.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// What `elfjit_last_error` returns on a thread whose error slot was already destroyed
/// (a call from a thread-local destructor late in the thread's exit).
const LOST_MESSAGE: &CStr = c"elfjit: no message: this thread is exiting and its \
    error message was already destroyed (a call from a thread-local destructor); the \
    status code is the only report";

/// Runs one exported function's body: resets the thread's error, catches panics,
/// records the failure's message and returns its status.
fn guard(body: impl FnOnce() -> Result<()>) -> elfjit_status {
    set_last_error(None);
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return ELFJIT_OK,
        Ok(Err(failure)) => failure,
        Err(payload) => Failure::Panic(panic_message(payload.as_ref())),
    };
    let status = elfjit_status::of(failure.kind());
    set_last_error(Some(failure.to_string()));
    status
}

/// Records this thread's message; where the thread's slot is already gone (a
/// thread-local destructor), it is dropped: the status still tells the failure.
fn set_last_error(message: Option<String>) {
    // A message with a NUL (clang echoing binary input) keeps everything, escaped.
    let message = message.map(|m| {
        CString::new(m.replace('\0', "\\0")).unwrap_or_else(|_| CString::from(c"(error)"))
    });
    // `try_with` and `try_borrow_mut`: nothing here may panic, it runs outside
    // `catch_unwind` (the slot is never borrowed across a call, so the borrow succeeds).
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = message;
        }
    });
}

/// Checks a pointer argument for NULL.
fn required<T>(pointer: *const T, argument: &'static str) -> Result<*const T> {
    if pointer.is_null() {
        Err(Failure::NullPointer { argument })
    } else {
        Ok(pointer)
    }
}

/// Checks an out-pointer for NULL.
fn out<T>(pointer: *mut T, argument: &'static str) -> Result<*mut T> {
    if pointer.is_null() {
        Err(Failure::NullPointer { argument })
    } else {
        Ok(pointer)
    }
}

/// Reads a NUL-terminated UTF-8 argument.
///
/// # Safety
/// `pointer` is NULL or points to a NUL-terminated string that stays valid for `'a`.
unsafe fn utf8<'a>(pointer: *const c_char, argument: &'static str) -> Result<&'a str> {
    let pointer = required(pointer, argument)?;
    // SAFETY: not NULL (checked), and the caller promises a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(pointer) };
    text.to_str()
        .map_err(|e| bad_argument(argument, format!("not UTF-8: {e}")))
}

/// Borrows `size` bytes at `data`.
///
/// # Safety
/// `data` is NULL or valid for reads of `size` bytes for `'a`, and not written meanwhile.
unsafe fn bytes<'a>(data: *const u8, size: usize, argument: &'static str) -> Result<&'a [u8]> {
    let data = required(data, argument)?;
    if size > isize::MAX as usize {
        return Err(bad_argument(argument, format!("size {size} is too large")));
    }
    // SAFETY: not NULL, size at most isize::MAX (both checked); the caller promises the
    // bytes are readable and unchanged for 'a.
    Ok(unsafe { std::slice::from_raw_parts(data, size) })
}

/// The version of this library (`"0.1.0"`), a static string.
#[no_mangle]
pub extern "C" fn elfjit_version() -> *const c_char {
    static VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    VERSION.as_ptr()
}

/// The message of this thread's last failed elfjit call, or NULL if the last call
/// succeeded. The string is valid until the next elfjit call on this thread. Called from
/// a thread-local destructor after this thread's message was destroyed, it returns a
/// fixed text saying so (the message is lost; the call's status code still tells what
/// failed).
#[no_mangle]
pub extern "C" fn elfjit_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| {
            slot.try_borrow()
                .ok()
                .and_then(|m| m.as_ref().map(|m| m.as_ptr()))
                .unwrap_or(ptr::null())
        })
        .unwrap_or(LOST_MESSAGE.as_ptr())
}

/// C for the host at `-O2`, no cache, no extra flags, the process's compiler memory limit.
#[no_mangle]
pub extern "C" fn elfjit_compile_options_default() -> elfjit_compile_options {
    elfjit_compile_options {
        lang: ELFJIT_LANG_C,
        opt_level: 2,
        target: ptr::null(),
        cache: 0,
        flags: ptr::null(),
        flag_count: 0,
        memory_limit: ELFJIT_COMPILE_MEMORY_DEFAULT,
    }
}

/// Compiles `source_len` bytes of C or LLVM IR at `source` with clang (the one elfjit
/// finds: `$ELFJIT_CLANG`, `clang`, else the newest `clang-NN` in `PATH`) into an ELF
/// object, through pipes. `options` may be NULL for `elfjit_compile_options_default()`.
/// On success `*object` is a new object to free with `elfjit_object_free`.
///
/// # Safety
/// `source` is readable for `source_len` bytes; `options` is NULL or points to a valid
/// `elfjit_compile_options` whose strings are NUL-terminated and whose `flags` holds
/// `flag_count` pointers; `object` is writable.
#[no_mangle]
pub unsafe extern "C" fn elfjit_compile(
    source: *const c_char,
    source_len: usize,
    options: *const elfjit_compile_options,
    object: *mut *mut elfjit_object,
) -> elfjit_status {
    guard(|| {
        let object = out(object, "object")?;
        // SAFETY: not NULL (checked); the caller promises it is writable.
        unsafe { object.write(ptr::null_mut()) };
        // SAFETY: the caller promises `source_len` readable bytes.
        let source = unsafe { bytes(source.cast::<u8>(), source_len, "source")? };
        let options = if options.is_null() {
            elfjit_compile_options_default()
        } else {
            // SAFETY: not NULL; the caller promises a valid struct.
            unsafe { *options }
        };
        // SAFETY: the caller promises the struct's pointers are valid.
        let request = unsafe { request_of(&options)? };
        let bytes = elfjit_bindings::compile(source, &request)?;
        let handle = Box::into_raw(Box::new(elfjit_object { bytes }));
        // SAFETY: checked and writable, as above.
        unsafe { object.write(handle) };
        Ok(())
    })
}

/// The request `options` describe.
///
/// # Safety
/// `options.target` is NULL or NUL-terminated; `options.flags` is NULL or holds
/// `flag_count` NUL-terminated strings.
unsafe fn request_of(options: &elfjit_compile_options) -> Result<CompileRequest> {
    let lang = match options.lang {
        ELFJIT_LANG_C => Lang::C,
        ELFJIT_LANG_IR => Lang::Ir,
        other => {
            return Err(bad_argument(
                "lang",
                format!("{other}; ELFJIT_LANG_C (0) or ELFJIT_LANG_IR (1)"),
            ))
        }
    };
    let target = if options.target.is_null() {
        None
    } else {
        // SAFETY: not NULL; the caller promises NUL-termination.
        Some(parse_target(unsafe {
            utf8(options.target, "options.target")?
        })?)
    };
    let mut flags = Vec::with_capacity(options.flag_count.min(1024));
    if options.flag_count > 0 {
        let list = required(options.flags, "options.flags")?;
        for i in 0..options.flag_count {
            // SAFETY: the caller promises `flag_count` readable pointers at `flags`.
            let flag = unsafe { list.add(i).read() };
            // SAFETY: the caller promises each is NUL-terminated (NULL is caught).
            flags.push(unsafe { utf8(flag, "options.flags[i]")? }.to_string());
        }
    }
    Ok(CompileRequest {
        lang,
        target,
        opt_level: options.opt_level,
        cache: options.cache != 0,
        flags,
        memory_limit: match options.memory_limit {
            ELFJIT_COMPILE_MEMORY_DEFAULT => None,
            ELFJIT_COMPILE_MEMORY_UNLIMITED => Some(None),
            bytes => Some(Some(bytes)),
        },
    })
}

/// The bytes of a compiled object: `*data` points to `*size` bytes owned by `object`,
/// valid until it is freed.
///
/// # Safety
/// `object` is NULL or a live object from `elfjit_compile`; `data` and `size` are
/// writable.
#[no_mangle]
pub unsafe extern "C" fn elfjit_object_bytes(
    object: *const elfjit_object,
    data: *mut *const u8,
    size: *mut usize,
) -> elfjit_status {
    guard(|| {
        let bytes = || {
            // SAFETY: not NULL (checked); the caller promises a live object.
            let object = unsafe { &*required(object, "object")? };
            Ok((object.bytes.as_ptr(), object.bytes.len()))
        };
        // SAFETY: the caller promises `data` and `size` are writable.
        unsafe { write_span(data, size, ("data", "size"), bytes) }
    })
}

/// Writes a pointer and a length through two out-pointers: NULL and 0 first, then what
/// `value` returns if it succeeds.
///
/// # Safety
/// `pointer` and `length` are each NULL or writable.
unsafe fn write_span<T>(
    pointer: *mut *const T,
    length: *mut usize,
    names: (&'static str, &'static str),
    value: impl FnOnce() -> Result<(*const T, usize)>,
) -> Result<()> {
    let (pointer, length) = (out(pointer, names.0)?, out(length, names.1)?);
    // SAFETY: both checked for NULL; the caller promises they are writable.
    unsafe {
        pointer.write(ptr::null());
        length.write(0);
    }
    let (found, size) = value()?;
    // SAFETY: as above.
    unsafe {
        pointer.write(found);
        length.write(size);
    }
    Ok(())
}

/// Frees an object from `elfjit_compile`. NULL is ignored.
///
/// # Safety
/// `object` is NULL or a live object from `elfjit_compile`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn elfjit_object_free(object: *mut elfjit_object) {
    // SAFETY: the caller passes NULL or an object from elfjit_compile, once.
    unsafe { free_handle(object) };
}

/// Drops a handle this library made with `Box::into_raw`; NULL is ignored.
///
/// # Safety
/// `handle` is NULL or came from `Box::into_raw` of a `Box<T>`, and is not used again.
unsafe fn free_handle<T>(handle: *mut T) {
    guard(|| {
        if !handle.is_null() {
            // SAFETY: the caller's promise: a Box<T> turned into a raw pointer, freed once.
            drop(unsafe { Box::from_raw(handle) });
        }
        Ok(())
    });
}

/// Takes a fresh process's one-time costs off its first load: maps the pages of the
/// loader's own code, opens what symbol lookups read (libm, the loaded libraries' symbol
/// tables), makes the process-wide code arena's first chunk with its first pages written
/// and faulted in, and links and frees a small built-in object so that the first real load
/// runs warm code. Call it at start-up, or while the first kernel compiles: a few tenths
/// of a millisecond once; later calls return at once. Optional: loads work without it.
#[no_mangle]
pub extern "C" fn elfjit_prepare() -> elfjit_status {
    guard(|| Ok(elfjit_lib::prepare()?))
}

/// Links one relocatable ELF object for the host into the process-wide code arena (code
/// never writable and executable at once), resolving undefined symbols in the process. On success
/// `*module` is a new module to free with `elfjit_module_free`. The bytes are only read
/// during the call.
///
/// # Safety
/// `object` is readable for `size` bytes; `module` is writable.
#[no_mangle]
pub unsafe extern "C" fn elfjit_load(
    object: *const u8,
    size: usize,
    module: *mut *mut elfjit_module,
) -> elfjit_status {
    // SAFETY: a list of one: the pointer to `object` and to `size` are valid for one
    // element each; the caller's promises are passed on.
    unsafe { elfjit_load_objects(&object, &size, 1, None, ptr::null_mut(), module) }
}

/// Links `count` objects into one image: symbols resolve across them, then through
/// `resolver` (may be NULL), then through the process. `objects[i]` holds `sizes[i]`
/// bytes. On success `*module` is a new module to free with `elfjit_module_free`.
///
/// # Safety
/// `objects` and `sizes` hold `count` entries, each object readable for its size;
/// `resolver`, if not NULL, is safe to call with `user_data` as documented on
/// [`elfjit_resolver`]; `module` is writable.
#[no_mangle]
pub unsafe extern "C" fn elfjit_load_objects(
    objects: *const *const u8,
    sizes: *const usize,
    count: usize,
    resolver: elfjit_resolver,
    user_data: *mut c_void,
    module: *mut *mut elfjit_module,
) -> elfjit_status {
    guard(|| {
        let module = out(module, "module")?;
        // SAFETY: not NULL (checked); the caller promises it is writable.
        unsafe { module.write(ptr::null_mut()) };
        let objects = required(objects, "objects")?;
        let sizes = required(sizes, "sizes")?;
        let mut slices = Vec::with_capacity(count.min(1024));
        for i in 0..count {
            // SAFETY: the caller promises `count` entries in both arrays.
            let (data, size) = unsafe { (objects.add(i).read(), sizes.add(i).read()) };
            // SAFETY: the caller promises each object is readable for its size.
            slices.push(unsafe { bytes(data, size, "objects[i]")? });
        }
        let mut resolve = |name: &str| -> Option<u64> {
            let callback = resolver?;
            let name = CString::new(name).ok()?;
            // SAFETY: the caller promises the callback may be called with `user_data`
            // and a NUL-terminated name valid during the call.
            let address = unsafe { callback(user_data, name.as_ptr()) };
            (!address.is_null()).then_some(address as usize as u64)
        };
        let loaded = Module::load_objects(&slices, &mut resolve)?;
        let function_names = loaded
            .functions()
            .iter()
            .filter_map(|name| CString::new(name.as_str()).ok())
            .collect();
        let handle = Box::into_raw(Box::new(elfjit_module {
            module: loaded,
            function_names,
        }));
        // SAFETY: checked and writable, as above.
        unsafe { module.write(handle) };
        Ok(())
    })
}

/// The address of the global symbol `name` (a function or data) in `module`. A name the
/// module does not define is `ELFJIT_ERROR_NOT_FOUND`, with the module's functions listed
/// in the message.
///
/// # Safety
/// `module` is NULL or live; `name` is NULL or NUL-terminated; `address` is writable.
#[no_mangle]
pub unsafe extern "C" fn elfjit_module_symbol(
    module: *const elfjit_module,
    name: *const c_char,
    address: *mut *const c_void,
) -> elfjit_status {
    guard(|| {
        let address = out(address, "address")?;
        // SAFETY: not NULL (checked); the caller promises it is writable.
        unsafe { address.write(ptr::null()) };
        // SAFETY: not NULL (checked); the caller promises a live module.
        let module = unsafe { &*required(module, "module")? };
        // SAFETY: the caller promises NUL-termination.
        let name = unsafe { utf8(name, "name")? };
        let found = elfjit_bindings::symbol(&module.module, name)?;
        // SAFETY: as above.
        unsafe { address.write(found as *const c_void) };
        Ok(())
    })
}

/// How many global functions `module` defines.
///
/// # Safety
/// `module` is NULL or live; `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn elfjit_module_function_count(
    module: *const elfjit_module,
    count: *mut usize,
) -> elfjit_status {
    guard(|| {
        let count = out(count, "count")?;
        // SAFETY: not NULL (checked); the caller promises it is writable.
        unsafe { count.write(0) };
        // SAFETY: not NULL (checked); the caller promises a live module.
        let module = unsafe { &*required(module, "module")? };
        // SAFETY: as above.
        unsafe { count.write(module.function_names.len()) };
        Ok(())
    })
}

/// The name of global function `index` (0 to count - 1, in symbol-table order), owned by
/// the module and valid until it is freed.
///
/// # Safety
/// `module` is NULL or live; `name` is writable.
#[no_mangle]
pub unsafe extern "C" fn elfjit_module_function_name(
    module: *const elfjit_module,
    index: usize,
    name: *mut *const c_char,
) -> elfjit_status {
    guard(|| {
        let name = out(name, "name")?;
        // SAFETY: not NULL (checked); the caller promises it is writable.
        unsafe { name.write(ptr::null()) };
        // SAFETY: not NULL (checked); the caller promises a live module.
        let module = unsafe { &*required(module, "module")? };
        let found = module.function_names.get(index).ok_or_else(|| {
            bad_argument(
                "index",
                format!(
                    "{index}, but the module has {} functions",
                    module.function_names.len()
                ),
            )
        })?;
        // SAFETY: as above.
        unsafe { name.write(found.as_ptr()) };
        Ok(())
    })
}

/// The module's code: `*size` bytes from `*start`.
///
/// # Safety
/// `module` is NULL or live; `start` and `size` are writable.
#[no_mangle]
pub unsafe extern "C" fn elfjit_module_region(
    module: *const elfjit_module,
    start: *mut *const c_void,
    size: *mut usize,
) -> elfjit_status {
    guard(|| {
        let region = || {
            // SAFETY: not NULL (checked); the caller promises a live module.
            let module = unsafe { &*required(module, "module")? };
            let (address, length) = module.module.region();
            Ok((address as *const c_void, length))
        };
        // SAFETY: the caller promises `start` and `size` are writable.
        unsafe { write_span(start, size, ("start", "size"), region) }
    })
}

/// Frees a module and gives its memory back to the code arena (which reuses it for later
/// modules). NULL is ignored.
///
/// # Safety
/// `module` is NULL or a live module from a load, that no thread uses any more (nor
/// any address or name from it).
#[no_mangle]
pub unsafe extern "C" fn elfjit_module_free(module: *mut elfjit_module) {
    // SAFETY: the caller passes NULL or a module from a load, once.
    unsafe { free_handle(module) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> Option<String> {
        let message = elfjit_last_error();
        (!message.is_null()).then(|| {
            // SAFETY: not NULL, so this thread's current message: a NUL-terminated string
            // valid until the next elfjit call on this thread, and none is made here.
            unsafe { CStr::from_ptr(message) }
                .to_string_lossy()
                .into_owned()
        })
    }

    // A panic cannot be provoked through the exported functions without a bug, so the
    // guard that turns one into an error is tested directly.
    #[test]
    fn a_panic_becomes_an_internal_error() {
        let status = guard(|| panic!("deliberate"));
        assert_eq!(status, ELFJIT_ERROR_INTERNAL);
        let message = last_error().unwrap();
        assert!(message.contains("deliberate"), "{message}");
        assert_eq!(guard(|| Ok(())), ELFJIT_OK);
        assert_eq!(last_error(), None);
    }

    #[test]
    fn messages_with_nul_bytes_are_kept_escaped() {
        guard(|| Err(bad_argument("x", "a\0b")));
        assert_eq!(last_error().unwrap(), "bad x: a\\0b");
    }
}
