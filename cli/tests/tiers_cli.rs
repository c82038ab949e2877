//! `memplan plan --tiers`: the tier table on stderr, a plan that `memplan check` accepts, and
//! bad `--tier-alignment` values refused with exit code 2 and a message naming the culprit.

use std::process::{Command, Output};

mod common;
use common::sample;

fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plan_with_tiers_prints_the_tier_table_and_writes_a_valid_tiered_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiered.plan.json");
    let r = memplan(&[
        "plan",
        &sample(),
        "--strategy",
        "heuristic",
        "--no-fuse",
        "--tiers",
        "--tier-alignment",
        "persistent=64,activations=256,temporaries=512",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    for tier in ["persistent", "activations", "temporaries", "frag@peak"] {
        assert!(err.contains(tier), "{tier} missing: {err}");
    }
    let c = memplan(&["check", &sample(), out.to_str().unwrap()]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let tiers = plan["stats"]["tiers"].as_array().unwrap();
    let aligns: Vec<u64> = tiers
        .iter()
        .map(|t| t["alignment"].as_u64().unwrap())
        .collect();
    assert_eq!(aligns, [64, 256, 512]);
    assert!(plan["stats"]["fragmentation_at_peak"].is_f64());
}

#[test]
fn plan_without_tiers_has_no_tier_stats_but_reports_fragmentation_at_peak() {
    let r = memplan(&["plan", &sample(), "--strategy", "heuristic"]);
    assert!(r.status.success());
    let plan: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(plan["stats"].get("tiers").is_none());
    assert!(plan["stats"]["fragmentation_at_peak"].is_f64());
    assert!(String::from_utf8_lossy(&r.stderr).contains("fragmentation at peak"));
}

#[test]
fn bad_tier_alignments_are_refused_naming_the_culprit() {
    for (spec, want) in [
        (
            "activations=100",
            "activations alignment \"100\" is not a power of two",
        ),
        ("temporaries=0", "temporaries alignment \"0\""),
        ("scratch=256", "unknown tier \"scratch\""),
        ("persistent=64,persistent=64", "persistent is given twice"),
        ("activations:64", "\"activations:64\""),
        ("big", "all alignment \"big\""),
        // A power of two that rounds the sample's sizes past 64 bits: bad input, not exit 3.
        (
            "4611686018427387904",
            "tier_alignment persistent=4611686018427387904",
        ),
    ] {
        let r = memplan(&["plan", &sample(), "--tiers", "--tier-alignment", spec]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{spec}: {err}");
        assert!(
            err.contains("tier_alignment") && err.contains(want),
            "{spec}: {err}"
        );
        assert!(r.stdout.is_empty(), "{spec}");
    }
    // --tier-alignment needs --tiers; --tiers does not combine with --budget.
    let r = memplan(&["plan", &sample(), "--tier-alignment", "512"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("tier_alignment needs tiers"));
    let r = memplan(&["plan", &sample(), "--tiers", "--budget", "80%"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("tiers and budget cannot be combined"));
}
