//! Solving a [`Model`] and what comes back: the typed status, the column values of a feasible
//! solution, the objective, the MIP dual bound and the nodes explored, read before the HiGHS
//! instance is dropped (so nothing outlives the solve), or, when a guarded solve gives up on
//! HiGHS, the last it reported.

use super::overrun;
use super::watch::{self, Relay, Watch};
use super::{MipError, MipOptions, Model};
use highs::Sense;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// How HiGHS ended (its model status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MipStatus {
    /// Solved to optimality (within `mip_rel_gap`).
    Optimal,
    /// Proven infeasible.
    Infeasible,
    /// Stopped at its time limit.
    TimeLimit,
    /// Stopped at an iteration limit ([`MipOptions::max_lp_iterations`]).
    IterationLimit,
    /// Stopped at a solution limit: HiGHS reports its node cap (`mip_max_nodes`) so.
    SolutionLimit,
    /// Stopped by the watched stop flag.
    Interrupt,
    /// Any other HiGHS model status (its raw value).
    Other(i32),
}

impl MipStatus {
    /// The status of HiGHS' raw model status.
    fn from_raw(raw: i32) -> Self {
        match raw {
            highs_sys::MODEL_STATUS_OPTIMAL => MipStatus::Optimal,
            highs_sys::MODEL_STATUS_INFEASIBLE => MipStatus::Infeasible,
            highs_sys::MODEL_STATUS_REACHED_TIME_LIMIT => MipStatus::TimeLimit,
            highs_sys::MODEL_STATUS_REACHED_ITERATION_LIMIT => MipStatus::IterationLimit,
            highs_sys::MODEL_STATUS_REACHED_SOLUTION_LIMIT => MipStatus::SolutionLimit,
            highs_sys::MODEL_STATUS_REACHED_INTERRUPT => MipStatus::Interrupt,
            other => MipStatus::Other(other),
        }
    }

    /// Stopped by the clock or the stop flag (a raised flag reads as a spent time limit).
    pub fn timed_out(self) -> bool {
        matches!(self, MipStatus::TimeLimit | MipStatus::Interrupt)
    }
}

/// What a solve found, as plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct MipSolution {
    /// How HiGHS ended.
    pub status: MipStatus,
    /// Column values (by [`Col::index`](super::Col::index)) when HiGHS has a feasible
    /// solution (`primal_solution_status` = feasible).
    pub columns: Option<Vec<f64>>,
    /// Objective value of that solution.
    pub objective: Option<f64>,
    /// HiGHS' MIP dual bound (`mip_dual_bound`), when finite: no solution of the model has a
    /// lower objective.
    pub dual_bound: Option<f64>,
    /// Branch-and-bound nodes explored (`mip_node_count`), if HiGHS reports them.
    pub nodes: Option<u64>,
    /// Simplex iterations in all (HiGHS' `simplex_iteration_count`, for a MIP its total LP
    /// iterations), if HiGHS reports them.
    pub lp_iterations: Option<u64>,
    /// HiGHS had not returned within the grace after its time limit or the stop flag: the
    /// values above are the last it reported (the solution of its last improving-solution
    /// report, the bound and nodes of its last interrupt check), and it finishes on its own
    /// thread, its answer dropped.
    pub abandoned: bool,
}

/// Solves `model` (minimising) with `options`, warm-started from `start` (one value per
/// column: HiGHS takes it as its incumbent), with `watch` on HiGHS' callback.
///
/// A solve with a time limit or anything to watch is *guarded*
/// ([`super::overrun`]): HiGHS runs on a thread of its own, and the solve returns within
/// [`LIMIT_GRACE`](super::overrun::LIMIT_GRACE) of the time limit and
/// [`STOP_GRACE`](super::overrun::STOP_GRACE) of the stop flag even where HiGHS does not stop
/// (then with what HiGHS last reported, [`MipSolution::abandoned`] set). Otherwise HiGHS runs
/// on the calling thread, with the callback only for an iteration cap
/// ([`MipOptions::max_lp_iterations`]).
pub fn solve(
    model: Model,
    options: &MipOptions,
    start: &[f64],
    watch: &Watch<'_>,
) -> Result<MipSolution, MipError> {
    if options.time_limit.is_some() || watch.is_active() {
        overrun::guarded(model, options, start, watch)
    } else if options.max_lp_iterations.is_some() {
        run(
            model,
            options,
            start,
            Some(&Relay::new(options.max_lp_iterations)),
        )
    } else {
        run(model, options, start, None)
    }
}

/// Runs HiGHS on `model` on this thread, with `relay` on its callback when given (and its
/// start time recorded there). The callback is gone with the HiGHS instance before this
/// returns.
pub(crate) fn run(
    model: Model,
    options: &MipOptions,
    start: &[f64],
    relay: Option<&Relay>,
) -> Result<MipSolution, MipError> {
    let mut highs = model
        .problem
        .try_optimise(Sense::Minimise)
        .map_err(|e| MipError::Build(format!("{e:?}")))?;
    options.apply(&mut highs)?;
    if highs
        .try_set_solution(Some(start), None, None, None)
        .is_err()
        && !options.lenient
    {
        return Err(MipError::WarmStart);
    }
    if let Some(relay) = relay {
        if !watch::install(&mut highs, relay) {
            return Err(MipError::Callback);
        }
        let _ = relay.started.set(Instant::now());
    }
    let solved = highs
        .try_solve()
        .map_err(|e| MipError::Run(format!("{e:?}")))?;
    // SAFETY: a live Highs instance owned by `solved`.
    let raw = unsafe { highs_sys::Highs_getModelStatus(solved.as_ptr()) };
    let feasible = solved.int_info_value(c"primal_solution_status").ok() == Some(2);
    let mut status = MipStatus::from_raw(raw);
    if status == MipStatus::Interrupt && relay.is_some_and(|r| r.capped.load(Ordering::Relaxed)) {
        status = MipStatus::IterationLimit;
    }
    let solution = MipSolution {
        status,
        columns: feasible.then(|| solved.get_solution().columns().to_vec()),
        objective: feasible.then(|| solved.objective_value()),
        dual_bound: solved
            .double_info_value(c"mip_dual_bound")
            .ok()
            .filter(|d| d.is_finite()),
        nodes: node_count(&solved),
        lp_iterations: solved
            .int_info_value(c"simplex_iteration_count")
            .ok()
            .and_then(|i| u64::try_from(i).ok()),
        abandoned: false,
    };
    drop(solved);
    Ok(solution)
}

/// Branch-and-bound nodes HiGHS explored in `solved` (its `mip_node_count` info, an `int64`
/// that the `highs` crate's `int_info_value` cannot read), if it reports them.
fn node_count(solved: &highs::SolvedModel) -> Option<u64> {
    let mut nodes: i64 = 0;
    // SAFETY: a live Highs instance owned by `solved`; the name is NUL-terminated and
    // `nodes` is a valid `int64_t` to write to.
    let status = unsafe {
        highs_sys::Highs_getInt64InfoValue(solved.as_ptr(), c"mip_node_count".as_ptr(), &mut nodes)
    };
    (status == highs_sys::STATUS_OK)
        .then(|| u64::try_from(nodes).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::super::{MipOptions, MipStatus, Model, Watch};
    use super::solve;

    /// A multi-dimensional covering knapsack (60 binaries, 6 rows, costs and weights from a
    /// fixed formula): branch and bound takes thousands of LP iterations to prove it. The warm
    /// start takes every item (feasible, dear).
    fn covering() -> (Model, Vec<f64>) {
        let mut model = Model::new();
        let n = 60u32;
        let cols: Vec<_> = (0..n)
            .map(|i| model.add_integer_column(f64::from(11 + (i * 37) % 41), 0.0..=1.0))
            .collect();
        for r in 0..6u32 {
            let weights: Vec<f64> = (0..n)
                .map(|i| f64::from(3 + (i * (13 + 2 * r) + 7 * r) % 31))
                .collect();
            let need = weights.iter().sum::<f64>() * 0.41;
            model.add_row(need.., cols.iter().copied().zip(weights));
        }
        (model, vec![1.0; n as usize])
    }

    #[test]
    fn an_lp_iteration_cap_stops_highs_at_the_same_point_every_time() {
        let (model, start) = covering();
        let free = solve(model, &MipOptions::default(), &start, &Watch::NONE).unwrap();
        assert_eq!(free.status, MipStatus::Optimal);
        let spent = free.lp_iterations.unwrap();
        assert!(spent > 400, "the model is too easy: {spent} LP iterations");
        let capped = MipOptions {
            max_lp_iterations: Some(spent / 4),
            ..MipOptions::default()
        };
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let (model, start) = covering();
                solve(model, &capped, &start, &Watch::NONE).unwrap()
            })
            .collect();
        assert_eq!(runs[0].status, MipStatus::IterationLimit);
        let used = runs[0].lp_iterations.unwrap();
        assert!(used >= spent / 4 && used < spent, "{used} of {spent}");
        assert_eq!(runs[0], runs[1]);
        // A guarded solve (a time limit) stops at the same check with the same answer.
        let (model, start) = covering();
        let guarded = MipOptions {
            time_limit: Some(600.0),
            ..capped
        };
        assert_eq!(
            solve(model, &guarded, &start, &Watch::NONE).unwrap(),
            runs[0]
        );
    }

    #[test]
    fn the_model_counts_its_rows_and_nonzeros() {
        let (model, _) = covering();
        assert_eq!((model.num_rows(), model.num_nonzeros()), (6, 360));
    }
}
