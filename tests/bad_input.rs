//! One test per graph-format rule: the graph is rejected and the message names the culprit.

use memplan::graph::{Graph, GraphError};
use serde_json::{json, Value};

/// A valid two-op graph to break in each test.
fn good() -> Value {
    json!({
        "format": "memplan-graph/1",
        "name": "tiny",
        "tensors": [
            {"name": "x", "size": 1024, "kind": "input"},
            {"name": "w", "size": 256, "kind": "weight"},
            {"name": "h", "size": 1024, "kind": "activation"},
            {"name": "y", "size": 512, "kind": "output"}
        ],
        "ops": [
            {"name": "mm", "type": "matmul", "inputs": ["x", "w"], "outputs": ["h"]},
            {"name": "act", "type": "relu", "inputs": ["h"], "outputs": ["y"], "inplace": [[0, 0]]}
        ]
    })
}

fn reject(g: Value) -> (GraphError, String) {
    let err = Graph::parse(&g.to_string()).expect_err("graph should be rejected");
    let msg = err.to_string();
    (err, msg)
}

#[test]
fn the_untouched_graph_is_accepted() {
    let g = Graph::parse(&good().to_string()).unwrap();
    assert_eq!(g.ops.len(), 2);
    assert_eq!(g.alignment, 256);
}

#[test]
fn a_wrong_format_string_is_named() {
    let mut g = good();
    g["format"] = json!("memplan-graph/2");
    let (_, msg) = reject(g);
    assert!(
        msg.contains("memplan-graph/2") && msg.contains("memplan-graph/1"),
        "{msg}"
    );
}

#[test]
fn a_missing_format_string_is_rejected() {
    let mut g = good();
    g.as_object_mut().unwrap().remove("format");
    let (e, _) = reject(g);
    assert!(matches!(e, GraphError::Format { .. }));
}

#[test]
fn a_duplicate_tensor_name_is_named() {
    let mut g = good();
    g["tensors"][3]["name"] = json!("h");
    let (_, msg) = reject(g);
    assert!(msg.contains("tensor \"h\" is defined twice"), "{msg}");
}

#[test]
fn a_duplicate_op_name_is_named() {
    let mut g = good();
    g["ops"][1]["name"] = json!("mm");
    let (_, msg) = reject(g);
    assert!(msg.contains("op \"mm\" is defined twice"), "{msg}");
}

#[test]
fn an_unknown_input_tensor_names_op_and_tensor() {
    let mut g = good();
    g["ops"][1]["inputs"] = json!(["hh"]);
    let (_, msg) = reject(g);
    assert!(
        msg.contains("op \"act\" reads unknown tensor \"hh\""),
        "{msg}"
    );
}

#[test]
fn an_unknown_output_tensor_names_op_and_tensor() {
    let mut g = good();
    g["ops"][0]["outputs"] = json!(["h", "ghost"]);
    let (_, msg) = reject(g);
    assert!(
        msg.contains("op \"mm\" writes unknown tensor \"ghost\""),
        "{msg}"
    );
}

#[test]
fn an_activation_produced_by_no_op_is_named() {
    let mut g = good();
    g["tensors"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "orphan", "size": 4, "kind": "activation"}));
    let (_, msg) = reject(g);
    assert!(
        msg.contains("activation tensor \"orphan\" is produced by no op"),
        "{msg}"
    );
}

#[test]
fn an_output_produced_by_no_op_is_named() {
    let mut g = good();
    g["tensors"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "lost", "size": 4, "kind": "output"}));
    let (_, msg) = reject(g);
    assert!(
        msg.contains("output tensor \"lost\" is produced by no op"),
        "{msg}"
    );
}

#[test]
fn a_tensor_produced_by_two_ops_names_both() {
    let mut g = good();
    g["ops"][1]["outputs"] = json!(["h"]);
    g["ops"][1]["inputs"] = json!(["x"]);
    let (_, msg) = reject(g);
    assert!(
        msg.contains("tensor \"h\" is produced by two ops, \"mm\" and \"act\""),
        "{msg}"
    );
}

#[test]
fn an_input_produced_by_an_op_is_named() {
    let mut g = good();
    g["ops"][1]["outputs"] = json!(["x"]);
    let (_, msg) = reject(g);
    assert!(
        msg.contains("input tensor \"x\" is produced by op \"act\""),
        "{msg}"
    );
}

#[test]
fn a_weight_produced_by_an_op_is_named() {
    let mut g = good();
    g["ops"][1]["outputs"] = json!(["y", "w"]);
    let (_, msg) = reject(g);
    assert!(
        msg.contains("weight tensor \"w\" is produced by op \"act\""),
        "{msg}"
    );
}

#[test]
fn a_zero_size_is_named() {
    let mut g = good();
    g["tensors"][2]["size"] = json!(0);
    let (_, msg) = reject(g);
    assert!(msg.contains("tensor \"h\" has size 0"), "{msg}");
}

#[test]
fn a_tensor_alignment_that_is_not_a_power_of_two_is_named() {
    let mut g = good();
    g["tensors"][2]["alignment"] = json!(48);
    let (_, msg) = reject(g);
    assert!(
        msg.contains("tensor \"h\" alignment 48 is not a power of two"),
        "{msg}"
    );
}

#[test]
fn a_graph_alignment_that_is_not_a_power_of_two_is_rejected() {
    let mut g = good();
    g["alignment"] = json!(100);
    let (_, msg) = reject(g);
    assert!(msg.contains("graph alignment 100"), "{msg}");
}

#[test]
fn an_op_without_outputs_is_named() {
    let mut g = good();
    g["ops"][1]["outputs"] = json!([]);
    let (_, msg) = reject(g);
    assert!(msg.contains("op \"act\" has no outputs"), "{msg}");
}

#[test]
fn a_cycle_prints_the_ops_on_it() {
    let g = json!({
        "format": "memplan-graph/1",
        "tensors": [
            {"name": "x", "size": 4, "kind": "input"},
            {"name": "a", "size": 4, "kind": "activation"},
            {"name": "b", "size": 4, "kind": "activation"},
            {"name": "c", "size": 4, "kind": "output"}
        ],
        "ops": [
            {"name": "first", "inputs": ["x"], "outputs": ["c"]},
            {"name": "p", "inputs": ["b"], "outputs": ["a"]},
            {"name": "q", "inputs": ["a"], "outputs": ["b"]}
        ]
    });
    let (e, msg) = reject(g);
    match e {
        GraphError::Cycle { mut ops } => {
            ops.sort();
            assert_eq!(ops, vec!["p", "q"]);
        }
        other => panic!("expected a cycle, got {other}"),
    }
    assert!(
        msg.contains("cycle") && msg.contains("p") && msg.contains("q"),
        "{msg}"
    );
}

#[test]
fn an_op_reading_its_own_output_is_a_cycle() {
    let mut g = good();
    g["ops"][1]["inputs"] = json!(["h", "y"]);
    let (e, msg) = reject(g);
    assert!(
        matches!(e, GraphError::Cycle { ref ops } if ops == &vec!["act".to_string()]),
        "{msg}"
    );
}

#[test]
fn a_json_syntax_error_reports_line_and_column() {
    let text = "{\n  \"format\": \"memplan-graph/1\",\n  \"tensors\": [\n    {\"name\": \"x\" \"size\": 4}\n  ]\n}";
    let err = Graph::parse(text).unwrap_err();
    match err {
        GraphError::Json { line, column, .. } => assert_eq!((line, column), (4, 18)),
        other => panic!("expected a JSON error, got {other}"),
    }
    assert!(Graph::parse(text)
        .unwrap_err()
        .to_string()
        .contains("line 4, column 18"));
}

#[test]
fn a_negative_size_is_reported_with_its_position() {
    let text = good().to_string().replace("\"size\":1024", "\"size\":-1");
    let msg = Graph::parse(&text).unwrap_err().to_string();
    assert!(msg.contains("line 1") && msg.contains("-1"), "{msg}");
}

#[test]
fn sizes_whose_sum_overflows_u64_are_rejected_not_wrapped() {
    let mut g = good();
    g["tensors"][2]["size"] = json!(u64::MAX - 10);
    g["tensors"][3]["size"] = json!(u64::MAX / 2);
    let (e, msg) = reject(g);
    assert!(matches!(e, GraphError::Overflow(_)), "{msg}");
}

#[test]
fn an_inplace_pair_out_of_range_is_named() {
    let mut g = good();
    g["ops"][1]["inplace"] = json!([[0, 3]]);
    let (_, msg) = reject(g);
    assert!(
        msg.contains("op \"act\" inplace pair [0, 3] is out of range"),
        "{msg}"
    );
}

#[test]
fn an_output_listed_twice_by_one_op_is_named() {
    let mut g = good();
    g["ops"][1]["outputs"] = json!(["y", "y"]);
    let (_, msg) = reject(g);
    assert!(msg.contains("op \"act\" lists output \"y\" twice"), "{msg}");
}

#[test]
fn an_unknown_tensor_kind_is_reported_with_its_position() {
    let text = good()
        .to_string()
        .replace("\"kind\":\"weight\"", "\"kind\":\"parameter\"");
    let msg = Graph::parse(&text).unwrap_err().to_string();
    assert!(
        msg.contains("parameter") && msg.contains("line 1, column"),
        "{msg}"
    );
}

#[test]
fn a_million_op_chain_parses_without_overflowing_the_stack() {
    let n = 1_000_000;
    let mut text = String::with_capacity(n * 120);
    text.push_str("{\"format\":\"memplan-graph/1\",\"name\":\"chain\",\"tensors\":[{\"name\":\"t0\",\"size\":256,\"kind\":\"input\"}");
    for i in 1..=n {
        let kind = if i == n { "output" } else { "activation" };
        text.push_str(&format!(
            ",{{\"name\":\"t{i}\",\"size\":256,\"kind\":\"{kind}\"}}"
        ));
    }
    text.push_str("],\"ops\":[");
    for i in 1..=n {
        if i > 1 {
            text.push(',');
        }
        text.push_str(&format!(
            "{{\"name\":\"o{i}\",\"inputs\":[\"t{}\"],\"outputs\":[\"t{i}\"]}}",
            i - 1
        ));
    }
    text.push_str("]}");
    let g = Graph::parse(&text).unwrap();
    assert_eq!(g.ops.len(), n);
    let plan = memplan::plan(
        &g,
        &memplan::PlanOptions {
            order: memplan::OrderMode::Given,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(plan.stats.peak_bytes, 512);
}

#[test]
fn a_wrong_field_is_named_by_its_path_and_the_tensor_or_op_it_belongs_to() {
    let mut g = good();
    g["tensors"][2]["size"] = json!(-1024);
    let (e, msg) = reject(g);
    assert!(matches!(e, GraphError::Json { .. }), "{msg}");
    assert!(
        msg.contains("tensors[2] (\"h\").size: invalid value: integer `-1024`"),
        "{msg}"
    );
    let mut g = good();
    g["ops"][1]["inplace"] = json!([[0]]);
    let (_, msg) = reject(g);
    assert!(
        msg.contains("ops[1] (\"act\").inplace[0]: invalid length 1"),
        "{msg}"
    );
    let mut g = good();
    g["tensors"][1]["kind"] = json!("weights");
    let (_, msg) = reject(g);
    assert!(
        msg.contains("tensors[1] (\"w\").kind: unknown variant `weights`"),
        "{msg}"
    );
}

#[test]
fn a_graph_given_as_an_array_is_refused_as_not_an_object() {
    // serde alone would read an array field by field, in the order of its declaration.
    let g = good();
    let fields = json!([
        g["format"],
        null,
        g["name"],
        null,
        null,
        g["tensors"],
        g["ops"]
    ]);
    let (e, msg) = reject(fields);
    assert!(
        matches!(
            e,
            GraphError::Json {
                line: 1,
                column: 1,
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("must be a JSON object"), "{msg}");
}
