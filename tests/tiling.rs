//! Spatial tiling end to end: the zoo's resnet18 inference graph tiled into 2 and 4 strips
//! plans, validates (our validator and `../shared/tools/check_plan.py` on the written graph),
//! runs on the CPU executor to the same outputs as the untiled graph, and lowers the peak; the
//! resolution script scales zoo graphs and names the op it cannot scale.

use memplan::graph::Graph;
use memplan::passes::tile::{tile_graph, Tile, TileSpec};
use memplan::passes::{replay, run_pipeline, Pass};
use memplan::{plan, validate, OrderMode, PlanOptions, Strategy};
use memplan_executor::{self as executor, ExecOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/shared.rs"]
mod shared;

fn zoo(name: &str) -> Option<(PathBuf, Graph)> {
    let p = shared::zoo_path(name)?;
    let g = Graph::parse(&std::fs::read_to_string(&p).unwrap()).unwrap();
    Some((p, g))
}

fn heuristic() -> PlanOptions {
    PlanOptions {
        order: OrderMode::Auto,
        strategy: Strategy::Heuristic,
        ..PlanOptions::default()
    }
}

/// check_plan.py on the written files (see tests/support/shared.rs without it).
fn check_plan_py(graph: &Path, plan: &Path) {
    let Some(script) = shared::check_plan_py() else {
        return;
    };
    let r = Command::new("python3")
        .arg(script)
        .arg(graph)
        .arg(plan)
        .output()
        .expect("python3 runs");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|_| panic!("check_plan.py: {}", String::from_utf8_lossy(&r.stderr)));
    assert_eq!(v["valid"], true, "{}", v["error"]);
}

#[test]
fn resnet18_tiled_into_2_and_4_strips_plans_validates_and_computes_the_same_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_, g)) = zoo("resnet18.1.inference") else {
        return;
    };
    let untiled = plan(&g, &heuristic()).unwrap().stats.peak_bytes;
    for n in [2, 4] {
        let pass = Tile::new(TileSpec::Strips(n));
        let out = run_pipeline(&g, &[&pass as &dyn Pass]).unwrap();
        let (tiled, reports) = (out.graph, out.reports);
        // The recorded regions give the same graph again, without choosing.
        assert_eq!(replay(&g, &out.steps).unwrap(), tiled);
        assert!(
            reports[0].notes.iter().any(|l| l.contains("strips")),
            "{:?}",
            reports[0].notes
        );
        // What `memplan plan --graph-out` writes, read back as the checker reads it.
        let graph_path = dir.path().join(format!("resnet18.tile{n}.json"));
        std::fs::write(&graph_path, tiled.to_json()).unwrap();
        let reread = Graph::parse(&std::fs::read_to_string(&graph_path).unwrap()).unwrap();
        assert_eq!(reread, tiled);
        let p = plan(&tiled, &heuristic()).unwrap();
        validate(&tiled, &p, None).unwrap();
        let plan_path = dir.path().join(format!("resnet18.tile{n}.plan.json"));
        std::fs::write(&plan_path, p.to_json()).unwrap();
        check_plan_py(&graph_path, &plan_path);
        assert!(
            p.stats.peak_bytes < untiled,
            "{n} strips: peak {} not below the untiled {untiled}",
            p.stats.peak_bytes
        );
        let run = executor::execute(&tiled, &p, &ExecOptions::default()).unwrap();
        assert!(run.outputs_equal, "{n} strips: the plan run differs");
        let eq = executor::equivalence(&g, &tiled, &ExecOptions::default(), 0.0).unwrap();
        assert!(eq.outputs_equal, "{n} strips: {:?}", eq.first_mismatch);
        assert_eq!(eq.outputs_compared, 1);
    }
}

#[test]
fn auto_tiling_keeps_the_modelled_overhead_within_its_limit() {
    let Some((_, g)) = zoo("resnet18.1.inference") else {
        return;
    };
    let (tiled, summary) = tile_graph(&g, &Tile::new(TileSpec::Auto)).unwrap();
    assert!(!summary.regions.is_empty());
    assert!(summary.overhead() <= 0.10, "{}", summary.overhead());
    assert!(summary.overhead() > 0.0);
    let eq = executor::equivalence(&g, &tiled, &ExecOptions::default(), 0.0).unwrap();
    assert!(eq.outputs_equal, "{:?}", eq.first_mismatch);
    let before = plan(&g, &heuristic()).unwrap().stats.peak_bytes;
    let after = plan(&tiled, &heuristic()).unwrap().stats.peak_bytes;
    assert!(
        after * 2 < before,
        "auto tiling: {after} vs untiled {before}"
    );
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benchmarks/scale_resolution.py")
}

#[test]
fn the_resolution_script_scales_vgg16_to_512_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let Some((src, g)) = zoo("vgg16.1.inference") else {
        return;
    };
    if !shared::python3() {
        return;
    }
    let out = dir.path().join("vgg16.512.json");
    let r = Command::new("python3")
        .arg(script())
        .arg(&src)
        .arg(&out)
        .args(["--size", "512"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let big = Graph::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let shape = |g: &Graph, op: usize| g.tensor(g.ops[op].outputs[0]).shape.clone().unwrap();
    // The first conv keeps 64 channels at 512 × 512 (4 bytes per element).
    assert_eq!(shape(&big, 0), vec![1, 64, 512, 512]);
    assert_eq!(big.tensor(big.ops[0].outputs[0]).size, 64 * 512 * 512 * 4);
    let factor = (512.0f64 / 224.0).powi(2);
    let ratio = big.ops[0].flops.unwrap() / g.ops[0].flops.unwrap();
    assert!((ratio - factor).abs() < 1e-9, "{ratio}");
    // The adaptive pool keeps its 7 × 7 output, so the classifier is unchanged.
    let last = big.ops.len() - 1;
    assert_eq!(shape(&big, last), shape(&g, last));
    assert_eq!(big.ops[last].flops, g.ops[last].flops);
}

#[test]
fn the_resolution_script_names_the_op_it_cannot_scale() {
    let dir = tempfile::tempdir().unwrap();
    if !shared::python3() {
        return;
    }
    let src = dir.path().join("upsample.json");
    std::fs::write(
        &src,
        r#"{"format": "memplan-graph/1", "name": "u",
            "tensors": [{"name": "x", "size": 602112, "shape": [1,3,224,224], "dtype": "f32", "kind": "input"},
                        {"name": "y", "size": 2408448, "shape": [1,3,448,448], "dtype": "f32", "kind": "output"}],
            "ops": [{"name": "up", "type": "upsample_nearest2d", "inputs": ["x"], "outputs": ["y"]}]}"#,
    )
    .unwrap();
    let r = Command::new("python3")
        .arg(script())
        .arg(&src)
        .arg(dir.path().join("upsample.out.json"))
        .args(["--size", "512"])
        .output()
        .unwrap();
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("'up'") && err.contains("upsample_nearest2d"),
        "{err}"
    );
}
