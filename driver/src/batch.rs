//! Batches: many C kernels compiled by one clang run (one translation unit) and linked
//! into one image, each callable by name.
//!
//! One clang process costs tens of milliseconds however little it compiles; a batch pays
//! it once for all its kernels.
//!
//! **C only.** The kernels' sources are concatenated into one translation unit, each
//! preceded by a `#line 1 "NAME"` directive, so clang's diagnostics name the kernel they
//! are about. Concatenation has C's rules, and elfjit does not rewrite anyone's code:
//!
//! - every kernel's entry function, and every other external name, must be distinct
//!   across the batch;
//! - `static` helpers and file-scope variables share one file scope too: two kernels
//!   defining `static float relu(float)` is a redefinition error. Give helpers
//!   per-kernel names (a beam search generating variants can prefix them), or mark
//!   identical helpers `static inline` in a shared prelude ([`Batch::prelude`]);
//! - macros defined by one kernel stay defined for those after it (`#undef` them).
//!
//! A clang error in a batch fails the whole batch ([`crate::CompileError::ClangFailed`], with
//! the kernel named by the `#line` markers); [`crate::parallel`] compiles kernels
//! separately when one bad kernel must not sink the others.
//!
//! LLVM IR modules cannot be concatenated as text (duplicate declarations, attribute
//! group and metadata numbering), and clang links no IR modules on the way to one object:
//! [`Batch`] refuses IR ([`crate::Error::Unsupported`]).

use crate::cache::{Cache, CacheStatus};
use crate::clang::{CompileOptions, Compiler, Lang};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::parallel::{compile_sources, worker_count, ParallelOptions};
use elfjit_os::Arena;
use std::num::NonZeroUsize;

/// C kernels to compile as one translation unit. Each has a name: the function it
/// defines, which callers look up in the loaded [`Module`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    prelude: String,
    kernels: Vec<(String, String)>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Text placed once before every kernel (shared `#include`s, `static inline`
    /// helpers, typedefs).
    pub fn prelude(mut self, text: impl Into<String>) -> Batch {
        self.prelude = text.into();
        self
    }

    /// Adds a kernel whose source defines the global function `name`. The name must be a
    /// C identifier, unique in the batch.
    pub fn add(&mut self, name: impl Into<String>, source: impl Into<String>) -> Result<()> {
        let name = name.into();
        let bad = |reason: String| Error::BadArgument {
            what: "batch kernel name".to_string(),
            reason,
        };
        let mut chars = name.chars();
        let identifier = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(bad(format!("`{name}` is not a C identifier")));
        }
        if self.kernels.iter().any(|(n, _)| *n == name) {
            return Err(bad(format!("`{name}` is in the batch twice")));
        }
        self.kernels.push((name, source.into()));
        Ok(())
    }

    /// The kernels' names, in the order they were added.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kernels.iter().map(|(n, _)| n.as_str())
    }

    /// How many kernels the batch holds.
    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    /// Whether the batch holds no kernel.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// The translation unit clang compiles: the prelude, then each kernel after a
    /// `#line 1 "NAME"` marker.
    pub fn source(&self) -> String {
        let mut s = String::with_capacity(
            self.prelude.len()
                + self
                    .kernels
                    .iter()
                    .map(|(n, k)| n.len() + k.len() + 16)
                    .sum::<usize>(),
        );
        if !self.prelude.is_empty() {
            s.push_str("#line 1 \"prelude\"\n");
            s.push_str(&self.prelude);
            s.push('\n');
        }
        for (name, source) in &self.kernels {
            s.push_str(&format!("#line 1 \"{name}\"\n"));
            s.push_str(source);
            s.push('\n');
        }
        s
    }

    fn check(&self, opts: &CompileOptions) -> Result<()> {
        if opts.lang != Lang::C {
            return Err(Error::Unsupported(
                "batches of LLVM IR: only C kernels can share one translation unit; compile \
                 IR kernels one by one (elfjit::parallel) or link them with llvm-link first"
                    .to_string(),
            ));
        }
        if self.kernels.is_empty() {
            return Err(Error::BadArgument {
                what: "batch".to_string(),
                reason: "no kernels".to_string(),
            });
        }
        Ok(())
    }

    /// Compiles the batch with one clang run into one object.
    pub fn compile(&self, compiler: &Compiler, opts: &CompileOptions) -> Result<Vec<u8>> {
        self.check(opts)?;
        Ok(compiler.compile(self.source().as_bytes(), opts)?)
    }

    /// [`Batch::compile`] through a [`Cache`] (the key covers the whole translation unit).
    pub fn compile_cached(
        &self,
        compiler: &Compiler,
        opts: &CompileOptions,
        cache: &Cache,
    ) -> Result<(Vec<u8>, CacheStatus)> {
        self.check(opts)?;
        Ok(cache.compile(compiler, self.source().as_bytes(), opts)?)
    }

    /// Links a batch object (from [`Batch::compile`]) into memory and checks that every
    /// kernel's function is there: then `module.symbol(name)` finds each. The batch is one
    /// image, published once (one protection change per class, one cache flush).
    pub fn load(&self, object: &[u8]) -> Result<Module> {
        self.check_loaded(Module::load(object)?)
    }

    /// [`Batch::load`] into `arena` instead of the process-wide one.
    pub fn load_in(&self, arena: &Arena, object: &[u8]) -> Result<Module> {
        self.check_loaded(Module::load_in(arena, object)?)
    }

    /// Compile and load: one clang run, one image.
    pub fn build(&self, compiler: &Compiler, opts: &CompileOptions) -> Result<Module> {
        self.load(&self.compile(compiler, opts)?)
    }

    /// Compile and load with one clang run per core: the kernels are split, in order,
    /// into `parts` translation units (by default one per core, see
    /// [`crate::parallel::worker_count`]), each with the prelude, compiled at the same time
    /// and linked into **one** image, every kernel callable by name as with
    /// [`Batch::build`].
    ///
    /// One clang run costs about as much per kernel whatever runs beside it, so a large
    /// batch is bounded by the compile work of its kernels; splitting it spreads that work
    /// over the cores. A batch that compiles as one translation unit also compiles split
    /// (the parts are subsets of it); the reverse is not checked: two parts may define the
    /// same external name, which [`Batch::build`] would report as a redefinition.
    pub fn build_split(
        &self,
        compiler: &Compiler,
        opts: &CompileOptions,
        parts: Option<NonZeroUsize>,
    ) -> Result<Module> {
        self.check(opts)?;
        let options = ParallelOptions {
            workers: parts,
            cache: None,
        };
        let parts = worker_count(&options, self.kernels.len());
        let per_part = self.kernels.len().div_ceil(parts);
        let sources: Vec<String> = self
            .kernels
            .chunks(per_part)
            .map(|chunk| {
                Batch {
                    prelude: self.prelude.clone(),
                    kernels: chunk.to_vec(),
                }
                .source()
            })
            .collect();
        let objects = compile_sources(compiler, &sources, opts, NonZeroUsize::new(parts))
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&[u8]> = objects.iter().map(Vec::as_slice).collect();
        self.check_loaded(Module::load_objects(&refs, &mut |_| None)?)
    }

    /// `module`, if every kernel's function is in it.
    fn check_loaded(&self, module: Module) -> Result<Module> {
        for (name, _) in &self.kernels {
            if !module.functions().iter().any(|f| f == name) {
                return Err(Error::UnknownEntry {
                    name: name.clone(),
                    available: module.functions().to_vec(),
                });
            }
        }
        Ok(module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_identifiers_and_unique() {
        let mut b = Batch::new();
        b.add("k_0", "int k_0(void) { return 0; }").unwrap();
        assert!(b.add("k_0", "").is_err());
        for bad in ["", "0k", "k-1", "k 1", "k\"", "ké"] {
            let e = b.add(bad, "").unwrap_err();
            assert!(e.to_string().contains("not a C identifier"), "{e}");
        }
        assert_eq!(b.len(), 1);
        assert_eq!(b.names().collect::<Vec<_>>(), ["k_0"]);
    }

    #[test]
    fn source_marks_each_kernel() {
        let mut b = Batch::new().prelude("typedef float f32;");
        b.add("a", "f32 a(void) { return 1; }").unwrap();
        b.add("b", "f32 b(void) { return 2; }").unwrap();
        let s = b.source();
        assert!(s.starts_with("#line 1 \"prelude\"\ntypedef float f32;\n"));
        assert!(s.contains("#line 1 \"a\"\nf32 a(void) { return 1; }\n#line 1 \"b\"\n"));
    }

    #[test]
    fn ir_and_empty_batches_are_refused() {
        let mut b = Batch::new();
        assert!(matches!(
            b.check(&CompileOptions::new(Lang::C, elfjit_core::Arch::X86_64)),
            Err(Error::BadArgument { .. })
        ));
        b.add("f", "void f(void) {}").unwrap();
        assert!(matches!(
            b.check(&CompileOptions::new(Lang::Ir, elfjit_core::Arch::X86_64)),
            Err(Error::Unsupported(_))
        ));
    }
}
