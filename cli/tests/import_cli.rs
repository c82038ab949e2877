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

/// `memplan ARGS` in `dir`, asserting success; its stdout and stderr.
fn ok(dir: &Path, args: &[&str]) -> (String, String) {
    let out = memplan().current_dir(dir).args(args).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{args:?}: {stderr}{stdout}");
    (stdout, stderr)
}

#[test]
fn imported_weights_and_an_input_run_through_the_cli_to_the_hand_computed_outputs() {
    use memplan::data_file::{self, TensorData, TensorFile};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tiny.onnx"), onnx_writer::tiny_with_weights()).unwrap();
    let (_, err) = ok(
        d,
        &[
            "import",
            "onnx",
            "tiny.onnx",
            "-o",
            "g.json",
            "--weights-out",
            "w.safetensors",
        ],
    );
    assert!(err.contains("weights: 5 tensors"), "{err}");
    ok(d, &["plan", "g.json", "-o", "p.json"]);
    let mut x = TensorFile::default();
    x.tensors.insert(
        "x".into(),
        TensorData::from_f32(vec![1, 1, 3, 3], &onnx_writer::TINY_X),
    );
    std::fs::write(d.join("x.safetensors"), data_file::write(&x)).unwrap();
    let (out, err) = ok(
        d,
        &[
            "run",
            "g.json",
            "p.json",
            "--data",
            "w.safetensors",
            "--data",
            "x.safetensors",
            "--outputs-out",
            "y.safetensors",
            "--require-real-kernels",
        ],
    );
    assert!(out.contains("outputs equal     yes"), "{out}");
    assert!(out.contains("6 inputs/weights from --data"), "{out}");
    assert!(!err.contains("WARNING"), "{err}");
    let y = data_file::read(&std::fs::read(d.join("y.safetensors")).unwrap()).unwrap();
    let y = &y.tensors["y"];
    assert_eq!(y.shape, vec![1, 4]);
    for (a, b) in y.to_f32().unwrap().iter().zip(onnx_writer::tiny_expected()) {
        assert!((a - b).abs() <= 1e-5, "{y:?}");
    }
}

#[test]
fn run_data_that_does_not_fit_the_graph_is_bad_input_naming_the_tensor() {
    use memplan::data_file::{self, Dtype, TensorData, TensorFile};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tiny.onnx"), onnx_writer::tiny_with_weights()).unwrap();
    ok(d, &["import", "onnx", "tiny.onnx", "-o", "g.json"]);
    ok(d, &["plan", "g.json", "-o", "p.json"]);
    let cases: [(&str, TensorData, &str); 3] = [
        (
            "nope",
            TensorData::from_f32(vec![1], &[0.0]),
            "has no such tensor",
        ),
        (
            "x",
            TensorData::new("x", Dtype::I32, vec![9], vec![0; 36]).unwrap(),
            "dtype I32 in the file, F32 in the graph",
        ),
        (
            "x",
            TensorData::from_f32(vec![4], &[0.0; 4]),
            "16 bytes given",
        ),
    ];
    for (name, t, want) in cases {
        let mut f = TensorFile::default();
        f.tensors.insert(name.into(), t);
        std::fs::write(d.join("bad.safetensors"), data_file::write(&f)).unwrap();
        let out = memplan()
            .current_dir(d)
            .args(["run", "g.json", "p.json", "--data", "bad.safetensors"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!("{name:?}")) && err.contains(want),
            "{err}"
        );
        // Refused data gets no warning that its bytes are used (the wrong size above has
        // another shape too).
        assert!(!err.contains("warning"), "{err}");
    }
    // Not a tensor file at all.
    std::fs::write(d.join("bad.safetensors"), b"{}").unwrap();
    let out = memplan()
        .current_dir(d)
        .args(["run", "g.json", "p.json", "--data", "bad.safetensors"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("truncated tensor file"));
}

#[test]
fn running_data_through_a_mixing_kernel_warns_and_fails_when_real_kernels_are_required() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tiny.onnx"), onnx_writer::tiny_with_weights()).unwrap();
    ok(
        d,
        &[
            "import",
            "onnx",
            "tiny.onnx",
            "-o",
            "g.json",
            "--weights-out",
            "w.safetensors",
        ],
    );
    // The linear layer renamed to a type without a kernel.
    let g = std::fs::read_to_string(d.join("g.json")).unwrap();
    std::fs::write(d.join("g.json"), g.replace("\"linear\"", "\"gemm\"")).unwrap();
    ok(d, &["plan", "g.json", "-o", "p.json"]);
    let (out, err) = ok(d, &["run", "g.json", "p.json", "--data", "w.safetensors"]);
    assert!(
        err.contains("WARNING: 1 ops ran the mixing kernel") && err.contains("fc (gemm)"),
        "{err}"
    );
    assert!(out.contains("mixing kernel     1 ops: fc (gemm)"), "{out}");
    let out = memplan()
        .current_dir(d)
        .args([
            "run",
            "g.json",
            "p.json",
            "--data",
            "w.safetensors",
            "--require-real-kernels",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("fc (gemm)") && err.contains("--require-real-kernels"),
        "{err}"
    );
}

#[test]
fn import_with_a_symbol_writes_a_symbolic_graph_that_plans_and_instantiates() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("cnn.onnx");
    std::fs::write(&model, onnx_writer::small_cnn(true)).unwrap();
    let graph = dir.path().join("cnn.sym.json");
    let m = model.to_str().unwrap();
    let g = graph.to_str().unwrap();
    let out = common::memplan(&["import", "onnx", m, "--symbol", "batch=1..16", "-o", g]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("symbolic: batch=1..16"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&graph).unwrap()).unwrap();
    assert_eq!(doc["symbols"]["batch"]["max"], 16);
    let x = &doc["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "x")
        .unwrap();
    assert_eq!(x["size"], "768*batch");
    // `memplan plan` plans it for the whole range; `instantiate` gives a concrete graph.
    let plan = dir.path().join("cnn.sym.plan.json");
    let p = plan.to_str().unwrap();
    let out = common::memplan(&["plan", g, "-o", p]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at3 = dir.path().join("cnn.3.json");
    let out = common::memplan(&["instantiate", g, "batch=3", "-o", at3.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&at3).unwrap();
    assert!(
        text.contains("\"size\": 2304") || text.contains("\"size\":2304"),
        "{text}"
    );
}

#[test]
fn bad_symbol_options_fail_naming_the_option_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("cnn.onnx");
    std::fs::write(&model, onnx_writer::small_cnn(true)).unwrap();
    let graph = dir.path().join("g.json");
    let m = model.to_str().unwrap();
    let g = graph.to_str().unwrap();
    for (spec, want) in [
        ("batch=16..1", "min 16 is greater than max 1"),
        ("batch:1..4", "expected NAME=MIN..MAX"),
        ("seq=1..4", "no dimension named \"seq\""),
    ] {
        let out = common::memplan(&["import", "onnx", m, "--symbol", spec, "-o", g]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}");
        assert!(
            err.contains(&format!("--symbol {spec}")) && err.contains(want),
            "{spec}: {err}"
        );
        assert!(!graph.exists(), "{spec}");
    }
}

#[test]
fn import_refuses_outputs_over_the_model_or_over_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    let bytes = onnx_writer::tiny_with_weights();
    std::fs::write(&model, &bytes).unwrap();
    let m = model.to_str().unwrap();
    let x = dir.path().join("x.json");
    let x = x.to_str().unwrap();
    for (flags, says) in [
        (vec!["-o", m], format!("-o {m} is also the model")),
        (
            vec!["-o", x, "--weights-out", m],
            format!("--weights-out {m} is also the model"),
        ),
        (
            vec!["-o", x, "--weights-out", x],
            format!("--weights-out {x} is the same file as -o {x}"),
        ),
    ] {
        let out = memplan()
            .args(["import", "onnx", m])
            .args(&flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(&says), "{flags:?}: {err}");
        assert_eq!(std::fs::read(&model).unwrap(), bytes, "{flags:?}");
        assert!(!Path::new(x).exists(), "{flags:?}");
    }
}

#[test]
fn import_names_a_missing_model_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.onnx");
    let out = memplan()
        .args(["import", "onnx"])
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
}
