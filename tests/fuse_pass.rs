//! The fusion pass's rules, black box: which chains fuse (conv → batch_norm → activation
//! prefixes, element-wise chains, zero pads folded into convs), which stay (second readers,
//! graph outputs, training graphs, operands that depend on a member), idempotence, and that
//! every fused graph computes the original's outputs bit for bit
//! (`memplan_executor::equivalence`). (Zoo graphs are in tests/fusion.rs.)

use memplan::graph::Graph;
use memplan::passes::fuse::*;
use memplan::passes::Pass;
use memplan_executor::{equivalence, ExecOptions, KernelMode};

fn t(name: &str, shape: &[u64], kind: &str) -> String {
    let n: u64 = shape.iter().product();
    format!(
        r#"{{"name": "{name}", "size": {}, "shape": {shape:?}, "dtype": "f32", "kind": "{kind}"}}"#,
        (n * 4).max(1)
    )
}

fn op(name: &str, ty: &str, ins: &[&str], outs: &[&str], extra: &str) -> String {
    format!(
        r#"{{"name": "{name}", "type": "{ty}", "inputs": {ins:?}, "outputs": {outs:?}{extra}}}"#
    )
}

fn graph(tensors: &[String], ops: &[String]) -> Graph {
    Graph::parse(&format!(
        r#"{{"format": "memplan-graph/1", "name": "g", "tensors": [{}], "ops": [{}]}}"#,
        tensors.join(","),
        ops.join(",")
    ))
    .unwrap()
}

const CONV: &str = r#", "attrs": {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1, "transposed": false}"#;

/// conv -> empty -> batch_norm (3 outputs, stats unread) -> relu, as exported.
fn conv_bn_relu(out_kind: &str) -> Vec<String> {
    vec![
        t("x", &[1, 2, 6, 6], "input"),
        t("w", &[3, 2, 3, 3], "weight"),
        t("g", &[3], "weight"),
        t("b", &[3], "weight"),
        t("m", &[3], "weight"),
        t("v", &[3], "weight"),
        t("c", &[1, 3, 6, 6], "activation"),
        r#"{"name": "e", "size": 1, "shape": [0], "dtype": "u8", "kind": "activation"}"#
            .to_string(),
        t("n.0", &[1, 3, 6, 6], "activation"),
        t("n.1", &[0], "activation"),
        t("n.2", &[0], "activation"),
        t("r", &[1, 3, 6, 6], out_kind),
    ]
}

fn conv_bn_relu_ops() -> Vec<String> {
    vec![
        op("conv", "conv2d", &["x", "w"], &["c"], CONV),
        op("empty", "empty", &[], &["e"], ""),
        op(
            "bn",
            "batch_norm",
            &["c", "g", "b", "m", "v"],
            &["n.0", "n.1", "n.2"],
            "",
        ),
        op("relu", "relu", &["n.0"], &["r"], r#", "inplace": [[0, 0]]"#),
    ]
}

fn fused(g: &Graph) -> Graph {
    Fuse::default().run(g).unwrap().graph
}

fn assert_same_outputs(g: &Graph, f: &Graph) {
    assert_same_outputs_with(g, f, &[KernelMode::Real, KernelMode::Mix]);
}

fn assert_same_outputs_with(g: &Graph, f: &Graph, modes: &[KernelMode]) {
    for &kernels in modes {
        let opts = ExecOptions {
            kernels,
            seed: 3,
            ..ExecOptions::default()
        };
        let e = equivalence(g, f, &opts, 0.0).unwrap();
        assert!(e.outputs_equal, "{kernels:?}: {:?}", e.first_mismatch);
    }
}

fn members(g: &Graph) -> Vec<Vec<&str>> {
    g.ops
        .iter()
        .filter_map(|o| o.fused.as_ref())
        .map(|f| f.members.iter().map(|m| m.name.as_str()).collect())
        .collect()
}

#[test]
fn conv_batch_norm_relu_becomes_one_op_and_the_empty_op_keeps_its_place() {
    let g = graph(&conv_bn_relu("output"), &conv_bn_relu_ops());
    let out = Fuse::default().run(&g).unwrap();
    let f = &out.graph;
    assert_eq!(members(f), vec![vec!["conv", "bn", "relu"]]);
    assert_eq!(f.ops.len(), 2);
    assert_eq!(f.ops[0].name, "empty");
    let op = &f.ops[1];
    assert_eq!(op.op_type, "fused:conv2d+batch_norm+relu");
    assert_eq!(op.outputs.len(), 1);
    assert_eq!(f.tensor(op.outputs[0]).name, "r");
    // intermediates and the unread statistics are gone from the graph
    for name in ["c", "n.0", "n.1", "n.2"] {
        assert!(f.tensor_by_name(name).is_none(), "{name}");
    }
    assert_eq!(out.report.ops_before - out.report.ops_after, 2);
    assert_eq!(
        out.report.arena_tensor_bytes_before - out.report.arena_tensor_bytes_after,
        2 * 432 + 2
    );
    assert!(
        out.report.notes[0].contains("not materialised"),
        "{:?}",
        out.report.notes
    );
    assert_same_outputs(&g, f);
}

#[test]
fn the_prefixes_conv_bn_conv_act_and_bn_act_fuse() {
    // conv -> bn (bn output read twice: the chain stops after bn)
    let mut ts = conv_bn_relu("activation");
    ts.push(t("s", &[1, 3, 6, 6], "output"));
    let mut ops = conv_bn_relu_ops();
    ops.push(op("sum", "add", &["r", "n.0"], &["s"], ""));
    let g = graph(&ts, &ops);
    let f = fused(&g);
    assert_eq!(members(&f), vec![vec!["conv", "bn"], vec!["relu", "sum"]]);
    assert_same_outputs(&g, &f);
    // conv -> act
    let g = graph(
        &[
            t("x", &[1, 2, 6, 6], "input"),
            t("w", &[3, 2, 3, 3], "weight"),
            t("c", &[1, 3, 6, 6], "activation"),
            t("y", &[1, 3, 6, 6], "output"),
        ],
        &[
            op("conv", "conv2d", &["x", "w"], &["c"], CONV),
            op("act", "hardtanh", &["c"], &["y"], ""),
        ],
    );
    let f = fused(&g);
    assert_eq!(members(&f), vec![vec!["conv", "act"]]);
    assert_same_outputs(&g, &f);
    // bn -> act (the conv output is also a graph output, so conv stays alone)
    let mut ts = conv_bn_relu("output");
    ts[6] = t("c", &[1, 3, 6, 6], "output");
    let g = graph(&ts, &conv_bn_relu_ops());
    let f = fused(&g);
    assert_eq!(members(&f), vec![vec!["bn", "relu"]]);
    assert_same_outputs(&g, &f);
}

#[test]
fn an_elementwise_chain_takes_its_outside_operands_as_inputs() {
    let g = graph(
        &[
            t("x", &[2, 8], "input"),
            t("y", &[2, 8], "input"),
            t("z", &[8], "weight"),
            t("a", &[2, 8], "activation"),
            t("r", &[2, 8], "activation"),
            t("m", &[2, 8], "activation"),
            t("s", &[2, 8], "output"),
        ],
        &[
            op(
                "add",
                "add",
                &["x", "y"],
                &["a"],
                r#", "inplace": [[0, 0]]"#,
            ),
            op("relu", "relu", &["a"], &["r"], r#", "inplace": [[0, 0]]"#),
            op("mul", "mul", &["r", "z"], &["m"], ""),
            op("sig", "sigmoid", &["m"], &["s"], ""),
        ],
    );
    let f = fused(&g);
    assert_eq!(members(&f), vec![vec!["add", "relu", "mul", "sig"]]);
    let names: Vec<&str> = f.ops[0]
        .inputs
        .iter()
        .map(|&i| f.tensor(i).name.as_str())
        .collect();
    assert_eq!(names, ["x", "y", "z"]);
    // mul breaks the in-place chain back to x
    assert!(f.ops[0].inplace.is_empty());
    assert_same_outputs(&g, &f);
}

#[test]
fn an_in_place_chain_back_to_an_input_keeps_its_hint() {
    let g = graph(
        &[
            t("x", &[2, 8], "input"),
            t("y", &[2, 8], "input"),
            t("a", &[2, 8], "activation"),
            t("r", &[2, 8], "output"),
        ],
        &[
            op(
                "add",
                "add",
                &["x", "y"],
                &["a"],
                r#", "inplace": [[0, 0]]"#,
            ),
            op("relu", "relu", &["a"], &["r"], r#", "inplace": [[0, 0]]"#),
        ],
    );
    let f = fused(&g);
    assert_eq!(f.ops[0].inplace, vec![(0, 0)]);
    assert_same_outputs(&g, &f);
}

#[test]
fn a_zero_pad_folds_into_the_following_conv_and_computes_the_same_values() {
    let g = graph(
        &[
            t("x", &[1, 2, 5, 5], "input"),
            t("w", &[3, 2, 3, 3], "weight"),
            t("p", &[1, 2, 9, 7], "activation"),
            t("y", &[1, 3, 9, 7], "output"),
        ],
        &[
            op(
                "pad",
                "constant_pad_nd",
                &["x"],
                &["p"],
                r#", "attrs": {"pad": [1, 1, 2, 2], "value": 0}"#,
            ),
            op("conv", "conv2d", &["p", "w"], &["y"], CONV),
        ],
    );
    let out = Fuse::default().run(&g).unwrap();
    let f = out.graph;
    assert_eq!(f.ops.len(), 1);
    let conv = &f.ops[0];
    assert_eq!(conv.name, "conv");
    assert_eq!(f.tensor(conv.inputs[0]).name, "x");
    assert_eq!(
        conv.attrs.as_ref().unwrap()["padding"],
        serde_json::json!([3, 2])
    );
    assert!(out.report.notes[0].starts_with("folded pad"));
    // Real kernels only: the mixing kernel treats the pad as an opaque op, which folding
    // removes by design.
    assert_same_outputs_with(&g, &f, &[KernelMode::Real]);
}

#[test]
fn asymmetric_nonzero_and_channel_pads_stay() {
    for attrs in [
        r#"{"pad": [1, 0, 0, 0], "value": 0}"#,
        r#"{"pad": [1, 1, 0, 0], "value": 1.5}"#,
        r#"{"pad": [0, 0, 0, 0, 1, 1], "value": 0}"#,
    ] {
        let g = graph(
            &[
                t("x", &[1, 2, 5, 5], "input"),
                t("w", &[3, 2, 3, 3], "weight"),
                t("p", &[1, 2, 5, 6], "activation"),
                t("y", &[1, 3, 5, 6], "output"),
            ],
            &[
                op(
                    "pad",
                    "pad",
                    &["x"],
                    &["p"],
                    &format!(r#", "attrs": {attrs}"#),
                ),
                op("conv", "conv2d", &["p", "w"], &["y"], CONV),
            ],
        );
        assert_eq!(fused(&g).ops.len(), 2, "{attrs}");
    }
}

#[test]
fn an_intermediate_with_a_second_reader_is_not_fused() {
    let mut ts = conv_bn_relu("output");
    ts.push(t("z", &[1, 3, 6, 6], "output"));
    let mut ops = conv_bn_relu_ops();
    ops.push(op("other", "neg", &["c"], &["z"], ""));
    let g = graph(&ts, &ops);
    let f = fused(&g);
    // conv's output has two readers: only bn -> relu fuses
    assert_eq!(members(&f), vec![vec!["bn", "relu"]]);
    assert!(f.tensor_by_name("c").is_some());
    assert_same_outputs(&g, &f);
}

#[test]
fn a_graph_output_intermediate_is_not_fused_away() {
    let mut ts = conv_bn_relu("output");
    ts[8] = t("n.0", &[1, 3, 6, 6], "output");
    ts[6] = t("c", &[1, 3, 6, 6], "output");
    let g = graph(&ts, &conv_bn_relu_ops());
    let out = Fuse::default().run(&g).unwrap();
    assert_eq!(out.graph, g);
    assert_eq!(out.report.notes, vec!["nothing to fuse"]);
}

#[test]
fn a_training_conv_whose_output_is_saved_for_backward_fuses_nothing() {
    let mut ts = conv_bn_relu("activation");
    ts[9] = t("n.1", &[3], "activation");
    ts[10] = t("n.2", &[3], "activation");
    ts.push(t("gr", &[1, 3, 6, 6], "input"));
    ts.push(t("gb", &[1, 3, 6, 6], "activation"));
    ts.push(t("gx", &[1, 2, 6, 6], "output"));
    ts.push(t("next", &[1, 3, 6, 6], "output"));
    let mut ops = conv_bn_relu_ops();
    ops[2] = op(
        "bn",
        "batch_norm",
        &["c", "g", "b"],
        &["n.0", "n.1", "n.2"],
        "",
    );
    // the next layer and relu's grad read relu's output; bn's grad reads the conv output,
    // the saved statistics and (here) bn's output: every intermediate is saved
    ops.push(op("next", "neg", &["r"], &["next"], ""));
    ops.push(op(
        "relu_bw",
        "threshold_backward",
        &["gr", "r"],
        &["gb"],
        "",
    ));
    ops.push(op(
        "bn_bw",
        "batch_norm_backward",
        &["gb", "c", "n.1", "n.2", "n.0", "x"],
        &["gx"],
        "",
    ));
    let g = graph(&ts, &ops);
    let f = fused(&g);
    assert_eq!(f, g, "{:?}", members(&f));
    // when bn's output is not saved (it is not, in PyTorch), only bn -> relu fuses:
    // the conv output, saved for backward, stays in the arena
    ops[6] = op(
        "bn_bw",
        "batch_norm_backward",
        &["gb", "c", "n.1", "n.2", "x"],
        &["gx"],
        "",
    );
    let g = graph(&ts, &ops);
    let f = fused(&g);
    assert_eq!(members(&f), vec![vec!["bn", "relu"]]);
    assert!(f.tensor_by_name("c").is_some());
    let fop = f.ops.iter().find(|o| o.fused.is_some()).unwrap();
    let outs: Vec<&str> = fop
        .outputs
        .iter()
        .map(|&o| f.tensor(o).name.as_str())
        .collect();
    assert_eq!(outs, ["n.1", "n.2", "r"]);
    assert_same_outputs(&g, &f);
}

#[test]
fn an_operand_that_depends_on_a_member_stops_the_chain() {
    // bn's statistics feed `scale`, whose output is the add's other operand: fusing the
    // add would make the fused op read its own output.
    let mut ts = conv_bn_relu("activation");
    ts[9] = t("n.1", &[3], "activation");
    ts[10] = t("n.2", &[3], "activation");
    ts.push(t("k", &[3, 1, 1], "activation"));
    ts.push(t("s", &[1, 3, 6, 6], "output"));
    let mut ops = conv_bn_relu_ops();
    ops[2] = op(
        "bn",
        "batch_norm",
        &["c", "g", "b"],
        &["n.0", "n.1", "n.2"],
        "",
    );
    ops[3] = op("scale", "neg", &["n.1"], &["k"], "");
    ops.push(op("add", "add", &["n.0", "k"], &["s"], ""));
    ts[11] = t("r", &[1, 3, 6, 6], "activation");
    ts.retain(|x| !x.contains(r#""name": "r""#));
    let g = graph(&ts, &ops);
    let f = fused(&g);
    // scale -> add is a chain of its own (after the conv -> bn op)
    assert_eq!(members(&f), vec![vec!["conv", "bn"], vec!["scale", "add"]]);
    let fop = f.ops.iter().find(|o| o.fused.is_some()).unwrap();
    let outs: Vec<&str> = fop
        .outputs
        .iter()
        .map(|&o| f.tensor(o).name.as_str())
        .collect();
    assert_eq!(outs, ["n.0", "n.1"]);
    assert_same_outputs(&g, &f);
}

#[test]
fn fusing_twice_changes_nothing_more() {
    let g = graph(&conv_bn_relu("output"), &conv_bn_relu_ops());
    let f = fused(&g);
    assert_eq!(fused(&f), f);
}

#[test]
fn a_fused_op_with_a_member_that_may_not_be_recomputed_is_flagged_recompute_false() {
    let tensors = [
        t("x", &[2, 8], "input"),
        t("y", &[2, 8], "input"),
        t("a", &[2, 8], "activation"),
        t("r", &[2, 8], "output"),
    ];
    let chain = |relu_extra: &str| {
        graph(
            &tensors,
            &[
                op("add", "add", &["x", "y"], &["a"], ""),
                op("relu", "relu", &["a"], &["r"], relu_extra),
            ],
        )
    };
    // Plain members: no flag, and the fused op may be recomputed.
    let f = fused(&chain(""));
    assert_eq!(members(&f), vec![vec!["add", "relu"]]);
    assert_eq!(f.ops[0].recompute, None);
    assert!(memplan::ops::may_recompute(&f.ops[0]));
    // A member flagged false makes the fused op unrecomputable, through a round trip.
    let f = fused(&chain(r#", "recompute": false"#));
    assert_eq!(members(&f), vec![vec!["add", "relu"]]);
    assert_eq!(f.ops[0].recompute, Some(false));
    let back = Graph::parse(&f.to_json()).unwrap();
    assert!(!memplan::ops::may_recompute(&back.ops[0]));
}
