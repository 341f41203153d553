//! A loaded image: object bytes linked into code memory of this process, callable by
//! symbol name. The memory comes from an [`Arena`] (the process-wide page-granular one,
//! [`Arena::process`], unless the caller names another) and goes back to it when the
//! [`Module`] is dropped; a module keeps its arena alive.
//!
//! With the `dlopen-fallback` feature the same API links the objects into a shared
//! library with `clang -shared` and opens it with `dlopen` instead (see `fallback.rs`).

use crate::error::{Error, Result};
use crate::symbol::{Symbol, SymbolType};
use crate::symbols::{Symbols, SymbolsBuilder};
use elfjit_core::{Arch, Plan, SegmentKind, SymbolResolver};
use elfjit_os::{Arena, ArenaBackend, ProcessResolver};
use std::sync::atomic::{AtomicBool, Ordering};

/// Linked code and data in memory owned by this value; given back to its arena on drop.
pub struct Module {
    arch: Arch,
    // What profilers, debuggers and the unwinder were told (see `elfjit_observe`); declared
    // before `memory` so that it is unregistered before the memory goes back to the arena.
    observed: Option<elfjit_observe::Registration>,
    // Kept alive for the addresses below; dropping it frees the image.
    memory: Backing,
    symbols: Symbols,
}

/// What holds a module's code and data. (The arena variant is the large one and the one
/// nearly every module uses: boxing it would cost an allocation per load.)
#[cfg_attr(feature = "dlopen-fallback", allow(clippy::large_enum_variant))]
enum Backing {
    /// The in-memory loader's memory, from an arena (kept alive by it).
    #[cfg_attr(feature = "dlopen-fallback", allow(dead_code))]
    Arena(ArenaBackend),
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

/// Takes a fresh process's one-time costs off its first [`Module::load`]: maps the pages of
/// the loader's own code ([`elfjit_os::prefault::code_around`] its parser, planner, linker
/// and arena), opens what symbol lookups read ([`ProcessResolver::prepare`]), makes the
/// process-wide arena's first chunk with its first pages of each class written and the
/// next ones faulted in ([`Arena::prepare`]), then links a small built-in object into that
/// arena and frees it, so that the first real load runs code that has run before (its
/// caches and branch predictors warm; the object is told to no profiler or debugger).
/// Call it at start-up, or while the first kernel compiles: it takes a few tenths of a
/// millisecond once; after it has succeeded, later calls return at once. An error is what
/// the first load would have met (the arena's).
///
/// It also starts a compile server for the clang [`Compiler::find`](crate::Compiler::find)
/// finds, on a thread of its own that this call does not wait for (see [`crate::route`]),
/// so that the first compile finds a warm compiler.
pub fn prepare() -> Result<()> {
    static PREPARED: AtomicBool = AtomicBool::new(false);
    if PREPARED.load(Ordering::Acquire) {
        return Ok(());
    }
    // First, so the server loads its libraries while the loader is warmed.
    crate::route::warm_in_background();
    let loader = [
        Module::load_objects_in as *const () as usize,
        link as *const () as usize,
        Plan::new as *const () as usize,
        ProcessResolver::lookup as *const () as usize,
        ArenaBackend::publish_all as *const () as usize,
    ];
    elfjit_os::prefault::code_around(&loader);
    ProcessResolver::prepare();
    let arena = Arena::process();
    arena.prepare().map_err(Error::Arena)?;
    warm_up(arena)?;
    PREPARED.store(true, Ordering::Release);
    Ok(())
}

/// Links [`crate::warmup`]'s object into `arena` and frees it, publishing it to no
/// observer (nothing runs it).
#[cfg(not(feature = "dlopen-fallback"))]
fn warm_up(arena: &Arena) -> Result<()> {
    // On a host elfjit does not link for, loads fail anyway: nothing to warm.
    let Some(host) = Arch::host() else {
        return Ok(());
    };
    let object = crate::warmup::object(host)
        .ok_or_else(|| Error::Unsupported(format!("writing the warm-up object for {host}")))?;
    let objects = [&object[..]];
    let plan = Plan::new(&objects, arena.page_size() as u64)?;
    let mut memory = arena.backend();
    link(&objects, &plan, &mut memory, &mut crate::warmup::resolve).map(drop)
}

/// The fallback loads through `dlopen`: the in-memory loader has nothing to warm.
#[cfg(feature = "dlopen-fallback")]
fn warm_up(_: &Arena) -> Result<()> {
    Ok(())
}

impl Module {
    /// Links one relocatable object for the host into the process-wide arena, resolving
    /// external symbols through the process (dlsym) and the Rust runtime's compiler-rt
    /// builtins.
    pub fn load(object: &[u8]) -> Result<Module> {
        Module::load_in(Arena::process(), object)
    }

    /// [`Module::load`] into `arena` (for example a packed one, [`Arena::packed`]).
    pub fn load_in(arena: &Arena, object: &[u8]) -> Result<Module> {
        Module::load_objects_in(arena, &[object], &mut |_| None)
    }

    /// Links several objects into one image (symbols resolve across them), consulting
    /// `resolver` before the process for each undefined symbol.
    pub fn load_objects(
        objects: &[&[u8]],
        resolver: &mut dyn FnMut(&str) -> Option<u64>,
    ) -> Result<Module> {
        Module::load_objects_in(Arena::process(), objects, resolver)
    }

    /// [`Module::load_objects`] into `arena`.
    pub fn load_objects_in(
        arena: &Arena,
        objects: &[&[u8]],
        resolver: &mut dyn FnMut(&str) -> Option<u64>,
    ) -> Result<Module> {
        // The plan's tables are on the heap, sized to the objects: a load needs little
        // stack (a few hundred bytes for the plan itself).
        let plan = Plan::new(objects, arena.page_size() as u64)?;
        let host = host_arch()?;
        check_arch(&plan, host)?;
        #[cfg(feature = "dlopen-fallback")]
        {
            let _ = arena;
            let loaded = crate::fallback::load(&plan, host, objects, resolver)?;
            Ok(Module {
                arch: host,
                // The dynamic linker tells debuggers and the unwinder about the library.
                observed: None,
                memory: Backing::Library(loaded.library, loaded.region),
                symbols: Symbols::from_map(loaded.symbols, loaded.functions),
            })
        }
        #[cfg(not(feature = "dlopen-fallback"))]
        {
            let mut memory = arena.backend();
            // Linking publishes a module of its own (not a batch member) before it returns.
            let linked = link(objects, &plan, &mut memory, resolver)?;
            Module::published(host, memory, linked)
        }
    }

    /// Links each object as a module of its own (each freed on its own), all into `arena`
    /// and published together: with a page-granular arena, two `mprotect`s per protection
    /// class (code, read-only data) for all of them, where loading them one by one costs
    /// four per module. If any fails, none is loaded and the arena is as it was.
    pub fn load_each_in(
        arena: &Arena,
        objects: &[&[u8]],
        resolver: &mut dyn FnMut(&str) -> Option<u64>,
    ) -> Result<Vec<Module>> {
        #[cfg(feature = "dlopen-fallback")]
        {
            objects
                .iter()
                .map(|o| Module::load_objects_in(arena, &[o], resolver))
                .collect()
        }
        #[cfg(not(feature = "dlopen-fallback"))]
        {
            let plans = objects
                .iter()
                .map(|object| Plan::new(std::slice::from_ref(object), arena.page_size() as u64))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let host = host_arch()?;
            for plan in &plans {
                check_arch(plan, host)?;
            }
            let layouts: Vec<_> = plans.iter().map(Plan::layout).collect();
            let mut backends = arena.allocate_batch(&layouts).map_err(Error::Arena)?;
            let mut linked = Vec::with_capacity(plans.len());
            for ((plan, memory), object) in plans.iter().zip(backends.iter_mut()).zip(objects) {
                linked.push(link(std::slice::from_ref(object), plan, memory, resolver)?);
            }
            ArenaBackend::publish_all(&mut backends).map_err(Error::Arena)?;
            // Observed only now that the batch is runnable; if one registration fails, the
            // modules made so far drop (registrations first) with the rest of the batch.
            backends
                .into_iter()
                .zip(linked)
                .map(|(memory, linked)| Module::published(host, memory, linked))
                .collect()
        }
    }

    /// A module of `memory`, published, told to the observers (perf map, jitdump, GDB,
    /// unwinder) that are on. Every load registers anew, so a module in a range the arena
    /// reuses gets its own perf-map line and jitdump record.
    #[cfg_attr(feature = "dlopen-fallback", allow(dead_code))]
    fn published(host: Arch, memory: ArenaBackend, linked: Linked<'_>) -> Result<Module> {
        let observed = match &linked.observe {
            // SAFETY: `memory` is published (its code and data mapped readable, no longer
            // written: the arena writes a range again only after it is given back, on the
            // backend's drop) and is kept in the module, which drops the registration first
            // (field order).
            Some(description) => Some(unsafe { elfjit_observe::publish(description)? }),
            None => None,
        };
        Ok(Module {
            arch: host,
            observed,
            memory: Backing::Arena(memory),
            symbols: linked.symbols,
        })
    }

    /// The arena holding the module (`None` for a dlopen-fallback module).
    pub fn arena(&self) -> Option<&Arena> {
        match &self.memory {
            Backing::Arena(memory) => Some(memory.arena()),
            #[cfg(feature = "dlopen-fallback")]
            Backing::Library(..) => None,
        }
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
        self.symbols.get(name).map(|a| a as usize as *const u8)
    }

    /// The defined global symbol `name` as a `T` (an `unsafe extern "C" fn` type for a
    /// function, a raw pointer for data), borrowing the module so that it cannot outlive
    /// it: see [`crate::symbol`]. A function type for a symbol that is not one of
    /// [`Module::functions`] is [`Error::UnknownEntry`], as is a name the module does not
    /// define.
    pub fn get<T: SymbolType>(&self, name: &str) -> Result<Symbol<'_, T>> {
        let unknown = || Error::UnknownEntry {
            name: name.to_string(),
            available: self.functions().to_vec(),
        };
        match self.symbols.lookup(name) {
            Some(found) if T::IS_FUNCTION && !found.is_function => Err(unknown()),
            // The symbol borrows `self` (the signature ties its lifetime to `&self`).
            Some(found) if found.address != 0 => {
                Ok(Symbol::new(found.address as usize as *const u8))
            }
            _ => Err(unknown()),
        }
    }

    /// The names of the global functions the module defines, in symbol-table order.
    pub fn functions(&self) -> &[String] {
        self.symbols.functions()
    }

    /// Where the module's code lies: its code segment's address and length (the shared
    /// library's mapping with dlopen-fallback); `(0, 0)` if it has no code.
    pub fn region(&self) -> (usize, usize) {
        match &self.memory {
            Backing::Arena(memory) => memory.segment(SegmentKind::Code).unwrap_or((0, 0)),
            #[cfg(feature = "dlopen-fallback")]
            Backing::Library(_, region) => *region,
        }
    }
}

/// The architecture this process runs on, if elfjit links for it.
fn host_arch() -> Result<Arch> {
    Arch::host()
        .ok_or_else(|| Error::Unsupported(format!("host architecture {}", std::env::consts::ARCH)))
}

/// An error unless `plan` is for `host`.
fn check_arch(plan: &Plan<'_>, host: Arch) -> Result<()> {
    if plan.arch() != host {
        return Err(Error::Unsupported(format!(
            "the object is for {}, but this host is {host}; load it on {0} or run it with \
             `elfjit run --target {0}`",
            plan.arch()
        )));
    }
    Ok(())
}

/// What linking a module yields for [`Module::published`].
#[cfg_attr(feature = "dlopen-fallback", allow(dead_code))]
struct Linked<'o> {
    symbols: Symbols,
    /// What to tell the observers once the memory is published (`None`: nothing is on and
    /// there is no `.eh_frame`; one atomic load).
    observe: Option<elfjit_observe::Published<'o>>,
}

/// The in-memory loader: `plan` (of `objects`) linked into `memory`; returns the global
/// symbols and what to tell the observers. An arena failure is reported in full (what ran
/// out, the size asked for, the limit).
#[cfg_attr(feature = "dlopen-fallback", allow(dead_code))]
fn link<'o>(
    objects: &[&'o [u8]],
    plan: &Plan<'_>,
    memory: &mut ArenaBackend,
    resolver: &mut dyn FnMut(&str) -> Option<u64>,
) -> Result<Linked<'o>> {
    let image = match plan.link(memory, &mut Chain { first: resolver }) {
        Ok(image) => image,
        Err(e @ elfjit_core::Error::Backend(_)) => {
            return Err(memory.error().copied().map_or(Error::Link(e), Error::Arena))
        }
        Err(e) => return Err(Error::Link(e)),
    };
    // At most one entry per symbol table entry; `finish` gives back what is not used.
    let table = plan.sizes().symbols;
    let mut symbols = SymbolsBuilder::with_capacity(table, table.saturating_mul(16));
    for global in image.global_entries() {
        symbols.push_global(&global);
    }
    let observe = elfjit_observe::describe_image("module", objects, &image)?;
    Ok(Linked {
        symbols: symbols.finish(),
        observe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clang::{CompileOptions, Lang};
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
        crate::test_objects::driver_object(SMALL, &CompileOptions::new(Lang::C, host))
    }

    /// The warm-up object is linked and published into the arena it is given, then freed:
    /// no module is left, its pages are pooled for the next load.
    #[cfg(not(feature = "dlopen-fallback"))]
    #[test]
    fn the_warm_up_links_publishes_and_frees_its_object() {
        let arena = Arena::new();
        warm_up(&arena).expect("warm up");
        let stats = arena.stats();
        assert_eq!((stats.chunks, stats.modules, stats.held), (1, 0, 0));
        assert!(stats.pooled > 0, "{stats:?}");
        assert!(stats.protect_calls >= 2, "published: {stats:?}");
        // A real load after it runs.
        let object = small_object();
        let module = Module::load_in(&arena, &object).expect("load");
        assert!(module.symbol("kernel").is_some());
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
