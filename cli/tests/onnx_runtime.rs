//! memplan's CPU executor against an independent runtime: tools/test_onnx_runtime.py imports
//! ONNX models with their weights (`memplan import onnx --weights-out`), plans them and runs
//! the plans on those weights and a real input (`memplan run --data ... --outputs-out ...
//! --require-real-kernels`, with this binary), runs ONNX Runtime on the same input and
//! requires every output within the documented tolerance. Small CNNs built with onnx.helper
//! always; torchvision resnet18 and mobilenet_v2 (both exporters) where torch is installed.
//!
//! Needs python3 with onnx, onnxruntime and numpy: skipped with a note without them, a
//! failure under `MEMPLAN_REQUIRE_SHARED=1`. `MEMPLAN_ONNX_TORCH=0` leaves out the
//! torchvision models.

mod common;

use common::shared;
use std::process::Command;

#[test]
fn onnx_models_run_on_their_weights_match_onnx_runtime() {
    if !shared::python3() {
        return;
    }
    let probe = Command::new("python3")
        .args(["-c", "import onnx, onnxruntime, numpy"])
        .output()
        .expect("python3 runs");
    if !probe.status.success() {
        shared::skip(&format!(
            "python3 cannot import onnx, onnxruntime and numpy (pip install onnx onnxruntime): {}",
            String::from_utf8_lossy(&probe.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
        return;
    }
    let script = format!(
        "{}/../tools/test_onnx_runtime.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new("python3")
        .arg(&script)
        .arg("-v")
        .env("MEMPLAN_BIN", env!("CARGO_BIN_EXE_memplan"))
        .output()
        .expect("python3 runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{err}");
    // The per-model differences, shown with --nocapture.
    for line in err.lines().filter(|l| l.contains("max abs diff")) {
        println!("{line}");
    }
    assert!(
        err.contains("cnn_resnet_like: output y"),
        "the small models ran:\n{err}"
    );
    if err.contains("torch/torchvision not installed") {
        shared::optional(
            "torch/torchvision not installed: resnet18 and mobilenet_v2 are not compared",
        );
    }
}
