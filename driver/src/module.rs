//! A loaded image: object bytes linked into fresh memory in this process, callable by
//! symbol name. The memory belongs to the [`Module`] and is unmapped when it is dropped.

use crate::error::{Error, Result};
use elfjit_core::{Arch, Plan, SymbolResolver};
use elfjit_os::{MmapBackend, ProcessResolver};
use std::collections::HashMap;

/// Linked code and data in memory owned by this value; unmapped on drop.
pub struct Module {
    arch: Arch,
    // Kept alive for the addresses below; dropping it unmaps the image.
    memory: MmapBackend,
    symbols: HashMap<String, u64>,
    functions: Vec<String>,
}

/// Resolution order for a module's undefined symbols: the caller's table first, then the
/// process (dlsym, libm, compiler-rt helpers).
struct Chain<'r> {
    first: &'r mut dyn FnMut(&str) -> Option<u64>,
}

impl SymbolResolver for Chain<'_> {
    fn resolve(&mut self, name: &[u8]) -> Option<u64> {
        std::str::from_utf8(name)
            .ok()
            .and_then(|n| (self.first)(n))
            .or_else(|| ProcessResolver::lookup(name))
    }
}

impl Module {
    /// Links one relocatable object for the host into fresh memory, resolving external
    /// symbols through the process (dlsym) and the Rust runtime's compiler-rt builtins.
    pub fn load(object: &[u8]) -> Result<Module> {
        Module::load_objects(&[object], &mut |_| None)
    }

    /// Links several objects into one image (symbols resolve across them), consulting
    /// `resolver` before the process for each undefined symbol.
    pub fn load_objects(
        objects: &[&[u8]],
        resolver: &mut dyn FnMut(&str) -> Option<u64>,
    ) -> Result<Module> {
        let host = Arch::from_name(std::env::consts::ARCH).ok_or_else(|| {
            Error::Unsupported(format!("host architecture {}", std::env::consts::ARCH))
        })?;
        let mut memory = MmapBackend::new();
        let mut plan = Plan::new(objects, elfjit_core::MemoryBackend::page_size(&memory))?;
        if plan.arch() != host {
            return Err(Error::Unsupported(format!(
                "the object is for {}, but this host is {host}; load it on {0} or run it with \
                 `elfjit run --target {0}`",
                plan.arch()
            )));
        }
        let image = plan.link(&mut memory, &mut Chain { first: resolver })?;
        let mut symbols = HashMap::new();
        let mut functions = Vec::new();
        for global in image.globals() {
            let Ok(name) = std::str::from_utf8(global.name) else {
                continue;
            };
            if global.is_function {
                functions.push(name.to_string());
            }
            symbols.entry(name.to_string()).or_insert(global.address);
        }
        Ok(Module {
            arch: host,
            memory,
            symbols,
            functions,
        })
    }

    /// The architecture the module was linked for.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The executable address of a defined global symbol.
    pub fn symbol(&self, name: &str) -> Option<*const u8> {
        self.symbols.get(name).map(|&a| a as usize as *const u8)
    }

    /// The names of the global functions the module defines, in symbol-table order.
    pub fn functions(&self) -> &[String] {
        &self.functions
    }

    /// The mapping's address and length.
    pub fn region(&self) -> (usize, usize) {
        self.memory.region().unwrap_or((0, 0))
    }
}
