//! Model-zoo batch optimisation and reports: [`batch`] plans every graph of a zoo
//! through [`crate::pipeline::run`] three ways (the listed order, the heuristics, the full
//! pipeline with the batch's options), validates and saves each plan, and records the
//! figures; [`profile`] (re-exported from [`crate::analysis`]) recovers the arena over time from a plan; [`pytorch`] simulates
//! PyTorch's caching allocator for a baseline; [`report`] and [`svg`] write `report.md` and
//! a self-contained `report.html` (inline SVG, no external resource); [`determinism`] compares
//! plans made at idle and under load.

pub mod batch;
pub mod determinism;
pub mod pytorch;
pub mod report;
pub mod svg;

/// The arena profile of a plan, now [`crate::analysis::profile`] (kept under its old path).
pub use crate::analysis::profile;
pub use batch::{run_zoo, GraphResult, ZooEvent, ZooOptions, ZooResults, ZooSummary};

use std::path::Path;
use thiserror::Error;

/// Why a batch failed; each names the file or option at fault.
#[derive(Debug, Error)]
pub enum ZooError {
    /// An input path does not exist.
    #[error("{0}: no such file or folder")]
    Missing(String),
    /// A folder without `*.json` graphs.
    #[error("{0}: no graph files (*.json) found")]
    NoGraphs(String),
    /// A graph file is not a valid memplan-graph/1 graph.
    #[error("{path}: {message}")]
    Graph {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Several graph files are not valid graphs (one line each: the file and what is wrong).
    #[error("{} graph files are not valid graphs:\n  {}", .0.len(), .0.join("\n  "))]
    Graphs(Vec<String>),
    /// The planner failed on a graph.
    #[error("{path}: planning failed: {message}")]
    Plan {
        /// The graph file.
        path: String,
        /// The planner's error.
        message: String,
    },
    /// A plan failed the validator (a planner bug; nothing is recorded for it).
    #[error("{path}: the {phase} plan is invalid: {message}")]
    Invalid {
        /// The graph file.
        path: String,
        /// Which plan.
        phase: &'static str,
        /// The violation.
        message: String,
    },
    /// The existing `results.json` cannot be read.
    #[error("{path}: cannot resume from it: {message} (remove it or choose another --out)")]
    Results {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Another run is writing the output folder (the folder).
    #[error("{0}: another memplan zoo run is writing this folder; wait for it to end or choose another --out")]
    Busy(String),
    /// Bad options.
    #[error("{0}")]
    Options(String),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An invariant broke (a bug).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ZooError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        ZooError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    fn plan(path: &Path, e: impl std::fmt::Display) -> Self {
        ZooError::Plan {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }
}
