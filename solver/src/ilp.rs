//! Integer programs through good_lp + HiGHS.
//!
//! [`place_ilp`] is the classic big-M placement model (the formulation OLLA and TelaMalloc start
//! from): integer offsets in units of each buffer's alignment, one binary per pair of buffers
//! that are alive together deciding which lies below, and `peak ≥ offset + size` for all.
//! `O(n + c)` variables and `2c + n` rows for `c` conflicting pairs. It is exact but scales
//! poorly (HiGHS makes little progress past a few hundred pairs), so it takes a size cap, a
//! time limit and a warm start, and never returns worse than its warm start.

use crate::budget::{Budget, SolveStats, SolveStatus};
use crate::problem::{Placement, PlacementError, PlacementProblem};
use good_lp::solvers::highs::highs;
use good_lp::{
    constraint, variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus,
    SolverModel, Variable, WithInitialSolution,
};
use std::time::Instant;
use thiserror::Error;

/// Why an integer program could not be built or solved.
#[derive(Debug, Error)]
pub enum IlpError {
    /// The problem itself is malformed.
    #[error(transparent)]
    Problem(#[from] PlacementError),
    /// The warm start is not a valid placement.
    #[error("warm start is not a valid placement: {0}")]
    WarmStart(PlacementError),
    /// Too many conflicting pairs for the model's cap.
    #[error("{pairs} conflicting buffer pairs exceed the model's cap of {cap}")]
    TooLarge {
        /// Pairs in the problem.
        pairs: usize,
        /// The cap.
        cap: usize,
    },
    /// HiGHS failed.
    #[error("HiGHS: {0}")]
    Solver(String),
}

/// Settings of [`place_ilp`].
#[derive(Debug, Clone)]
pub struct IlpOptions {
    /// Time and node limits (nodes are not used by HiGHS here).
    pub budget: Budget,
    /// HiGHS threads (1 = deterministic).
    pub threads: u32,
    /// Largest number of conflicting pairs to model.
    pub max_pairs: usize,
}

impl Default for IlpOptions {
    fn default() -> Self {
        IlpOptions {
            budget: Budget::UNLIMITED,
            threads: 1,
            max_pairs: 5_000,
        }
    }
}

/// The placement found and its stats (objective = peak; lower bound = the proven optimum when
/// optimal, else LOAD).
#[derive(Debug, Clone)]
pub struct IlpOutcome {
    /// Offsets.
    pub placement: Placement,
    /// Status, time, peak and bound.
    pub stats: SolveStats,
}

/// Minimises the peak of `problem` exactly, warm-started from `warm` (a valid placement).
pub fn place_ilp(
    problem: &PlacementProblem,
    warm: &Placement,
    opts: &IlpOptions,
) -> Result<IlpOutcome, IlpError> {
    let started = Instant::now();
    problem.validate()?;
    let uncapped = PlacementProblem::new(problem.buffers.clone());
    let warm_peak = uncapped.check(warm).map_err(IlpError::WarmStart)?;
    let load = problem.load();
    let bufs = &problem.buffers;
    let mut pairs = Vec::new();
    for i in 0..bufs.len() {
        for j in i + 1..bufs.len() {
            if bufs[i].lifetime.overlaps(&bufs[j].lifetime) {
                pairs.push((i, j));
                if pairs.len() > opts.max_pairs {
                    return Err(IlpError::TooLarge {
                        pairs: count_pairs(problem),
                        cap: opts.max_pairs,
                    });
                }
            }
        }
    }
    if warm_peak <= load {
        return Ok(IlpOutcome {
            placement: warm.clone(),
            stats: SolveStats {
                status: SolveStatus::Optimal,
                elapsed: started.elapsed(),
                objective: warm_peak,
                lower_bound: warm_peak,
            },
        });
    }
    // Offsets never need to exceed the warm start's peak, so it is a valid big-M.
    let big_m = warm_peak as f64;
    let mut vars = ProblemVariables::new();
    let peak = vars.add(variable().min(load as f64).max(big_m));
    let slots: Vec<Variable> = bufs
        .iter()
        .map(|b| {
            let max_slot = (warm_peak - b.size.min(warm_peak)) / b.alignment;
            vars.add(variable().integer().min(0).max(max_slot as f64))
        })
        .collect();
    let below: Vec<Variable> = pairs
        .iter()
        .map(|_| vars.add(variable().binary()))
        .collect();
    let offset = |i: usize| -> Expression { slots[i] * bufs[i].alignment as f64 };
    let mut model = vars.minimise(peak).using(highs);
    for (i, b) in bufs.iter().enumerate() {
        model.add_constraint(constraint!(offset(i) + b.size as f64 <= peak));
    }
    for (&(i, j), &z) in pairs.iter().zip(&below) {
        // z = 0: i below j; z = 1: j below i.
        model.add_constraint(constraint!(
            offset(i) + bufs[i].size as f64 <= offset(j) + big_m * z
        ));
        model.add_constraint(constraint!(
            offset(j) + bufs[j].size as f64 <= offset(i) + big_m * (1.0 - z)
        ));
    }
    let mut start: Vec<(Variable, f64)> = vec![(peak, warm_peak as f64)];
    for (i, b) in bufs.iter().enumerate() {
        start.push((slots[i], (warm.offsets[i] / b.alignment) as f64));
    }
    for (&(i, j), &z) in pairs.iter().zip(&below) {
        start.push((
            z,
            if warm.offsets[i] < warm.offsets[j] {
                0.0
            } else {
                1.0
            },
        ));
    }
    let mut model = model
        .with_initial_solution(start)
        .set_threads(opts.threads.max(1));
    if let Some(t) = opts.budget.time {
        model = model.set_time_limit(t.saturating_sub(started.elapsed()).as_secs_f64());
    }
    model.set_verbose(false);
    let solution = match model.solve() {
        Ok(s) => s,
        Err(ResolutionError::Other("NoSolutionFound")) => {
            return Ok(fallback(warm, warm_peak, load, started));
        }
        Err(e) => return Err(IlpError::Solver(e.to_string())),
    };
    let placement = Placement {
        offsets: bufs
            .iter()
            .zip(&slots)
            .map(|(b, &s)| (solution.value(s).round().max(0.0) as u64) * b.alignment)
            .collect(),
    };
    // Re-check independently; keep the warm start unless the model's answer is valid and better.
    let peak_found = match uncapped.check(&placement) {
        Ok(p) if p < warm_peak => p,
        _ => return Ok(fallback(warm, warm_peak, load, started)),
    };
    let optimal = matches!(solution.status(), SolutionStatus::Optimal);
    Ok(IlpOutcome {
        placement,
        stats: SolveStats {
            status: if optimal {
                SolveStatus::Optimal
            } else {
                SolveStatus::TimeLimit
            },
            elapsed: started.elapsed(),
            objective: peak_found,
            lower_bound: if optimal { peak_found } else { load },
        },
    })
}

fn fallback(warm: &Placement, warm_peak: u64, load: u64, started: Instant) -> IlpOutcome {
    IlpOutcome {
        placement: warm.clone(),
        stats: SolveStats {
            status: SolveStatus::TimeLimit,
            elapsed: started.elapsed(),
            objective: warm_peak,
            lower_bound: load,
        },
    }
}

fn count_pairs(problem: &PlacementProblem) -> usize {
    let b = &problem.buffers;
    (0..b.len())
        .map(|i| {
            (i + 1..b.len())
                .filter(|&j| b[i].lifetime.overlaps(&b[j].lifetime))
                .count()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Buffer, Lifetime};

    fn buf(start: u64, end: u64, size: u64) -> Buffer {
        Buffer {
            lifetime: Lifetime::new(start, end),
            size,
            alignment: 1,
        }
    }

    /// LOAD is 5 (steps 1 and 2); the warm start stacks the 3-byte buffer on top and needs 6.
    /// HiGHS must move it to the bottom and reach 5.
    #[test]
    fn highs_solves_a_small_placement_program_to_optimality() {
        let p = PlacementProblem::new(vec![
            buf(0, 2, 2),
            buf(2, 4, 2),
            buf(1, 3, 3),
            buf(0, 1, 1),
            buf(3, 4, 1),
        ]);
        // Warm start: everything stacked.
        let warm = Placement {
            offsets: vec![0, 0, 2, 5, 5],
        };
        assert_eq!(p.check(&warm).unwrap(), 6);
        let out = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
        assert_eq!(out.stats.status, SolveStatus::Optimal);
        assert_eq!(p.check(&out.placement).unwrap(), out.stats.objective);
        assert_eq!(out.stats.objective, 5);
        assert_eq!(out.stats.lower_bound, 5);
    }

    #[test]
    fn warm_start_at_load_is_returned_as_optimal_without_solving() {
        let p = PlacementProblem::new(vec![buf(0, 1, 4), buf(1, 2, 4)]);
        let warm = Placement {
            offsets: vec![0, 0],
        };
        let out = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
        assert_eq!(
            (out.stats.status, out.stats.objective),
            (SolveStatus::Optimal, 4)
        );
    }

    #[test]
    fn models_over_the_pair_cap_are_refused_with_the_count() {
        let p = PlacementProblem::new((0..4).map(|_| buf(0, 1, 1)).collect());
        let warm = Placement {
            offsets: vec![0, 1, 2, 3],
        };
        let opts = IlpOptions {
            max_pairs: 2,
            ..IlpOptions::default()
        };
        assert!(matches!(
            place_ilp(&p, &warm, &opts),
            Err(IlpError::TooLarge { pairs: 6, cap: 2 })
        ));
    }
}
