//! `memplan reserve` (the P99 reservation of a symbolic plan) and the split flags of
//! `memplan plan` (`--max-ratio`, `--max-pieces`) on the bundled symbolic sample.

mod common;
use common::{memplan, sample};
use serde_json::{json, Value};
use std::path::Path;

/// The bundled symbolic sample (B in 1..=32).
fn symbolic_sample() -> String {
    format!(
        "{}/../samples/resnet_block.train.symbolic.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Plans the symbolic sample with `extra` flags into `name` in `dir` and returns the plan's
/// path.
fn symbolic_plan(dir: &Path, name: &str, extra: &[&str]) -> String {
    let out = dir.join(name);
    let sample = symbolic_sample();
    let mut args = vec!["plan", sample.as_str(), "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = memplan(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out.to_string_lossy().into_owned()
}

/// B geometric with ratio 0.5 over 1, 2, 4, …, 32 as request counts, written to `name` in
/// `dir`.
fn histogram(dir: &Path, name: &str) -> String {
    let path = dir.join(name);
    let h = json!({"B": {"1": 320, "2": 160, "4": 80, "8": 40, "16": 20, "32": 1}});
    std::fs::write(&path, h.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

/// Runs `memplan reserve` on a fresh plan of the symbolic sample and [`histogram`], with
/// `extra` flags and `-o`, its files in `dir`; returns (plan path, histogram path, stdout, the
/// JSON written).
fn reserve_run(dir: &Path, name: &str, extra: &[&str]) -> (String, String, String, Value) {
    let plan = symbolic_plan(dir, &format!("plan-{name}.json"), &[]);
    let hist = histogram(dir, &format!("hist-{name}.json"));
    let out = dir.join(format!("reservation-{name}.json"));
    let mut args = vec!["reserve", plan.as_str(), hist.as_str()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-o", out.to_str().unwrap()]);
    let o = memplan(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    (plan, hist, stdout, r)
}

#[test]
fn reserve_prints_a_table_and_writes_the_reservation_with_the_splits_above_the_quantile() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, stdout, r) =
        reserve_run(dir.path(), "table", &["--quantile", "0.99", "--split", "B"]);
    // 621 requests: B ≤ 16 holds 620 of them (99.8 %), so the quantile batch is 16.
    assert!(stdout.contains("binding B=16"), "{stdout}");
    assert!(stdout.contains("split B=32 → 2 × B=16"), "{stdout}");
    let reserved = r["reserved_bytes"].as_u64().unwrap();
    assert!(reserved > 0);
    for b in r["bindings"].as_array().unwrap() {
        if b["fits"].as_bool().unwrap() {
            assert!(b["utilisation"].as_f64().unwrap() <= 1.0, "{b}");
        } else {
            assert_eq!(b["fallback"]["budget_bytes"].as_u64(), Some(reserved));
            assert_eq!(b["fallback"]["split"]["chunks"].as_u64(), Some(2));
        }
    }
}

#[test]
fn reserve_with_batching_merges_small_requests_and_reports_a_higher_utilisation() {
    let dir = tempfile::tempdir().unwrap();
    let (plan, hist, stdout, r) = reserve_run(
        dir.path(),
        "batching",
        &["--split", "B", "--batching", "--requests", "2000"],
    );
    assert!(
        stdout.contains("dynamic batching (window 16, 2000 requests, seed 0)"),
        "{stdout}"
    );
    let alone = r["average_utilisation"].as_f64().unwrap();
    let b = &r["batching"];
    let merged = b["average_utilisation"].as_f64().unwrap();
    assert!(merged > alone + 0.3, "alone {alone}, merged {merged}");
    assert!(b["capacity"].as_u64().unwrap() >= 16, "{b}");
    assert!(b["average_requests_per_run"].as_f64().unwrap() > 1.5, "{b}");
    // Batching needs the symbol to merge along.
    let o = memplan(&["reserve", &plan, &hist, "--batching"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--split"));
}

#[test]
fn reserve_with_the_graph_plans_the_budgeted_fallback_above_the_quantile_and_writes_it() {
    let files = tempfile::tempdir().unwrap();
    let dir = files.path().join("fallbacks");
    let sample = symbolic_sample();
    let (plan, hist, stdout, r) = reserve_run(
        files.path(),
        "fallback",
        &[
            "--split",
            "B",
            "--graph",
            &sample,
            "--fallback-dir",
            dir.to_str().unwrap(),
        ],
    );
    // B=32 is above the 0.99 quantile (B=16): its budgeted plan at the reserved size.
    assert!(stdout.contains("fallback at B=32: fits"), "{stdout}");
    let reserved = r["reserved_bytes"].as_u64().unwrap();
    let f = &r["fallback_plans"][0];
    assert_eq!(f["binding"]["B"], 32, "{f}");
    assert_eq!(f["fits"], true, "{f}");
    assert!(f["peak_bytes"].as_u64().unwrap() <= reserved);
    assert!(f["spilled_out_bytes"].as_u64().unwrap() + f["recomputed_ops"].as_u64().unwrap() > 0);
    // The written pair replays within the reservation.
    let g = dir.join("B=32.graph.json");
    let p = dir.join("B=32.plan.json");
    let o = memplan(&[
        "check",
        g.to_str().unwrap(),
        p.to_str().unwrap(),
        "--budget",
        &reserved.to_string(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // --fallback-dir needs --graph.
    let o = memplan(&["reserve", &plan, &hist, "--fallback-dir", "x"]);
    assert_eq!(o.status.code(), Some(2));
    // A file where the folder should be is named before any work, and kept.
    let file = files.path().join("not-a-folder");
    std::fs::write(&file, "mine").unwrap();
    let o = memplan(&[
        "reserve",
        &plan,
        &hist,
        "--graph",
        &symbolic_sample(),
        "--fallback-dir",
        file.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "--fallback-dir {}: exists and is not a folder",
            file.display()
        )),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "the report came before the refusal");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

#[test]
fn reserve_refuses_a_bad_histogram_or_quantile_with_exit_code_2_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let plan = symbolic_plan(dir.path(), "plan-bad.json", &[]);
    let hist = dir.path().join("bad-hist.json");
    std::fs::write(&hist, r#"{"B": {"one": 3}}"#).unwrap();
    let o = memplan(&["reserve", &plan, hist.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("key \"one\" is not a non-negative integer"),
        "{err}"
    );
    let good = histogram(dir.path(), "hist-q.json");
    let o = memplan(&["reserve", &plan, &good, "--quantile", "1.5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("quantile 1.5 is not in (0, 1]"));
}

#[test]
fn plan_split_flags_shape_the_pieces_and_are_refused_on_a_concrete_graph() {
    let dir = tempfile::tempdir().unwrap();
    let one = symbolic_plan(dir.path(), "one-piece.json", &["--max-pieces", "1"]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(one).unwrap()).unwrap();
    assert!(doc.get("split").is_none());
    let o = memplan(&["plan", &symbolic_sample(), "--max-ratio", "0.5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("max_ratio must be"));
    let o = memplan(&["plan", "sample", "--max-ratio", "1.1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("apply to symbolic graphs"));
}

#[test]
fn reserve_refuses_to_write_the_reservation_over_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let plan = symbolic_plan(dir.path(), "plan.json", &[]);
    let hist = histogram(dir.path(), "hist.json");
    let before = std::fs::read(&plan).unwrap();
    let o = memplan(&["reserve", &plan, &hist, "-o", &plan]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("-o {plan} is also the plan")),
        "{err}"
    );
    assert_eq!(std::fs::read(&plan).unwrap(), before);
}

#[test]
fn reserve_refuses_a_histogram_whose_weights_do_not_sum_to_a_finite_number() {
    let dir = tempfile::tempdir().unwrap();
    let plan = symbolic_plan(dir.path(), "plan.json", &[]);
    let hist = dir.path().join("inf.json");
    std::fs::write(&hist, r#"{"B": {"1": 0.5, "4": 1e308, "8": 1e308}}"#).unwrap();
    let o = memplan(&["reserve", &plan, hist.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("at B=8") && err.contains("finite"), "{err}");
    assert!(!out.contains("NaN"), "{out}");
}

#[test]
fn reserve_with_a_concrete_graph_says_the_graph_is_not_symbolic() {
    let dir = tempfile::tempdir().unwrap();
    let plan = symbolic_plan(dir.path(), "plan.json", &[]);
    let hist = histogram(dir.path(), "hist.json");
    let concrete = sample();
    let o = memplan(&["reserve", &plan, &hist, "--graph", &concrete]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("--graph {concrete}: not a symbolic graph")),
        "{err}"
    );
    assert!(!err.contains(&hist), "the histogram is not blamed: {err}");
}

#[test]
fn reserve_refuses_a_graph_the_plan_was_not_made_for_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let plan = symbolic_plan(dir.path(), "plan.json", &[]);
    let hist = histogram(dir.path(), "hist.json");
    // Another symbolic graph: the sample renamed, then the sample with another range of B.
    let mut other: Value =
        serde_json::from_str(&std::fs::read_to_string(symbolic_sample()).unwrap()).unwrap();
    let name = other["name"].as_str().unwrap().to_string();
    other["name"] = json!(format!("{name}-other"));
    let renamed = dir.path().join("renamed.json");
    std::fs::write(&renamed, other.to_string()).unwrap();
    other["name"] = json!(name);
    other["symbols"]["B"]["max"] = json!(16);
    let narrower = dir.path().join("narrower.json");
    std::fs::write(&narrower, other.to_string()).unwrap();
    for (graph, words) in [
        (&renamed, "the plan is for graph"),
        (&narrower, "declares other symbols or ranges"),
    ] {
        let o = memplan(&["reserve", &plan, &hist, "--graph", graph.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("--graph {}", graph.display())) && err.contains(words),
            "{err}"
        );
    }
}
