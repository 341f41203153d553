//! What `elfjit run` prints without `--json`: a few readable lines.

use elfjit::args::ArgOutcome;
use elfjit::run::RunOutcome;
use std::fmt::Write;
use std::time::Duration;

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The entry and target, the return value, each argument after the call (a buffer's first
/// 16 elements) and the stage times.
pub fn summary(outcome: &RunOutcome) -> String {
    const SHOWN: usize = 16;
    let mut s = String::new();
    let _ = writeln!(s, "{} on {}", outcome.entry, outcome.target);
    match outcome.ret {
        Some(v) => {
            let _ = writeln!(s, "  return  {v} ({})", v.ty());
        }
        None => {
            let _ = writeln!(s, "  return  void");
        }
    }
    for (i, a) in outcome.args.iter().enumerate() {
        match a {
            ArgOutcome::Scalar(v) => {
                let _ = writeln!(s, "  arg {i}   {}:{v}", v.ty());
            }
            ArgOutcome::Buffer(values) => {
                let ty = values.ty().name();
                let shown: Vec<String> = values.iter().take(SHOWN).map(|v| v.to_string()).collect();
                let more = values.len().saturating_sub(SHOWN);
                let tail = if more > 0 {
                    format!(", ... ({more} more)")
                } else {
                    String::new()
                };
                let _ = writeln!(
                    s,
                    "  arg {i}   {ty}[{}] = [{}{tail}]",
                    values.len(),
                    shown.join(", ")
                );
            }
        }
    }
    let _ = write!(
        s,
        "  time    compile {:.0} µs, load {:.1} µs, call {:.1} µs",
        micros(outcome.timings.compile),
        micros(outcome.timings.load),
        micros(outcome.timings.call)
    );
    s
}
