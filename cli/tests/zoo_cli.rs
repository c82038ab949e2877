//! `memplan zoo` end to end: output files, resume, and refused options.

use std::process::Command;

mod common;
use common::sample;

fn memplan() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
}

#[test]
fn zoo_plans_the_sample_writes_every_file_and_skips_it_the_second_time() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = || {
        memplan()
            .args(["zoo", &sample(), "--out"])
            .arg(&out)
            .args(["--time-limit", "0.2"])
            .output()
            .unwrap()
    };
    let first = run();
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{err}");
    assert!(err.contains("1 planned, 0 skipped"), "{err}");
    for f in ["results.json", "results.csv", "report.md", "report.html"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    // One typed status, and the full pipeline's options in the resume key.
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let r = &results["results"][0];
    let status = r["full_status"].as_str().unwrap();
    assert!(
        memplan::PlanStatus::ALL
            .iter()
            .any(|s| s.as_str() == status),
        "{status}"
    );
    assert!(
        r["options"]
            .as_str()
            .unwrap()
            .contains(r#""time_limit_s":0.2"#),
        "{r}"
    );
    let second = run();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{err}");
    assert!(err.contains("0 planned, 1 skipped"), "{err}");
}

#[test]
fn zoo_plans_every_budget_with_every_spill_strategy_and_reports_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let o = memplan()
        .args(["zoo", &sample(), "--budgets", "80,60", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let rows = results["results"][0]["budgets"].as_array().unwrap();
    let strategies = rows
        .iter()
        .map(|r| r["strategy"].as_str().unwrap().to_string())
        .collect::<std::collections::BTreeSet<_>>();
    assert!(strategies.len() >= 3, "{strategies:?}");
    assert_eq!(rows.len(), 2 * strategies.len());
    // The budgets are percentages of the full pipeline's peak.
    let full = results["results"][0]["full_peak_bytes"].as_u64().unwrap();
    for r in rows {
        let pct = r["percent"].as_f64().unwrap();
        assert_eq!(
            r["budget_bytes"].as_u64().unwrap(),
            (full as f64 * pct / 100.0).floor() as u64,
            "{r}"
        );
        if r["fits"].as_bool().unwrap() {
            assert!(r["peak_bytes"].as_u64().unwrap() <= r["budget_bytes"].as_u64().unwrap());
            assert!(r["status"].is_string(), "{r}");
        }
    }
    // The sample fits 80 % with the sweep.
    assert!(rows
        .iter()
        .any(|r| r["percent"] == 80.0 && r["strategy"] == "sweep" && r["fits"] == true));
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains("| 80% |"), "{md}");
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("overhead per budget and spill strategy"));
}

#[test]
fn zoo_refuses_an_out_that_is_a_file_or_under_one_with_exit_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("results.txt");
    std::fs::write(&file, "mine").unwrap();
    for out in [file.clone(), file.join("sub")] {
        let o = memplan()
            .args(["zoo", &sample(), "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", out.display());
        assert!(err.contains(&format!("--out {}", out.display())), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    // A run that fails before planning (a missing input) creates no folder.
    let out = dir.path().join("a").join("b");
    let o = memplan()
        .args(["zoo", "no-such-graph.json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(!dir.path().join("a").exists());
}

#[test]
fn zoo_refuses_a_budget_that_is_not_a_percentage() {
    let dir = tempfile::tempdir().unwrap();
    // The grammar of --budget (the `%` optional): no sign, exponent, leading zero or `%%`.
    for bad in ["80,abc", "0", "150", "1e1", "060", "+60", "5.", "60%%"] {
        let o = memplan()
            .args(["zoo", &sample(), "--budgets", bad, "--out"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("is not a percentage"), "{err}");
    }
}

#[test]
fn zoo_rewrites_give_plans_that_check_against_the_original_graph() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = memplan()
        .args([
            "zoo",
            &sample(),
            "--rewrite",
            "fuse",
            "--effort",
            "0",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let r = &results["results"][0];
    assert_eq!(r["rewritten"], true, "{r}");
    let key = r["options"].as_str().unwrap();
    assert!(
        key.contains(r#""rewrite":["fuse"]"#) && key.contains(r#""effort":0"#),
        "{key}"
    );
    for way in ["listed", "heuristic", "full"] {
        let plan = out.join(r["plans"][way].as_str().unwrap());
        let c = memplan()
            .args(["check", &sample()])
            .arg(&plan)
            .output()
            .unwrap();
        assert!(
            c.status.success(),
            "{way}: {}",
            String::from_utf8_lossy(&c.stderr)
        );
    }
}

#[test]
fn zoo_refuses_bad_pipeline_options_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value, message) in [
        ("--rewrite", "fusion", "unknown rewrite"),
        ("--time-limit", "nan", "time_limit_s"),
    ] {
        let o = memplan()
            .args(["zoo", &sample(), flag, value, "--out"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(message), "{flag} {value}: {err}");
    }
}

#[test]
fn zoo_names_a_missing_input_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = memplan()
        .args(["zoo", "/nonexistent/graph.json", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/graph.json"));
}

#[test]
fn plan_trace_writes_a_chrome_trace_with_a_slice_per_op() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let o = memplan()
        .args(["plan", "sample", "-o"])
        .arg(dir.path().join("plan.json"))
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let ev = t["traceEvents"].as_array().unwrap();
    assert!(ev.iter().filter(|e| e["ph"] == "X").count() > 0);
    assert!(ev.iter().any(|e| e["ph"] == "C" && e["name"] == "arena"));
}

#[test]
fn zoo_refuses_an_output_folder_that_is_one_of_its_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    std::fs::create_dir(&graphs).unwrap();
    std::fs::copy(sample(), graphs.join("sample.json")).unwrap();
    let r = memplan()
        .arg("zoo")
        .arg(&graphs)
        .arg("--out")
        .arg(graphs.join("."))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("is also the input"), "{err}");
    assert!(!graphs.join("results.json").exists());
}
