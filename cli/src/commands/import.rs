//! `memplan import`: converts a model of another framework (ONNX) into a memplan-graph/1
//! graph, with a one-line summary on stderr.

use crate::args::{ImportArgs, ImportFormat, OnnxArgs};
use crate::common::{bad, mib, write_out};
use anyhow::{Context, Result};
use memplan::graph::Graph;
use memplan::import::onnx::{import_onnx, parse_input_shape, OnnxOptions};
use std::process::ExitCode;

/// Runs `memplan import`.
pub fn import(a: ImportArgs) -> Result<ExitCode> {
    match a.format {
        ImportFormat::Onnx(o) => onnx(o),
    }
}

/// Runs `memplan import onnx`.
fn onnx(a: OnnxArgs) -> Result<ExitCode> {
    let mut opts = OnnxOptions {
        name: a.name,
        alignment: Some(a.alignment),
        ..OnnxOptions::default()
    };
    for spec in &a.input_shape {
        let (n, dims) = parse_input_shape(spec).map_err(|e| bad(e.to_string()))?;
        if opts.input_shapes.insert(n.clone(), dims).is_some() {
            return Err(bad(format!("--input-shape {n} is given twice")));
        }
    }
    let bytes =
        std::fs::read(&a.model).with_context(|| format!("cannot read {}", a.model.display()))?;
    let g = import_onnx(&bytes, &opts).map_err(|e| bad(format!("{}: {e}", a.model.display())))?;
    eprintln!(
        "{}: {} ops, {} tensors ({} inputs, {} weights, {} outputs), arena tensors {}, weights {}",
        g.name,
        g.ops.len(),
        g.tensors.len(),
        count_kind(&g, memplan::TensorKind::Input),
        count_kind(&g, memplan::TensorKind::Weight),
        count_kind(&g, memplan::TensorKind::Output),
        mib(memplan::passes::arena_tensor_bytes(&g)),
        mib(g.weights_bytes())
    );
    write_out(&a.output, &format!("{}\n", g.to_json()))?;
    Ok(ExitCode::SUCCESS)
}

/// The number of tensors of `kind` in `g`.
fn count_kind(g: &Graph, kind: memplan::TensorKind) -> usize {
    g.tensors.iter().filter(|t| t.kind == kind).count()
}
