//! `memplan::import::onnx` on ONNX models that the test builds byte by byte
//! (tests/support/onnx_writer.rs): sizes come from the declared shapes with symbols bound by
//! the input shapes, ops map onto memplan's vocabulary so the executor runs real kernels, the
//! imported graph plans, validates and executes; models without shapes, with unbound symbols,
//! control flow or bad input shapes get errors that name the culprit and say what to do.

#[path = "support/onnx_writer.rs"]
mod onnx_writer;

use memplan::import::onnx::{import_onnx, parse_input_shape, OnnxOptions};
use memplan::{plan, validate, PlanOptions, TensorKind};
use memplan_executor::{execute, ExecOptions};
use onnx_writer::*;
use std::collections::BTreeMap;

fn opts(shapes: &[&str]) -> OnnxOptions {
    OnnxOptions {
        input_shapes: shapes
            .iter()
            .map(|s| parse_input_shape(s).unwrap())
            .collect::<BTreeMap<_, _>>(),
        ..OnnxOptions::default()
    }
}

#[test]
fn a_small_cnn_imports_with_sizes_from_its_shapes_and_the_bound_batch() {
    let g = import_onnx(&small_cnn(true), &opts(&["x=2,3,8,8"])).unwrap();
    assert_eq!(g.name, "small_cnn");
    let t = |n: &str| g.tensor(g.tensor_by_name(n).unwrap()).clone();
    assert_eq!(t("x").kind, TensorKind::Input);
    assert_eq!(t("x").size, 2 * 3 * 8 * 8 * 4);
    assert_eq!(t("w").kind, TensorKind::Weight);
    assert_eq!(t("w").size, 4 * 3 * 3 * 3 * 4);
    assert_eq!(t("c").shape.as_deref(), Some(&[2, 4, 8, 8][..]));
    assert_eq!(t("c").size, 2 * 4 * 8 * 8 * 4);
    assert_eq!(t("p").size, 2 * 4 * 4 * 4 * 4);
    assert_eq!(t("y").kind, TensorKind::Output);
    assert_eq!(t("y").size, 2 * 10 * 4);
    assert_eq!(t("y").dtype.as_deref(), Some("f32"));
    let types: Vec<&str> = g.ops.iter().map(|o| o.op_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "conv2d",
            "relu",
            "max_pool2d",
            "adaptive_avg_pool2d",
            "reshape",
            "linear",
            "softmax"
        ]
    );
    // The unnamed Relu node gets a generated name; relu may run in place.
    assert_eq!(g.ops[1].name, "relu_1");
    assert_eq!(g.ops[1].inplace, vec![(0, 0)]);
    let conv = &g.ops[0];
    let attrs = conv.attrs.as_ref().unwrap();
    assert_eq!(attrs["padding"], serde_json::json!([1, 1]));
    assert_eq!(attrs["stride"], serde_json::json!([1, 1]));
    assert_eq!(attrs["groups"], 1);
    // 2 · N·O·H·W · C·kh·kw
    assert_eq!(conv.flops, Some(2.0 * (2 * 4 * 8 * 8) as f64 * 27.0));
    assert_eq!(g.ops[5].flops, Some(2.0 * 20.0 * 4.0));
}

#[test]
fn an_imported_graph_plans_validates_and_runs_real_kernels() {
    let g = import_onnx(&small_cnn(true), &opts(&["x=2,3,8,8"])).unwrap();
    let p = plan(&g, &PlanOptions::default()).unwrap();
    validate(&g, &p, None).unwrap();
    let r = execute(&g, &p, &ExecOptions::default()).unwrap();
    assert!(r.outputs_equal, "{:?}", r.first_mismatch);
    // Every op maps onto a real kernel: none falls back to the mixing kernel.
    assert!(!r.kernels.contains_key("mix"), "{:?}", r.kernels);
    assert_eq!(r.kernels.values().sum::<usize>(), 7);
}

#[test]
fn the_batch_symbol_scales_every_size() {
    let one = import_onnx(&small_cnn(true), &opts(&["x=1,3,8,8"])).unwrap();
    let eight = import_onnx(&small_cnn(true), &opts(&["x=8,3,8,8"])).unwrap();
    for (a, b) in one.tensors.iter().zip(&eight.tensors) {
        if a.kind == TensorKind::Weight {
            assert_eq!(a.size, b.size, "{}", a.name);
        } else {
            assert_eq!(a.size * 8, b.size, "{}", a.name);
        }
    }
}

#[test]
fn a_model_without_inferred_shapes_gets_an_error_saying_how_to_add_them() {
    let e = import_onnx(&small_cnn(false), &opts(&["x=2,3,8,8"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"c\""), "{e}");
    assert!(e.contains("onnx.shape_inference.infer_shapes"), "{e}");
}

#[test]
fn an_unbound_symbol_is_an_error_naming_it_and_the_option() {
    let e = import_onnx(&small_cnn(true), &OnnxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"batch\"") && e.contains("--input-shape"),
        "{e}"
    );
}

#[test]
fn input_shapes_that_contradict_the_model_are_rejected() {
    let cases = [
        ("x=2,3,8", "4 dimensions, not 3"),
        ("x=2,3,9,8", "fixes dimension 2 of \"x\" to 8"),
        ("nope=1", "no graph input \"nope\""),
    ];
    for (spec, want) in cases {
        let e = import_onnx(&small_cnn(true), &opts(&[spec]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{spec}: {e}");
    }
}

#[test]
fn bytes_that_are_not_onnx_are_rejected_clearly() {
    let e = import_onnx(
        b"{\"format\": \"memplan-graph/1\"}",
        &OnnxOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("not an ONNX model"), "{e}");
    let e = import_onnx(&model(&[]), &OnnxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no nodes"), "{e}");
}

fn one_node_model(n: Vec<u8>, extra_inits: &[Vec<u8>]) -> Vec<u8> {
    let v = |name: &str| value_info(name, FLOAT, Some(&[D::V(4)]));
    model(&graph("g", &[n], extra_inits, &[v("a")], &[v("out")], &[]))
}

#[test]
fn control_flow_is_rejected_naming_the_node() {
    let body = graph("body", &[], &[], &[], &[], &[]);
    let n = node(
        "branch",
        "If",
        &["a"],
        &["out"],
        &[attr_graph("then_branch", &body)],
    );
    let e = import_onnx(&one_node_model(n, &[]), &OnnxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"branch\"") && e.contains("control flow"),
        "{e}"
    );
}

#[test]
fn a_node_reading_an_unknown_value_is_rejected_naming_both() {
    let n = node("add", "Add", &["a", "ghost"], &["out"], &[]);
    let e = import_onnx(&one_node_model(n, &[]), &OnnxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"add\"") && e.contains("\"ghost\""), "{e}");
}

#[test]
fn constants_become_weights_and_unknown_ops_keep_their_type() {
    let v = |name: &str, d: i64| value_info(name, FLOAT, Some(&[D::V(d)]));
    let k = tensor("k_value", FLOAT, &[4]);
    let nodes = [
        node("k", "Constant", &[], &["k"], &[attr_tensor("value", &k)]),
        node("m", "Mul", &["a", "k"], &["m"], &[]),
        node("e", "Erf", &["m"], &["out"], &[]),
    ];
    let g = import_onnx(
        &model(&graph(
            "g",
            &nodes,
            &[],
            &[v("a", 4)],
            &[v("out", 4)],
            &[v("m", 4)],
        )),
        &OnnxOptions::default(),
    )
    .unwrap();
    let k = g.tensor(g.tensor_by_name("k").unwrap());
    assert_eq!((k.kind, k.size), (TensorKind::Weight, 16));
    let types: Vec<&str> = g.ops.iter().map(|o| o.op_type.as_str()).collect();
    assert_eq!(types, ["mul", "erf"]);
    // A string-typed value has no size in bytes.
    let n = node("s", "Identity", &["a"], &["out"], &[]);
    let e = import_onnx(
        &model(&graph(
            "g",
            &[n],
            &[],
            &[v("a", 4)],
            &[value_info("out", STRING, Some(&[D::V(4)]))],
            &[],
        )),
        &OnnxOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("\"out\"") && e.contains("STRING"), "{e}");
}

#[test]
fn dropout_and_random_nodes_import_with_recompute_false_and_others_without_the_flag() {
    let v = |name: &str| value_info(name, FLOAT, Some(&[D::V(4)]));
    let nodes = [
        node("drop", "Dropout", &["a"], &["d"], &[]),
        node("noise", "RandomNormalLike", &["d"], &["n"], &[]),
        node("sum", "Add", &["d", "n"], &["s"], &[]),
        node("mask", "Bernoulli", &["s"], &["out"], &[]),
    ];
    let g = import_onnx(
        &model(&graph(
            "g",
            &nodes,
            &[],
            &[v("a")],
            &[v("out")],
            &[v("d"), v("n"), v("s")],
        )),
        &OnnxOptions::default(),
    )
    .unwrap();
    let flag = |name: &str| g.ops[g.op_indices()[name]].recompute;
    assert_eq!(flag("drop"), Some(false));
    assert_eq!(flag("noise"), Some(false));
    assert_eq!(flag("mask"), Some(false));
    assert_eq!(flag("sum"), None);
    assert!(!memplan::ops::may_recompute(&g.ops[0]));
    // The flag is written into the graph document.
    let doc: serde_json::Value = serde_json::from_str(&g.to_json()).unwrap();
    assert_eq!(doc["ops"][0]["recompute"], serde_json::json!(false));
}
