//! memplan: memory plans for deep-learning computation graphs.
//!
//! [`graph`] reads and checks memplan-graph/1; [`planner`] picks an op order and arena offsets
//! with the solver crate's heuristics and emits a memplan-plan/1 [`plan`](mod@plan); [`validate`](mod@validate)
//! replays a plan independently of any solver; [`budget`] fits a memory budget with spills
//! and recomputes, timed by the [`cost`] model; [`tiers`] splits memory into persistent,
//! activation and temporary regions.
//!
//! Layers, each using only those above it (`tests/layering.rs` fails on a module cycle):
//! the format ([`graph`] with [`graph::fused`], [`plan`](mod@plan) with its stats, the
//! [`data_file`] of named tensor values, [`json_path`] reading them with the path to a wrong
//! field) and op
//! semantics ([`ops`]); the [`cost`] model; [`validate`](mod@validate), [`analysis`],
//! [`trace`]; the [`planner`]; the conv-algorithm choice
//! ([`conv_algo`]), [`budget`] and [`tiers`]; the rewrites ([`passes`]); the [`pipeline`];
//! front ends ([`zoo`], [`import`]). The executor is its own crate, `memplan-executor`, on
//! top of the format and op semantics ([`ops::kernel`] selects each op's kernel).
#![deny(missing_docs)]

pub mod analysis;
pub mod budget;
pub mod conv_algo;
pub mod cost;
pub mod data_file;
pub mod graph;
pub mod import;
pub mod json_path;
pub mod ops;
pub mod passes;
pub mod pipeline;
pub mod plan;
pub mod planner;
pub mod streams;
pub mod symbolic;
pub mod text_file;
pub mod tiers;
pub mod trace;
pub mod validate;
pub mod zoo;

/// Where unit tests find `../shared` and python3, and how they skip without them (the file
/// the black-box tests share).
#[cfg(test)]
#[path = "../tests/support/shared.rs"]
mod test_shared;

/// Fused ops, part of the graph format: [`graph::fused`] under its old path.
pub use graph::fused;
pub use graph::{Graph, GraphError, OpId, TensorId, TensorKind};
pub use memplan_solver::CancelToken;
pub use pipeline::{Control, PipelineOptions, PipelineResult, Rewrite};
pub use plan::{Instruction, Plan, PlanStatus};
pub use planner::{plan, OrderMode, PlanError, PlanOptions, Progress, ProgressSink, Strategy};
pub use validate::{validate, Replay, Violation, ViolationKind};
