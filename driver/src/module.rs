//! A loaded image: object bytes linked into fresh memory, callable by symbol name.
//! (Being written: the signatures below are the contract; bodies land with the core.)

use crate::error::{Error, Result};
use elfjit_core::Arch;

/// Linked code and data in memory owned by this value; unmapped on drop.
pub struct Module {
    functions: Vec<String>,
}

impl Module {
    /// Links one relocatable object for the host into fresh memory, resolving external
    /// symbols through the process (dlsym) and the Rust runtime's compiler-rt builtins.
    pub fn load(object: &[u8]) -> Result<Module> {
        let _ = object;
        Err(Error::Unsupported("loader not yet written".into()))
    }

    /// The architecture the module was linked for.
    pub fn arch(&self) -> Arch {
        Arch::X86_64
    }

    /// The executable address of a defined symbol.
    pub fn symbol(&self, name: &str) -> Option<*const u8> {
        let _ = name;
        None
    }

    /// The names of the global functions the module defines, in symbol-table order.
    pub fn functions(&self) -> &[String] {
        &self.functions
    }
}
