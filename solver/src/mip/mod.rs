//! The one HiGHS layer of the crate: every integer program (placement, op order, the memory
//! budget's spill/recompute program in the `memplan` crate) builds its [`Model`] here, solves
//! it with [`solve`] under [`MipOptions`] and a [`Watch`] (cancellation and progress), and
//! decodes the plain-data [`MipSolution`] it gets back (typed [`MipStatus`], column values,
//! dual bound, node count).
//!
//! - [`model`]: columns (bounds, integrality, objective coefficient) and rows.
//! - [`options`]: the HiGHS options each program sets (threads, gap, presolve, limits,
//!   switches), with the warm start.
//! - [`watch`]: HiGHS' callback through `highs-sys` (the `highs` crate exposes none): a stop
//!   flag polled at HiGHS' MIP-interrupt checks, and what HiGHS reports there and on every
//!   improving solution (columns, bounds, nodes) for the caller's progress callback.
//! - [`overrun`]: the guard: a solve with a time limit or a watch runs HiGHS on a thread of
//!   its own and returns within a grace of its limit or its stop flag even where HiGHS does
//!   not stop (HiGHS 1.16 does not check them in every phase).
//! - [`solution`]: the solve itself and what it reads back (status, columns, bound, nodes).
//!
//! Why not `good_lp`: it builds models well, but gives no access to HiGHS' callbacks, its MIP
//! dual bound, its node count or an initial solution, which every program here needs; so the
//! models are built on the `highs` crate directly and `good_lp` is not a dependency.

pub mod model;
pub mod options;
pub mod overrun;
pub mod solution;
pub mod watch;

pub use model::{Col, Model};
pub use options::{MipOptions, NODE_CAPPED_OFF};
pub use solution::{solve, MipSolution, MipStatus};
pub use watch::Watch;

use thiserror::Error;

/// Why HiGHS could not be set up or run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MipError {
    /// HiGHS refused the model.
    #[error("building the model: {0}")]
    Build(String),
    /// HiGHS refused an option.
    #[error("setting option {0}")]
    Option(&'static str),
    /// HiGHS refused the warm start.
    #[error("setting the warm start")]
    WarmStart,
    /// HiGHS refused the callback.
    #[error("installing the HiGHS callback")]
    Callback,
    /// The solve itself failed.
    #[error("run failed: {0}")]
    Run(String),
}
