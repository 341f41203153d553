//! The GDB JIT interface (GDB manual, "JIT Compilation Interface"; LLDB implements the same):
//! the program defines `__jit_debug_descriptor`, a doubly linked list of in-memory symbol
//! files, and `__jit_debug_register_code`, an empty function the debugger breaks on. To add
//! or remove an entry the program edits the list, says which entry and what it did in the
//! descriptor, and calls the function; the debugger, stopped there, reads the entry's
//! symbol file out of the process.
//!
//! Each entry is one object of a module: the object's bytes with each loaded section's
//! `sh_addr` set to where it went — what LLVM's JITLink debug-object plugin does. The
//! object stays `ET_REL`, so the debugger reads a symbol's address as its section's address
//! plus its value (its symbols land where the code is) and applies the object's own
//! relocations to the DWARF (`-g`) against those section addresses, as it does for any
//! relocatable object.
//!
//! Cost: the debugger reads every symbol file when it is registered and keeps it, and
//! re-evaluates pending breakpoints on each registration, so its time grows with the number
//! of entries; with no debugger attached a registration is a list insert and a call.

use crate::published::{parse, LoadedObject};
use crate::Error;
use object::read::elf::{FileHeader, SectionHeader};
use object::Object;
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::Mutex;

/// `jit_actions_t`.
const JIT_NOACTION: u32 = 0;
const JIT_REGISTER_FN: u32 = 1;
const JIT_UNREGISTER_FN: u32 = 2;

/// `struct jit_code_entry`.
#[repr(C)]
struct CodeEntry {
    next_entry: *mut CodeEntry,
    prev_entry: *mut CodeEntry,
    symfile_addr: *const u8,
    symfile_size: u64,
}

/// `struct jit_descriptor`.
#[repr(C)]
pub struct JitDescriptor {
    version: u32,
    action_flag: u32,
    relevant_entry: *mut CodeEntry,
    first_entry: *mut CodeEntry,
}

/// The descriptor's storage: the debugger writes nothing, the program only under `LOCK`.
#[repr(transparent)]
pub struct Descriptor(UnsafeCell<JitDescriptor>);

// SAFETY: every access from this program holds `LOCK`; the debugger reads it only while the
// process is stopped.
unsafe impl Sync for Descriptor {}

/// The list the debugger reads. The name and layout are the interface.
#[no_mangle]
pub static __jit_debug_descriptor: Descriptor = Descriptor(UnsafeCell::new(JitDescriptor {
    version: 1,
    action_flag: JIT_NOACTION,
    relevant_entry: ptr::null_mut(),
    first_entry: ptr::null_mut(),
}));

/// Where the debugger breaks to read `__jit_debug_descriptor`. Never inlined, and not
/// empty to the optimiser, so every call stays a call.
#[no_mangle]
#[inline(never)]
pub extern "C" fn __jit_debug_register_code() {
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// Serialises edits of the list.
static LOCK: Mutex<()> = Mutex::new(());

/// One registered symbol file; unregistered when dropped.
pub(crate) struct Entry {
    entry: Box<CodeEntry>,
    // The bytes the entry points to; a Box so that moving `Entry` does not move them.
    _symfile: Box<[u8]>,
}

// SAFETY: the entry's pointers refer to its own heap data and the list, which is only
// touched under `LOCK`.
unsafe impl Send for Entry {}
// SAFETY: `Entry` has no methods that read through its pointers without `LOCK`.
unsafe impl Sync for Entry {}

/// The symbol file `object` is registered as: its bytes, each loaded section's `sh_addr` set to the
/// address it was loaded at.
pub fn symbol_file(module: &str, object: &LoadedObject<'_>) -> Result<Vec<u8>, Error> {
    let file = parse(module, object.bytes)?;
    let endian = file.endian();
    let header = file.elf_header();
    let malformed = |what: &str| Error::Object {
        module: module.to_string(),
        what: what.to_string(),
    };
    let shoff = usize::try_from(header.e_shoff(endian)).map_err(|_| malformed("e_shoff"))?;
    let entsize = usize::from(header.e_shentsize(endian));
    if entsize < std::mem::size_of::<object::elf::SectionHeader64<object::Endianness>>() {
        return Err(malformed("section header size"));
    }
    let mut bytes = object.bytes.to_vec();
    for (index, section) in file.elf_section_table().iter().enumerate() {
        let Some(address) = object.section_addresses.get(index).copied().flatten() else {
            continue;
        };
        if !section.sh_flags(endian).contains(object::elf::SHF_ALLOC) {
            continue;
        }
        // sh_addr is the third field of Elf64_Shdr: after sh_name (4), sh_type (4) and
        // sh_flags (8).
        let at = index
            .checked_mul(entsize)
            .and_then(|o| o.checked_add(shoff))
            .and_then(|o| o.checked_add(16))
            .ok_or_else(|| malformed("section header offset"))?;
        let field = bytes
            .get_mut(at..at + 8)
            .ok_or_else(|| malformed("section header out of bounds"))?;
        let value = if file.is_little_endian() {
            address.to_le_bytes()
        } else {
            address.to_be_bytes()
        };
        field.copy_from_slice(&value);
    }
    Ok(bytes)
}

/// Tells the debugger about `symfile` (kept until the entry is dropped).
pub(crate) fn register(symfile: Vec<u8>) -> Entry {
    let symfile = symfile.into_boxed_slice();
    let mut entry = Box::new(CodeEntry {
        next_entry: ptr::null_mut(),
        prev_entry: ptr::null_mut(),
        symfile_addr: symfile.as_ptr(),
        symfile_size: symfile.len() as u64,
    });
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let descriptor = __jit_debug_descriptor.0.get();
    let raw: *mut CodeEntry = &mut *entry;
    // SAFETY: `LOCK` is held, so no other thread touches the descriptor or the list; every
    // entry in the list is a live `Entry`'s box (removed in its drop before it is freed).
    unsafe {
        let first = (*descriptor).first_entry;
        (*raw).next_entry = first;
        if !first.is_null() {
            (*first).prev_entry = raw;
        }
        (*descriptor).first_entry = raw;
        (*descriptor).relevant_entry = raw;
        (*descriptor).action_flag = JIT_REGISTER_FN;
    }
    __jit_debug_register_code();
    drop(guard);
    Entry {
        entry,
        _symfile: symfile,
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let descriptor = __jit_debug_descriptor.0.get();
        let raw: *mut CodeEntry = &mut *self.entry;
        // SAFETY: as in `register`: under `LOCK`, the list holds only live entries, and
        // this one is in it (added by `register`, removed only here).
        unsafe {
            let (prev, next) = ((*raw).prev_entry, (*raw).next_entry);
            if prev.is_null() {
                (*descriptor).first_entry = next;
            } else {
                (*prev).next_entry = next;
            }
            if !next.is_null() {
                (*next).prev_entry = prev;
            }
            (*descriptor).relevant_entry = raw;
            (*descriptor).action_flag = JIT_UNREGISTER_FN;
        }
        __jit_debug_register_code();
    }
}

/// The number of registered entries (for tests and diagnostics).
pub fn registered_entries() -> usize {
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut count = 0;
    // SAFETY: under `LOCK` the list holds only live entries.
    unsafe {
        let mut at = (*__jit_debug_descriptor.0.get()).first_entry;
        while !at.is_null() {
            count += 1;
            at = (*at).next_entry;
        }
    }
    count
}
