//! Tests of the HiGHS placement program ([`super`]): small optima against brute force and the
//! exact search, windows, the pair cap, time limits, cancellation and progress.

use super::*;
use crate::placement::layout::round_up;
use std::sync::atomic::{AtomicBool, Ordering};

/// The HiGHS layer (crate::mip) solves a small integer program built by hand: a 0/1
/// knapsack whose optimum (items 0 and 2, value 13) the LP relaxation does not give directly.
/// (Formerly built with good_lp, which the crate no longer uses; see the mip module doc.)
#[test]
fn the_mip_layer_solves_a_small_integer_program() {
    use crate::mip::{self, MipOptions, Model, Watch};
    let (values, weights) = ([6.0, 5.0, 7.0], [3.0, 4.0, 4.0]);
    let mut model = Model::new();
    // Maximise the value: minimise its negation.
    let take: Vec<_> = values
        .iter()
        .map(|&v| model.add_integer_column(-v, 0.0..=1.0))
        .collect();
    model.add_row(..=8.0, take.iter().zip(weights).map(|(&x, w)| (x, w)));
    let solution = mip::solve(model, &MipOptions::default(), &[0.0; 3], &Watch::NONE).unwrap();
    let cols = solution.columns.unwrap();
    let picked: Vec<f64> = take.iter().map(|&x| cols[x.index()].round()).collect();
    assert_eq!(picked, vec![1.0, 0.0, 1.0]);
    let value: f64 = take
        .iter()
        .zip(values)
        .map(|(&x, v)| v * cols[x.index()])
        .sum();
    assert!((value - 13.0).abs() < 1e-6);
    assert!((solution.objective.unwrap() + 13.0).abs() < 1e-6);
}
use crate::problem::{Buffer, Lifetime};
use proptest::prelude::*;
use std::time::Duration;

use crate::problem::fixtures::buf;
/// Places buffers in the given order, each at its lowest aligned offset that is free of the
/// buffers already placed and alive with it; returns the offsets.
fn place_in_order(p: &PlacementProblem, order: &[usize]) -> Vec<u64> {
    let b = &p.buffers;
    let mut off = vec![0u64; b.len()];
    let mut placed: Vec<usize> = Vec::new();
    for &i in order {
        let mut ranges: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| b[j].lifetime.overlaps(&b[i].lifetime))
            .map(|&j| (off[j], off[j] + b[j].size))
            .collect();
        ranges.sort_unstable();
        let mut o = 0;
        for (s, e) in ranges {
            if s >= o + b[i].size {
                break;
            }
            o = o.max(round_up(e, b[i].alignment).unwrap());
        }
        off[i] = o;
        placed.push(i);
    }
    off
}

/// Optimum by enumerating every order (the canonical placements include an optimum).
fn brute_force(p: &PlacementProblem) -> u64 {
    fn rec(p: &PlacementProblem, order: &mut Vec<usize>, used: &mut [bool], best: &mut u64) {
        if order.len() == used.len() {
            let off = place_in_order(p, order);
            *best = (*best).min(p.check(&Placement { offsets: off }).unwrap());
            return;
        }
        for i in 0..used.len() {
            if !used[i] {
                used[i] = true;
                order.push(i);
                rec(p, order, used, best);
                order.pop();
                used[i] = false;
            }
        }
    }
    let mut best = u64::MAX;
    rec(
        p,
        &mut Vec::new(),
        &mut vec![false; p.buffers.len()],
        &mut best,
    );
    best
}

/// Deterministic pseudo-random instance: `n` buffers in `steps` steps, sizes `1..=max`,
/// alignments 1, 2 or 4.
fn random_problem(n: usize, steps: u64, max: u64, seed: u64) -> PlacementProblem {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |m: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % m
    };
    PlacementProblem::new(
        (0..n)
            .map(|_| {
                let start = next(steps);
                let end = (start + 1 + next(steps / 2)).min(steps);
                Buffer {
                    lifetime: Lifetime::new(start, end),
                    size: 1 + next(max),
                    alignment: [1, 2, 4][next(3) as usize],
                }
            })
            .collect(),
    )
}

/// The greedy warm start of these tests: decreasing size, each at its lowest free offset.
fn greedy(p: &PlacementProblem) -> Placement {
    let mut order: Vec<usize> = (0..p.buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(p.buffers[i].size), i));
    Placement {
        offsets: place_in_order(p, &order),
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

/// LOAD is 11 but the optimum is 13 (alignment waste), and the size-greedy needs 17: only
/// HiGHS' dual bound can prove 13.
#[test]
fn dual_bound_proves_an_optimum_above_load_where_the_greedy_is_not_optimal() {
    let b = |start, end, size, alignment| Buffer {
        lifetime: Lifetime::new(start, end),
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
    let warm = greedy(&p);
    assert_eq!(
        (p.load(), brute_force(&p), p.check(&warm).unwrap()),
        (11, 13, 17)
    );
    let out = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
    assert_eq!(out.stats.status, SolveStatus::Optimal);
    assert_eq!(p.check(&out.placement).unwrap(), 13);
    assert_eq!((out.stats.objective, out.stats.lower_bound), (13, 13));
    assert_eq!(out.model_bound, 13);
}

#[test]
fn time_limited_solve_is_valid_bounded_and_never_worse() {
    let p = random_problem(40, 12, 64, 7);
    let warm = greedy(&p);
    let warm_peak = p.check(&warm).unwrap();
    let opts = IlpOptions {
        limits: Limits::with_time(Duration::from_millis(300)),
        ..IlpOptions::default()
    };
    let out = place_ilp(&p, &warm, &opts).unwrap();
    let peak = p.check(&out.placement).unwrap();
    assert_eq!(peak, out.stats.objective);
    assert!(peak <= warm_peak);
    assert!(p.load() <= out.stats.lower_bound && out.stats.lower_bound <= peak);
    assert!(matches!(
        out.stats.status,
        SolveStatus::Optimal | SolveStatus::TimeLimit
    ));
    assert_eq!(
        out.stats.status == SolveStatus::Optimal,
        out.stats.lower_bound == peak
    );
    assert!(out.stats.elapsed < Duration::from_secs(10));
}

#[test]
fn window_moves_only_its_buffers_and_never_worsens() {
    let p = random_problem(40, 12, 64, 11);
    let warm = greedy(&p);
    let warm_peak = p.check(&warm).unwrap();
    // The buffers reaching highest: the ones a peak-refining window would pick.
    let mut by_end: Vec<usize> = (0..p.buffers.len()).collect();
    by_end.sort_by_key(|&i| std::cmp::Reverse(warm.offsets[i] + p.buffers[i].size));
    let window = &by_end[..8];
    let opts = IlpOptions {
        limits: Limits::with_time(Duration::from_secs(5)),
        ..IlpOptions::default()
    };
    let out = place_ilp_window(&p, &warm, window, &opts).unwrap();
    let peak = p.check(&out.placement).unwrap();
    assert_eq!(peak, out.stats.objective);
    assert!(peak <= warm_peak);
    for i in (0..p.buffers.len()).filter(|i| !window.contains(i)) {
        assert_eq!(
            out.placement.offsets[i], warm.offsets[i],
            "buffer {i} moved"
        );
    }
    assert!(out.stats.lower_bound <= peak && out.model_bound <= peak);
    assert_eq!(out.stats.lower_bound, p.load().min(peak));
}

#[test]
fn window_of_one_buffer_reaches_load_by_moving_it() {
    let p = PlacementProblem::new(vec![
        buf(0, 2, 2),
        buf(2, 4, 2),
        buf(1, 3, 3),
        buf(0, 1, 1),
        buf(3, 4, 1),
    ]);
    // The 3-byte buffer sits on top; the two 1-byte ones sit on the 2-byte ones.
    let warm = Placement {
        offsets: vec![0, 0, 2, 2, 2],
    };
    assert_eq!(p.check(&warm).unwrap(), 5);
    let warm = Placement {
        offsets: vec![3, 3, 0, 5, 5],
    };
    assert_eq!(p.check(&warm).unwrap(), 6);
    // Moving only buffer 2 cannot help (the others fill [3, 6) around it)...
    let out = place_ilp_window(&p, &warm, &[2], &IlpOptions::default()).unwrap();
    assert_eq!(out.placement, warm);
    assert_eq!((out.stats.objective, out.model_bound), (6, 6));
    assert_eq!(out.stats.status, SolveStatus::Heuristic);
    // ...moving buffers 3 and 4 below does.
    let out = place_ilp_window(&p, &warm, &[3, 4, 3], &IlpOptions::default()).unwrap();
    assert_eq!(p.check(&out.placement).unwrap(), 5);
    assert_eq!(out.stats.status, SolveStatus::Optimal);
    assert_eq!(&out.placement.offsets[..3], &warm.offsets[..3]);
}

#[test]
fn windows_naming_missing_buffers_and_invalid_warm_starts_are_refused() {
    let p = PlacementProblem::new(vec![buf(0, 2, 2), buf(1, 3, 3)]);
    let warm = Placement {
        offsets: vec![0, 2],
    };
    assert!(matches!(
        place_ilp_window(&p, &warm, &[0, 2], &IlpOptions::default()),
        Err(IlpError::BadWindow { index: 2, len: 2 })
    ));
    let bad = Placement {
        offsets: vec![0, 1],
    };
    assert!(matches!(
        place_ilp(&p, &bad, &IlpOptions::default()),
        Err(IlpError::WarmStart(PlacementError::Overlap { a: 0, b: 1 }))
    ));
}

#[test]
fn a_raised_cancel_flag_returns_the_compacted_warm_start_at_once() {
    let p = random_problem(40, 12, 64, 7);
    let warm = greedy(&p);
    let flag = AtomicBool::new(true);
    let opts = IlpOptions {
        cancel: Some(&flag),
        ..IlpOptions::default()
    };
    let out = place_ilp(&p, &warm, &opts).unwrap();
    assert_eq!(out.stats.status, SolveStatus::TimeLimit);
    assert!(p.check(&out.placement).unwrap() <= p.check(&warm).unwrap());
}

#[test]
fn the_cancel_flag_interrupts_a_running_solve() {
    let p = random_problem(60, 12, 1000, 3);
    let warm = greedy(&p);
    let warm_peak = p.check(&warm).unwrap();
    // Raised from HiGHS' own callback at its first improving solution, so always while
    // the solve runs (never before it starts, never after it ends), whatever the load.
    let flag = std::sync::Arc::new(AtomicBool::new(false));
    let improved = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let raise = {
        let (flag, improved) = (flag.clone(), improved.clone());
        crate::limits::ProgressFn::new(move |_, _| {
            improved.fetch_add(1, Ordering::Relaxed);
            flag.store(true, Ordering::Relaxed);
        })
    };
    let opts = IlpOptions {
        limits: Limits::with_time(Duration::from_secs(60)),
        cancel: Some(&*flag),
        progress: Some(&raise),
        ..IlpOptions::default()
    };
    let out = place_ilp(&p, &warm, &opts).unwrap();
    assert!(
        improved.load(Ordering::Relaxed) >= 1,
        "HiGHS found no solution"
    );
    // An interrupted solve reads as a spent time limit, with its best placement so far,
    // long before the 60 s limit.
    assert_eq!(out.stats.status, SolveStatus::TimeLimit, "{:?}", out.stats);
    assert!(p.check(&out.placement).unwrap() <= warm_peak);
    assert!(out.stats.lower_bound < out.stats.objective);
    assert!(
        out.stats.elapsed < Duration::from_secs(10),
        "{:?}",
        out.stats
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// On tiny instances the MIP optimum equals the optimum over all placement orders.
    #[test]
    fn mip_optimum_matches_brute_force(
        specs in prop::collection::vec((0u64..5, 1u64..4, 1u64..=8, 0usize..3), 1..=6)
    ) {
        let p = PlacementProblem::new(
            specs
                .iter()
                .map(|&(start, len, size, a)| Buffer {
                    lifetime: Lifetime::new(start, start + len),
                    size,
                    alignment: [1, 2, 4][a],
                })
                .collect(),
        );
        // Warm start: everything stacked.
        let mut top = 0;
        let offsets = p
            .buffers
            .iter()
            .map(|b| {
                let o = round_up(top, b.alignment).unwrap();
                top = o + b.size;
                o
            })
            .collect();
        let warm = Placement { offsets };
        let opt = brute_force(&p);
        let out = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
        prop_assert_eq!(out.stats.status, SolveStatus::Optimal);
        prop_assert_eq!(p.check(&out.placement).unwrap(), opt);
        prop_assert_eq!((out.stats.objective, out.stats.lower_bound), (opt, opt));
        let all: Vec<usize> = (0..p.buffers.len()).collect();
        let win = place_ilp_window(&p, &warm, &all, &IlpOptions::default()).unwrap();
        prop_assert_eq!((win.stats.objective, win.stats.lower_bound), (opt, opt));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Cross-check beyond brute force: on 8–10 buffers, HiGHS and the exact search
    /// (two independent methods) prove the same optimum.
    #[test]
    fn highs_and_the_exact_search_prove_the_same_optimum(seed in 0u64..1_000_000, n in 8usize..=10) {
        let p = random_problem(n, 8, 40, seed);
        let warm = greedy(&p);
        let ilp = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
        let exact = crate::exact::minimise(&p, &warm, &crate::exact::ExactOptions::default());
        prop_assert_eq!(ilp.stats.status, SolveStatus::Optimal);
        prop_assert_eq!(exact.status, crate::exact::ExactStatus::Optimal);
        prop_assert_eq!(ilp.stats.objective, exact.peak);
        prop_assert_eq!(p.check(&ilp.placement).unwrap(), exact.peak);
        prop_assert_eq!(p.check(&exact.placement).unwrap(), exact.peak);
    }
}
