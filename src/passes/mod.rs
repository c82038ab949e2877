//! Graph rewrites that run before planning: each pass takes a validated
//! [`Graph`] and returns a new validated graph plus a [`PassReport`] of what changed. The plan
//! then refers to the rewritten graph (`memplan plan --graph-out PATH` writes it), and the
//! executor proves that the rewritten graph computes the same outputs as the original one.
//!
//! One pass per module, behind the small [`Pass`] trait: [`fuse`] (operator fusion; see its
//! doc for how it differs from the fused-op format [`crate::graph::fused`] and the fused
//! kernel), [`tile`] (spatial tiling, in parts: classify / choose / emit). Both write their
//! result through one helper, `rebuild` (keep some tensors, add new ones, assemble and
//! validate the new graph). [`run_pipeline`] applies a list of configured passes in order.

pub mod fuse;
mod rebuild;
pub mod tile;

use crate::graph::{Graph, GraphError, TensorKind};
use serde::Serialize;
use thiserror::Error;

/// A graph rewrite.
pub trait Pass {
    /// Short name (`fuse`, `tile`, ...), as used in reports and on the command line.
    fn name(&self) -> &'static str;
    /// Rewrites `graph`. A pass that finds nothing to do returns the graph unchanged.
    fn run(&self, graph: &Graph) -> Result<PassOutcome, PassError>;
}

/// The result of one pass.
#[derive(Debug, Clone)]
pub struct PassOutcome {
    /// The rewritten, validated graph.
    pub graph: Graph,
    /// What changed.
    pub report: PassReport,
}

/// What a pass changed: counts before and after, and notes a person can read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassReport {
    /// The pass's name.
    pub pass: String,
    /// Ops before the pass.
    pub ops_before: usize,
    /// Ops after the pass.
    pub ops_after: usize,
    /// Tensors before the pass.
    pub tensors_before: usize,
    /// Tensors after the pass.
    pub tensors_after: usize,
    /// Sum of the arena tensors' sizes before the pass (bytes; weights excluded).
    pub arena_tensor_bytes_before: u64,
    /// Sum of the arena tensors' sizes after the pass (bytes; weights excluded).
    pub arena_tensor_bytes_after: u64,
    /// One line per rewrite made (or why none was made), in graph order.
    pub notes: Vec<String>,
}

impl PassReport {
    /// A report comparing `before` and `after`, with no notes yet.
    pub fn compare(pass: &str, before: &Graph, after: &Graph) -> PassReport {
        PassReport {
            pass: pass.to_string(),
            ops_before: before.ops.len(),
            ops_after: after.ops.len(),
            tensors_before: before.tensors.len(),
            tensors_after: after.tensors.len(),
            arena_tensor_bytes_before: arena_tensor_bytes(before),
            arena_tensor_bytes_after: arena_tensor_bytes(after),
            notes: Vec::new(),
        }
    }
}

/// Sum of the sizes of every tensor that lives in the arena (bytes; saturating).
pub fn arena_tensor_bytes(graph: &Graph) -> u64 {
    graph
        .tensors
        .iter()
        .filter(|t| t.kind != TensorKind::Weight)
        .fold(0u64, |a, t| a.saturating_add(t.size))
}

/// Why a pass could not run.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum PassError {
    /// The rewritten graph breaks a rule of the format (a bug in the pass, reported, not hidden).
    #[error("pass {pass}: the rewritten graph is invalid: {source}")]
    Invalid {
        /// The pass.
        pass: &'static str,
        /// The rule broken.
        source: GraphError,
    },
    /// The pass was asked for something the graph cannot give (names the op or tensor).
    #[error("pass {pass}: {message}")]
    Unsupported {
        /// The pass.
        pass: &'static str,
        /// What and where.
        message: String,
    },
}

/// Applies `passes` in order; returns the final graph and one report per pass.
pub fn run_pipeline(
    graph: &Graph,
    passes: &[&dyn Pass],
) -> Result<(Graph, Vec<PassReport>), PassError> {
    let mut current = graph.clone();
    let mut reports = Vec::with_capacity(passes.len());
    for pass in passes {
        let out = pass.run(&current)?;
        current = out.graph;
        reports.push(out.report);
    }
    Ok((current, reports))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct DropNothing;
    impl Pass for DropNothing {
        fn name(&self) -> &'static str {
            "nothing"
        }
        fn run(&self, graph: &Graph) -> Result<PassOutcome, PassError> {
            Ok(PassOutcome {
                graph: graph.clone(),
                report: PassReport::compare(self.name(), graph, graph),
            })
        }
    }

    #[test]
    fn a_pipeline_reports_every_pass_in_order() {
        let g = Graph::parse(crate::graph::SAMPLE_JSON).unwrap();
        let (out, reports) = run_pipeline(&g, &[&DropNothing, &DropNothing]).unwrap();
        assert_eq!(out, g);
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[0].ops_before, g.ops.len());
        assert_eq!(reports[1].arena_tensor_bytes_after, arena_tensor_bytes(&g));
    }
}
