//! What the commands share: the bad-input error (exit code 2), reading graphs, plans and
//! device profiles, checking durations, and formatting bytes (writing outputs: [`crate::output`]).

use anyhow::Result;
use memplan::cost::DeviceProfile;
use memplan::graph::Graph;
use memplan::plan::Plan;
use std::path::Path;
use std::time::Duration;

/// Bad input: exit code 2.
#[derive(Debug)]
pub struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for BadInput {}

/// A bad-input error (exit code 2) with this message.
pub fn bad(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}

/// The text of the file at `path` (at most `memplan::text_file::MAX_TEXT_BYTES`, less a
/// leading UTF-8 byte order mark); a file that cannot be read is bad input.
pub fn read(path: &Path) -> Result<String> {
    memplan::text_file::read(path).map_err(|e| bad(e.to_string()))
}

/// The graph `arg` names: a memplan-graph/1 file, or `sample` for the bundled sample.
pub fn load_graph(arg: &str) -> Result<Graph> {
    let (text, label) = if arg == "sample" {
        (
            memplan::graph::SAMPLE_JSON.to_string(),
            "bundled sample".to_string(),
        )
    } else {
        (read(Path::new(arg))?, arg.to_string())
    };
    Graph::parse(&text).map_err(|e| bad(format!("{label}: {e}")))
}

/// The memplan-plan/1 plan in the file at `path`.
pub fn load_plan(path: &Path) -> Result<Plan> {
    Plan::parse(&read(path)?).map_err(|e| bad(format!("{}: {e}", path.display())))
}

/// Whether `text` is a memplan-symbolic-plan/1 document (its `format` field says so).
pub fn is_symbolic_plan(text: &str) -> bool {
    memplan::json_path::declared_format(text).as_deref()
        == Some(memplan::symbolic::SYMBOLIC_PLAN_FORMAT)
}

/// The graph plan `p` (read from `path`) refers to: `given`, or the rewrite the plan
/// carries. `Ok(None)` when that makes the plan invalid (printed as `invalid: ...`; the
/// command then exits 1).
pub fn graph_for_plan(given: Graph, p: &Plan, path: &Path) -> Result<Option<Graph>> {
    match memplan::pipeline::graph_for_plan(given, p) {
        Ok(g) => Ok(Some(g)),
        Err(e) if e.makes_plan_invalid() => {
            eprintln!("invalid: {e}");
            Ok(None)
        }
        Err(e) => Err(bad(format!("{}: {e}", path.display()))),
    }
}

/// The device profile (JSON) in the file at `path`.
pub fn load_device_profile(path: &Path) -> Result<DeviceProfile> {
    DeviceProfile::from_json(&read(path)?).map_err(|e| bad(format!("{}: {e}", path.display())))
}

/// `secs` of the flag `--FLAG` as a duration; a negative or non-finite number is bad input.
pub fn seconds(flag: &str, secs: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        // Plain, or in exponent form where plain would print hundreds of digits.
        let shown = if secs.is_finite() && secs.abs() >= 1e16 {
            format!("{secs:e}")
        } else {
            format!("{secs}")
        };
        if secs.is_finite() && secs >= 0.0 {
            bad(format!(
                "--{flag} {shown} is too large: a duration must be below {:.1e} seconds",
                Duration::MAX.as_secs_f64()
            ))
        } else {
            bad(format!(
                "--{flag} {shown} is not a finite non-negative number of seconds"
            ))
        }
    })
}

/// `b` bytes in MiB, two decimals.
pub fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_too_large_is_called_too_large_in_short_form_and_a_negative_one_refused() {
        let e = seconds("time-limit", 1e20).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "--time-limit 1e20 is too large: a duration must be below 1.8e19 seconds"
            ),
            "{e}"
        );
        let e = seconds("time-limit", 1e300).unwrap_err().to_string();
        assert!(e.starts_with("--time-limit 1e300 is too large"), "{e}");
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = seconds("time-limit", bad).unwrap_err().to_string();
            assert!(
                e.contains("is not a finite non-negative number of seconds"),
                "{e}"
            );
        }
        assert_eq!(
            seconds("time-limit", 1.5).unwrap(),
            Duration::from_millis(1500)
        );
    }
}
