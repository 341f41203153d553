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
use std::fmt::Write;

/// `s` as a JSON string literal, quotes included.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn non_finite(nan: bool, negative: bool) -> String {
    string(if nan {
        "nan"
    } else if negative {
        "-inf"
    } else {
        "inf"
    })
}

/// Whether a finite magnitude is written positionally (else in exponent form).
fn positional(abs: f64) -> bool {
    abs == 0.0 || (1e-7..1e21).contains(&abs)
}

/// An `f64` as a JSON value (a number, or `"nan"` / `"inf"` / `"-inf"`).
pub fn f64_value(v: f64) -> String {
    if v.is_finite() {
        if positional(v.abs()) {
            format!("{v}")
        } else {
            format!("{v:e}")
        }
    } else {
        non_finite(v.is_nan(), v < 0.0)
    }
}

/// An `f32` as a JSON value, with `f32`'s shortest round-trip digits.
pub fn f32_value(v: f32) -> String {
    if v.is_finite() {
        if positional(f64::from(v.abs())) {
            format!("{v}")
        } else {
            format!("{v:e}")
        }
    } else {
        non_finite(v.is_nan(), v < 0.0)
    }
}

/// A scalar as a JSON value: integers exactly, floats as [`f32_value`] / [`f64_value`].
pub fn scalar(s: Scalar) -> String {
    match s {
        Scalar::F32(v) => f32_value(v),
        Scalar::F64(v) => f64_value(v),
        other => other.to_string(),
    }
}

/// An argument after the call: a scalar, or an array of a buffer's values.
pub fn arg_outcome(a: &ArgOutcome) -> String {
    match a {
        ArgOutcome::Scalar(s) => scalar(*s),
        ArgOutcome::Buffer(values) => {
            let mut out = String::with_capacity(values.len() * 8 + 2);
            out.push('[');
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&scalar(*v));
            }
            out.push(']');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let b = ArgOutcome::Buffer(vec![
            Scalar::F32(1.0),
            Scalar::F32(f32::NAN),
            Scalar::F32(2.5),
        ]);
        let v = parse(&arg_outcome(&b));
        assert_eq!(v, serde_json::json!([1, "nan", 2.5]));
        assert_eq!(
            parse(&arg_outcome(&ArgOutcome::Buffer(vec![]))),
            serde_json::json!([])
        );
    }
}
