//! Tests over the whole registry: every member gives a valid placement on random problems,
//! reports overflow instead of wrapping, and the portfolio meets its targets on the shared
//! benchmark traces (../shared; see tests/support/shared.rs when they are missing).

use super::{by_name, registry, run_portfolio};
use crate::limits::Limits;
use crate::problem::{Buffer, Lifetime, PlacementError, PlacementProblem};
use proptest::prelude::*;

fn problem_strategy() -> impl Strategy<Value = PlacementProblem> {
    let buffer = (0u64..40, 1u64..12, 1u64..2000, 0u32..10, any::<bool>()).prop_map(
        |(start, len, size, align_log, long)| Buffer {
            lifetime: Lifetime::new(start, start + if long { len * 4 } else { len }),
            size,
            alignment: 1 << align_log,
        },
    );
    prop::collection::vec(buffer, 0..48).prop_map(PlacementProblem::new)
}

proptest! {
    #[test]
    fn every_member_places_random_problems_validly_at_or_above_load(p in problem_strategy()) {
        let load = p.load();
        for placer in registry() {
            let placement = placer.place(&p, &Limits::UNLIMITED);
            prop_assert!(placement.is_ok(), "{} failed: {:?}", placer.name(), placement);
            let placement = placement.unwrap();
            let peak = p.check(&placement);
            prop_assert!(peak.is_ok(), "{} invalid: {:?}", placer.name(), peak);
            prop_assert!(peak.unwrap() >= load);
            // Deterministic: the same input gives the same offsets.
            prop_assert_eq!(placer.place(&p, &Limits::UNLIMITED).unwrap(), placement);
        }
    }
}

#[test]
fn member_names_are_unique_and_found_by_name() {
    let names: Vec<&str> = registry().iter().map(|p| p.name()).collect();
    for (i, name) in names.iter().enumerate() {
        assert!(!names[..i].contains(name), "duplicate name {name}");
        assert_eq!(by_name(name).map(|p| p.name()), Some(*name));
    }
    assert_eq!(
        names,
        vec![
            "greedy-size",
            "online",
            "greedy-conflicts",
            "first-fit",
            "coloring",
            "skyline",
            "squeaky",
            "local-search",
            "peak-clique"
        ]
    );
}

#[test]
fn every_member_reports_overflow_instead_of_wrapping() {
    let half = u64::MAX / 2 + 1;
    let p = PlacementProblem::new(vec![
        Buffer {
            lifetime: Lifetime::new(0, 2),
            size: half,
            alignment: 1,
        },
        Buffer {
            lifetime: Lifetime::new(1, 3),
            size: half,
            alignment: 1,
        },
    ]);
    for placer in registry() {
        let got = placer.place(&p, &Limits::UNLIMITED);
        assert!(
            matches!(got, Err(PlacementError::Overflow { .. })),
            "{}: {got:?}",
            placer.name()
        );
    }
}

#[test]
fn every_member_places_an_empty_problem() {
    let p = PlacementProblem::default();
    for placer in registry() {
        assert_eq!(
            placer.place(&p, &Limits::UNLIMITED).map(|pl| pl.offsets),
            Ok(vec![])
        );
    }
}

/// A shared benchmark file (`../shared/bench/RELATIVE` next to the workspace), if present
/// (see `test_shared::skip`); a file that is there but does not parse fails the test.
#[track_caller]
fn shared(relative: &str) -> Option<PlacementProblem> {
    let path = crate::test_shared::shared_path(&format!("bench/{relative}"))?;
    let text = std::fs::read_to_string(&path).unwrap();
    let csv = crate::csv::parse(&text, 1).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(csv.problem)
}

#[test]
fn the_portfolio_packs_iopddl_s_1_at_load_when_present() {
    let Some(p) = shared("traces/iopddl_S_1.csv") else {
        return;
    };
    let result = run_portfolio(&registry(), &p, &Limits::UNLIMITED).unwrap();
    let load = p.load();
    assert_eq!(
        result.stats.objective, load,
        "best {} ({}) above LOAD {load}",
        result.stats.objective, result.method
    );
    assert_eq!(result.method, "peak-clique");
}

#[test]
fn the_portfolio_beats_greedy_by_size_on_the_minimalloc_instances_when_present() {
    for name in ["A", "B", "C", "D", "E", "F"] {
        let Some(p) = shared(&format!("minimalloc/{name}.1048576.csv")) else {
            continue;
        };
        let result = run_portfolio(&registry(), &p, &Limits::UNLIMITED).unwrap();
        let greedy = result.members[0].peak;
        assert!(
            result.stats.objective < greedy,
            "{name}: no member beat greedy by size"
        );
        assert!(
            (result.stats.objective as f64) < 1.3 * p.load() as f64,
            "{name}"
        );
    }
}

/// Two 8-byte buffers alive `[0, 1)` and `[1, 2)`: LOAD 8.
fn two_buffers_that_never_overlap() -> PlacementProblem {
    PlacementProblem::new(vec![
        Buffer {
            lifetime: Lifetime::new(0, 1),
            size: 8,
            alignment: 1,
        },
        Buffer {
            lifetime: Lifetime::new(1, 2),
            size: 8,
            alignment: 1,
        },
    ])
}

#[test]
fn members_after_one_that_reaches_load_are_skipped() {
    // Two buffers that never overlap: greedy by size reaches LOAD at once.
    let p = two_buffers_that_never_overlap();
    let result = run_portfolio(&registry(), &p, &Limits::UNLIMITED).unwrap();
    assert_eq!(result.stats.objective, 8);
    assert_eq!(result.method, "greedy-size");
    assert!(!result.members[0].skipped);
    assert!(result.members[1..].iter().all(|m| m.skipped && m.peak == 8));
}

#[test]
fn a_spent_time_limit_or_stop_flag_skips_the_members_after_the_first() {
    use crate::generate::{generate, HardSpec, Variant};
    use crate::limits::{CancelToken, SolveStatus};
    let p = generate(&HardSpec::challenging(3, 100, Variant::Fits)).problem;
    let full = run_portfolio(&registry(), &p, &Limits::UNLIMITED).unwrap();
    assert!(full.members.iter().all(|m| !m.skipped));
    assert_ne!(full.stats.status, SolveStatus::TimeLimit);
    let token = CancelToken::new();
    token.cancel();
    let cancelled = Limits {
        cancel: Some(token),
        ..Limits::UNLIMITED
    };
    for limits in [Limits::with_time(std::time::Duration::ZERO), cancelled] {
        let cut = run_portfolio(&registry(), &p, &limits).unwrap();
        assert_eq!(cut.members.len(), full.members.len());
        assert!(!cut.members[0].skipped);
        assert!(cut.members[1..].iter().all(|m| m.skipped));
        // The first member's pass is cut too (at its first look at the clock, after 64
        // buffers): the rest go above by the online allocator, a valid placement either way.
        assert_eq!(cut.stats.objective, cut.members[0].peak);
        assert!(cut.stats.objective >= full.stats.objective);
        assert_eq!(cut.stats.status, SolveStatus::TimeLimit);
        PlacementProblem::new(p.buffers.clone())
            .check(&cut.placement)
            .unwrap();
    }
}

#[test]
fn later_members_start_from_the_best_so_far_and_never_lose_it() {
    for name in ["A", "B", "C"] {
        let Some(p) = shared(&format!("minimalloc/{name}.1048576.csv")) else {
            continue;
        };
        let result = run_portfolio(&registry(), &p, &Limits::UNLIMITED).unwrap();
        let at = result
            .members
            .iter()
            .position(|m| m.name == "local-search")
            .unwrap();
        let before_last = result.members[..at].iter().map(|m| m.peak).min().unwrap();
        let last = &result.members[at];
        assert!(last.peak <= before_last, "{name}");
    }
}

#[test]
fn every_pass_member_stops_at_a_raised_stop_flag_after_its_first_64_placements() {
    use crate::limits::CancelToken;
    use crate::problem::fixtures::buf;
    // A [0,2) and B [1,3) of 100 bytes and C [2,4) of 200 go first in every member's order
    // (largest, most in conflict, or alive at the LOAD step); 64 one-byte buffers alive at
    // step 10 follow. The whole pass reaches LOAD (300); stopped, the pass places its first
    // 64 and the last 3 go above (303), lower than all placed online (400: C finds no gap
    // where A was).
    let mut buffers = vec![buf(0, 2, 100), buf(1, 3, 100), buf(2, 4, 200)];
    buffers.extend((0..64).map(|_| buf(10, 11, 1)));
    let p = PlacementProblem::new(buffers);
    assert_eq!(p.load(), 300);
    let token = CancelToken::new();
    token.cancel();
    let stopped = Limits {
        cancel: Some(token),
        ..Limits::UNLIMITED
    };
    for name in ["greedy-size", "greedy-conflicts", "coloring", "peak-clique"] {
        let placer = by_name(name).unwrap();
        let full = placer.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(p.check(&full), Ok(300), "{name}");
        let cut = placer.place(&p, &stopped).unwrap();
        assert_eq!(p.check(&cut), Ok(303), "{name}");
    }
}

#[test]
fn each_member_gets_what_is_left_of_the_portfolios_time_limit() {
    use super::Placer;
    use crate::problem::Placement;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    /// Stacks the buffers after sleeping, and records the time limit it was given.
    struct Slow(Arc<Mutex<Vec<Option<Duration>>>>);
    impl Placer for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }
        fn place(
            &self,
            problem: &PlacementProblem,
            limits: &Limits,
        ) -> Result<Placement, PlacementError> {
            self.0.lock().unwrap().push(limits.time);
            std::thread::sleep(Duration::from_millis(50));
            let mut offsets = Vec::new();
            let mut top = 0;
            for b in &problem.buffers {
                offsets.push(top);
                top += b.size;
            }
            Ok(Placement { offsets })
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let placers: Vec<Box<dyn Placer>> =
        vec![Box::new(Slow(seen.clone())), Box::new(Slow(seen.clone()))];
    // Two buffers that never overlap, stacked: above LOAD (8), so neither member is skipped.
    let p = two_buffers_that_never_overlap();
    let limit = Duration::from_secs(100);
    run_portfolio(&placers, &p, &Limits::with_time(limit)).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].unwrap() <= limit);
    assert!(
        seen[1].unwrap() <= limit - Duration::from_millis(50),
        "{seen:?}"
    );
}
