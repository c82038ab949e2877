//! `memplan::import::onnx` on ONNX models that the test builds byte by byte
//! (tests/support/onnx_writer.rs): sizes come from the declared shapes with symbols bound by
//! the input shapes, ops map onto memplan's vocabulary so the executor runs real kernels, the
//! imported graph plans, validates and executes; models without shapes, with unbound symbols,
//! control flow or bad input shapes get errors that name the culprit and say what to do.
//! With weights: initializers' and constants' data (raw and typed) is read under the graph's
//! tensor names and a hand-checkable model runs on it to the values computed by hand.

#[path = "support/onnx_writer.rs"]
mod onnx_writer;

use memplan::import::onnx::{
    import_onnx, import_onnx_with_weights, parse_input_shape, OnnxOptions,
};
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

/// The tiny model's weights and input as executor data.
fn tiny_data(weights: &memplan::data_file::TensorFile) -> memplan_executor::TensorValues {
    let mut data: memplan_executor::TensorValues = weights
        .tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.bytes.clone()))
        .collect();
    data.insert(
        "x".into(),
        TINY_X.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    data
}

#[test]
fn an_import_with_weights_reads_raw_typed_and_constant_data_under_the_graphs_names() {
    use memplan::data_file::Dtype;
    let i = import_onnx_with_weights(&tiny_with_weights(), &OnnxOptions::default()).unwrap();
    let w = &i.weights;
    assert_eq!(w.tensors["w"].to_f32().unwrap(), TINY_W);
    assert_eq!(w.tensors["b"].to_f32().unwrap(), TINY_B, "float_data");
    assert_eq!(w.tensors["b"].shape, vec![4, 4]);
    assert_eq!(w.tensors["shape"].dtype, Dtype::I64, "int64_data");
    assert_eq!(
        w.tensors["shape"].bytes,
        [1i64.to_le_bytes(), 4i64.to_le_bytes()].concat()
    );
    // Every weight of the graph has data of exactly its size, and nothing else does.
    let weights: Vec<&str> = i
        .graph
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Weight)
        .map(|t| {
            assert_eq!(w.tensors[&t.name].bytes.len() as u64, t.size, "{}", t.name);
            t.name.as_str()
        })
        .collect();
    assert_eq!(weights.len(), w.tensors.len());
    // Clip's constant bounds became attributes of a hardtanh; the bound tensors, read by
    // no other op, left the graph.
    let clip = &i.graph.ops[1];
    assert_eq!(clip.op_type, "hardtanh");
    assert_eq!(clip.inputs.len(), 1);
    let attrs = clip.attrs.as_ref().unwrap();
    assert_eq!(
        (attrs["min_val"].as_f64(), attrs["max_val"].as_f64()),
        (Some(0.0), Some(2.5))
    );
    assert!(i.graph.tensor_by_name("lo").is_none() && i.graph.tensor_by_name("hi").is_none());
    // Gemm with transB = 0 is a linear layer whose weight is not transposed.
    assert_eq!(i.graph.ops[3].op_type, "linear");
    assert_eq!(i.graph.ops[3].attrs.as_ref().unwrap()["trans_b"], false);
}

#[test]
fn a_tiny_model_runs_end_to_end_on_its_weights_and_gives_the_hand_computed_values() {
    let i = import_onnx_with_weights(&tiny_with_weights(), &OnnxOptions::default()).unwrap();
    let p = plan(&i.graph, &PlanOptions::default()).unwrap();
    validate(&i.graph, &p, None).unwrap();
    let opts = ExecOptions {
        data: Some(std::sync::Arc::new(tiny_data(&i.weights))),
        require_real_kernels: true,
        ..ExecOptions::default()
    };
    let r = execute(&i.graph, &p, &opts).unwrap();
    assert!(r.outputs_equal, "{:?}", r.first_mismatch);
    assert!(r.mixed_ops.is_empty(), "{:?}", r.mixed_ops);
    assert_eq!(r.supplied_tensors, i.weights.tensors.len() + 1);
    let (name, bytes) = &r.output_values[0];
    assert_eq!(name, "y");
    let y: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let want = tiny_expected();
    // conv → [1.8, 2.2, 3.0, 3.4], clipped to [1.8, 2.2, 2.5, 2.5], times B plus C:
    for (a, b) in want.iter().zip([2.05f32, 9.45, 0.9, 6.3]) {
        assert!((a - b).abs() < 1e-5, "{want:?}");
    }
    for (a, b) in y.iter().zip(want) {
        assert!((a - b).abs() <= 1e-5, "plan run {y:?}, by hand {want:?}");
    }
}

#[test]
fn supplied_data_that_names_no_input_or_has_the_wrong_size_is_an_error_naming_the_tensor() {
    let i = import_onnx_with_weights(&tiny_with_weights(), &OnnxOptions::default()).unwrap();
    let p = plan(&i.graph, &PlanOptions::default()).unwrap();
    let run = |edit: &dyn Fn(&mut memplan_executor::TensorValues)| {
        let mut data = tiny_data(&i.weights);
        edit(&mut data);
        let opts = ExecOptions {
            data: Some(std::sync::Arc::new(data)),
            ..ExecOptions::default()
        };
        execute(&i.graph, &p, &opts).unwrap_err().to_string()
    };
    let e = run(&|d| {
        d.insert("nope".into(), vec![0; 4]);
    });
    assert!(
        e.contains("\"nope\"") && e.contains("no tensor of that name"),
        "{e}"
    );
    let e = run(&|d| {
        d.insert("x".into(), vec![0; 8]);
    });
    assert!(
        e.contains("\"x\"") && e.contains("8 bytes given") && e.contains("36 bytes"),
        "{e}"
    );
    let e = run(&|d| {
        d.insert("y".into(), vec![0; 16]);
    });
    assert!(e.contains("\"y\"") && e.contains("output"), "{e}");
}

#[test]
fn an_op_without_a_real_kernel_is_reported_and_refused_when_real_kernels_are_required() {
    // small_cnn with its linear layer typed `gemm` (as a scaled ONNX Gemm imports), which
    // has no real kernel.
    let g = import_onnx(&small_cnn(true), &opts(&["x=1,3,8,8"])).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&g.to_json()).unwrap();
    doc["ops"][5]["type"] = "gemm".into();
    let g = memplan::Graph::parse(&doc.to_string()).unwrap();
    let p = plan(&g, &PlanOptions::default()).unwrap();
    let r = execute(&g, &p, &ExecOptions::default()).unwrap();
    assert_eq!(r.mixed_ops, vec!["fc (gemm)".to_string()]);
    let strict = ExecOptions {
        require_real_kernels: true,
        ..ExecOptions::default()
    };
    let e = execute(&g, &p, &strict).unwrap_err().to_string();
    assert!(
        e.contains("fc (gemm)") && e.contains("mixing kernel"),
        "{e}"
    );
}

#[test]
fn external_data_is_an_error_naming_the_initializer_and_the_file() {
    let dims = [D::V(4)];
    let nodes = [
        node("r", "Relu", &["x"], &["y"], &[]),
        node("a", "Add", &["y", "w"], &["z"], &[]),
    ];
    let m = model(&graph(
        "ext",
        &nodes,
        &[tensor_external("w", FLOAT, &[4], "weights.bin")],
        &[value_info("x", FLOAT, Some(&dims))],
        &[value_info("z", FLOAT, Some(&dims))],
        &[value_info("y", FLOAT, Some(&dims))],
    ));
    // The graph alone imports; its weights' data cannot be read.
    assert!(import_onnx(&m, &OnnxOptions::default()).is_ok());
    let e = import_onnx_with_weights(&m, &OnnxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("weight \"w\"")
            && e.contains("\"weights.bin\"")
            && e.contains("load_external_data"),
        "{e}"
    );
    // A raw_data byte count that contradicts the shape is named too (small_cnn's
    // initializers carry 16 placeholder bytes).
    let e = import_onnx_with_weights(&small_cnn(true), &opts(&["x=1,3,8,8"]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("weight \"w\"") && e.contains("raw_data holds 16 bytes"),
        "{e}"
    );
}

#[test]
fn softmax_before_opset_13_is_a_last_axis_softmax_only_when_its_axis_is_the_last() {
    let dims4 = [D::V(1), D::V(2), D::V(2), D::V(2)];
    let m = |axis: Option<i64>, opset: i64| {
        let attrs: Vec<Vec<u8>> = axis.map(|a| attr_int("axis", a)).into_iter().collect();
        model_opset(
            &graph(
                "sm",
                &[node("s", "Softmax", &["x"], &["y"], &attrs)],
                &[],
                &[value_info("x", FLOAT, Some(&dims4))],
                &[value_info("y", FLOAT, Some(&dims4))],
                &[],
            ),
            opset,
        )
    };
    let kernel = |bytes: &[u8]| {
        let g = import_onnx(bytes, &OnnxOptions::default()).unwrap();
        memplan::ops::kernel::select(&g, &g.ops[0], memplan_executor::KernelMode::Real)
    };
    use memplan::ops::kernel::Kernel;
    // Opset 11, default axis 1: softmax over the flattened C·H·W — no last-axis kernel.
    assert_eq!(kernel(&m(None, 11)), Kernel::Mix);
    assert_eq!(
        kernel(&m(Some(3), 11)),
        Kernel::Softmax { rows: 4, cols: 2 }
    );
    // Opset 13: the default axis is the last.
    assert_eq!(kernel(&m(None, 13)), Kernel::Softmax { rows: 4, cols: 2 });
}
