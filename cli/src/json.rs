//! `elfjit run --json`: exactly one JSON object, written with serde_json as it goes.
//!
//! ```text
//! {"target": "x86_64", "entry": "add", "return": 42, "args": [2, 40], "timings_us": {"compile": 36812.5, "load": 19.1, "call": 0.1}}
//! ```
//!
//! The contract, kept byte for byte from the hand-written printer this replaced:
//! - keys in this order: `target`, `entry`, `return` (`null` for `void`), `args` (each a
//!   scalar as given or an array of a buffer's elements after the call), `cache`
//!   (`"hit"`/`"miss"`, only for `run --cache`), `compiler` (what compiled the kernel:
//!   `{"kind": "server", "pid": N, "binary": "..."}` or `{"kind": "spawn", "reason":
//!   "..."}`; absent on a cache hit), `timings_us` (`compile`, `load`, `call`);
//! - `", "` between elements and `": "` after keys, on one line ([`Spaced`]);
//! - numbers as Rust's shortest round-trip decimal: `f32` values with `f32`'s digits, so
//!   `0.1f32` prints `0.1`, not `0.10000000149011612`, and integral floats without a
//!   fraction (`1`, not serde_json's `1.0`). Like JavaScript's
//!   `Number.prototype.toString`, magnitudes from 1e-7 up to 1e21 are written positionally
//!   and the rest in exponent form (`1e30`, `1.7976931348623157e308`, `5e-324`): still
//!   shortest round-trip, and short, where plain digits would run to 300+ characters that
//!   some parsers (serde_json without its `float_roundtrip` feature, for one) reject as
//!   out of range;
//! - JSON has no NaN or infinities: those are the strings `"nan"`, `"inf"` and `"-inf"`;
//! - strings escape what serde_json escapes, and also DEL, U+2028 and U+2029 (`\u007f`,
//!   `\u2028`, `\u2029`), which some JavaScript parsers mishandle raw.
//!
//! A buffer is serialized element by element, straight to the output: never held as text
//! or as a list of values.

use elfjit::args::{ArgOutcome, Buffer, Scalar};
use elfjit::cache::CacheStatus;
use elfjit::route::CompiledBy;
use elfjit::run::RunOutcome;
use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;
use std::io::{self, Write};
use std::time::Duration;

/// serde_json's compact output with a space after `,` and `:`, floats in the contract's
/// notation and a few more characters escaped (see the module documentation).
pub struct Spaced;

/// Whether a finite magnitude is written positionally (else in exponent form).
fn positional(abs: f64) -> bool {
    abs == 0.0 || (1e-7..1e21).contains(&abs)
}

impl serde_json::ser::Formatter for Spaced {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    // serde_json hands only finite values to these (non-finite ones are strings here).
    fn write_f32<W: ?Sized + Write>(&mut self, w: &mut W, v: f32) -> io::Result<()> {
        if positional(f64::from(v.abs())) {
            write!(w, "{v}")
        } else {
            write!(w, "{v:e}")
        }
    }

    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, v: f64) -> io::Result<()> {
        if positional(v.abs()) {
            write!(w, "{v}")
        } else {
            write!(w, "{v:e}")
        }
    }

    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut plain = 0; // start of the run of characters written as they are
        for (i, c) in fragment.char_indices() {
            if matches!(c, '\u{7f}' | '\u{2028}' | '\u{2029}') {
                w.write_all(fragment.get(plain..i).unwrap_or_default().as_bytes())?;
                write!(w, "\\u{:04x}", c as u32)?;
                plain = i + c.len_utf8();
            }
        }
        w.write_all(fragment.get(plain..).unwrap_or_default().as_bytes())
    }
}

/// A scalar as a JSON value: integers exactly, finite floats as numbers, NaN and the
/// infinities as strings.
struct Value(Scalar);

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fn non_finite(nan: bool, negative: bool) -> &'static str {
            match (nan, negative) {
                (true, _) => "nan",
                (false, true) => "-inf",
                (false, false) => "inf",
            }
        }
        match self.0 {
            Scalar::I8(v) => s.serialize_i8(v),
            Scalar::U8(v) => s.serialize_u8(v),
            Scalar::I16(v) => s.serialize_i16(v),
            Scalar::U16(v) => s.serialize_u16(v),
            Scalar::I32(v) => s.serialize_i32(v),
            Scalar::U32(v) => s.serialize_u32(v),
            Scalar::I64(v) => s.serialize_i64(v),
            Scalar::U64(v) => s.serialize_u64(v),
            Scalar::F32(v) if v.is_finite() => s.serialize_f32(v),
            Scalar::F64(v) if v.is_finite() => s.serialize_f64(v),
            Scalar::F32(v) => s.serialize_str(non_finite(v.is_nan(), v < 0.0)),
            Scalar::F64(v) => s.serialize_str(non_finite(v.is_nan(), v < 0.0)),
        }
    }
}

/// A buffer's elements, read one at a time as they are written.
struct Elements<'a>(&'a Buffer);

impl Serialize for Elements<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for v in self.0.iter() {
            seq.serialize_element(&Value(v))?;
        }
        seq.end()
    }
}

/// An argument after the call.
struct Arg<'a>(&'a ArgOutcome);

impl Serialize for Arg<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ArgOutcome::Scalar(v) => Value(*v).serialize(s),
            ArgOutcome::Buffer(b) => Elements(b).serialize(s),
        }
    }
}

/// Every argument, in call order.
struct Args<'a>(&'a [ArgOutcome]);

impl Serialize for Args<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(Arg))
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `timings_us`.
#[derive(Serialize)]
struct TimingsUs {
    compile: f64,
    load: f64,
    call: f64,
}

/// The object, its fields in the contract's order.
#[derive(Serialize)]
struct Object<'a> {
    target: &'a str,
    entry: &'a str,
    #[serde(rename = "return")]
    ret: Option<Value>,
    args: Args<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compiler: Option<Compiler<'a>>,
    timings_us: TimingsUs,
}

/// `compiler`: what compiled the kernel.
#[derive(Serialize)]
#[serde(tag = "kind")]
enum Compiler<'a> {
    #[serde(rename = "server")]
    Server { pid: u32, binary: String },
    #[serde(rename = "spawn")]
    Spawn { reason: &'a str },
}

impl<'a> From<&'a CompiledBy> for Compiler<'a> {
    fn from(by: &'a CompiledBy) -> Compiler<'a> {
        match by {
            CompiledBy::Server { pid, binary } => Compiler::Server {
                pid: *pid,
                binary: binary.to_string_lossy().into_owned(),
            },
            CompiledBy::Spawned { reason } => Compiler::Spawn { reason },
        }
    }
}

/// Writes `outcome` as the `--json` object (no trailing newline), with `"cache"` after
/// `"args"` for a run through the compile cache and `"compiler"` when a compile ran.
pub fn write(
    outcome: &RunOutcome,
    cache: Option<CacheStatus>,
    compiler: Option<&CompiledBy>,
    w: &mut dyn Write,
) -> io::Result<()> {
    let object = Object {
        target: outcome.target.name(),
        entry: &outcome.entry,
        ret: outcome.ret.map(Value),
        args: Args(&outcome.args),
        cache: cache.map(CacheStatus::name),
        compiler: compiler.map(Compiler::from),
        timings_us: TimingsUs {
            compile: micros(outcome.timings.compile),
            load: micros(outcome.timings.load),
            call: micros(outcome.timings.call),
        },
    };
    to_writer(w, &object)
}

/// Serializes `value` to `w` with [`Spaced`].
fn to_writer<T: Serialize + ?Sized>(w: &mut dyn Write, value: &T) -> io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(w, Spaced);
    value.serialize(&mut ser).map_err(io::Error::other)
}

/// [`write`] into a string.
#[cfg(test)]
pub fn to_string(outcome: &RunOutcome, cache: Option<CacheStatus>) -> String {
    let mut out = Vec::new();
    let _ = write(outcome, cache, None, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
fn text<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    let _ = to_writer(&mut out, value);
    String::from_utf8(out).unwrap_or_default()
}

/// `s` as a JSON string literal, quotes included.
#[cfg(test)]
pub fn string(s: &str) -> String {
    text(s)
}

/// An `f64` as a JSON value (a number, or `"nan"` / `"inf"` / `"-inf"`).
#[cfg(test)]
pub fn f64_value(v: f64) -> String {
    text(&Value(Scalar::F64(v)))
}

/// An `f32` as a JSON value, with `f32`'s shortest round-trip digits.
#[cfg(test)]
pub fn f32_value(v: f32) -> String {
    text(&Value(Scalar::F32(v)))
}

/// A scalar as a JSON value.
#[cfg(test)]
pub fn scalar(s: Scalar) -> String {
    text(&Value(s))
}

/// An argument after the call: a scalar, or an array of a buffer's values.
#[cfg(test)]
pub fn arg_outcome(a: &ArgOutcome) -> String {
    text(&Arg(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfjit::args::ScalarType;
    use elfjit::run::Timings;
    use elfjit::Arch;
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

    #[test]
    fn json_shape() {
        let o = RunOutcome {
            target: Arch::X86_64,
            entry: "k\"1".into(),
            ret: Some(Scalar::F32(f32::NEG_INFINITY)),
            args: vec![
                ArgOutcome::Scalar(Scalar::I32(3)),
                ArgOutcome::Buffer(
                    Buffer::from_values(
                        ScalarType::F64,
                        &[Scalar::F64(0.5), Scalar::F64(f64::NAN)],
                    )
                    .unwrap(),
                ),
            ],
            timings: Timings {
                compile: Duration::from_micros(30_000),
                load: Duration::from_nanos(3_700),
                call: Duration::ZERO,
            },
        };
        let v: serde_json::Value = serde_json::from_str(&to_string(&o, None)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "target": "x86_64", "entry": "k\"1", "return": "-inf",
                "args": [3, [0.5, "nan"]],
                "timings_us": {"compile": 30000, "load": 3.7, "call": 0}
            })
        );
        let void = RunOutcome {
            ret: None,
            args: vec![],
            ..o
        };
        let v: serde_json::Value = serde_json::from_str(&to_string(&void, None)).unwrap();
        assert!(v["return"].is_null());
        assert!(v.get("cache").is_none());
        for status in [CacheStatus::Hit, CacheStatus::Miss] {
            let v: serde_json::Value =
                serde_json::from_str(&to_string(&void, Some(status))).unwrap();
            assert_eq!(v["cache"], status.name());
            assert!(v["timings_us"]["compile"].is_number());
        }
        assert!(crate::text::summary(&void).contains("return  void"));
    }

    /// Byte for byte what the hand-written printer wrote (recorded from it).
    #[test]
    fn bytes_are_the_contract() {
        let o = RunOutcome {
            target: Arch::Aarch64,
            entry: "we\u{7f}ird\u{2028}nm\"q".into(),
            ret: Some(Scalar::F64(1e21)),
            args: vec![
                ArgOutcome::Buffer(
                    Buffer::from_values(
                        ScalarType::F32,
                        &[
                            Scalar::F32(f32::NAN),
                            Scalar::F32(f32::INFINITY),
                            Scalar::F32(f32::NEG_INFINITY),
                            Scalar::F32(-0.0),
                            Scalar::F32(1e-45),
                            Scalar::F32(0.1),
                            Scalar::F32(1e30),
                        ],
                    )
                    .unwrap(),
                ),
                ArgOutcome::Scalar(Scalar::U64(u64::MAX)),
                ArgOutcome::Scalar(Scalar::I8(-128)),
                ArgOutcome::Buffer(Buffer::zeroed(ScalarType::U8, 0).unwrap()),
            ],
            timings: Timings {
                compile: Duration::from_nanos(65_695_102),
                load: Duration::from_nanos(800_552),
                call: Duration::ZERO,
            },
        };
        assert_eq!(
            to_string(&o, Some(CacheStatus::Hit)),
            "{\"target\": \"aarch64\", \"entry\": \"we\\u007fird\\u2028nm\\\"q\", \"return\": 1e21, \
             \"args\": [[\"nan\", \"inf\", \"-inf\", -0, 1e-45, 0.1, 1e30], 18446744073709551615, -128, []], \
             \"cache\": \"hit\", \"timings_us\": {\"compile\": 65695.102, \"load\": 800.5519999999999, \
             \"call\": 0}}"
        );
    }
}
