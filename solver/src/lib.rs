//! Graph-agnostic memory-planning solvers.
//!
//! Vocabulary used throughout (stated once here):
//! - a **step** is the position of an op in an execution order (`0..n`);
//! - a [`Lifetime`] is the half-open step range `[start, end)` during which a buffer's bytes
//!   must stay reserved: a buffer produced by the op at step `p` and last read at step `q`
//!   lives `[p, q + 1)`;
//! - sizes, offsets, alignments and capacities are **bytes** (`u64`), with checked arithmetic;
//! - two buffers **conflict** when their lifetimes intersect; conflicting buffers may not share bytes.
//!
//! Modules: [`problem`] (buffers, placements, LOAD, the placement checker), [`budget`] (solver
//! limits and statistics), [`placement`] (heuristic placement portfolio), [`order`] (op-order
//! problem, lifetimes of an order, order heuristics and the order-independent bound),
//! [`csv`] (the minimalloc buffer CSV), [`ilp`] (integer programs through good_lp + HiGHS).
#![deny(missing_docs)]

pub mod budget;
pub mod csv;
pub mod ilp;
pub mod order;
pub mod placement;
pub mod problem;

pub use budget::{Budget, SolveStats, SolveStatus};
pub use problem::{align_up, Buffer, Lifetime, Placement, PlacementError, PlacementProblem};
