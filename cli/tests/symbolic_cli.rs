//! `memplan plan` on a symbolic graph (sizes as expressions over symbols) writes one
//! memplan-symbolic-plan/1 plan for the whole range; `memplan instantiate` turns it (and the
//! graph) into an ordinary plan and graph at a binding, which `check`, `check_plan.py` and
//! `run` accept; bindings out of range or naming unknown symbols are refused (exit 2) naming
//! the symbol.

use std::path::Path;

mod common;
use common::{check_plan_py, memplan};

/// The bundled symbolic sample (the sample's batch as the symbol B in 1..=32).
fn symbolic_sample() -> String {
    format!(
        "{}/../samples/resnet_block.train.symbolic.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[track_caller]
fn ok(args: &[&str]) -> String {
    let r = memplan(args);
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "memplan {args:?}: {err}");
    err
}

#[test]
fn a_symbolic_plan_instantiates_at_every_tried_batch_into_plans_that_check_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let sp = dir.path().join("sample.symplan.json");
    let err = ok(&["plan", &symbolic_sample(), "-o", s(&sp)]);
    assert!(err.contains("symbolic plan for B in [1, 32]"), "{err}");
    assert!(
        err.contains("at B=1: peak") && err.contains("at B=32: peak"),
        "{err}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    assert_eq!(doc["format"], "memplan-symbolic-plan/1");
    let mut peaks = Vec::new();
    for b in [1u64, 3, 8, 32] {
        let (p, g) = (
            dir.path().join(format!("p{b}.json")),
            dir.path().join(format!("g{b}.json")),
        );
        let binding = format!("B={b}");
        ok(&["instantiate", s(&sp), &binding, "-o", s(&p)]);
        ok(&["instantiate", &symbolic_sample(), &binding, "-o", s(&g)]);
        let check = memplan(&["check", s(&g), s(&p)]);
        assert!(
            check.status.success(),
            "B={b}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        check_plan_py(&g, &p, None);
        let run = memplan(&["run", s(&g), s(&p)]);
        assert!(
            run.status.success(),
            "B={b}: {}",
            String::from_utf8_lossy(&run.stdout)
        );
        let plan: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        peaks.push(plan["stats"]["peak_bytes"].as_u64().unwrap());
    }
    // The peak grows with the batch.
    assert!(peaks.windows(2).all(|w| w[0] < w[1]), "{peaks:?}");
}

#[test]
fn check_replays_a_symbolic_plan_over_its_range_and_names_the_binding_a_corrupted_one_breaks() {
    let dir = tempfile::tempdir().unwrap();
    let sp = dir.path().join("check.symplan.json");
    ok(&["plan", &symbolic_sample(), "-o", s(&sp)]);
    let r = memplan(&["check", &symbolic_sample(), s(&sp), "--samples", "8"]);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(
        out.contains("valid at") && out.contains("(at B=32)"),
        "{out}"
    );
    assert!(
        out.contains("proved valid at every binding in range: 1 template(s)"),
        "{out}"
    );
    // A buffer reserved larger than its tensor still validates where sampled, but its size
    // is not the graph's expression: no proof, said so.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    let b0 = &mut doc["buffers"][0];
    b0["size"] = serde_json::json!(format!("256 + {}", b0["size"].as_str().unwrap()));
    let loose = dir.path().join("loose.symplan.json");
    std::fs::write(&loose, doc.to_string()).unwrap();
    let r = memplan(&["check", &symbolic_sample(), s(&loose), "--samples", "8"]);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(
        out.contains("not proved for the whole range (the top-level template: buffer 0"),
        "{out}"
    );
    // Within a budget below the largest peak: invalid, naming the binding.
    let r = memplan(&["check", &symbolic_sample(), s(&sp), "--budget", "1000"]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("invalid: at B="));
    // A buffer that forgets what lies below it lands on a live tensor.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    let buffers = doc["buffers"].as_array_mut().unwrap();
    let k = buffers
        .iter()
        .position(|b| !b["below"].as_array().unwrap().is_empty())
        .unwrap();
    buffers[k]["below"] = serde_json::json!([]);
    let bad = dir.path().join("corrupt.symplan.json");
    std::fs::write(&bad, doc.to_string()).unwrap();
    let r = memplan(&["check", &symbolic_sample(), s(&bad)]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("invalid: at B="), "{err}");
}

#[test]
fn at_the_bundled_batch_the_instantiated_graph_is_the_bundled_sample() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g8.json");
    ok(&["instantiate", &symbolic_sample(), "B=8", "-o", s(&g)]);
    let ours: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&g).unwrap()).unwrap();
    let sample = common::sample_json();
    let sizes = |v: &serde_json::Value| -> Vec<(String, u64)> {
        v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["size"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(sizes(&ours), sizes(&sample));
}

#[test]
fn a_binding_out_of_range_or_naming_an_unknown_symbol_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let sp = dir.path().join("refuse.symplan.json");
    ok(&["plan", &symbolic_sample(), "-o", s(&sp)]);
    for (binding, says) in [
        ("B=33", "\"B\" = 33 is out of its range 1..=32"),
        ("B=0", "\"B\" = 0 is out of its range"),
        ("S=4", "symbol \"S\" is not declared"),
        ("B", "binding"),
    ] {
        for input in [s(&sp), symbolic_sample().as_str()] {
            let r = memplan(&["instantiate", input, binding]);
            let err = String::from_utf8_lossy(&r.stderr);
            assert_eq!(r.status.code(), Some(2), "{binding}: {err}");
            assert!(err.contains(says), "{binding}: {err}");
        }
    }
}

#[test]
fn a_symbolic_graph_with_a_budget_or_a_trace_is_refused_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let r = memplan(&["plan", &symbolic_sample(), "--budget", "80%"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("budget"));
    let r = memplan(&[
        "plan",
        &symbolic_sample(),
        "--trace",
        s(&dir.path().join("t.json")),
    ]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("memplan instantiate"));
}

/// Plans the symbolic sample into `dir` and returns the plan's path.
fn symbolic_plan(dir: &Path) -> String {
    let sp = dir.join("sample.symplan.json");
    ok(&[
        "plan",
        &symbolic_sample(),
        "--strategy",
        "heuristic",
        "-o",
        s(&sp),
    ]);
    s(&sp).to_string()
}

#[test]
fn instantiate_refuses_to_write_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let sp = symbolic_plan(dir.path());
    let before = std::fs::read(&sp).unwrap();
    let r = memplan(&["instantiate", &sp, "B=3", "-o", &sp]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("-o {sp} is also the input file")),
        "{err}"
    );
    assert_eq!(std::fs::read(&sp).unwrap(), before);
}

#[test]
fn instantiate_of_a_concrete_plan_or_graph_says_it_is_not_symbolic_naming_the_format() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("concrete.plan.json");
    let sample = common::sample();
    ok(&["plan", &sample, "--strategy", "heuristic", "-o", s(&plan)]);
    for (input, found) in [
        (s(&plan), "a concrete plan (memplan-plan/1)"),
        (
            sample.as_str(),
            "a concrete graph (memplan-graph/1 without \"symbols\")",
        ),
    ] {
        let r = memplan(&["instantiate", input, "B=3"]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("{input}: {found}, not a symbolic plan")),
            "{err}"
        );
        assert!(!err.contains("missing field"), "{err}");
    }
}

#[test]
fn instantiate_refuses_a_symbol_bound_twice() {
    let dir = tempfile::tempdir().unwrap();
    let sp = symbolic_plan(dir.path());
    for binding in [&["B=3", "B=4"][..], &["B=3,B=4"][..]] {
        let mut args = vec!["instantiate", sp.as_str()];
        args.extend_from_slice(binding);
        let r = memplan(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{binding:?}: {err}");
        assert!(
            err.contains("symbol B is bound twice"),
            "{binding:?}: {err}"
        );
        assert!(r.stdout.is_empty(), "no plan is written");
    }
}

#[test]
fn check_refuses_more_random_samples_than_its_documented_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let sp = symbolic_plan(dir.path());
    let r = memplan(&[
        "check",
        &symbolic_sample(),
        &sp,
        "--samples",
        "18446744073709551615",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--samples") && err.contains("10000000"),
        "{err}"
    );
    let help = String::from_utf8_lossy(&memplan(&["check", "--help"]).stdout).into_owned();
    assert!(help.contains("at most 10000000"), "{help}");
}
