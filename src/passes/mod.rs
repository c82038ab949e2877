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
pub use crate::plan::RewriteStep;
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
    /// The pass's decisions, for a plan to record (`None` when the graph is unchanged):
    /// [`replay`] applies them to the same input graph and gives `graph` again.
    pub step: Option<RewriteStep>,
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

/// A pipeline's result: the final graph, one report per pass, and the steps of the passes
/// that changed the graph (in order; what a plan records as `rewrites`).
#[derive(Debug, Clone)]
pub struct PipelineOutcome {
    /// The final graph.
    pub graph: Graph,
    /// One report per pass, in order.
    pub reports: Vec<PassReport>,
    /// The decisions of each pass that changed the graph, in order.
    pub steps: Vec<RewriteStep>,
}

/// Applies `passes` in order.
pub fn run_pipeline(graph: &Graph, passes: &[&dyn Pass]) -> Result<PipelineOutcome, PassError> {
    let mut current = graph.clone();
    let mut reports = Vec::with_capacity(passes.len());
    let mut steps = Vec::new();
    for pass in passes {
        let out = pass.run(&current)?;
        current = out.graph;
        reports.push(out.report);
        steps.extend(out.step);
    }
    Ok(PipelineOutcome {
        graph: current,
        reports,
        steps,
    })
}

/// The name of the pass a recorded step is of (`tile`, `fuse`).
pub fn step_pass(step: &RewriteStep) -> &'static str {
    match step {
        RewriteStep::Tile { .. } => tile::NAME,
        RewriteStep::Fuse { .. } => fuse::NAME,
    }
}

/// Applies recorded `steps` to `graph` in order, without searching: each pass takes the
/// decisions its step names (a tiling its regions and strip counts). Deterministic, so the
/// steps a pipeline recorded give back the graph it made. A step the graph cannot take (a
/// region that is not one of the graph's, a strip count its rows do not allow) is an error
/// naming it, and so is a step that changes nothing: a pipeline records only the passes that
/// changed the graph.
pub fn replay(graph: &Graph, steps: &[RewriteStep]) -> Result<Graph, PassError> {
    let mut current = graph.clone();
    for (i, step) in steps.iter().enumerate() {
        let next = match step {
            RewriteStep::Tile { regions } => tile::replay(&current, regions)?,
            RewriteStep::Fuse { fold_pad, chains } => {
                let fuse = fuse::Fuse {
                    fold_pad: *fold_pad,
                    chains: *chains,
                };
                fuse.run(&current)?.graph
            }
        };
        if next == current {
            return Err(PassError::Unsupported {
                pass: step_pass(step),
                message: format!(
                    "recorded step {i} changes nothing in the graph it is applied to (a plan \
                     records only the passes that changed the graph)"
                ),
            });
        }
        current = next;
    }
    Ok(current)
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
                step: None,
            })
        }
    }

    #[test]
    fn a_pipeline_reports_every_pass_in_order() {
        let g = Graph::parse(crate::graph::SAMPLE_JSON).unwrap();
        let out = run_pipeline(&g, &[&DropNothing, &DropNothing]).unwrap();
        let reports = out.reports;
        assert_eq!(out.graph, g);
        assert!(out.steps.is_empty());
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[0].ops_before, g.ops.len());
        assert_eq!(reports[1].arena_tensor_bytes_after, arena_tensor_bytes(&g));
    }
}
