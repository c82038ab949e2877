//! tools/export_pytorch.py: its Python tests pass (the trace-to-graph conversion always; the
//! torchvision traces where torch is installed, skipped with a note otherwise), and every
//! graph they write parses as memplan-graph/1, plans, validates and runs on the CPU executor.
//! Symbolic graphs (`*.symbolic.json`, from `--dynamic-batch`) are planned once for their
//! range, checked over it, and their plans at the range's ends run on the executor.

use memplan::symbolic::{check_symbolic, plan_symbolic_with, SymbolicGraph, SymbolicOptions};
use memplan::{plan, validate, Graph, PipelineOptions, PlanOptions};
use memplan_executor::{execute, ExecOptions};
use std::process::Command;

#[path = "support/shared.rs"]
mod shared;

#[test]
fn the_pytorch_exporter_tests_pass_and_its_graphs_plan_and_run() {
    if !shared::python3() {
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .arg(format!("{root}/tools/test_export_pytorch.py"))
        .arg(dir.path())
        .output()
        .expect("python3 runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    if err.contains("torch/torchvision not installed") {
        shared::optional("torch/torchvision not installed: the exporter's tracing is not tested");
    }
    let mut graphs = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.to_string_lossy().ends_with(".symbolic.json") {
            let sg = SymbolicGraph::parse(&std::fs::read_to_string(&path).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let sp = plan_symbolic_with(
                &sg,
                &PipelineOptions::default(),
                &SymbolicOptions::default(),
            )
            .unwrap();
            check_symbolic(&sg, &sp, 8, 0).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for b in [sg.min_corner(), sg.max_corner()] {
                let (g, p) = (sg.instantiate(&b).unwrap(), sp.instantiate(&b).unwrap());
                let r = execute(&g, &p, &ExecOptions::default()).unwrap();
                assert!(
                    r.outputs_equal,
                    "{} at {b}: {:?}",
                    sg.name, r.first_mismatch
                );
            }
            graphs += 1;
            continue;
        }
        let g = Graph::parse(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let p = plan(&g, &PlanOptions::default()).unwrap();
        validate(&g, &p, None).unwrap();
        let r = execute(&g, &p, &ExecOptions::default()).unwrap();
        assert!(r.outputs_equal, "{}: {:?}", g.name, r.first_mismatch);
        graphs += 1;
    }
    assert!(graphs >= 1, "the conversion test writes at least one graph");
}
