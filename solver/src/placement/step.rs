//! The whole placement step: the heuristic [`crate::placement`] portfolio, then the
//! exact search ([`crate::exact`]) within what is left of the budget.
//!
//! - With a capacity: if the heuristics fit it, done; otherwise the exact search tries to fit
//!   it, and either finds a placement, proves none exists, or runs out of budget.
//! - Without: the exact search lowers the peak from the heuristics' best towards the lower
//!   bound (LOAD tightened by alignment, [`PlacementProblem::aligned_load`]) and reports the
//!   proven bound (that, or higher where infeasibility was proven).
//!
//! - Then, when a gap is left, the HiGHS placement model ([`super::refine`])
//!   gets the rest of the budget: whole for small instances (its dual bound can raise the
//!   proven bound above LOAD), by windows around the peak otherwise. With a time limit the
//!   exact search stops at [`EXACT_SHARE`] of it so the model always gets a turn; when the
//!   model stops early (nothing to model, or done) with a gap left, the minimisation resumes
//!   where it stopped ([`exact::minimise_more`]) with the rest of the time, so a time limit
//!   is used whole.
//!
//! Within [`NEGLIGIBLE_GAP`] of the bound, minimisation asks one question only, the bound
//! itself, on a small budget ([`NEGLIGIBLE_NODES_PER_BUFFER`]), and the model gets no turn.
//! The result is never worse than the heuristics'. Without a time limit the exact search gets
//! [`DEFAULT_EXACT_NODES`] search nodes and the model [`DEFAULT_ILP_MODELS`] node-limited
//! solves, so a call always ends and is deterministic.

use super::refine::{self, IlpRefineOptions};
use crate::exact::{self, ExactOptions, ExactStatus, SearchTrace};
use crate::limits::{Limits, SolveStats, SolveStatus};
use crate::placement::{self, MemberResult};
use crate::problem::{Placement, PlacementError, PlacementProblem};
use std::time::{Duration, Instant};

/// Relative gap (peak − bound) / peak under which minimisation asks only whether the bound
/// itself is reachable, on a small budget: the bound counts the alignment lost between buffers
/// alive together at one step only ([`PlacementProblem::aligned_load`]), so the last few bytes
/// of alignment slack that spans steps can rarely be proven away, and a bisection would spend
/// its whole budget for nothing; but where the placement only put the wrong buffer on top, the
/// search places everything at the bound at once.
pub const NEGLIGIBLE_GAP: f64 = 1e-4;

/// Search nodes per buffer for the one question asked within [`NEGLIGIBLE_GAP`] (at most the
/// exact search's own node budget when it has one). Five zoo training plans, 252 bytes above
/// the bound, were placed at it after 799–3,699 nodes (195–1,030 buffers).
pub const NEGLIGIBLE_NODES_PER_BUFFER: u64 = 16;

/// Node budget of the exact search when the caller gives no limit at all.
pub const DEFAULT_EXACT_NODES: u64 = 200_000;

/// Share of a time limit the exact search may use, when minimising, before the HiGHS model's
/// turn (when the exact search stops early, the model gets the whole rest). A fit (with a
/// capacity) has no model turn: the search gets the whole limit.
pub const EXACT_SHARE: f64 = 0.8;

/// Time kept back from a time limit per buffer, at most a quarter of the limit, for what
/// follows the last limited phase: a cut member's finishing (its buffers not reached placed
/// online, `O(n log n)`), the placement's checks, and the caller's writing. Measured on
/// 50,000 random buffers (two cores): about 1.5 µs per buffer after the clock has run out.
pub const FINISH_PER_BUFFER: Duration = Duration::from_micros(2);

/// `limits` with [`FINISH_PER_BUFFER`] per buffer of `problem` kept back from its time.
fn keep_back_finishing(problem: &PlacementProblem, limits: &Limits) -> Limits {
    let n = u32::try_from(problem.buffers.len()).unwrap_or(u32::MAX);
    let kept = limits.time.map_or(Duration::ZERO, |t| {
        FINISH_PER_BUFFER.saturating_mul(n).min(t / 4)
    });
    limits.remaining_after(kept)
}

/// Least time left after the HiGHS model's turn for the minimisation to resume (below it the
/// search could not ask one question).
pub const MIN_RESUME: Duration = Duration::from_millis(20);

/// Models the HiGHS refinement solves when the caller gives no limit at all.
pub const DEFAULT_ILP_MODELS: usize = 4;

/// Options of [`place`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceOptions {
    /// Limits for the whole step (heuristics first, the exact search gets the rest).
    pub limits: Limits,
    /// Run the exact search after the heuristics.
    pub exact: bool,
}

impl Default for PlaceOptions {
    fn default() -> Self {
        PlaceOptions {
            limits: Limits::UNLIMITED,
            exact: true,
        }
    }
}

/// What the exact search did, when it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExactReport {
    /// Its status.
    pub status: ExactStatus,
    /// Search nodes entered.
    pub nodes: u64,
    /// Time it took.
    pub elapsed: Duration,
    /// How far the canonical search got and where it failed (a fit question only: a capacity,
    /// or the bound within a negligible gap; the minimiser leaves none).
    pub trace: Option<SearchTrace>,
}

impl ExactReport {
    /// The report of one fit question ([`exact::solve`]).
    fn of_fit(out: &exact::ExactOutcome) -> Self {
        ExactReport {
            status: out.status,
            nodes: out.nodes,
            elapsed: out.elapsed,
            trace: Some(out.trace),
        }
    }
}

/// What the HiGHS model did, when it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IlpReport {
    /// Its status (optimal when it proved the peak).
    pub status: SolveStatus,
    /// Models solved (1 for a whole-instance model, else one per window).
    pub models: usize,
    /// Models that lowered the peak.
    pub improved: usize,
    /// Time it took.
    pub elapsed: Duration,
}

/// The chosen placement and how it was found.
#[derive(Debug, Clone)]
pub struct PlaceOutcome {
    /// The placement (valid; see `stats` for its peak).
    pub placement: Placement,
    /// `exact` when the exact search improved on the heuristics, else the heuristic's name.
    pub method: String,
    /// The heuristic portfolio's members.
    pub members: Vec<MemberResult>,
    /// The exact search's report, when it ran.
    pub exact: Option<ExactReport>,
    /// The HiGHS model's report, when it ran.
    pub ilp: Option<IlpReport>,
    /// Objective = peak; lower bound = the aligned LOAD or better; status optimal / heuristic /
    /// time_limit / node_limit / infeasible (capacity proven unreachable).
    pub stats: SolveStats,
    /// Whether the peak fits `problem.capacity` (true when there is none).
    pub fits: bool,
}

/// Places `problem` (see the module doc): [`heuristics`], then [`refine`](fn@refine) with what is left
/// of the budget when `opts.exact`. `problem.capacity`, when set, is the target.
pub fn place(
    problem: &PlacementProblem,
    opts: &PlaceOptions,
) -> Result<PlaceOutcome, PlacementError> {
    let started = Instant::now();
    if let Some(outcome) = below_the_bound(problem, started)? {
        return Ok(outcome);
    }
    let limits = keep_back_finishing(problem, &opts.limits);
    let heur = heuristics(problem, &limits)?;
    if !opts.exact {
        return Ok(heur);
    }
    let remaining = limits.remaining_after(started.elapsed());
    refine(problem, &heur, &remaining)
}

/// Method of the answer to a capacity below the lower bound, which [`place`] gives at once.
pub const BELOW_THE_BOUND: &str = "online (capacity below the lower bound)";

/// A capacity below the lower bound (the aligned LOAD, `O(k · n log n)`) is answered at once,
/// infeasible, without the portfolio or the search: with every buffer placed online (`O(n
/// log n)`, [`super::online`]) as the placement the outcome carries, and method
/// [`BELOW_THE_BOUND`]. `None` when there is no capacity or it is not below the bound.
fn below_the_bound(
    problem: &PlacementProblem,
    started: Instant,
) -> Result<Option<PlaceOutcome>, PlacementError> {
    let Some(capacity) = problem.capacity else {
        return Ok(None);
    };
    let bound = problem.aligned_load();
    if capacity >= bound {
        return Ok(None);
    }
    let placement = super::online::place_all(&problem.buffers)?;
    let peak = super::fit::peak_of(&problem.buffers, &placement);
    Ok(Some(PlaceOutcome {
        placement,
        method: BELOW_THE_BOUND.to_string(),
        members: Vec::new(),
        exact: None,
        ilp: None,
        stats: SolveStats {
            status: SolveStatus::Infeasible,
            elapsed: started.elapsed(),
            objective: peak,
            lower_bound: bound.min(peak),
        },
        fits: false,
    }))
}

/// The heuristic portfolio alone, as a [`PlaceOutcome`] (lower bound: LOAD tightened by
/// alignment, [`PlacementProblem::aligned_load`]).
pub fn heuristics(
    problem: &PlacementProblem,
    limits: &Limits,
) -> Result<PlaceOutcome, PlacementError> {
    let heur = placement::portfolio(problem, limits)?;
    let peak = heur.stats.objective;
    let mut stats = heur.stats;
    // A capacity below the lower bound is answered by the bound itself, search or not.
    if problem.capacity.is_some_and(|c| c < stats.lower_bound) {
        stats.status = SolveStatus::Infeasible;
    }
    Ok(PlaceOutcome {
        placement: heur.placement,
        method: heur.method.to_string(),
        members: heur.members,
        exact: None,
        ilp: None,
        fits: problem.capacity.is_none_or(|c| peak <= c),
        stats,
    })
}

/// Deterministic work caps of [`refine_with`]: with these, the stop flag of the budget (and
/// its time limit, if any) is only a cap on top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefineWork {
    /// Exact search nodes.
    pub exact_nodes: u64,
    /// HiGHS placement models (whole, or windows around the peak).
    pub ilp_models: usize,
    /// Branch-and-bound nodes per HiGHS model.
    pub ilp_nodes_per_model: u64,
    /// The exact search's work limit ([`ExactOptions::work_limit`], on top of
    /// `exact_nodes`: a node's cost ranges over fifty times with the instance's width, its
    /// work does not); `None`: the node cap alone.
    pub exact_work: Option<u64>,
}

/// Runs the exact search from `start` (a valid placement of `problem`, e.g. from
/// [`heuristics`]) within `budget` and keeps whichever is better. Without any limit in
/// `budget` the search gets [`DEFAULT_EXACT_NODES`] nodes.
pub fn refine(
    problem: &PlacementProblem,
    start: &PlaceOutcome,
    limits: &Limits,
) -> Result<PlaceOutcome, PlacementError> {
    refine_with(problem, start, limits, None)
}

/// [`refine`](fn@refine) with explicit work caps for the exact search and the HiGHS model (`None`: the
/// caps follow `budget` as in [`refine`](fn@refine)).
pub fn refine_with(
    problem: &PlacementProblem,
    start: &PlaceOutcome,
    limits: &Limits,
    work: Option<RefineWork>,
) -> Result<PlaceOutcome, PlacementError> {
    let started = Instant::now();
    // Nothing left of the time limit (the heuristics used it, as on tens of thousands of
    // buffers), or the stop flag raised: the search and the model would only build their
    // indexes (0.15 s on 50,000 buffers) to stop at once.
    if limits.time.is_some_and(|t| t.is_zero()) || limits.is_cancelled() {
        let mut out = start.clone();
        let s = &mut out.stats;
        let unmet = match problem.capacity {
            Some(_) => !out.fits,
            None => s.objective > s.lower_bound,
        };
        if unmet && s.status != SolveStatus::Infeasible {
            s.status = SolveStatus::TimeLimit;
        }
        return Ok(out);
    }
    let bound = problem.aligned_load();
    let uncapped = PlacementProblem::new(problem.buffers.clone());
    let mut placement = start.placement.clone();
    let mut method = start.method.clone();
    let start_stats = &start.stats;
    let mut peak = uncapped.check(&placement)?;
    let mut lower = start_stats.lower_bound.max(bound).min(peak);
    let mut status = start_stats.status;
    let fits_now = |peak: u64| problem.capacity.is_none_or(|c| peak <= c);
    let mut report = None;
    // Done when the target is met: the capacity when there is one (a capacity below the
    // heuristics' peak still needs the search, even at LOAD, to prove it infeasible), else
    // the lower bound.
    let done = match problem.capacity {
        Some(_) => fits_now(peak),
        None => peak <= lower,
    };
    let mut ilp_report = None;
    if !done {
        // A fit (capacity given) has no model turn after the search: it gets all the time.
        let share = if problem.capacity.is_some() {
            1.0
        } else {
            EXACT_SHARE
        };
        let eopts = ExactOptions {
            limits: Limits {
                time: limits.time.map(|t| t.mul_f64(share)),
                nodes: match (work, limits.time, limits.nodes) {
                    (Some(w), _, _) => Some(w.exact_nodes),
                    (None, None, None) => Some(DEFAULT_EXACT_NODES),
                    (None, _, n) => n,
                },
                cancel: limits.cancel.clone(),
            },
            work_limit: work.and_then(|w| w.exact_work),
            ..ExactOptions::default()
        };
        // The minimisation's outcome, which a later turn may continue (see below).
        let mut resume = None;
        let (found, exact_status, proven) = match problem.capacity {
            Some(capacity) => {
                let out = exact::solve(problem, capacity, &[], &eopts);
                report = Some(ExactReport::of_fit(&out));
                let proven = if out.status == ExactStatus::Infeasible {
                    capacity.saturating_add(1)
                } else {
                    bound
                };
                (out.placement, out.status, proven)
            }
            // A negligible gap: one question, the bound itself, on a small budget; unanswered, it
            // leaves the status as it was.
            None if !gap_left(peak, lower) => {
                let cap =
                    (problem.buffers.len() as u64).saturating_mul(NEGLIGIBLE_NODES_PER_BUFFER);
                let qopts = ExactOptions {
                    limits: Limits {
                        nodes: Some(eopts.limits.nodes.map_or(cap, |n| n.min(cap))),
                        ..eopts.limits.clone()
                    },
                    ..eopts.clone()
                };
                let out = exact::solve(problem, lower, &[], &qopts);
                report = Some(ExactReport::of_fit(&out));
                let (status, proven) = match out.status {
                    ExactStatus::Infeasible => (ExactStatus::Feasible, lower.saturating_add(1)),
                    ExactStatus::Timeout => (ExactStatus::Feasible, lower),
                    s => (s, lower),
                };
                (out.placement, status, proven)
            }
            None => {
                let out = exact::minimise(problem, &placement, &eopts);
                report = Some(ExactReport {
                    status: out.status,
                    nodes: out.nodes,
                    elapsed: out.elapsed,
                    trace: None,
                });
                let found = (Some(out.placement.clone()), out.status, out.lower_bound);
                resume = Some(out);
                found
            }
        };
        if let Some(p) = found {
            keep_if_lower(
                &uncapped,
                p,
                "exact",
                (&mut placement, &mut peak, &mut method),
            );
        }
        lower = lower.max(proven).min(peak);
        // Which limit stopped the search: the time (its share used, or the stop flag raised,
        // or no node cap at all) or else its node cap.
        let ran_out = || {
            let time_used = limits
                .time
                .is_some_and(|t| started.elapsed() >= t.mul_f64(share));
            if time_used || limits.is_cancelled() || eopts.limits.nodes.is_none() {
                SolveStatus::TimeLimit
            } else {
                SolveStatus::NodeLimit
            }
        };
        status = match exact_status {
            ExactStatus::Infeasible if problem.capacity.is_some() => SolveStatus::Infeasible,
            ExactStatus::Timeout => ran_out(),
            // A minimisation without proof left a question unanswered: its budget ran out
            // (the negligible gap's one question reports `Feasible` only when answered).
            ExactStatus::Feasible if resume.is_some() => ran_out(),
            _ => SolveStatus::Heuristic,
        };
        // The HiGHS model's turn, for minimisation with a gap left.
        let rest = limits.remaining_after(started.elapsed());
        if problem.capacity.is_none()
            && gap_left(peak, lower)
            && !rest.is_cancelled()
            && rest.time.is_none_or(|t| !t.is_zero())
        {
            let ropts = IlpRefineOptions {
                limits: Limits {
                    nodes: work.map(|w| w.ilp_nodes_per_model),
                    ..rest
                },
                max_models: match work {
                    Some(w) => w.ilp_models,
                    None if rest.time.is_none() => DEFAULT_ILP_MODELS,
                    None => IlpRefineOptions::default().max_models,
                },
                ..IlpRefineOptions::default()
            };
            // A model that cannot be built (too large) leaves the placement as it is.
            if let Ok(out) = refine::refine_peak(&uncapped, &placement, &ropts) {
                let best = (&mut placement, &mut peak, &mut method);
                keep_if_lower(&uncapped, out.placement, "ilp", best);
                lower = lower.max(out.stats.lower_bound).min(peak);
                if out.stats.status == SolveStatus::TimeLimit {
                    status = SolveStatus::TimeLimit;
                }
                ilp_report = Some(IlpReport {
                    status: out.stats.status,
                    models: out.models,
                    improved: out.improved,
                    elapsed: out.stats.elapsed,
                });
            }
        }
        // The model's turn ended before the time limit (nothing to model, or done early):
        // under a time limit alone, the minimisation resumes where it stopped with the rest,
        // so that the whole budget is used while a gap is left.
        let rest = limits.remaining_after(started.elapsed());
        if let (Some(earlier), None, None, Some(time)) = (resume, work, limits.nodes, rest.time) {
            if gap_left(peak, lower) && !rest.is_cancelled() && time >= MIN_RESUME {
                let eopts = ExactOptions {
                    limits: rest,
                    ..ExactOptions::default()
                };
                let out = exact::minimise_more(problem, &placement, &earlier, &eopts);
                let best = (&mut placement, &mut peak, &mut method);
                keep_if_lower(&uncapped, out.placement, "exact", best);
                lower = lower.max(out.lower_bound).min(peak);
                if let Some(r) = report.as_mut() {
                    r.nodes = r.nodes.saturating_add(out.nodes);
                    r.elapsed += out.elapsed;
                    r.status = if peak <= lower {
                        ExactStatus::Optimal
                    } else {
                        ExactStatus::Feasible
                    };
                }
            }
        }
        // A minimisation that used its time limit with a gap left stopped for the time.
        let used = |t: Duration| started.elapsed().saturating_add(MIN_RESUME) >= t;
        if problem.capacity.is_none() && peak > lower && limits.time.is_some_and(used) {
            status = SolveStatus::TimeLimit;
        }
    }
    if peak <= lower && status != SolveStatus::Infeasible {
        status = SolveStatus::Optimal;
    }
    Ok(PlaceOutcome {
        placement,
        method,
        members: start.members.clone(),
        exact: report,
        ilp: ilp_report,
        stats: SolveStats {
            status,
            elapsed: start_stats.elapsed + started.elapsed(),
            objective: peak,
            lower_bound: lower,
        },
        fits: fits_now(peak),
    })
}

/// Whether `peak` is more than [`NEGLIGIBLE_GAP`] above the bound `lower`.
fn gap_left(peak: u64, lower: u64) -> bool {
    peak > lower && (peak - lower) as f64 > peak as f64 * NEGLIGIBLE_GAP
}

/// Takes `candidate` (found by `by`) as the best placement when it is valid and lower than
/// the best's peak.
fn keep_if_lower(
    uncapped: &PlacementProblem,
    candidate: Placement,
    by: &str,
    (placement, peak, method): (&mut Placement, &mut u64, &mut String),
) {
    if let Ok(p) = uncapped.check(&candidate) {
        if p < *peak {
            (*placement, *peak, *method) = (candidate, p, by.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::problem::fixtures::buf;
    fn stacked(problem: &PlacementProblem) -> PlaceOutcome {
        let mut offsets = Vec::new();
        let mut top = 0;
        for b in &problem.buffers {
            offsets.push(top);
            top += b.size;
        }
        PlaceOutcome {
            placement: Placement { offsets },
            method: "stacked".into(),
            members: Vec::new(),
            exact: None,
            ilp: None,
            stats: SolveStats::heuristic(top, problem.aligned_load(), Duration::ZERO),
            fits: true,
        }
    }

    /// LOAD 5 at steps 1 and 2, reachable.
    fn small() -> PlacementProblem {
        PlacementProblem::new(vec![
            buf(0, 2, 2),
            buf(2, 4, 2),
            buf(1, 3, 3),
            buf(0, 1, 1),
            buf(3, 4, 1),
        ])
    }

    #[test]
    fn refining_a_poor_start_reaches_the_optimum_and_proves_it() {
        let p = small();
        let out = refine(&p, &stacked(&p), &Limits::UNLIMITED).unwrap();
        assert_eq!(p.check(&out.placement).unwrap(), 5);
        assert_eq!(out.method, "exact");
        assert_eq!(out.stats.status, SolveStatus::Optimal);
        assert_eq!((out.stats.objective, out.stats.lower_bound), (5, 5));
    }

    #[test]
    fn the_highs_model_takes_over_when_the_exact_search_stops_and_proves_the_optimum() {
        // LOAD 11, optimum 13 (alignment waste): only a search or HiGHS' dual bound proves 13.
        let b = |start, end, size, alignment| crate::problem::Buffer {
            lifetime: crate::problem::Lifetime::new(start, end),
            size,
            alignment,
        };
        let p = PlacementProblem::new(vec![
            b(0, 2, 5, 1),
            b(1, 3, 2, 4),
            b(0, 2, 3, 4),
            b(1, 3, 1, 4),
            b(0, 1, 1, 1),
        ]);
        // Stacked in index order, on alignment: peak 16 (5, then 2 at 8, 3 at 12, 1 at 16…).
        let start = PlaceOutcome {
            placement: Placement {
                offsets: vec![0, 8, 12, 16, 5],
            },
            ..stacked(&PlacementProblem::new(Vec::new()))
        };
        let start_peak = p.check(&start.placement).unwrap();
        assert!(start_peak > 13);
        // One exact node: the search stops at once and the model gets its turn.
        let one_node = Limits {
            nodes: Some(1),
            ..Limits::UNLIMITED
        };
        let out = refine(&p, &start, &one_node).unwrap();
        let ilp = out.ilp.expect("the HiGHS model ran");
        assert_eq!(ilp.models, 1);
        assert_eq!(
            out.method, "ilp",
            "{} from {start_peak}",
            out.stats.objective
        );
        assert_eq!(p.check(&out.placement).unwrap(), 13);
        assert_eq!((out.stats.objective, out.stats.lower_bound), (13, 13));
        assert_eq!(out.stats.status, SolveStatus::Optimal);
    }

    #[test]
    fn a_minimisation_under_a_time_limit_uses_the_whole_limit_while_a_gap_is_left() {
        use crate::generate::{generate, HardSpec, Variant};
        let inst = generate(&HardSpec::challenging(101, 450, Variant::Fits));
        let p = PlacementProblem::new(inst.problem.buffers.clone());
        let limit = Duration::from_millis(2000);
        let started = Instant::now();
        let out = place(
            &p,
            &PlaceOptions {
                limits: Limits::with_time(limit),
                exact: true,
            },
        )
        .unwrap();
        let took = started.elapsed();
        assert!(p.check(&out.placement).is_ok());
        if out.stats.status != SolveStatus::Optimal {
            // The search stops at 80 % for the model's turn; whatever the model leaves goes
            // back to the search (less than `MIN_RESUME` may stay unused).
            assert!(
                took + MIN_RESUME + Duration::from_millis(10) >= limit,
                "{took:?} of {limit:?}, {:?}",
                out.ilp
            );
            assert_eq!(out.stats.status, SolveStatus::TimeLimit, "{:?}", out.ilp);
        }
    }

    #[test]
    fn a_minimisation_stopped_by_its_node_cap_says_node_limit_and_not_heuristic() {
        use crate::generate::{generate, HardSpec, Variant};
        let inst = generate(&HardSpec::challenging(101, 450, Variant::Fits));
        let p = PlacementProblem::new(inst.problem.buffers.clone());
        let start = heuristics(&p, &Limits::UNLIMITED).unwrap();
        let work = RefineWork {
            exact_nodes: 20_000,
            ilp_models: 0,
            ilp_nodes_per_model: 0,
            exact_work: None,
        };
        let out = refine_with(&p, &start, &Limits::UNLIMITED, Some(work)).unwrap();
        assert!(p.check(&out.placement).is_ok());
        // 20,000 nodes do not close a 450-buffer minimisation: a gap is left, and the status
        // names the cap that stopped the search.
        assert!(
            out.stats.objective > out.stats.lower_bound,
            "{:?}",
            out.stats
        );
        assert_eq!(out.stats.status, SolveStatus::NodeLimit, "{:?}", out.exact);
        let exact = out.exact.expect("the search ran");
        assert_eq!(exact.status, ExactStatus::Feasible);
        // The same budget as a time limit names the time.
        let timed = Limits::with_time(Duration::from_millis(300));
        let out = refine_with(&p, &start, &timed, None).unwrap();
        if out.stats.objective > out.stats.lower_bound {
            assert_eq!(out.stats.status, SolveStatus::TimeLimit, "{:?}", out.exact);
        }
    }

    #[test]
    fn a_capacity_below_load_is_proven_infeasible() {
        let mut p = small();
        p.capacity = Some(4);
        let out = place(&p, &PlaceOptions::default()).unwrap();
        assert!(!out.fits);
        assert_eq!(out.stats.status, SolveStatus::Infeasible);
        assert!(out.stats.lower_bound >= 5);
        assert!(out.stats.lower_bound <= out.stats.objective);
    }

    #[test]
    fn a_capacity_below_the_aligned_load_is_proven_infeasible_without_a_search() {
        use crate::problem::fixtures::aligned;
        // LOAD 315 B; at 256-byte offsets the three need 773 B (5 on top of 300 and 10).
        let mut p = PlacementProblem::new(vec![
            aligned(0, 2, 5, 256),
            aligned(0, 2, 300, 256),
            aligned(1, 3, 10, 256),
        ]);
        p.capacity = Some(772);
        let out = place(&p, &PlaceOptions::default()).unwrap();
        assert!(!out.fits);
        assert_eq!(out.stats.status, SolveStatus::Infeasible);
        assert_eq!(out.stats.lower_bound, 773);
        // Answered by the bound before any heuristic or search ran.
        assert_eq!(out.method, BELOW_THE_BOUND);
        assert!(out.exact.is_none() && out.members.is_empty());
        p.capacity = Some(773);
        let out = place(&p, &PlaceOptions::default()).unwrap();
        assert!(out.fits);
        assert_eq!(out.stats.objective, 773);
    }

    #[test]
    fn a_negligible_gap_gets_one_question_which_reaches_the_bound() {
        use crate::problem::fixtures::aligned;
        // 4 B under 4 MiB, both 256-aligned and alive together: on top, the 4 bytes end at
        // 4194308 (the aligned LOAD); the start has them at the bottom, 252 B (6e-5) higher.
        let p = PlacementProblem::new(vec![aligned(0, 1, 4, 256), aligned(0, 1, 4 << 20, 256)]);
        assert_eq!(p.aligned_load(), (4 << 20) + 4);
        let mut start = stacked(&PlacementProblem::new(Vec::new()));
        start.placement = Placement {
            offsets: vec![0, 256],
        };
        start.stats = SolveStats::heuristic((4 << 20) + 256, p.aligned_load(), Duration::ZERO);
        let out = refine(&p, &start, &Limits::UNLIMITED).unwrap();
        assert_eq!(out.stats.status, SolveStatus::Optimal);
        assert_eq!(out.stats.objective, (4 << 20) + 4);
        assert_eq!(p.check(&out.placement), Ok((4 << 20) + 4));
        let exact = out.exact.expect("the one question");
        assert_eq!(exact.status, ExactStatus::Optimal);
        assert!(exact.nodes <= 2 * NEGLIGIBLE_NODES_PER_BUFFER);
        assert!(out.ilp.is_none(), "no model turn for a negligible gap");
    }

    #[test]
    fn a_capacity_the_heuristics_reach_needs_no_search() {
        let mut p = small();
        p.capacity = Some(100);
        let out = place(&p, &PlaceOptions::default()).unwrap();
        assert!(out.fits);
        assert!(out.exact.is_none());
    }

    #[test]
    fn the_result_is_never_worse_than_the_heuristics_and_bounds_hold() {
        // Deterministic pseudo-random instances.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..40 {
            let bufs = (0..12)
                .map(|_| {
                    let s = next(10);
                    buf(s, s + 1 + next(5), 1 + next(50))
                })
                .collect();
            let p = PlacementProblem::new(bufs);
            let heur = heuristics(&p, &Limits::UNLIMITED).unwrap();
            let out = refine(&p, &heur, &Limits::UNLIMITED).unwrap();
            let peak = p.check(&out.placement).unwrap();
            assert_eq!(peak, out.stats.objective);
            assert!(peak <= heur.stats.objective);
            assert!(p.load() <= out.stats.lower_bound && out.stats.lower_bound <= peak);
        }
    }

    #[test]
    fn a_capacity_below_the_bound_is_answered_infeasible_without_the_portfolio_or_the_search() {
        let mut p = small();
        for capacity in [0, 1, 4] {
            p.capacity = Some(capacity);
            for exact in [true, false] {
                let out = place(
                    &p,
                    &PlaceOptions {
                        limits: Limits::UNLIMITED,
                        exact,
                    },
                )
                .unwrap();
                assert_eq!(out.stats.status, SolveStatus::Infeasible);
                assert!(!out.fits);
                assert_eq!(out.method, BELOW_THE_BOUND);
                assert!(out.members.is_empty() && out.exact.is_none() && out.ilp.is_none());
                assert_eq!(out.stats.lower_bound, 5);
                let peak = PlacementProblem::new(p.buffers.clone())
                    .check(&out.placement)
                    .unwrap();
                assert_eq!(out.stats.objective, peak);
            }
        }
        // At the bound the portfolio runs and fits.
        p.capacity = Some(5);
        let out = place(&p, &PlaceOptions::default()).unwrap();
        assert!(out.fits && !out.members.is_empty(), "{}", out.method);
    }

    #[test]
    fn a_spent_time_limit_skips_the_search_and_says_time_limit() {
        let p = small();
        let start = stacked(&p);
        let out = refine(&p, &start, &Limits::with_time(Duration::ZERO)).unwrap();
        assert!(out.exact.is_none() && out.ilp.is_none());
        assert_eq!(out.placement, start.placement);
        assert_eq!(out.stats.status, SolveStatus::TimeLimit);
        // With time, the search runs and reaches LOAD.
        let out = refine(&p, &start, &Limits::with_time(Duration::from_secs(5))).unwrap();
        assert!(out.exact.is_some());
        assert_eq!(out.stats.status, SolveStatus::Optimal);
    }

    #[test]
    fn finishing_time_is_kept_back_per_buffer_up_to_a_quarter_of_the_limit() {
        let many = |n: u64| PlacementProblem::new((0..n).map(|i| buf(i, i + 1, 1)).collect());
        let second = Limits::with_time(Duration::from_secs(1));
        let kept = |n: u64| keep_back_finishing(&many(n), &second).time.unwrap();
        assert_eq!(kept(1000), Duration::from_millis(998));
        assert_eq!(kept(1_000_000), Duration::from_millis(750));
        assert_eq!(
            keep_back_finishing(&many(10), &Limits::UNLIMITED).time,
            None
        );
    }
}
