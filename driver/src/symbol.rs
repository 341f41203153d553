//! Typed symbols: a loaded function or variable as a Rust type, borrowing its
//! [`Module`](crate::Module) (the convention of `libloading::Symbol<'lib, T>`).
//!
//! ```
//! use elfjit::{Arch, CompileOptions, Compiler, Lang, Module, Symbol};
//!
//! let clang = Compiler::find()?;
//! let opts = CompileOptions::new(Lang::C, Arch::host().ok_or("unsupported host")?);
//! let object = clang.compile(b"int twice(int x) { return 2 * x; }", &opts)?;
//! let module = Module::load(&object)?;
//! let twice: Symbol<'_, unsafe extern "C" fn(i32) -> i32> = module.get("twice")?;
//! // SAFETY: `twice` is `int twice(int)`, and `module` is alive for the call.
//! assert_eq!(unsafe { twice(21) }, 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A [`Symbol`] cannot outlive its module: the borrow checker refuses to drop the
//! module while a symbol of it is alive.
//!
//! ```compile_fail,E0505
//! # use elfjit::{Module, Symbol};
//! # fn f(module: Module) -> Result<(), elfjit::Error> {
//! let twice: Symbol<'_, unsafe extern "C" fn(i32) -> i32> = module.get("twice")?;
//! drop(module); // error: `module` is still borrowed by `twice`
//! unsafe { twice(1) };
//! # Ok(()) }
//! ```
//!
//! Only types that cannot be misused from safe code can be asked for ([`SymbolType`]):
//! `unsafe extern "C" fn` pointers, so that every call is an `unsafe` block whose
//! author vouches for the signature, and raw pointers to data. A safe `extern "C" fn`
//! type is refused at compile time:
//!
//! ```compile_fail,E0277
//! # fn f(module: &elfjit::Module) -> Result<(), elfjit::Error> {
//! let twice = module.get::<extern "C" fn(i32) -> i32>("twice")?;
//! # Ok(()) }
//! ```
//!
//! As with libloading, copying the pointer out of the symbol (`let f = *twice;`) leaves
//! the borrow behind: the copy is as valid as the module, which the compiler no longer
//! checks.

use std::marker::PhantomData;
use std::ops::Deref;

mod sealed {
    /// Only the types below are [`super::SymbolType`]s.
    pub trait Sealed {}
}

/// A type a symbol's address can be read as through [`Module::get`](crate::Module::get): an
/// `unsafe extern "C" fn` pointer of up to 12 arguments, or a raw pointer to data.
/// Sealed: no other type can claim to be made from an address.
pub trait SymbolType: Copy + sealed::Sealed {
    /// Whether the symbol must be one of the module's functions
    /// ([`Module::functions`](crate::Module::functions)).
    const IS_FUNCTION: bool;

    /// The value at `address`, a non-zero address of a symbol in a live module.
    #[doc(hidden)]
    fn from_address(address: usize) -> Self;
}

impl<U> sealed::Sealed for *const U {}
impl<U> SymbolType for *const U {
    const IS_FUNCTION: bool = false;
    fn from_address(address: usize) -> Self {
        address as *const U
    }
}

impl<U> sealed::Sealed for *mut U {}
impl<U> SymbolType for *mut U {
    const IS_FUNCTION: bool = false;
    fn from_address(address: usize) -> Self {
        address as *mut U
    }
}

/// `SymbolType` for `unsafe extern "C" fn(A, B, ...) -> R` of each arity.
macro_rules! function_types {
    ($($arg:ident),*) => {
        impl<R, $($arg),*> sealed::Sealed for unsafe extern "C" fn($($arg),*) -> R {}
        impl<R, $($arg),*> SymbolType for unsafe extern "C" fn($($arg),*) -> R {
            const IS_FUNCTION: bool = true;
            fn from_address(address: usize) -> Self {
                // SAFETY: a function pointer has the size and representation of an
                // address (every target elfjit supports), `address` is non-zero (checked
                // by `Module::get`), and it is the entry of a function in a live module.
                // Making the pointer is safe; calling it is `unsafe`, and that is where
                // its caller vouches for the signature.
                unsafe { std::mem::transmute::<usize, Self>(address) }
            }
        }
    };
}

function_types!();
function_types!(A);
function_types!(A, B);
function_types!(A, B, C);
function_types!(A, B, C, D);
function_types!(A, B, C, D, E);
function_types!(A, B, C, D, E, F);
function_types!(A, B, C, D, E, F, G);
function_types!(A, B, C, D, E, F, G, H);
function_types!(A, B, C, D, E, F, G, H, I);
function_types!(A, B, C, D, E, F, G, H, I, J);
function_types!(A, B, C, D, E, F, G, H, I, J, K);
function_types!(A, B, C, D, E, F, G, H, I, J, K, L);

/// A symbol of a [`Module`](crate::Module) as a `T`, borrowing the module: it dereferences
/// to the function pointer (or data pointer) and cannot outlive the code it points into.
///
/// `'m` is the borrow of the module that [`Module::get`](crate::Module::get) hands out
/// (this file names no `Module`, so the two files import in one direction only).
pub struct Symbol<'m, T: SymbolType> {
    value: T,
    address: *const u8,
    module: PhantomData<&'m ()>,
}

impl<'m, T: SymbolType> Symbol<'m, T> {
    /// `address` of a symbol of the module borrowed for `'m`, as a `T`; `address` is
    /// non-zero.
    pub(crate) fn new(address: *const u8) -> Symbol<'m, T> {
        Symbol {
            value: T::from_address(address as usize),
            address,
            module: PhantomData,
        }
    }

    /// The symbol's address (what [`Module::symbol`](crate::Module::symbol) returns).
    pub fn address(&self) -> *const u8 {
        self.address
    }
}

impl<T: SymbolType> Deref for Symbol<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: SymbolType> std::fmt::Debug for Symbol<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbol")
            .field("address", &self.address)
            .finish()
    }
}

// SAFETY: a Symbol is an address into a module, which is itself Send + Sync; the pointer
// types it holds are not Send/Sync only because of what they may point to, and calling
// or dereferencing them is `unsafe` wherever the symbol is.
unsafe impl<T: SymbolType> Send for Symbol<'_, T> {}
// SAFETY: as for Send: shared access only reads the address.
unsafe impl<T: SymbolType> Sync for Symbol<'_, T> {}
