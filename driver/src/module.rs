//! A loaded image: object bytes linked into fresh memory in this process, callable by
//! symbol name. The memory belongs to the [`Module`] and is unmapped when it is dropped.
//!
//! With the `dlopen-fallback` feature the same API links the objects into a shared
//! library with `clang -shared` and opens it with `dlopen` instead (see `fallback.rs`).

use crate::error::{Error, Result};
use crate::symbol::{Symbol, SymbolType};
use elfjit_core::{Arch, Plan, SymbolResolver};
use elfjit_os::{MmapBackend, ProcessResolver};
use std::collections::HashMap;

/// Linked code and data in memory owned by this value; unmapped on drop.
pub struct Module {
    arch: Arch,
    // What profilers, debuggers and the unwinder were told (see `elfjit_observe`); declared
    // before `memory` so that it is unregistered before the memory is unmapped.
    observed: Option<elfjit_observe::Registration>,
    // Kept alive for the addresses below; dropping it unmaps the image.
    memory: Backing,
    symbols: HashMap<String, u64>,
    functions: Vec<String>,
}

/// What holds a module's code and data.
enum Backing {
    /// The in-memory loader's mapping.
    #[cfg_attr(feature = "dlopen-fallback", allow(dead_code))]
    Mapped(MmapBackend),
    /// A shared library opened with dlopen, and its address range.
    #[cfg(feature = "dlopen-fallback")]
    Library(#[allow(dead_code)] libloading::Library, (usize, usize)),
}

/// Resolution order for a module's undefined symbols: the caller's table first, then the
/// process (dlsym, libm, compiler-rt helpers).
#[cfg_attr(feature = "dlopen-fallback", allow(dead_code))]
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
        let host = Arch::host().ok_or_else(|| {
            Error::Unsupported(format!("host architecture {}", std::env::consts::ARCH))
        })?;
        let memory = MmapBackend::new();
        // The plan's tables are on the heap, sized to the objects: a load needs little
        // stack (a few hundred bytes for the plan itself).
        let plan = Plan::new(objects, memory.page_size())?;
        if plan.arch() != host {
            return Err(Error::Unsupported(format!(
                "the object is for {}, but this host is {host}; load it on {0} or run it with \
                 `elfjit run --target {0}`",
                plan.arch()
            )));
        }
        #[cfg(feature = "dlopen-fallback")]
        {
            let loaded = crate::fallback::load(&plan, host, objects, resolver)?;
            Ok(Module {
                arch: host,
                // The dynamic linker tells debuggers and the unwinder about the library.
                observed: None,
                memory: Backing::Library(loaded.library, loaded.region),
                symbols: loaded.symbols,
                functions: loaded.functions,
            })
        }
        #[cfg(not(feature = "dlopen-fallback"))]
        Module::link_in_memory(host, objects, &plan, memory, resolver)
    }

    /// The in-memory loader: `plan` linked into `memory`.
    #[cfg_attr(feature = "dlopen-fallback", allow(dead_code))]
    fn link_in_memory(
        host: Arch,
        objects: &[&[u8]],
        plan: &Plan<'_>,
        mut memory: MmapBackend,
        resolver: &mut dyn FnMut(&str) -> Option<u64>,
    ) -> Result<Module> {
        let image = plan.link(&mut memory, &mut Chain { first: resolver })?;
        // With every observer off and no .eh_frame this is one atomic load.
        // SAFETY: `memory` holds the image and is kept in the module, which drops the
        // registration first (field order).
        let observed = unsafe { elfjit_observe::observe_image("module", objects, &image)? };
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
            observed,
            memory: Backing::Mapped(memory),
            symbols,
            functions,
        })
    }

    /// What profilers, debuggers and the unwinder were told about this module, if any
    /// observer is on or it loaded an `.eh_frame` (see [`crate::observe`]).
    pub fn observed(&self) -> Option<&elfjit_observe::Registration> {
        self.observed.as_ref()
    }

    /// The architecture the module was linked for.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The executable address of a defined global symbol.
    pub fn symbol(&self, name: &str) -> Option<*const u8> {
        self.symbols.get(name).map(|&a| a as usize as *const u8)
    }

    /// The defined global symbol `name` as a `T` (an `unsafe extern "C" fn` type for a
    /// function, a raw pointer for data), borrowing the module so that it cannot outlive
    /// it: see [`crate::symbol`]. A function type for a symbol that is not one of
    /// [`Module::functions`] is [`Error::UnknownEntry`], as is a name the module does not
    /// define.
    pub fn get<T: SymbolType>(&self, name: &str) -> Result<Symbol<'_, T>> {
        let unknown = || Error::UnknownEntry {
            name: name.to_string(),
            available: self.functions.clone(),
        };
        if T::IS_FUNCTION && !self.functions.iter().any(|f| f == name) {
            return Err(unknown());
        }
        match self.symbol(name) {
            // The symbol borrows `self` (the signature ties its lifetime to `&self`).
            Some(address) if !address.is_null() => Ok(Symbol::new(address)),
            _ => Err(unknown()),
        }
    }

    /// The names of the global functions the module defines, in symbol-table order.
    pub fn functions(&self) -> &[String] {
        &self.functions
    }

    /// The mapping's address and length.
    pub fn region(&self) -> (usize, usize) {
        match &self.memory {
            Backing::Mapped(memory) => memory.region().unwrap_or((0, 0)),
            #[cfg(feature = "dlopen-fallback")]
            Backing::Library(_, region) => *region,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clang::{CompileOptions, Compiler, Lang};
    use elfjit_core::plan::{
        HighHalf, LowHalf, NameEntry, ObjectEntry, PlanSizes, SectionPlace, SymbolEntry,
    };

    /// A kernel with read-only data, data and a libm call, like the corpus's saxpy.
    const SMALL: &str = "extern float expf(float);\n\
        static const float w[16] = {1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16};\n\
        int calls;\n\
        float kernel(float *out, const float *in, int n) {\n\
            float s = 0; calls++;\n\
            for (int i = 0; i < n; i++) { out[i] = expf(in[i] * w[i & 15]); s += out[i]; }\n\
            return s;\n\
        }\n";

    fn small_object() -> Vec<u8> {
        let host = Arch::host().expect("a supported host");
        Compiler::find()
            .expect("clang")
            .compile(SMALL.as_bytes(), &CompileOptions::new(Lang::C, host))
            .expect("compile")
    }

    /// The plan's tables live on the heap: loading, calling and dropping a module fits a
    /// 64 KiB thread stack (the fixed-capacity plan alone was about 200 KB).
    #[test]
    fn loads_on_a_64_kib_stack() {
        let object = small_object();
        let result = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let module = Module::load(&object).expect("load");
                let kernel = module.symbol("kernel").expect("kernel");
                // SAFETY: `kernel` is `float kernel(float *, const float *, int)`; `module`
                // outlives the call.
                let f: extern "C" fn(*mut f32, *const f32, i32) -> f32 =
                    unsafe { std::mem::transmute(kernel) };
                let input = [0.5f32; 4];
                let mut out = [0f32; 4];
                f(out.as_mut_ptr(), input.as_ptr(), 4)
            })
            .expect("spawn")
            .join()
            .expect("the load ran within 64 KiB of stack");
        let want: f32 = (0..4).map(|i| (0.5f32 * (i + 1) as f32).exp()).sum();
        assert!((result - want).abs() < 1e-3 * want, "{result} vs {want}");
    }

    /// What a small kernel's plan occupies: the `Plan` value (stack or wherever it is
    /// kept) and its tables (heap, exactly sized); printed for the README.
    #[test]
    fn a_small_kernels_plan_is_small() {
        let object = small_object();
        let plan = Plan::new(&[&object], 4096).expect("plan");
        let sizes = plan.sizes();
        assert_eq!(sizes, PlanSizes::count(&[&object]).expect("count"));
        let tables = sizes.objects * std::mem::size_of::<ObjectEntry<'_>>()
            + sizes.sections * std::mem::size_of::<SectionPlace>()
            + sizes.symbols * std::mem::size_of::<SymbolEntry>()
            + sizes.names * std::mem::size_of::<NameEntry>()
            + sizes.high_halves * std::mem::size_of::<HighHalf>()
            + sizes.low_halves * std::mem::size_of::<LowHalf>();
        let value = std::mem::size_of::<Plan<'_>>();
        eprintln!("small kernel plan: {value} bytes + {tables} bytes of tables ({sizes:?})");
        assert!(value < 1024, "{value}");
        assert!(tables < 8 * 1024, "{tables}");
    }
}
