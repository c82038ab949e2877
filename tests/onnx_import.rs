//! `memplan::import::onnx` on ONNX models that the test builds byte by byte
//! (tests/support/onnx_writer.rs): sizes come from the declared shapes with symbols bound by
//! the input shapes, ops map onto memplan's vocabulary so the executor runs real kernels, the
//! imported graph plans, validates and executes; models without shapes, with unbound symbols,
//! control flow or bad input shapes get errors that name the culprit and say what to do.
//! With weights: initializers' and constants' data (raw and typed) is read under the graph's
//! tensor names and a hand-checkable model runs on it to the values computed by hand.
//! With `--symbol` declarations, dim_params stay symbols: sizes become expressions, the
//! symbolic graph parses, instantiates to the bound import and plans for its whole range.

#[path = "support/onnx_writer.rs"]
mod onnx_writer;

use memplan::import::onnx::{
    import_onnx, import_onnx_symbolic, import_onnx_with_weights, parse_input_shape, parse_symbol,
    OnnxError, OnnxOptions,
};
use memplan::symbolic::{plan_symbolic, Binding, SymbolicGraph};
use memplan::{plan, validate, PlanOptions, TensorKind};
use memplan::{PipelineOptions, Strategy};
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

/// Options binding `shapes` (`--input-shape`) and declaring `symbols` (`--symbol`).
fn sym_opts(shapes: &[&str], symbols: &[&str]) -> OnnxOptions {
    OnnxOptions {
        symbols: symbols.iter().map(|s| parse_symbol(s).unwrap()).collect(),
        ..opts(shapes)
    }
}

/// The graph's tensors as `(name, size, shape)` and ops as `(name, type, inputs, outputs,
/// inplace)`, without flops (a symbolic import leaves them out).
fn skeleton(g: &memplan::Graph) -> String {
    let tensors: Vec<String> = g
        .tensors
        .iter()
        .map(|t| format!("{} {} {:?} {:?}", t.name, t.size, t.shape, t.kind))
        .collect();
    let ops: Vec<String> = g
        .ops
        .iter()
        .map(|o| {
            format!(
                "{} {} {:?} {:?} {:?}",
                o.name, o.op_type, o.inputs, o.outputs, o.inplace
            )
        })
        .collect();
    format!("{tensors:?}\n{ops:?}")
}

#[test]
fn declared_symbols_become_size_expressions_of_a_symbolic_graph() {
    let i = import_onnx_symbolic(&seq_mlp(), &sym_opts(&[], &["N=1..16", "S=1..512"])).unwrap();
    let doc = &i.document;
    assert_eq!(
        doc["symbols"]["N"],
        serde_json::json!({"min": 1, "max": 16})
    );
    assert_eq!(
        doc["symbols"]["S"],
        serde_json::json!({"min": 1, "max": 512})
    );
    let t = |n: &str| {
        doc["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(t("x")["size"], "32*N*S");
    assert_eq!(t("x")["shape"], serde_json::json!(["N", "S", 8]));
    assert_eq!(t("h")["size"], "64*N*S");
    assert_eq!(t("y")["size"], "16*N*S");
    // Weights stay numbers.
    assert_eq!(t("w1")["size"], 8 * 16 * 4);
    // The document reads back as a symbolic graph, and the parsed form agrees.
    let sg = SymbolicGraph::parse(&doc.to_string()).unwrap();
    assert_eq!(sg, i.graph);
    assert_eq!(sg.symbols.len(), 2);
}

#[test]
fn a_symbolic_import_instantiates_to_the_import_with_bound_shapes() {
    let i = import_onnx_symbolic(&small_cnn(true), &sym_opts(&[], &["batch=1..16"])).unwrap();
    let t = |n: &str| {
        i.document["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .unwrap()["size"]
            .clone()
    };
    assert_eq!(t("x"), "768*batch");
    assert_eq!(t("c"), "1024*batch");
    assert_eq!(t("y"), "40*batch");
    for n in [1, 3, 16] {
        let at = i
            .graph
            .instantiate(&Binding::new().with("batch", n))
            .unwrap();
        let bound = import_onnx(&small_cnn(true), &opts(&[&format!("x={n},3,8,8")])).unwrap();
        assert_eq!(skeleton(&at), skeleton(&bound), "batch = {n}");
        // Flops are left out where a size is symbolic.
        assert!(at.ops.iter().all(|o| o.flops.is_none()));
    }
}

#[test]
fn input_shapes_and_symbols_mix_with_bound_symbols_becoming_numbers() {
    let i = import_onnx_symbolic(&seq_mlp(), &sym_opts(&["x=2,128,8"], &["N=1..16"]));
    // `x=2,128,8` binds both N and S: N may not also be declared.
    let e = i.unwrap_err().to_string();
    assert!(
        e.contains("--symbol N=1..16") && e.contains("also bound to 2"),
        "{e}"
    );
    let i = import_onnx_symbolic(&seq_mlp(), &sym_opts(&[], &["S=1..512"]));
    // N unbound and undeclared: the error names it and both options.
    let e = i.unwrap_err().to_string();
    assert!(
        e.contains("\"N\"") && e.contains("--input-shape") && e.contains("--symbol N=MIN..MAX"),
        "{e}"
    );
}

#[test]
fn a_dim_param_that_is_no_symbol_name_is_bound_by_input_shape_as_the_readme_says() {
    // `batch-size` is neither a symbol name nor an expression of the grammar; bound, it is
    // a number everywhere it occurs.
    let g = graph(
        "dash",
        &[node("relu", "Relu", &["x"], &["y"], &[])],
        &[],
        &[value_info("x", FLOAT, Some(&[D::P("batch-size"), D::V(4)]))],
        &[value_info("y", FLOAT, Some(&[D::P("batch-size"), D::V(4)]))],
        &[],
    );
    let i = import_onnx_symbolic(&model(&g), &sym_opts(&["x=2,4"], &[])).unwrap();
    let t = &i.document["tensors"];
    assert_eq!(
        (t[0]["size"].as_u64(), t[1]["size"].as_u64()),
        (Some(32), Some(32))
    );
    // Unbound, it is still refused naming the option that binds it.
    let e = import_onnx_symbolic(&model(&g), &sym_opts(&[], &[]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("batch-size") && e.contains("--input-shape"),
        "{e}"
    );
}

#[test]
fn a_bound_symbol_inside_an_expression_dim_param_becomes_a_number() {
    // x[N, 4] and z[M, 4] concatenated on axis 0: y[N + M, 4], as symbolic shape inference
    // writes it. z=3,4 binds M; N stays symbolic.
    let g = graph(
        "cat",
        &[node(
            "cat",
            "Concat",
            &["x", "z"],
            &["y"],
            &[attr_int("axis", 0)],
        )],
        &[],
        &[
            value_info("x", FLOAT, Some(&[D::P("N"), D::V(4)])),
            value_info("z", FLOAT, Some(&[D::P("M"), D::V(4)])),
        ],
        &[value_info("y", FLOAT, Some(&[D::P("N + M"), D::V(4)]))],
        &[],
    );
    let i = import_onnx_symbolic(&model(&g), &sym_opts(&["z=3,4"], &["N=1..8"])).unwrap();
    let t = &i.document["tensors"];
    assert_eq!(t[0]["size"], "16*N");
    assert_eq!(t[1]["size"], 48);
    assert_eq!(t[2]["size"], "48 + 16*N");
    assert_eq!(t[2]["shape"], serde_json::json!(["3 + N", 4]));
    let at2 = i.graph.instantiate(&Binding::new().with("N", 2)).unwrap();
    assert_eq!(at2.tensors[2].size, 80);
}

#[test]
fn a_symbolic_import_plans_once_and_validates_at_every_batch() {
    let i = import_onnx_symbolic(&seq_mlp(), &sym_opts(&[], &["N=1..16", "S=1..64"])).unwrap();
    let options = PipelineOptions {
        strategy: Strategy::Heuristic,
        ..PipelineOptions::default()
    };
    let sp = plan_symbolic(&i.graph, &options).unwrap();
    for (n, s) in [(1, 1), (3, 17), (16, 64), (7, 1)] {
        let b = Binding::new().with("N", n).with("S", s);
        let g = i.graph.instantiate(&b).unwrap();
        let p = sp.instantiate(&b).unwrap();
        memplan::validate(&g, &p, None).unwrap();
    }
}

#[test]
fn the_graph_of_a_symbolic_import_is_the_one_at_every_symbols_max() {
    let g = import_onnx(&small_cnn(true), &sym_opts(&[], &["batch=1..16"])).unwrap();
    let bound = import_onnx(&small_cnn(true), &opts(&["x=16,3,8,8"])).unwrap();
    assert_eq!(skeleton(&g), skeleton(&bound));
}

#[test]
fn weights_of_a_symbolic_import_keep_their_static_sizes_and_data() {
    let n = D::P("N");
    let g = graph(
        "mm",
        &[node("mm", "MatMul", &["x", "w"], &["y"], &[])],
        &[tensor_f32("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0])],
        &[value_info("x", FLOAT, Some(&[n.clone(), D::V(2)]))],
        &[value_info("y", FLOAT, Some(&[n, D::V(2)]))],
        &[],
    );
    let i = import_onnx_with_weights(&model(&g), &sym_opts(&[], &["N=1..4"])).unwrap();
    let doc = i.symbolic.unwrap();
    assert_eq!(doc["tensors"][1]["name"], "x");
    assert_eq!(doc["tensors"][1]["size"], "8*N");
    assert_eq!(doc["tensors"][0]["size"], 16);
    assert_eq!(i.weights.tensors["w"].bytes.len(), 16);
    // The graph beside it is the instance at N = 4.
    let x = i.graph.tensor(i.graph.tensor_by_name("x").unwrap());
    assert_eq!(x.size, 32);
}

#[test]
fn bad_symbol_options_are_refused_naming_the_problem() {
    let cases = [
        ("batch", "expected NAME=MIN..MAX"),
        ("batch=1-64", "expected a range MIN..MAX"),
        ("batch=a..4", "\"a\" is not a non-negative integer"),
        ("batch=0..4", "starts at 1"),
        ("batch=8..4", "min 8 is greater than max 4"),
        ("batch-size=1..4", "is not a symbol name"),
    ];
    for (spec, want) in cases {
        let e = parse_symbol(spec).unwrap_err();
        assert!(matches!(e, OnnxError::Symbol { .. }), "{spec}: {e}");
        let e = e.to_string();
        assert!(e.contains(spec) && e.contains(want), "{spec}: {e}");
    }
    assert_eq!(parse_symbol("N=1..16").unwrap(), ("N".to_string(), (1, 16)));
}

#[test]
fn a_declared_symbol_the_model_never_uses_is_an_error_listing_its_dim_params() {
    let e = import_onnx_symbolic(&small_cnn(true), &sym_opts(&[], &["batch=1..8", "B=1..8"]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--symbol B=1..8")
            && e.contains("no dimension named \"B\"")
            && e.contains("batch"),
        "{e}"
    );
}

#[test]
fn arithmetic_on_a_symbolic_dimension_is_refused_naming_the_value() {
    let o = sym_opts(&[], &["N=1..8", "H=8..32"]);
    let e = import_onnx_symbolic(&strided_conv("(H-3)/2+1"), &o)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("value \"c\" dimension 2") && e.contains("(H-3)/2+1") && e.contains("'-'"),
        "{e}"
    );
    let e = import_onnx_symbolic(&strided_conv("unk__1"), &o)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("value \"c\" dimension 2")
            && e.contains("unk__1")
            && e.contains("only multiply"),
        "{e}"
    );
    // A dim_param that is an expression of the grammar is substituted.
    let i = import_onnx_symbolic(&strided_conv("2*H+1"), &o).unwrap();
    let c = i.document["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "c")
        .unwrap()
        .clone();
    assert_eq!(c["shape"], serde_json::json!(["N", 4, "1 + 2*H", 3]));
    // Binding H turns the expression into a number.
    let i = import_onnx_symbolic(&strided_conv("(H-3)/2+1"), &sym_opts(&["x=1,3,9,8"], &[]));
    assert!(
        i.is_err(),
        "a non-grammar dim_param stays an error even when bound"
    );
}

#[test]
fn same_padding_over_a_symbolic_spatial_dimension_is_refused_naming_the_node_and_value() {
    let e = import_onnx_symbolic(&same_padded_conv(), &sym_opts(&[], &["N=1..8", "H=8..32"]))
        .unwrap_err();
    assert!(matches!(e, OnnxError::Node { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("node \"conv\" (Conv)")
            && e.contains("auto_pad SAME_UPPER")
            && e.contains("\"x\", whose dimension 2 is the expression \"H\""),
        "{e}"
    );
    // With H bound (here with N, by the input's shape), the same model imports.
    let i = import_onnx_symbolic(&same_padded_conv(), &sym_opts(&["x=2,3,8,8"], &[])).unwrap();
    assert!(i.graph.is_concrete());
}
