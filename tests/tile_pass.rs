//! The tiling pass's rules, black box: row ranges through convolutions and pools, strip
//! kernels that stay real, the overhead limit, determinism, cancellation and spec parsing;
//! tiled graphs compute the original's outputs (`memplan_executor::equivalence`) and plan,
//! validate and run with a lower peak. (Zoo-scale tiling is in tests/tiling.rs.)

use memplan::graph::Graph;
use memplan::ops::kernel::{self as kernels, Kernel, KernelMode};
use memplan::passes::tile::*;
use memplan::CancelToken;
use memplan::{plan, validate, OrderMode, PlanOptions, Strategy};
use memplan_executor::{self as executor, ExecOptions};

const CONV3: RowMap = RowMap::Window {
    span: 3,
    stride: 1,
    pad: 1,
};

#[test]
fn row_ranges_back_propagate_through_a_padded_3x3_convolution() {
    // Output rows [0, 4) of an 8-row map read rows -1..5: rows [0, 5), one padded row on top.
    assert_eq!(input_rows(CONV3, (0, 4), 8), Some(((0, 5), 1, 0)));
    // The second half reads [3, 9): rows [3, 8) and one padded row below.
    assert_eq!(input_rows(CONV3, (4, 8), 8), Some(((3, 8), 0, 1)));
    // A middle strip reads one halo row each side, no padding.
    assert_eq!(input_rows(CONV3, (2, 5), 8), Some(((1, 6), 0, 0)));
}

#[test]
fn row_ranges_follow_stride_and_dilation() {
    // 3×3, stride 2, padding 1 on 16 rows: outputs [2, 5) start at 2·2−1 = 3 and end at
    // 4·2−1+3 = 10.
    let s2 = RowMap::Window {
        span: 3,
        stride: 2,
        pad: 1,
    };
    assert_eq!(input_rows(s2, (2, 5), 16), Some(((3, 10), 0, 0)));
    assert_eq!(input_rows(s2, (0, 1), 16), Some(((0, 2), 1, 0)));
    // The last output of a 7-row map (oh = 4) reads rows 5..8: [5, 7), one padded row.
    assert_eq!(input_rows(s2, (3, 4), 7), Some(((5, 7), 0, 1)));
    // Dilation 2 with kernel 3 spans 5 rows; padding 2.
    let dil = RowMap::Window {
        span: 5,
        stride: 1,
        pad: 2,
    };
    assert_eq!(input_rows(dil, (0, 3), 10), Some(((0, 5), 2, 0)));
    assert_eq!(input_rows(dil, (8, 10), 10), Some(((6, 10), 0, 2)));
    // A 2×2 stride-2 pool: outputs [1, 3) read [2, 6).
    let pool = RowMap::Window {
        span: 2,
        stride: 2,
        pad: 0,
    };
    assert_eq!(input_rows(pool, (1, 3), 8), Some(((2, 6), 0, 0)));
    assert_eq!(input_rows(RowMap::Same, (3, 7), 9), Some(((3, 7), 0, 0)));
}

fn t(name: &str, shape: &[u64], kind: &str) -> String {
    let n: u64 = shape.iter().product();
    format!(
        r#"{{"name": "{name}", "size": {}, "shape": {shape:?}, "dtype": "f32", "kind": "{kind}"}}"#,
        n * 4
    )
}

/// x → conv 3×3 (16 ch) → relu → conv 3×3 stride 2 dilation 1 → batch_norm → max_pool
/// 3×3/2 pad 1 → conv 1×1 → + residual from the pool → out: the wide intermediates make
/// tiling worth it.
fn chain() -> Graph {
    let tensors = [
        t("x", &[1, 2, 23, 9], "input"),
        t("w1", &[16, 2, 3, 3], "weight"),
        t("c1", &[1, 16, 23, 9], "activation"),
        t("r1", &[1, 16, 23, 9], "activation"),
        t("w2", &[16, 16, 3, 3], "weight"),
        t("c2", &[1, 16, 12, 5], "activation"),
        t("g", &[16], "weight"),
        t("b", &[16], "weight"),
        t("m", &[16], "weight"),
        t("v", &[16], "weight"),
        t("n2", &[1, 16, 12, 5], "activation"),
        t("p", &[1, 16, 6, 3], "activation"),
        t("w3", &[16, 16, 1, 1], "weight"),
        t("c3", &[1, 16, 6, 3], "activation"),
        t("y", &[1, 16, 6, 3], "output"),
    ]
    .join(",");
    let ops = r#"
      {"name": "conv1", "type": "conv2d", "inputs": ["x", "w1"], "outputs": ["c1"], "flops": 1000,
       "attrs": {"stride": [1,1], "padding": [1,1], "dilation": [1,1], "groups": 1}},
      {"name": "relu1", "type": "relu", "inputs": ["c1"], "outputs": ["r1"]},
      {"name": "conv2", "type": "conv2d", "inputs": ["r1", "w2"], "outputs": ["c2"], "flops": 1000,
       "attrs": {"stride": [2,2], "padding": [1,1], "dilation": [1,1], "groups": 1}},
      {"name": "bn", "type": "batch_norm", "inputs": ["c2", "g", "b", "m", "v"], "outputs": ["n2"]},
      {"name": "pool", "type": "max_pool2d", "inputs": ["n2"], "outputs": ["p"]},
      {"name": "conv3", "type": "conv2d", "inputs": ["p", "w3"], "outputs": ["c3"]},
      {"name": "add", "type": "add", "inputs": ["c3", "p"], "outputs": ["y"]}"#;
    Graph::parse(&format!(
        r#"{{"format": "memplan-graph/1", "name": "chain", "tensors": [{tensors}], "ops": [{ops}]}}"#
    ))
    .unwrap()
}

fn forced(n: usize) -> Tile {
    Tile {
        max_overhead: f64::INFINITY,
        ..Tile::new(TileSpec::Strips(n))
    }
}

#[test]
fn a_tiny_conv_chain_tiled_into_2_and_3_strips_computes_the_same_outputs() {
    let g = chain();
    for n in [2, 3] {
        let (tiled, summary) = tile_graph(&g, &forced(n)).unwrap();
        assert!(!summary.regions.is_empty(), "{n} strips: nothing tiled");
        assert!(summary.regions.iter().all(|r| r.strips == n));
        assert!(tiled
            .ops
            .iter()
            .any(|o| o.name == format!("conv1@s{}", n - 1)));
        assert!(tiled.ops.iter().any(|o| o.op_type == "slice_rows"));
        // Inputs, weights and outputs keep their names.
        for name in ["x", "w1", "w2", "w3", "y"] {
            assert!(tiled.tensor_by_name(name).is_some(), "{name} lost");
        }
        let eq = executor::equivalence(&g, &tiled, &ExecOptions::default(), 0.0).unwrap();
        assert!(eq.outputs_equal, "{n} strips: {:?}", eq.first_mismatch);
        // The rewritten graph plans, validates and runs to the same outputs.
        let opts = PlanOptions {
            order: OrderMode::Given,
            strategy: Strategy::Heuristic,
            ..PlanOptions::default()
        };
        let p = plan(&tiled, &opts).unwrap();
        assert!(validate(&tiled, &p, None).is_ok());
        let untiled = plan(&g, &opts).unwrap();
        assert!(
            p.stats.peak_bytes < untiled.stats.peak_bytes,
            "{n} strips: peak {} not below {}",
            p.stats.peak_bytes,
            untiled.stats.peak_bytes
        );
        let run = executor::execute(&tiled, &p, &ExecOptions::default()).unwrap();
        assert!(run.outputs_equal);
    }
}

#[test]
fn every_strip_kernel_is_real_and_strips_cover_the_output_exactly() {
    let (tiled, _) = tile_graph(&chain(), &forced(3)).unwrap();
    for op in &tiled.ops {
        let k = kernels::select(&tiled, op, KernelMode::Real);
        assert_ne!(k, Kernel::Mix, "op {} fell back to mixing", op.name);
    }
    let concat = tiled.ops.iter().find(|o| o.op_type == "concat").unwrap();
    let rows: u64 = concat
        .inputs
        .iter()
        .map(|&t| tiled.tensor(t).shape.as_ref().unwrap()[2])
        .sum();
    let out = tiled.tensor(concat.outputs[0]);
    assert_eq!(rows, out.shape.as_ref().unwrap()[2]);
}

#[test]
fn the_overhead_limit_keeps_expensive_tilings_out() {
    let g = chain();
    let none = Tile {
        max_overhead: 0.0,
        ..Tile::new(TileSpec::Strips(3))
    };
    let (out, summary) = tile_graph(&g, &none).unwrap();
    assert!(summary.regions.is_empty());
    assert_eq!(out, g);
    let auto = Tile {
        max_overhead: f64::INFINITY,
        ..Tile::new(TileSpec::Auto)
    };
    let (_, summary) = tile_graph(&g, &auto).unwrap();
    assert!(summary.regions.iter().all(|r| r.strips.is_power_of_two()));
    assert!(summary.overhead() > 0.0);
}

#[test]
fn auto_tiling_twice_gives_the_same_graph() {
    let auto = Tile {
        max_overhead: f64::INFINITY,
        ..Tile::new(TileSpec::Auto)
    };
    let (a, sa) = tile_graph(&chain(), &auto).unwrap();
    let (b, sb) = tile_graph(&chain(), &auto).unwrap();
    assert_eq!(a, b);
    assert_eq!(sa, sb);
}

#[test]
fn tiling_with_a_raised_token_returns_a_valid_graph_at_once() {
    let token = CancelToken::new();
    token.cancel();
    let auto = Tile {
        max_overhead: f64::INFINITY,
        cancel: Some(token),
        ..Tile::new(TileSpec::Auto)
    };
    let g = chain();
    let started = std::time::Instant::now();
    let (out, summary) = tile_graph(&g, &auto).unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // Stopped before the first region: nothing tiled, the graph as given.
    assert!(summary.regions.is_empty());
    assert_eq!(out, g);
}

#[test]
fn tile_specs_parse_from_the_command_line() {
    assert_eq!(TileSpec::parse("off"), Ok(None));
    assert_eq!(TileSpec::parse("auto"), Ok(Some(TileSpec::Auto)));
    assert_eq!(TileSpec::parse("4"), Ok(Some(TileSpec::Strips(4))));
    assert!(TileSpec::parse("1").is_err());
    assert!(TileSpec::parse("x").unwrap_err().contains("strip count"));
}

#[test]
fn an_op_that_may_not_be_recomputed_is_never_cut_into_strips() {
    // Strips recompute halo rows, so a relu flagged `"recompute": false` stays whole (as a
    // dropout would).
    let mut v = chain().to_value();
    v["ops"][1]["recompute"] = serde_json::json!(false);
    let g = Graph::parse(&v.to_string()).unwrap();
    for n in [2, 3] {
        let (tiled, _) = tile_graph(&g, &forced(n)).unwrap();
        assert!(
            !tiled.ops.iter().any(|o| o.name.starts_with("relu1@s")),
            "{n} strips"
        );
        assert!(tiled.ops.iter().any(|o| o.name == "relu1"), "{n} strips");
    }
}
