//! The few JSON pieces `elfjit run --json` prints, written by hand.
//!
//! Numbers are printed as Rust's shortest round-trip decimal (`f32` values with `f32`'s
//! digits, so `0.1f32` prints `0.1`, not `0.10000000149011612`), which is always a valid
//! JSON number (`1`, never `1.`). Like JavaScript's `Number.prototype.toString`, magnitudes
//! from 1e-7 up to 1e21 are written positionally and the rest in exponent form (`1e30`,
//! `1.7976931348623157e308`, `5e-324`): still shortest round-trip, and short, where plain
//! digits would run to 300+ characters that some parsers (serde_json without its
//! `float_roundtrip` feature, for one) reject as out of range. JSON has no NaN or
//! infinities, so those are the strings `"nan"`, `"inf"` and `"-inf"`.

use crate::args::{ArgOutcome, Scalar};
use std::io::{self, Write};

/// `s` as a JSON string literal, quotes included.
pub fn string(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len() + 2);
    let _ = write_string(&mut out, s);
    String::from_utf8(out).unwrap_or_default()
}

/// Writes `s` as a JSON string literal, quotes included.
pub fn write_string(w: &mut dyn Write, s: &str) -> io::Result<()> {
    w.write_all(b"\"")?;
    let mut plain = 0; // start of the run of characters needing no escape
    for (i, c) in s.char_indices() {
        let escape: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{08}' => Some("\\b"),
            '\u{0c}' => Some("\\f"),
            _ => None,
        };
        let unicode = (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{2028}' || c == '\u{2029}';
        if escape.is_none() && !unicode {
            continue;
        }
        w.write_all(s.get(plain..i).unwrap_or_default().as_bytes())?;
        match escape {
            Some(e) => w.write_all(e.as_bytes())?,
            None => write!(w, "\\u{:04x}", c as u32)?,
        }
        plain = i + c.len_utf8();
    }
    w.write_all(s.get(plain..).unwrap_or_default().as_bytes())?;
    w.write_all(b"\"")
}

fn non_finite(nan: bool, negative: bool) -> &'static str {
    if nan {
        "\"nan\""
    } else if negative {
        "\"-inf\""
    } else {
        "\"inf\""
    }
}

/// Whether a finite magnitude is written positionally (else in exponent form).
fn positional(abs: f64) -> bool {
    abs == 0.0 || (1e-7..1e21).contains(&abs)
}

/// An `f64` as a JSON value (a number, or `"nan"` / `"inf"` / `"-inf"`).
pub fn f64_value(v: f64) -> String {
    let mut out = Vec::new();
    let _ = write_scalar(&mut out, Scalar::F64(v));
    String::from_utf8(out).unwrap_or_default()
}

/// An `f32` as a JSON value, with `f32`'s shortest round-trip digits.
pub fn f32_value(v: f32) -> String {
    let mut out = Vec::new();
    let _ = write_scalar(&mut out, Scalar::F32(v));
    String::from_utf8(out).unwrap_or_default()
}

/// A scalar as a JSON value: integers exactly, floats as [`f32_value`] / [`f64_value`].
pub fn scalar(s: Scalar) -> String {
    let mut out = Vec::new();
    let _ = write_scalar(&mut out, s);
    String::from_utf8(out).unwrap_or_default()
}

/// Writes a scalar as [`scalar`] formats it, without building a string.
pub fn write_scalar(w: &mut dyn Write, s: Scalar) -> io::Result<()> {
    match s {
        Scalar::F32(v) if !v.is_finite() => w.write_all(non_finite(v.is_nan(), v < 0.0).as_bytes()),
        Scalar::F64(v) if !v.is_finite() => w.write_all(non_finite(v.is_nan(), v < 0.0).as_bytes()),
        Scalar::F32(v) if positional(f64::from(v.abs())) => write!(w, "{v}"),
        Scalar::F32(v) => write!(w, "{v:e}"),
        Scalar::F64(v) if positional(v.abs()) => write!(w, "{v}"),
        Scalar::F64(v) => write!(w, "{v:e}"),
        other => write!(w, "{other}"),
    }
}

/// An argument after the call: a scalar, or an array of a buffer's values.
pub fn arg_outcome(a: &ArgOutcome) -> String {
    let mut out = Vec::new();
    let _ = write_arg_outcome(&mut out, a);
    String::from_utf8(out).unwrap_or_default()
}

/// Writes [`arg_outcome`]'s text, one element at a time: a buffer is never copied into
/// values or strings first.
pub fn write_arg_outcome(w: &mut dyn Write, a: &ArgOutcome) -> io::Result<()> {
    match a {
        ArgOutcome::Scalar(s) => write_scalar(w, *s),
        ArgOutcome::Buffer(values) => {
            w.write_all(b"[")?;
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    w.write_all(b", ")?;
                }
                write_scalar(w, v)?;
            }
            w.write_all(b"]")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Buffer, ScalarType};
    use serde_json::Value;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap_or_else(|e| panic!("{s:?} is not JSON: {e}"))
    }

    #[test]
    fn strings_escape() {
        for s in [
            "",
            "plain",
            "quote\"back\\slash",
            "ctl\u{1}\u{1f}\n\t\r\u{8}\u{c}",
            "ünï ☃ \u{2028}",
            "\u{7f}",
        ] {
            assert_eq!(parse(&string(s)), Value::String(s.to_string()));
        }
    }

    #[test]
    fn floats_are_valid_numbers() {
        for v in [
            0.0f64,
            -0.0,
            1.0,
            -1.5,
            0.1,
            1e30,
            -1e300,
            5e-324,
            1e-7,
            9.99e-8,
            1e21,
            9.99e20,
            f64::MAX,
            f64::MIN_POSITIVE,
            123456789.125,
        ] {
            let s = f64_value(v);
            let parsed = parse(&s).as_f64().unwrap();
            assert!(parsed == v || ((parsed - v) / v).abs() < 1e-15, "{s}");
            // Shortest round-trip: Rust reads back the very same value.
            assert_eq!(s.parse::<f64>().unwrap().to_bits(), v.to_bits(), "{s}");
            assert!(s.len() <= 24, "{s}");
        }
        for v in [
            1.0f32,
            0.1,
            1e30,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-45,
            -3.25,
            16777216.0,
        ] {
            let s = f32_value(v);
            assert!(parse(&s).is_number(), "{s}");
            assert_eq!(s.parse::<f32>().unwrap(), v, "{s}");
        }
        assert_eq!(f32_value(0.1), "0.1");
        assert_eq!(f32_value(1e30), "1e30");
        assert_eq!(f64_value(1.0), "1");
        assert_eq!(f64_value(-0.0), "-0");
        assert_eq!(f64_value(1e20), "100000000000000000000");
        assert_eq!(f64_value(f64::MAX), "1.7976931348623157e308");
        assert_eq!(f32_value(f32::NAN), "\"nan\"");
        assert_eq!(f64_value(f64::INFINITY), "\"inf\"");
        assert_eq!(f64_value(f64::NEG_INFINITY), "\"-inf\"");
    }

    #[test]
    fn scalars_and_buffers() {
        assert_eq!(scalar(Scalar::U64(u64::MAX)), "18446744073709551615");
        assert_eq!(scalar(Scalar::I8(-128)), "-128");
        let b = ArgOutcome::Buffer(
            Buffer::from_values(
                ScalarType::F32,
                &[Scalar::F32(1.0), Scalar::F32(f32::NAN), Scalar::F32(2.5)],
            )
            .unwrap(),
        );
        let v = parse(&arg_outcome(&b));
        assert_eq!(v, serde_json::json!([1, "nan", 2.5]));
        assert_eq!(
            parse(&arg_outcome(&ArgOutcome::Buffer(
                Buffer::zeroed(ScalarType::U8, 0).unwrap()
            ))),
            serde_json::json!([])
        );
    }
}
