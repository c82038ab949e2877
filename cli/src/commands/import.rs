//! `memplan import`: converts a model of another framework (ONNX) into a memplan-graph/1
//! graph, with a one-line summary on stderr; `--weights-out` also writes the weights' data
//! as a tensor file (`memplan::data_file`). With `--symbol NAME=MIN..MAX` the graph is a
//! symbolic graph (`memplan::symbolic`): that dim_param stays a symbol and the sizes that
//! depend on it are expressions; the summary then counts the graph at every symbol's max.

use crate::args::{ImportArgs, ImportFormat, OnnxArgs};
use crate::common::{bad, mib};
use crate::output::{check_outputs, given, write_with};
use anyhow::{Context, Result};
use memplan::graph::Graph;
use memplan::import::onnx::{
    import_onnx, import_onnx_with_weights, parse_input_shape, parse_symbol, OnnxOptions,
};
use std::path::Path;
use std::process::ExitCode;

/// Runs `memplan import`.
pub fn import(a: ImportArgs) -> Result<ExitCode> {
    match a.format {
        ImportFormat::Onnx(o) => onnx(o),
    }
}

/// Runs `memplan import onnx`.
fn onnx(a: OnnxArgs) -> Result<ExitCode> {
    let outputs = given(&[("-o", &a.output), ("--weights-out", &a.weights_out)]);
    check_outputs(&[("the model", &a.model)], &outputs)?;
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
    for spec in &a.symbol {
        let (n, range) = parse_symbol(spec).map_err(|e| bad(e.to_string()))?;
        if opts.symbols.insert(n.clone(), range).is_some() {
            return Err(bad(format!("--symbol {n} is given twice")));
        }
    }
    let bytes = std::fs::read(&a.model)
        .map_err(|e| bad(format!("cannot read {}: {e}", a.model.display())))?;
    let fail = |e: memplan::import::onnx::OnnxError| bad(format!("{}: {e}", a.model.display()));
    let (g, symbolic, weights) = match &a.weights_out {
        None if opts.symbols.is_empty() => (import_onnx(&bytes, &opts).map_err(fail)?, None, None),
        None => {
            let i = memplan::import::onnx::import_onnx_symbolic(&bytes, &opts).map_err(fail)?;
            let max = i
                .graph
                .instantiate(&i.graph.max_corner())
                .map_err(|e| bad(e.to_string()))?;
            (max, Some(i.document), None)
        }
        Some(path) => {
            let i = import_onnx_with_weights(&bytes, &opts).map_err(fail)?;
            if !i.empty_weights.is_empty() {
                eprintln!(
                    "note: {} weights have no elements and no data (left out of {}): {}",
                    i.empty_weights.len(),
                    path.display(),
                    i.empty_weights.join(", ")
                );
            }
            (i.graph, i.symbolic, Some((path, i.weights)))
        }
    };
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
    let text = match symbolic {
        Some(doc) => {
            let symbols: Vec<String> = opts
                .symbols
                .iter()
                .map(|(s, (lo, hi))| format!("{s}={lo}..{hi}"))
                .collect();
            eprintln!(
                "symbolic: {} (sizes above at every symbol's max)",
                symbols.join(", ")
            );
            serde_json::to_string_pretty(&doc).context("cannot write the symbolic graph")?
        }
        None => g.to_json(),
    };
    let text = format!("{text}\n");
    let weight_bytes = weights
        .as_ref()
        .map(|(path, w)| (*path, memplan::data_file::write(w)));
    // The graph and the weights together: a failure to write one leaves the other as it was.
    let others: Vec<(&Path, &[u8])> = weight_bytes
        .iter()
        .map(|(path, bytes)| (path.as_path(), bytes.as_slice()))
        .collect();
    write_with(&a.output, &text, &others)?;
    if let (Some((path, weights)), Some((_, bytes))) = (&weights, &weight_bytes) {
        eprintln!(
            "weights: {} tensors, {} in {}",
            weights.tensors.len(),
            mib(bytes.len() as u64),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The number of tensors of `kind` in `g`.
fn count_kind(g: &Graph, kind: memplan::TensorKind) -> usize {
    g.tensors.iter().filter(|t| t.kind == kind).count()
}
