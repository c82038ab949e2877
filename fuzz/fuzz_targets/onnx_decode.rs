//! Fuzzes the ONNX importer, `memplan::import::onnx::import_onnx`, on arbitrary bytes: the
//! protobuf decoder (`import::onnx_proto::ModelProto::decode`), shape resolution, op mapping
//! and the final `Graph::parse`. When the import fails on a symbolic dimension that no
//! `--input-shape` binds, it runs a second time with the shape of every graph input that
//! declares a symbol given (symbols bound to 2), to reach the binding code.
//!
//! Invariants checked: nothing panics (bad bytes are a typed `OnnxError`); an imported graph
//! survives `Graph::parse(&g.to_json()) == g`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memplan::import::onnx::{import_onnx, OnnxError, OnnxOptions};
use memplan::import::onnx_proto::ModelProto;
use memplan::Graph;

fn round_trip(g: &Graph) {
    let json = g.to_json();
    match Graph::parse(&json) {
        Ok(back) => assert_eq!(&back, g, "to_json round trip changed the graph:\n{json}"),
        Err(e) => panic!("to_json of an imported graph does not parse again: {e}\n{json}"),
    }
}

fuzz_target!(|data: &[u8]| {
    match import_onnx(data, &OnnxOptions::default()) {
        Ok(g) => return round_trip(&g),
        Err(OnnxError::Shape(m)) if m.contains("no --input-shape binds") => {}
        Err(_) => return,
    }
    let Ok(model) = ModelProto::decode(data) else {
        return;
    };
    let Some(graph) = &model.graph else {
        return;
    };
    let mut opts = OnnxOptions::default();
    for v in &graph.input {
        let (Some(name), Some(shape)) = (
            &v.name,
            v.r#type
                .as_ref()
                .and_then(|t| t.tensor_type.as_ref())
                .and_then(|t| t.shape.as_ref()),
        ) else {
            continue;
        };
        if !shape.dim.iter().any(|d| d.dim_param.is_some()) {
            continue;
        }
        let dims = shape
            .dim
            .iter()
            .map(|d| d.dim_value.and_then(|v| u64::try_from(v).ok()).unwrap_or(2))
            .collect();
        opts.input_shapes.insert(name.clone(), dims);
    }
    if opts.input_shapes.is_empty() {
        return;
    }
    if let Ok(g) = import_onnx(data, &opts) {
        round_trip(&g);
    }
});
