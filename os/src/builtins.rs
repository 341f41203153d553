//! Compiler-rt helpers clang calls from kernels (128-bit arithmetic, half-precision and
//! bfloat16 conversions, ...) that a process does not always export. Rust links its own
//! copies (the `compiler_builtins` crate) into every program; taking their addresses here
//! makes them available to kernels even when `dlsym` cannot see them.

/// Declares the helpers `$name...` and a function `$list` returning their `(name,
/// address)` pairs.
macro_rules! builtin_list {
    ($list:ident: $($name:ident),* $(,)?) => {
        fn $list() -> Vec<(&'static str, usize)> {
            extern "C" {
                $(fn $name();)*
            }
            vec![$((stringify!($name), $name as unsafe extern "C" fn() as usize)),*]
        }
    };
}

/// `(name, address)` of every helper taken from the Rust runtime.
pub fn table() -> &'static [(&'static str, usize)] {
    static TABLE: std::sync::OnceLock<Vec<(&'static str, usize)>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = helpers();
        t.extend(gnu_aliases());
        t.extend(extra());
        t.sort_unstable_by_key(|&(name, _)| name);
        t
    })
}

// Only addresses are taken: the declared signatures are never called from Rust.
builtin_list!(
    helpers:
    __udivti3,
    __divti3,
    __umodti3,
    __modti3,
    __udivmodti4,
    __multi3,
    __muloti4,
    __ashlti3,
    __ashrti3,
    __lshrti3,
    __floattisf,
    __floattidf,
    __floatuntisf,
    __floatuntidf,
    __fixsfti,
    __fixdfti,
    __fixunssfti,
    __fixunsdfti,
    __extendhfsf2,
    __truncsfhf2,
    __truncdfhf2,
    __extendhfdf2,
    __powisf2,
    __powidf2,
);

// The GNU names of the half-precision conversions, which Rust's runtime defines for ELF
// targets only.
#[cfg(not(any(windows, target_vendor = "apple")))]
builtin_list!(gnu_aliases: __gnu_h2f_ieee, __gnu_f2h_ieee);

/// The GNU half-precision names: not in Rust's runtime on Windows and Apple targets.
#[cfg(any(windows, target_vendor = "apple"))]
fn gnu_aliases() -> Vec<(&'static str, usize)> {
    Vec::new()
}

/// Helpers Rust's runtime lacks, written here.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn extra() -> Vec<(&'static str, usize)> {
    vec![
        (
            "__truncsfbf2",
            bf16::truncsfbf2 as extern "C" fn(f32) -> f32 as usize,
        ),
        (
            "__truncdfbf2",
            bf16::truncdfbf2 as extern "C" fn(f64) -> f32 as usize,
        ),
    ]
}

/// Helpers Rust's runtime lacks: none written for this architecture.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn extra() -> Vec<(&'static str, usize)> {
    Vec::new()
}

/// `__bf16` results of `__truncsfbf2`/`__truncdfbf2`. On x86_64 and aarch64 a `__bf16` is
/// returned in the low 16 bits of the first vector register, exactly where an `f32`
/// return's low bits go, so these return an `f32` whose bit pattern holds the result.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub mod bf16 {
    /// Rounds an f32 to bfloat16 bits (round to nearest even; NaN stays NaN).
    pub fn bits_from_f32(x: f32) -> u16 {
        let b = x.to_bits();
        if x.is_nan() {
            return ((b >> 16) as u16) | 0x0040;
        }
        let round = 0x7fff + ((b >> 16) & 1);
        (b.wrapping_add(round) >> 16) as u16
    }

    /// `__truncsfbf2`: f32 → bf16.
    pub extern "C" fn truncsfbf2(x: f32) -> f32 {
        f32::from_bits(u32::from(bits_from_f32(x)))
    }

    /// `__truncdfbf2`: f64 → bf16, rounding once (through an f32 rounded to odd, which
    /// keeps the second rounding exact).
    pub extern "C" fn truncdfbf2(x: f64) -> f32 {
        let narrowed = x as f32;
        let odd = if (narrowed as f64) != x && narrowed.is_finite() {
            f32::from_bits(narrowed.to_bits() | 1)
        } else {
            narrowed
        };
        f32::from_bits(u32::from(bits_from_f32(odd)))
    }
}

/// The address of helper `name`, if the Rust runtime (or this crate) provides it.
pub fn lookup(name: &[u8]) -> Option<usize> {
    let table = table();
    let i = table
        .binary_search_by(|(n, _)| n.as_bytes().cmp(name))
        .ok()?;
    table.get(i).map(|&(_, addr)| addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_are_present() {
        for name in ["__udivti3", "__extendhfsf2", "__truncsfhf2", "__divti3"] {
            assert!(lookup(name.as_bytes()).is_some_and(|a| a != 0), "{name}");
        }
        assert_eq!(lookup(b"__no_such_helper"), None);
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn bf16_rounding() {
        use bf16::bits_from_f32;
        assert_eq!(bits_from_f32(1.0), 0x3f80);
        assert_eq!(bits_from_f32(-2.0), 0xc000);
        // 1 + 2^-8 is halfway between two bf16 values: ties to even (down).
        assert_eq!(bits_from_f32(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(bits_from_f32(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert!(bits_from_f32(f32::NAN) & 0x7f80 == 0x7f80);
        assert_eq!(bits_from_f32(f32::INFINITY), 0x7f80);
        assert_eq!(bf16::truncdfbf2(1.0).to_bits(), 0x3f80);
        assert_eq!(bf16::truncdfbf2(1e300).to_bits(), 0x7f80);
        assert_eq!(bf16::truncdfbf2(-1e300).to_bits(), 0xff80);
        assert!(bf16::truncdfbf2(f64::NAN).to_bits() & 0x7fc0 == 0x7fc0);
        // Just above the halfway point between two bf16 values: a double rounding through
        // f32 alone would tie to even; rounding to odd keeps it going up.
        let above_half = f64::from_bits(0x3ff0_1000_0000_0001);
        assert_eq!(bf16::truncdfbf2(above_half).to_bits(), 0x3f81);
    }
}
