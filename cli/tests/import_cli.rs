//! `memplan import onnx` end to end: an ONNX model built byte by byte imports, plans, passes
//! the independent checker and runs; bad models and options fail with a clear message and a
//! non-zero exit, writing nothing.

#[path = "../../tests/support/onnx_writer.rs"]
mod onnx_writer;

use std::path::Path;
use std::process::Command;

mod common;

fn memplan() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
}

#[test]
fn an_imported_onnx_model_plans_checks_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("cnn.onnx");
    std::fs::write(&model, onnx_writer::small_cnn(true)).unwrap();
    let graph = dir.path().join("cnn.json");
    let out = memplan()
        .args(["import", "onnx"])
        .arg(&model)
        .arg("-o")
        .arg(&graph)
        .args(["--input-shape", "x=4,3,8,8", "--name", "cnn.4"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("cnn.4: 7 ops"), "{err}");
    let text = std::fs::read_to_string(&graph).unwrap();
    assert!(text.contains("\"memplan-graph/1\""));
    // `plan --rewrite fuse` fuses conv → relu: the plan refers to the rewritten graph it writes.
    let plan = dir.path().join("cnn.plan.json");
    let fused = dir.path().join("cnn.fused.json");
    let out = memplan()
        .arg("plan")
        .arg(&graph)
        .arg("-o")
        .arg(&plan)
        .args(["--rewrite", "fuse", "--graph-out"])
        .arg(&fused)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::check_plan_py(&fused, &plan, None);
    let out = memplan()
        .arg("run")
        .arg(&fused)
        .arg(&plan)
        .arg("--original")
        .arg(&graph)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("outputs equal     yes"), "{stdout}");
    assert!(stdout.contains("computes the same outputs"), "{stdout}");
}

#[test]
fn import_failures_say_what_to_do_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let unshaped = dir.path().join("unshaped.onnx");
    std::fs::write(&unshaped, onnx_writer::small_cnn(false)).unwrap();
    let shaped = dir.path().join("shaped.onnx");
    std::fs::write(&shaped, onnx_writer::small_cnn(true)).unwrap();
    let graph = dir.path().join("g.json");
    let cases: [(&Path, &[&str], &str); 4] = [
        (&unshaped, &["--input-shape", "x=1,3,8,8"], "infer_shapes"),
        (&shaped, &[], "--input-shape"),
        (
            &shaped,
            &["--input-shape", "x=1,3,8,8", "--input-shape", "x=2,3,8,8"],
            "given twice",
        ),
        (&shaped, &["--input-shape", "x:1,3"], "NAME=d0,d1"),
    ];
    for (model, args, want) in cases {
        let out = memplan()
            .args(["import", "onnx"])
            .arg(model)
            .arg("-o")
            .arg(&graph)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!graph.exists(), "{args:?} wrote a graph");
    }
}
