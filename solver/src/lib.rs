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
//! Modules: [`problem`] (buffers, placements, LOAD, the placement checker), [`limits`] (solver
//! limits and statistics), [`placement`] (the placement step: heuristic portfolio, exact
//! search hand-off, the HiGHS address program and its peak-window refinement), [`exact`]
//! (exact placement search), [`order`] (op-order problem, lifetimes of an order, order
//! heuristics, the order-independent bound and the HiGHS order program), [`csv`] (the
//! minimalloc buffer CSV), [`generate`] (hard placement instances with known answers), [`mip`] (the one HiGHS layer every integer program is built and
//! solved through).
//!
//! ```
//! use memplan_solver::{placement, Limits, Buffer, Lifetime, PlacementProblem};
//!
//! // Three buffers: the first two are alive together, the third reuses the first's bytes.
//! let buf = |start, end, size| Buffer { lifetime: Lifetime::new(start, end), size, alignment: 64 };
//! let problem = PlacementProblem::new(vec![buf(0, 2, 1000), buf(1, 3, 500), buf(2, 4, 1000)]);
//! assert_eq!(problem.load(), 1500);
//!
//! let best = placement::portfolio(&problem, &Limits::UNLIMITED).unwrap();
//! let peak = problem.check(&best.placement).unwrap(); // independent re-check
//! assert_eq!(peak, best.stats.objective);
//! assert!(peak >= problem.load());
//! println!("{} reached {peak} bytes (gap {:.1}%)", best.method, 100.0 * best.stats.gap());
//! ```
#![deny(missing_docs)]

pub mod csv;
pub mod exact;
pub mod generate;
pub mod limits;
pub mod mip;
pub mod order;
pub mod placement;
pub mod problem;

/// Where unit tests find `../shared` (benchmark traces) and how they skip without it: the
/// workspace's tests/support/shared.rs (a note, or a failure under `MEMPLAN_REQUIRE_SHARED=1`).
#[cfg(test)]
#[path = "../../tests/support/shared.rs"]
pub(crate) mod test_shared;

pub use limits::{CancelToken, Deadline, Limits, LimitsClock, ProgressFn, SolveStats, SolveStatus};

pub use problem::{
    align_up, packed_bytes, Buffer, Lifetime, Placement, PlacementError, PlacementProblem,
};
