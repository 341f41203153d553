#![no_std]
pub mod arch;
pub use arch::Arch;
#[derive(Debug)]
pub struct Error;
impl core::fmt::Display for Error { fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result { f.write_str("placeholder") } }
