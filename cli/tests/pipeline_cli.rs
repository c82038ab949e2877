//! The README's flow with the defaults, as a new user runs it: `plan` → `check` → `run` on an
//! original zoo graph, with and without rewrites, and the CLI's plan equal to the library
//! pipeline's for the same options.

use memplan::pipeline::{self, PipelineOptions, Rewrite};
use memplan::zoo::determinism::without_timing;
use memplan::{Graph, Plan, Strategy};
use std::process::{Command, Output};

mod common;
use common::{check_plan_py, zoo};

fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(r: &Output, what: &str) {
    assert!(
        r.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        r.status.code(),
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
}

#[test]
fn the_default_plan_of_a_zoo_graph_checks_and_runs_against_that_graph() {
    let dir = tempfile::tempdir().unwrap();
    let Some(g) = zoo("resnet50.1.inference") else {
        return;
    };
    let out = dir.path().join("default.plan.json");
    let out = out.to_str().unwrap();
    ok(&memplan(&["plan", &g, "-o", out]), "plan");
    let plan = Plan::parse(&std::fs::read_to_string(out).unwrap()).unwrap();
    assert!(
        plan.rewritten_graph.is_none(),
        "the default plans the graph as given"
    );
    ok(&memplan(&["check", &g, out]), "check");
    ok(&memplan(&["run", &g, out]), "run");
    check_plan_py(&g, out, None);
}

#[test]
fn a_rewritten_plan_checks_and_runs_against_the_original_graph() {
    let dir = tempfile::tempdir().unwrap();
    let Some(g) = zoo("resnet18.1.inference") else {
        return;
    };
    let (out, written) = (
        dir.path().join("rewritten.plan.json"),
        dir.path().join("rewritten.graph.json"),
    );
    let (out, written) = (out.to_str().unwrap(), written.to_str().unwrap());
    let r = memplan(&[
        "plan",
        &g,
        "--rewrite",
        "all",
        "--graph-out",
        written,
        "-o",
        out,
    ]);
    ok(&r, "plan --rewrite all");
    let plan = Plan::parse(&std::fs::read_to_string(out).unwrap()).unwrap();
    let carried = plan
        .rewritten_graph
        .as_ref()
        .expect("the plan carries its graph");
    let carried = Graph::parse(&carried.to_string()).unwrap();
    assert_eq!(
        carried,
        Graph::parse(&std::fs::read_to_string(written).unwrap()).unwrap()
    );
    assert!(carried.ops.iter().any(|o| o.op_type.contains('+')), "fused");
    ok(&memplan(&["check", &g, out]), "check against the original");
    let r = memplan(&["run", &g, out]);
    ok(&r, "run against the original");
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(text.contains("computes the same outputs"), "{text}");
    check_plan_py(written, out, None);
}

#[test]
fn a_carried_graph_from_another_model_is_refused_naming_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let (Some(g), Some(other)) = (zoo("resnet18.1.inference"), zoo("resnet50.1.inference")) else {
        return;
    };
    let out = dir.path().join("other.plan.json");
    let out = out.to_str().unwrap();
    ok(
        &memplan(&["plan", &g, "--rewrite", "fuse", "-o", out]),
        "plan",
    );
    let r = memplan(&["check", &other, out]);
    assert_eq!(r.status.code(), Some(1));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("not derived from"), "{err}");
}

#[test]
fn a_carried_graph_edited_after_planning_is_refused_by_check_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let Some(g) = zoo("resnet18.1.inference") else {
        return;
    };
    let out = dir.path().join("tiled.plan.json");
    let out = out.to_str().unwrap();
    ok(
        &memplan(&[
            "plan",
            &g,
            "--rewrite",
            "tile",
            "--tile",
            "2",
            "--strategy",
            "heuristic",
            "-o",
            out,
        ]),
        "plan",
    );
    ok(&memplan(&["check", &g, out]), "check as planned");
    // Same interface, same sizes: a strip op now computes something else.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    assert_eq!(doc["rewrites"][0]["pass"], "tile", "{}", doc["rewrites"]);
    let ops = doc["rewritten_graph"]["ops"].as_array_mut().unwrap();
    let k = ops
        .iter()
        .position(|o| o["type"] == "relu")
        .expect("a relu");
    ops[k]["type"] = serde_json::json!("sigmoid");
    let name = ops[k]["name"].as_str().unwrap().to_string();
    let edited = dir.path().join("edited.plan.json");
    std::fs::write(&edited, doc.to_string()).unwrap();
    let edited = edited.to_str().unwrap();
    for cmd in ["check", "run"] {
        let r = memplan(&[cmd, &g, edited]);
        assert_eq!(r.status.code(), Some(1), "{cmd}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(
            err.contains(&format!(
                "is not the graph its recorded rewrites (tile) and conv algorithms give: \
                 ops[{k}] ({name:?}).type: expected \"relu\", found \"sigmoid\""
            )),
            "{cmd}: {err}"
        );
    }
}

#[test]
fn the_cli_plan_equals_the_library_pipeline_plan_for_the_same_options() {
    let dir = tempfile::tempdir().unwrap();
    let Some(g) = zoo("mobilenet_v2.1.inference") else {
        return;
    };
    let out = dir.path().join("equal.plan.json");
    let out = out.to_str().unwrap();
    let r = memplan(&[
        "plan",
        &g,
        "--strategy",
        "heuristic",
        "--rewrite",
        "fuse",
        "-o",
        out,
    ]);
    ok(&r, "plan");
    let cli = Plan::parse(&std::fs::read_to_string(out).unwrap()).unwrap();
    let graph = Graph::parse(&std::fs::read_to_string(&g).unwrap()).unwrap();
    let opts = PipelineOptions {
        strategy: Strategy::Heuristic,
        rewrite: vec![Rewrite::Fuse],
        ..PipelineOptions::default()
    };
    let lib = pipeline::run(&graph, &opts, &pipeline::Control::default()).unwrap();
    assert_eq!(without_timing(&cli), without_timing(&lib.plan));
}

#[test]
fn options_that_cannot_be_combined_get_the_pipeline_error() {
    let r = memplan(&["plan", "sample", "--tiers", "--budget", "80%"]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("tiers and budget cannot be combined"), "{err}");
    let r = memplan(&["plan", "sample", "--rewrite", "fusion"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("unknown rewrite \"fusion\""));
}
