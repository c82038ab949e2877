//! `memplan plan --rewrite fuse`: the plan refers to the fused graph written by --graph-out,
//! the independent checker accepts it, `memplan run --original` proves it computes the input
//! graph's outputs; by default (and with --no-fuse) the input graph is planned as it is.

use memplan::graph::Graph;
use std::process::Command;

mod common;
use common::{check_plan_py, shared};

#[test]
fn the_cli_plans_the_fused_graph_and_the_checker_accepts_it() {
    let Some(g) = shared::zoo_path("resnet18.1.inference") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (f, p) = (dir.path().join("fused.json"), dir.path().join("plan.json"));
    let bin = env!("CARGO_BIN_EXE_memplan");
    let out = Command::new(bin)
        .args([
            "plan",
            g.to_str().unwrap(),
            "--rewrite",
            "fuse",
            "--graph-out",
        ])
        .arg(&f)
        .arg("-o")
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fused = Graph::parse(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert!(fused.ops.iter().any(|o| o.fused.is_some()));
    check_plan_py(&f, &p, None);
    let out = Command::new(bin)
        .arg("run")
        .arg(&f)
        .arg(&p)
        .arg("--original")
        .arg(&g)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // --no-fuse plans the input graph as it is
    let out = Command::new(bin)
        .args(["plan", g.to_str().unwrap(), "--no-fuse", "--graph-out"])
        .arg(&f)
        .arg("-o")
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success());
    let same = Graph::parse(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert!(same.ops.iter().all(|o| o.fused.is_none()));
}
