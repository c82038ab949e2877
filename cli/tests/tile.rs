//! `memplan plan --tile`: the rewritten graph written by `--graph-out` is what the plan
//! refers to, and `memplan run --original` proves it computes the untiled graph's outputs.

use std::process::{Command, Output};

mod common;

fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plan_with_tile_auto_writes_a_graph_that_runs_to_the_original_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let Some(zoo) = common::zoo("resnet18.1.inference") else {
        return;
    };
    let (g, p) = (
        dir.path().join("r18.tiled.json"),
        dir.path().join("r18.tiled.plan.json"),
    );
    let r = memplan(&[
        "plan",
        &zoo,
        "--conv-algos",
        "off",
        "--tile",
        "auto",
        "--strategy",
        "heuristic",
        "--graph-out",
        g.to_str().unwrap(),
        "-o",
        p.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(
        err.contains("tile: region") && err.contains("strips"),
        "{err}"
    );
    let r = memplan(&[
        "run",
        g.to_str().unwrap(),
        p.to_str().unwrap(),
        "--original",
        &zoo,
    ]);
    assert!(
        r.status.success(),
        "{}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
}

#[test]
fn a_bad_tile_value_is_rejected_with_a_message() {
    let r = memplan(&["plan", "sample", "--tile", "1"]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("strip count"));
}
