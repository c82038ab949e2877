//! The learning members of the restart rotation: the fit problem as a constraint program
//! solved by lazy clause generation, which learns a nogood from every failure.
//!
//! Idea: the canonical search ([`super::search`]) backtracks chronologically and learns only
//! whole failed states ([`super::memo`]); on large, tightly packed instances a wrong early
//! choice shows only dozens of levels deeper, and it never gets back to it. Lazy clause
//! generation (LCG) explains every propagation as a clause over bound literals `[y ≥ v]`, so
//! a failure yields a nogood naming the choices that caused it (first unique implication
//! point), and the search jumps back to the deepest of them.
//!
//! Two members branch differently ([`Branching`]), each with a solver of its own:
//! activity-driven branching (VSIDS) with restarts turns to the variables the conflicts
//! involve; bottom-left branching puts the buffer with the lowest possible offset there
//! (ties: the more aligned, the larger, then the longer-lived), which packs like the canonical
//! search but learns from its failures. They place different instances: alone, 10 s each, on
//! the generated 250-buffer fits (seeds 2–37) each placed 5 of 8, together all 8; on the
//! 100-buffer ones each 7 of 8 (before the more aligned went first on ties, which took the
//! bottom-left member alone from 2 to 7 of the sixteen 250-buffer fits of seeds 101–116 in 5
//! s). Both share the model below.
//!
//! Model, in grid units `g` (the greatest common divisor of the sizes and of the alignments
//! above one: every canonical placement lies on that grid, so nothing is lost): an offset
//! variable `y_b ∈ [0, ⌊C/g⌋ − s_b]` per buffer (a multiple of `a_b/g` when aligned, through
//! `y_b = (a_b/g)·z_b`), and one disjunctive (no-overlap) constraint over the offsets for each
//! maximal clique of the interval graph, that is, each section where a buffer starts and one
//! ends right after: every pair of buffers alive together shares one of them. The
//! disjunctive propagators (edge finding on both bounds) are those of the Pumpkin solver.
//!
//! A member keeps its solver between runs: a run continues the previous one with its
//! nogoods and activities, under a budget of steps (a step is a decision or a conflict).
//! Without fixed buffers only, up to [`MAX_BUFFERS`] buffers and offsets that fit `i32` on
//! the grid; otherwise the member sits out.
//!
//! Complexity: the model has `n` variables and `Σ` clique sizes task entries (`O(n · w)` for
//! the widest clique `w`); a step costs a propagation round, `O(w log w)` per clique touched.
//!
//! References: Ohrimenko, Stuckey and Codish, "Propagation via lazy clause generation",
//! Constraints 14 (2009); Schutt, Feydy, Stuckey and Wallace, "Explaining the cumulative
//! propagator", Constraints 16 (2011); Vilím, "Filtering algorithms for the unary resource
//! constraint", Archives of Control Sciences 18 (2008); Flippo et al., "A multi-stage proof
//! logging framework to certify the correctness of CP solvers", CP 2024 (Pumpkin).

use super::search::RunEnd;
use super::sections::Instance;
use crate::limits::LimitsClock;
use crate::problem::{Placement, PlacementProblem};
use pumpkin_conflict_resolvers::resolvers::ResolutionResolver;
use pumpkin_core::branching::branchers::independent_variable_value_brancher::IndependentVariableValueBrancher;
use pumpkin_core::branching::tie_breaking::InOrderTieBreaker;
use pumpkin_core::branching::value_selection::InDomainMin;
use pumpkin_core::branching::variable_selection::Smallest;
use pumpkin_core::branching::Brancher;
use pumpkin_core::results::{ProblemSolution, SatisfactionResult};
use pumpkin_core::termination::TerminationCondition;
use pumpkin_core::variables::{DomainId, TransformableVariable};
use pumpkin_core::{DefaultBrancher, Solver};
use pumpkin_propagators::disjunctive::ArgDisjunctiveTask;
use std::cmp::Reverse;
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest instance (free buffers) the member models.
pub(crate) const MAX_BUFFERS: usize = 4096;

/// Nodes of the schedule's budget one step counts as. A step (a decision or a conflict with its
/// propagation round) takes about as long as 100 nodes of the canonical search on the
/// generated 250–700-buffer instances; counting it as 25 gives the member about four times
/// the time of a search member's run once it joins (on the generated 250-buffer instances,
/// seeds 2–37, 10 s: 5 of 8 placed at LOAD with 25, 3 with 10 or 100).
pub(crate) const STEP_NODES: u64 = 25;

/// How a learning member branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Branching {
    /// Pumpkin's default: activity (VSIDS) over the literals of the conflicts, random
    /// bisection of an offset domain when none is active.
    Activity,
    /// Bottom-left: the buffer with the lowest possible offset (ties: the more aligned, the
    /// larger, then the longer-lived, then the first), placed there; on backtracking, above it.
    /// An aligned buffer first: it can sit at few of the offsets a floor may reach, so the
    /// floors it needs are taken before the unaligned buffers fill them.
    BottomLeft,
}

/// Bottom-left branching (see [`Branching::BottomLeft`]).
type BottomLeft = IndependentVariableValueBrancher<
    DomainId,
    Smallest<DomainId, InOrderTieBreaker<DomainId, i32>>,
    InDomainMin,
>;

/// The brancher of a member.
#[derive(Debug)]
enum MemberBrancher {
    Activity(Box<DefaultBrancher>),
    BottomLeft(BottomLeft),
}

/// The solver of a learning member and what it needs between runs.
pub(crate) struct Learning {
    solver: Solver,
    brancher: MemberBrancher,
    resolver: ResolutionResolver,
    /// Offset variable of each local buffer, in grid units.
    offsets: Vec<DomainId>,
    /// Bytes per grid unit.
    grid: u64,
    /// The solver failed in a way that is not an answer (a panic): the member sits out.
    broken: bool,
}

impl std::fmt::Debug for Learning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learning")
            .field("buffers", &self.offsets.len())
            .field("grid", &self.grid)
            .finish()
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The bottom-left member's tie order of the local buffers (among those with the lowest
/// possible offset, the first in this order goes there): the more aligned, the larger, the
/// longer-lived, then the lower index.
fn bottom_left_ties(inst: &Instance) -> Vec<usize> {
    let mut order: Vec<usize> = (0..inst.len()).collect();
    order.sort_by_key(|&i| {
        let b = &inst.bufs[i];
        (
            Reverse(b.alignment),
            Reverse(b.size),
            Reverse(b.lifetime.len()),
            i,
        )
    });
    order
}

/// The sections holding a maximal clique: a buffer starts there and one ends right after.
fn clique_sections(inst: &Instance) -> Vec<usize> {
    let mut starts = vec![false; inst.n_sec];
    let mut ends = vec![false; inst.n_sec];
    for i in 0..inst.len() {
        if let Some(s) = starts.get_mut(inst.lo[i] as usize) {
            *s = true;
        }
        if let Some(e) = (inst.hi[i] as usize)
            .checked_sub(1)
            .and_then(|s| ends.get_mut(s))
        {
            *e = true;
        }
    }
    (0..inst.n_sec)
        .filter(|&s| starts[s] && ends[s] && inst.members.row(s).len() >= 2)
        .collect()
}

impl Learning {
    /// Whether the member models `inst` at all: no fixed buffers, 1 to [`MAX_BUFFERS`] buffers.
    pub(crate) fn applies(inst: &Instance) -> bool {
        !inst.has_fixed && (1..=MAX_BUFFERS).contains(&inst.len())
    }

    /// Task entries of the model of `inst`: the sizes of its cliques summed (a step's cost
    /// grows with them, see the module doc).
    pub(crate) fn entries(inst: &Instance) -> usize {
        clique_sections(inst)
            .into_iter()
            .map(|s| inst.members.row(s).len())
            .sum()
    }

    /// The model of `inst` under `capacity` with `branching`, or `None` when the member sits
    /// out (see [`Learning::applies`]; also offsets beyond `i32` on the grid, or a buffer
    /// larger than the capacity, which [`super::fit`] refutes before any member runs).
    pub(crate) fn new(inst: &Instance, capacity: u64, branching: Branching) -> Option<Learning> {
        if !Self::applies(inst) {
            return None;
        }
        // Pumpkin is third-party code: a panic while modelling means the member sits out.
        std::panic::catch_unwind(|| Self::model(inst, capacity, branching))
            .ok()
            .flatten()
    }

    fn model(inst: &Instance, capacity: u64, branching: Branching) -> Option<Learning> {
        let m = inst.len();
        let grid = inst
            .bufs
            .iter()
            .flat_map(|b| [b.size, if b.alignment > 1 { b.alignment } else { 0 }])
            .fold(0, gcd)
            .max(1);
        let cap = i32::try_from(capacity / grid).ok()?;
        let mut solver = Solver::default();
        let tag = solver.new_constraint_tag();
        let mut offsets = Vec::with_capacity(m);
        let mut units = Vec::with_capacity(m);
        for b in &inst.bufs {
            let size = i32::try_from(b.size / grid).ok()?;
            let top = cap.checked_sub(size).filter(|&t| t >= 0)?;
            let y = solver.new_bounded_integer(0, top);
            let step = i32::try_from(b.alignment / grid).ok()?;
            if step > 1 {
                let z = solver.new_bounded_integer(0, top / step);
                let tied = pumpkin_constraints::equals([y.scaled(1), z.scaled(-step)], 0, tag);
                solver.add_constraint(tied).post();
            }
            offsets.push(y);
            units.push(size);
        }
        for s in clique_sections(inst) {
            let tasks: Vec<ArgDisjunctiveTask<DomainId>> = inst
                .members
                .row(s)
                .iter()
                .map(|&b| ArgDisjunctiveTask {
                    start_time: offsets[b as usize],
                    processing_time: units[b as usize],
                })
                .collect();
            let constraint = pumpkin_constraints::disjunctive_strict(tasks, tag);
            solver.add_constraint(constraint).post();
        }
        let brancher = match branching {
            Branching::Activity => MemberBrancher::Activity(Box::new(solver.default_brancher())),
            Branching::BottomLeft => {
                let vars: Vec<DomainId> =
                    bottom_left_ties(inst).iter().map(|&i| offsets[i]).collect();
                MemberBrancher::BottomLeft(IndependentVariableValueBrancher::new(
                    Smallest::new(&vars),
                    InDomainMin,
                ))
            }
        };
        Some(Learning {
            solver,
            brancher,
            resolver: ResolutionResolver::default(),
            offsets,
            grid,
            broken: false,
        })
    }

    /// Continues the search for at most `steps` steps, until `clock` runs out or `stop`
    /// says an earlier run of the schedule answered. Returns how the run ended and the steps
    /// it took. A placement is checked against `inst` before it is returned.
    pub(crate) fn run(
        &mut self,
        inst: &Instance,
        capacity: u64,
        steps: u64,
        clock: &LimitsClock,
        stop: Option<(&AtomicU64, u64)>,
    ) -> (RunEnd, u64) {
        if self.broken {
            return (RunEnd::NodeLimit, 0);
        }
        let mut budget = Budget {
            steps: 0,
            limit: steps,
            clock,
            stop,
            timed_out: false,
        };
        let Learning {
            solver,
            brancher,
            resolver,
            offsets,
            grid,
            ..
        } = self;
        // Pumpkin is third-party code: a panic there ends this member, never the search.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match brancher {
            MemberBrancher::Activity(b) => {
                satisfy(solver, &mut **b, &mut budget, resolver, offsets)
            }
            MemberBrancher::BottomLeft(b) => satisfy(solver, b, &mut budget, resolver, offsets),
        }));
        let used = budget.steps;
        let end = match outcome {
            Ok(Some(Some(units))) => {
                let off: Vec<u64> = units.iter().map(|&u| u.saturating_mul(*grid)).collect();
                match places(inst, capacity, off) {
                    Some(off) => RunEnd::Found(off),
                    None => {
                        self.broken = true;
                        RunEnd::NodeLimit
                    }
                }
            }
            Ok(Some(None)) => RunEnd::Infeasible,
            Ok(None) if budget.timed_out => RunEnd::TimeLimit,
            Ok(None) => RunEnd::NodeLimit,
            Err(_) => {
                self.broken = true;
                RunEnd::NodeLimit
            }
        };
        (end, used)
    }
}

/// One call of the solver with `brancher`: `Some(Some(offsets))` (grid units) when it finds
/// a solution, `Some(None)` when it proves there is none, `None` when the budget ends first.
fn satisfy<B: Brancher>(
    solver: &mut Solver,
    brancher: &mut B,
    budget: &mut Budget<'_>,
    resolver: &mut ResolutionResolver,
    offsets: &[DomainId],
) -> Option<Option<Vec<u64>>> {
    match solver.satisfy(brancher, budget, resolver) {
        SatisfactionResult::Satisfiable(sat) => {
            let solution = sat.solution();
            Some(Some(
                offsets
                    .iter()
                    .map(|&y| u64::try_from(solution.get_integer_value(y)).unwrap_or(0))
                    .collect(),
            ))
        }
        SatisfactionResult::Unsatisfiable(..) => Some(None),
        SatisfactionResult::Unknown(..) => None,
    }
}

/// Whether `off` places every buffer of `inst` under `capacity` (the problem's own checker).
fn places(inst: &Instance, capacity: u64, off: Vec<u64>) -> Option<Vec<u64>> {
    let local = PlacementProblem {
        buffers: inst.bufs.clone(),
        capacity: Some(capacity),
    };
    let placement = Placement { offsets: off };
    local.check(&placement).ok().map(|_| placement.offsets)
}

/// The step budget of one run, with the clock and the schedule's stop signal.
struct Budget<'a> {
    steps: u64,
    limit: u64,
    clock: &'a LimitsClock,
    stop: Option<(&'a AtomicU64, u64)>,
    timed_out: bool,
}

impl TerminationCondition for Budget<'_> {
    fn should_stop(&mut self) -> bool {
        if self.steps >= self.limit {
            return true;
        }
        self.steps += 1;
        if self.clock.exhausted().is_some() {
            self.timed_out = true;
            return true;
        }
        self.stop
            .is_some_and(|(answer, index)| answer.load(Ordering::Relaxed) < index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::fixtures::{aligned, buf};

    #[test]
    fn bottom_left_ties_put_the_more_aligned_buffer_first_then_the_larger_then_the_longer() {
        let p = PlacementProblem::new(vec![
            buf(0, 4, 8192),
            aligned(0, 2, 1024, 4096),
            buf(0, 8, 8192),
            aligned(0, 2, 2048, 2048),
            buf(0, 8, 8192),
        ]);
        let inst = Instance::new(&p, &[], u64::MAX);
        assert_eq!(bottom_left_ties(&inst), vec![1, 3, 2, 4, 0]);
    }
}
