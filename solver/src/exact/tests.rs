//! Tests of the exact search against brute force, per-technique node counts, budgets, and the
//! MiniMalloc benchmarks from `../shared` (see tests/support/shared.rs when it is missing).

use super::*;
use crate::problem::{align_up, Buffer, Lifetime};
use proptest::prelude::*;

use crate::problem::fixtures::buf;
/// The lowest aligned offset where buffer `i` fits between the placed ones.
fn lowest_fit(p: &PlacementProblem, offsets: &[Option<u64>], i: usize) -> u64 {
    let b = p.buffers[i];
    let mut taken: Vec<(u64, u64)> = (0..p.buffers.len())
        .filter(|&j| j != i && p.buffers[j].lifetime.overlaps(&b.lifetime))
        .filter_map(|j| offsets[j].map(|o| (o, o + p.buffers[j].size)))
        .collect();
    taken.sort_unstable();
    let mut x = 0;
    loop {
        x = align_up(x, b.alignment).unwrap();
        match taken.iter().find(|&&(a, e)| a < x + b.size && x < e) {
            Some(&(_, e)) => x = e,
            None => return x,
        }
    }
}

/// The minimum peak over all placements keeping `fixed` (brute force: every order of the
/// free buffers, each at its lowest fit; some order reproduces any optimum, see below).
///
/// Given an optimal placement, taking its free buffers by increasing offset and dropping each
/// to its lowest fit never moves one above its optimal offset (by induction: whatever lies
/// below it at its optimal offset was placed there or lower), so that order reaches the optimum.
fn brute_force(p: &PlacementProblem, fixed: &[Option<u64>]) -> u64 {
    let n = p.buffers.len();
    let pinned = |i: usize| fixed.get(i).copied().flatten();
    let mut perm: Vec<usize> = (0..n).filter(|&i| pinned(i).is_none()).collect();
    let eval = |perm: &[usize]| -> u64 {
        let mut offsets: Vec<Option<u64>> = (0..n).map(pinned).collect();
        for &i in perm {
            offsets[i] = Some(lowest_fit(p, &offsets, i));
        }
        (0..n)
            .map(|i| offsets[i].unwrap() + p.buffers[i].size)
            .max()
            .unwrap_or(0)
    };
    // Heap's algorithm, iteratively.
    let k = perm.len();
    let mut best = eval(&perm);
    let mut c = vec![0usize; k];
    let mut i = 0;
    while i < k {
        if c[i] < i {
            if i % 2 == 0 {
                perm.swap(0, i);
            } else {
                perm.swap(c[i], i);
            }
            best = best.min(eval(&perm));
            c[i] += 1;
            i = 0;
        } else {
            c[i] = 0;
            i += 1;
        }
    }
    best
}

/// A deterministic xorshift generator for fixed test instances.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A tiny random instance with mixed alignments.
fn tiny(rng: &mut Rng) -> PlacementProblem {
    let n = 1 + rng.below(7) as usize;
    PlacementProblem::new(
        (0..n)
            .map(|_| {
                let s = rng.below(6);
                let len = 1 + rng.below(4);
                Buffer {
                    lifetime: Lifetime::new(s, s + len),
                    size: 1 + rng.below(6),
                    alignment: [1, 1, 2, 4][rng.below(4) as usize],
                }
            })
            .collect(),
    )
}

/// `count` tiny instances drawn from `seed`, each with its brute-force optimum.
fn tiny_with_optimum(seed: u64, count: usize) -> impl Iterator<Item = (PlacementProblem, u64)> {
    let mut rng = Rng::new(seed);
    (0..count).map(move |_| {
        let p = tiny(&mut rng);
        let opt = brute_force(&p, &[]);
        (p, opt)
    })
}

/// LOAD tightened by alignment is a lower bound: between LOAD and the brute-force optimum of
/// tiny instances (half of them all 4-aligned), above LOAD on a quarter and more, and equal to
/// the optimum on nine in ten.
#[test]
fn the_aligned_load_lies_between_load_and_the_optimum() {
    let (mut above, mut exact, mut count) = (0, 0, 0);
    let mut rng = Rng::new(71);
    for k in 0..3000 {
        let mut p = tiny(&mut rng);
        // Every other instance with all its buffers 4-aligned, as in a DNN arena.
        if k % 2 == 0 {
            for b in &mut p.buffers {
                b.alignment = 4;
            }
        }
        let opt = brute_force(&p, &[]);
        let (load, aligned) = (p.load(), p.aligned_load());
        assert!(
            load <= aligned && aligned <= opt,
            "{p:?}: LOAD {load}, aligned {aligned}, optimum {opt}"
        );
        above += usize::from(aligned > load);
        exact += usize::from(aligned == opt);
        count += 1;
    }
    assert!(above * 4 > count, "only {above} of {count} above LOAD");
    assert!(exact * 10 > count * 9, "only {exact} of {count} exact");
}

#[test]
fn a_capacity_below_the_aligned_load_is_infeasible_without_a_search_node() {
    // LOAD 315 B; at 256-byte offsets the three need 773 B (5 on top of 300 and 10).
    let b = |start, end, size| Buffer {
        lifetime: Lifetime::new(start, end),
        size,
        alignment: 256,
    };
    let p = PlacementProblem::new(vec![b(0, 2, 5), b(0, 2, 300), b(1, 3, 10)]);
    let o = ExactOptions::default();
    let below = solve(&p, 772, &[], &o);
    assert_eq!((below.status, below.nodes), (ExactStatus::Infeasible, 0));
    let at = solve(&p, 773, &[], &o);
    assert_eq!(at.status, ExactStatus::Optimal);
    assert_eq!(p.check(&at.placement.expect("placed")), Ok(773));
}

/// Pins some buffers where `placement` puts them.
fn pin_some(rng: &mut Rng, placement: &Placement) -> Vec<Option<u64>> {
    placement
        .offsets
        .iter()
        .map(|&o| (rng.below(3) == 0).then_some(o))
        .collect()
}

/// Every combination of the switches, restarts included.
fn all_switches() -> impl Iterator<Item = ExactOptions> {
    (0..64u32).map(|m| ExactOptions {
        // Half under a node limit no tiny instance reaches, so that the blocks take a turn.
        limits: Limits {
            nodes: (m & 16 == 0).then_some(1 << 40),
            ..Limits::UNLIMITED
        },
        section_inference: m & 1 == 0,
        dominance: m & 2 == 0,
        dynamic_ordering: m & 4 == 0,
        restarts: m & 8 == 0,
        decomposition: m & 16 == 0,
        memo: m & 32 == 0,
        only_strategy: None,
        time_reversal: m & 8 == 0,
        discrepancy_passes: m & 2 == 0,
        learning: m & 4 == 0,
        blocks: m & 32 == 0,
        backjumping: m & 1 == 0,
        located_failures: m & 8 == 0,
        // Half under a work limit no tiny instance reaches.
        work_limit: (m & 16 != 0).then_some(1 << 40),
        threads: 1 + (m as usize & 1),
    })
}

/// Checks one answer of `solve` against the brute-force optimum `opt`.
fn agrees(p: &PlacementProblem, cap: u64, fixed: &[Option<u64>], opt: u64, o: &ExactOptions) {
    let out = solve(p, cap, fixed, o);
    match out.status {
        ExactStatus::Optimal => {
            let placement = out.placement.expect("a placement comes with Optimal");
            let capped = PlacementProblem {
                buffers: p.buffers.clone(),
                capacity: Some(cap),
            };
            assert!(capped.check(&placement).is_ok(), "{p:?} cap {cap}");
            for (f, o) in fixed.iter().zip(&placement.offsets) {
                if let Some(f) = f {
                    assert_eq!(f, o, "pinned offsets are kept");
                }
            }
            assert!(opt <= cap);
        }
        ExactStatus::Infeasible => assert!(opt > cap, "{p:?} fits {cap} (optimum {opt})"),
        s => panic!("unexpected {s:?} without a limits"),
    }
}

#[test]
fn every_switch_combination_agrees_with_brute_force_on_tiny_instances() {
    for (p, opt) in tiny_with_optimum(7, 150) {
        for cap in [opt - 1, opt, opt + 1] {
            for o in all_switches() {
                agrees(&p, cap, &[], opt, &o);
            }
        }
    }
}

#[test]
fn pinned_buffers_are_obstacles_and_brute_force_agrees() {
    let mut rng = Rng::new(11);
    for _ in 0..150 {
        let p = tiny(&mut rng);
        let best = minimise(&p, &Placement::default(), &ExactOptions::default());
        let fixed = pin_some(&mut rng, &best.placement);
        let opt = brute_force(&p, &fixed);
        for cap in [opt - 1, opt, opt + 2] {
            for o in all_switches().step_by(5) {
                agrees(&p, cap, &fixed, opt, &o);
            }
        }
    }
}

#[test]
fn minimise_reaches_the_brute_force_optimum_and_proves_it() {
    for (p, opt) in tiny_with_optimum(13, 150) {
        let out = minimise(&p, &Placement::default(), &ExactOptions::default());
        assert_eq!(out.status, ExactStatus::Optimal, "{p:?}");
        assert_eq!((out.peak, out.lower_bound), (opt, opt), "{p:?}");
        assert_eq!(p.check(&out.placement), Ok(opt));
    }
}

/// Seven buffers whose LOAD (10) no placement reaches: found by random search, checked by
/// brute force here.
fn gadget(shift: u64) -> Vec<Buffer> {
    [
        (5, 9, 5),
        (4, 8, 4),
        (0, 3, 5),
        (0, 2, 5),
        (3, 5, 2),
        (2, 4, 3),
        (2, 5, 2),
    ]
    .iter()
    .map(|&(s, e, z)| buf(s + shift, e + shift, z))
    .collect()
}

#[test]
fn a_gadget_that_misses_its_load_is_proven_infeasible_there_and_solved_one_above() {
    let p = PlacementProblem::new(gadget(0));
    assert_eq!(p.load(), 10);
    assert_eq!(brute_force(&p, &[]), 11);
    let o = ExactOptions::default();
    assert_eq!(solve(&p, 10, &[], &o).status, ExactStatus::Infeasible);
    assert_eq!(solve(&p, 11, &[], &o).status, ExactStatus::Optimal);
    let out = minimise(&p, &Placement::default(), &o);
    assert_eq!(
        (out.peak, out.lower_bound, out.status),
        (11, 11, ExactStatus::Optimal)
    );
}

#[test]
fn a_continued_minimisation_asks_again_only_with_more_budget_than_before() {
    let p = PlacementProblem::new(gadget(0));
    let whole = minimise(&p, &Placement::default(), &ExactOptions::default());
    assert_eq!((whole.peak, whole.lower_bound), (11, 11));
    assert!(whole.unanswered.is_empty());
    let nodes = |n| ExactOptions {
        limits: Limits {
            nodes: Some(n),
            ..Limits::UNLIMITED
        },
        ..ExactOptions::default()
    };
    let stacked = minimise::stack(&p).unwrap();
    // An earlier call that asked LOAD (10) with `had` nodes and got no answer.
    let earlier = |had| MinimiseOutcome {
        placement: stacked.clone(),
        peak: 26,
        lower_bound: 10,
        status: ExactStatus::Feasible,
        nodes: had,
        elapsed: std::time::Duration::ZERO,
        unanswered: vec![Unanswered {
            capacity: 10,
            time: None,
            nodes: Some(had),
        }],
    };
    // Each question now gets at most half of 100,000 nodes: after 10^9, LOAD is not asked
    // again, so the optimum is found but not proven.
    let more = minimise_more(&p, &stacked, &earlier(1_000_000_000), &nodes(100_000));
    assert_eq!(p.check(&more.placement), Ok(11));
    assert_eq!(
        (more.peak, more.lower_bound, more.status),
        (11, 10, ExactStatus::Feasible)
    );
    // After one node, it is: and proven infeasible.
    let more = minimise_more(&p, &stacked, &earlier(1), &nodes(100_000));
    assert_eq!(
        (more.peak, more.lower_bound, more.status),
        (11, 11, ExactStatus::Optimal)
    );
}

/// A perfect packing of a `horizon × cap` rectangle cut into `pieces` buffers (guillotine cuts
/// in time or in offset), with about one buffer in ten removed: LOAD-tight and hard.
fn planted(seed: u64, horizon: u64, cap: u64, pieces: usize) -> PlacementProblem {
    let mut rng = Rng::new(seed);
    let mut rects = vec![(0u64, horizon, 0u64, cap)];
    while rects.len() < pieces {
        let (k, _) = rects
            .iter()
            .enumerate()
            .map(|(k, r)| (k, (r.1 - r.0) * (r.3 - r.2)))
            .max_by_key(|&(k, a)| (a, std::cmp::Reverse(k)))
            .unwrap();
        let (t0, t1, y0, y1) = rects.swap_remove(k);
        if rng.below(2) == 0 && t1 - t0 >= 2 {
            let t = t0 + 1 + rng.below(t1 - t0 - 1);
            rects.extend([(t0, t, y0, y1), (t, t1, y0, y1)]);
        } else if y1 - y0 >= 2 {
            let y = y0 + 1 + rng.below(y1 - y0 - 1);
            rects.extend([(t0, t1, y0, y), (t0, t1, y, y1)]);
        } else {
            rects.push((t0, t1, y0, y1));
            break;
        }
    }
    let mut buffers: Vec<Buffer> = rects
        .iter()
        .map(|&(t0, t1, y0, y1)| buf(t0, t1, y1 - y0))
        .collect();
    let mut drop = Rng(seed + 77);
    buffers.retain(|_| drop.below(100) >= 10);
    PlacementProblem::new(buffers)
}

/// Nodes to solve `p` at its LOAD with `o` under a node cap (a timeout counts as the cap), on
/// the buffers themselves (no blocks: planted packings glue back into a few).
fn nodes_at_load(p: &PlacementProblem, o: ExactOptions) -> u64 {
    let o = ExactOptions {
        limits: Limits {
            time: None,
            nodes: Some(200_000),
            ..Limits::UNLIMITED
        },
        blocks: false,
        ..o
    };
    let out = solve(p, p.load(), &[], &o);
    assert_ne!(out.status, ExactStatus::Infeasible);
    out.nodes
}

/// One strategy, everything else on: the baseline of the node-count tests.
fn single_run() -> ExactOptions {
    ExactOptions {
        restarts: false,
        ..ExactOptions::default()
    }
}

/// Every switch on, at most `nodes` search nodes and no clock: the same outcome under any load.
fn node_capped(nodes: u64) -> ExactOptions {
    ExactOptions::with_limits(Limits {
        time: None,
        nodes: Some(nodes),
        ..Limits::UNLIMITED
    })
}

#[test]
fn section_inference_cuts_the_nodes_of_a_planted_packing() {
    let p = planted(3, 30, 200, 60);
    let on = nodes_at_load(&p, single_run());
    let off = nodes_at_load(
        &p,
        ExactOptions {
            section_inference: false,
            ..single_run()
        },
    );
    // Measured: 3439 against more than 200000 (the cap).
    assert!(on * 10 < off, "{on} vs {off}");
}

#[test]
fn dominance_cuts_the_nodes_of_a_planted_packing() {
    let p = planted(3, 30, 200, 60);
    let on = nodes_at_load(&p, single_run());
    let off = nodes_at_load(
        &p,
        ExactOptions {
            dominance: false,
            ..single_run()
        },
    );
    // Measured: 3439 against 23879.
    assert!(on * 2 < off, "{on} vs {off}");
}

#[test]
fn dynamic_ordering_cuts_the_nodes_of_a_planted_packing() {
    let p = planted(3, 30, 200, 60);
    let on = nodes_at_load(&p, single_run());
    let off = nodes_at_load(
        &p,
        ExactOptions {
            dynamic_ordering: false,
            ..single_run()
        },
    );
    // Measured: 3439 against 115226.
    assert!(on * 10 < off, "{on} vs {off}");
}

#[test]
fn the_memo_cuts_the_nodes_of_a_planted_packing() {
    let p = planted(3, 30, 200, 60);
    let on = nodes_at_load(&p, single_run());
    let off = nodes_at_load(
        &p,
        ExactOptions {
            memo: false,
            ..single_run()
        },
    );
    // Measured: 3439 against 7713.
    assert!(on < off, "{on} vs {off}");
}

#[test]
fn restarts_cut_the_nodes_of_a_planted_packing() {
    let p = planted(3, 30, 200, 60);
    let on = nodes_at_load(&p, ExactOptions::default());
    let off = nodes_at_load(&p, single_run());
    // Measured: 707 against 3439.
    assert!(on < off, "{on} vs {off}");
}

#[test]
fn decomposition_solves_independent_pieces_once() {
    // A long thin buffer under two independent parts: four buffers that stack in any of 24
    // orders, then the gadget, which cannot fit. Without decomposition every order of the
    // first part meets the gadget's failure again.
    let mut buffers = vec![buf(0, 20, 1)];
    buffers.extend([1, 2, 3, 4].map(|z| buf(0, 3, z)));
    buffers.extend(gadget(10));
    let p = PlacementProblem::new(buffers);
    assert_eq!(p.load(), 11);
    let run = |decomposition| {
        let out = solve(
            &p,
            11,
            &[],
            &ExactOptions {
                decomposition,
                ..single_run()
            },
        );
        assert_eq!(out.status, ExactStatus::Infeasible);
        out.nodes
    };
    let (on, off) = (run(true), run(false));
    // Measured: 86 against 122.
    assert!(on < off, "{on} vs {off}");
}

#[test]
fn the_node_budget_stops_the_search_with_a_timeout() {
    let p = planted(3, 30, 200, 60);
    let o = ExactOptions {
        limits: Limits {
            time: None,
            nodes: Some(100),
            ..Limits::UNLIMITED
        },
        ..single_run()
    };
    let out = solve(&p, p.load(), &[], &o);
    assert_eq!(out.status, ExactStatus::Timeout);
    assert!(out.placement.is_none());
    assert!(out.nodes <= 100);
}

#[test]
fn the_time_budget_stops_the_search_and_minimise_keeps_the_start() {
    let p = planted(3, 30, 200, 60);
    let o = ExactOptions::with_limits(Limits::with_time(Duration::ZERO));
    let out = solve(&p, p.load(), &[], &o);
    assert_eq!(out.status, ExactStatus::Timeout);
    let start = Placement {
        offsets: p
            .buffers
            .iter()
            .scan(0, |top, b| {
                let off = *top;
                *top += b.size;
                Some(off)
            })
            .collect(),
    };
    let peak = p.check(&start).unwrap();
    let m = minimise(&p, &start, &o);
    assert!(m.peak <= peak && m.lower_bound <= m.peak);
    assert_eq!(p.check(&m.placement), Ok(m.peak));
}

#[test]
fn invalid_inputs_are_infeasible() {
    let p = PlacementProblem::new(vec![buf(0, 2, 4), buf(1, 3, 4)]);
    let o = ExactOptions::default();
    // Wrong length of `fixed`; pinned buffers overlapping; a pinned buffer over the capacity.
    assert_eq!(solve(&p, 8, &[None], &o).status, ExactStatus::Infeasible);
    assert_eq!(
        solve(&p, 8, &[Some(0), Some(2)], &o).status,
        ExactStatus::Infeasible
    );
    assert_eq!(
        solve(&p, 8, &[None, Some(6)], &o).status,
        ExactStatus::Infeasible
    );
    let zero = PlacementProblem::new(vec![buf(0, 2, 0)]);
    assert_eq!(solve(&zero, 8, &[], &o).status, ExactStatus::Infeasible);
    // An empty problem fits anything.
    let empty = solve(&PlacementProblem::default(), 0, &[], &o);
    assert_eq!(empty.status, ExactStatus::Optimal);
}

#[test]
fn minimalloc_benchmarks_fit_their_capacity_within_a_node_budget() {
    for name in ["A", "B", "C", "D", "E", "F"] {
        let rel = format!("bench/minimalloc/{name}.1048576.csv");
        let Some(path) = crate::test_shared::shared_path(&rel) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let p = crate::csv::parse(&text, 1)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .problem;
        // A work limit, not the clock: the outcome is the same under any load (the time
        // limit is only a generous cap).
        let o = ExactOptions::with_limits(Limits {
            nodes: Some(MINIMALLOC_NODES),
            time: Some(Duration::from_secs(600)),
            ..Limits::UNLIMITED
        });
        let out = solve(&p, 1_048_576, &[], &o);
        assert_eq!(
            out.status,
            ExactStatus::Optimal,
            "{name}: {} nodes",
            out.nodes
        );
    }
}

/// Search nodes within which every MiniMalloc benchmark A–F fits its capacity (E, the
/// hardest, needs about 133 000).
const MINIMALLOC_NODES: u64 = 1_000_000;

fn arb_instance() -> impl Strategy<Value = PlacementProblem> {
    prop::collection::vec(
        (
            0u64..6,
            1u64..5,
            1u64..7,
            prop::sample::select(vec![1u64, 1, 2, 4]),
        ),
        1..=6,
    )
    .prop_map(|v| {
        PlacementProblem::new(
            v.into_iter()
                .map(|(s, len, size, alignment)| Buffer {
                    lifetime: Lifetime::new(s, s + len),
                    size,
                    alignment,
                })
                .collect(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn solve_returns_checked_placements_and_never_a_false_infeasible(
        p in arb_instance(),
        extra in 0u64..6,
        below in any::<bool>(),
        pin_seed in any::<u64>(),
    ) {
        let load = p.load();
        let cap = if below { load.saturating_sub(1) } else { load + extra };
        let mut rng = Rng::new(pin_seed);
        let fixed = if pin_seed % 3 == 0 {
            let best = minimise(&p, &Placement::default(), &ExactOptions::default());
            pin_some(&mut rng, &best.placement)
        } else {
            Vec::new()
        };
        let opt = brute_force(&p, &fixed);
        let out = solve(&p, cap, &fixed, &ExactOptions::default());
        match out.status {
            ExactStatus::Optimal => {
                let placement = out.placement.unwrap();
                let capped = PlacementProblem { buffers: p.buffers.clone(), capacity: Some(cap) };
                prop_assert!(capped.check(&placement).is_ok());
                prop_assert!(opt <= cap);
            }
            ExactStatus::Infeasible => prop_assert!(opt > cap),
            s => prop_assert!(false, "unexpected {:?}", s),
        }
    }

    #[test]
    fn minimise_is_never_worse_than_its_start_and_its_bound_holds(
        p in arb_instance(),
        order in any::<u64>(),
        nodes in 1u64..50,
    ) {
        // A valid start: stack the buffers in a shuffled order.
        let mut idx: Vec<usize> = (0..p.buffers.len()).collect();
        let mut rng = Rng::new(order);
        for i in (1..idx.len()).rev() {
            idx.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut offsets = vec![0u64; p.buffers.len()];
        let mut top = 0;
        for &i in &idx {
            offsets[i] = align_up(top, p.buffers[i].alignment).unwrap();
            top = offsets[i] + p.buffers[i].size;
        }
        let start = Placement { offsets };
        let start_peak = p.check(&start).unwrap();
        let opt = brute_force(&p, &[]);
        let o = node_capped(nodes);
        let out = minimise(&p, &start, &o);
        prop_assert_eq!(p.check(&out.placement), Ok(out.peak));
        prop_assert!(out.peak <= start_peak);
        prop_assert!(out.lower_bound <= opt && opt <= out.peak);
        prop_assert_eq!(out.status == ExactStatus::Optimal, out.peak == out.lower_bound);
    }
}

/// The search never calls a generated instance with a known placement infeasible, and proves
/// every below-LOAD variant infeasible (node-capped, so a timeout is allowed on the former).
#[test]
fn generated_hard_instances_get_answers_consistent_with_their_construction() {
    use crate::generate::{generate, HardSpec, Known, Variant};
    let capped = node_capped(20_000);
    let mut solved = 0;
    for seed in 0..24u64 {
        let variant = if seed % 4 == 3 {
            Variant::BelowLoad
        } else {
            Variant::Fits
        };
        let inst = generate(&HardSpec::challenging(
            seed,
            30 + 10 * (seed as usize % 5),
            variant,
        ));
        let out = solve(&inst.problem, inst.capacity, &[], &capped);
        match inst.known {
            Known::Fits => {
                assert_ne!(out.status, ExactStatus::Infeasible, "{}", inst.name);
                if let Some(p) = &out.placement {
                    assert!(inst.problem.check(p).unwrap() <= inst.capacity);
                    solved += 1;
                }
            }
            Known::Infeasible => assert_eq!(out.status, ExactStatus::Infeasible, "{}", inst.name),
            Known::Unknown => unreachable!(),
        }
    }
    assert!(
        solved >= 12,
        "only {solved} of 18 small fitting instances solved"
    );
}

/// Solves `inst` under a budget of `nodes` on one thread and on two (see
/// [`agree_on_threads`]) and returns the node count.
fn threads_agree(inst: &crate::generate::HardInstance, nodes: u64) -> u64 {
    agree_on_threads(inst, &node_capped(nodes)).nodes
}

/// The restart schedule's answer is that of its first settling run, whatever the number of
/// threads: same status, same placement, same node count, on instances that need restarts.
#[test]
fn two_threads_change_neither_the_answer_nor_the_node_count() {
    use crate::generate::{generate, HardSpec, Variant};
    let mut restarted = 0;
    for seed in 0..12u64 {
        let inst = generate(&HardSpec::challenging(seed, 60, Variant::Fits));
        // More nodes than the first run's limit: the answer came from a later run.
        if threads_agree(&inst, 30_000) > 64 {
            restarted += 1;
        }
    }
    assert!(restarted > 0, "no instance needed a second run");
}

/// The trace tells how far the search got: runs that place every buffer reach them all; runs
/// cut short on a hard instance stop below, after section-check failures, the hottest
/// section's among them.
#[test]
fn the_trace_tells_how_deep_the_search_got_and_where_it_failed() {
    use crate::generate::{generate, HardSpec, Variant};
    let easy = generate(&HardSpec::challenging(1, 100, Variant::Fits));
    let out = solve(&easy.problem, easy.capacity, &[], &node_capped(1_000_000));
    assert_eq!(out.status, ExactStatus::Optimal);
    assert_eq!(out.trace.deepest, easy.problem.buffers.len());
    let hard = generate(&HardSpec::challenging(8, 450, Variant::Fits));
    let out = solve(&hard.problem, hard.capacity, &[], &node_capped(200_000));
    assert_eq!(out.status, ExactStatus::Timeout);
    let t = out.trace;
    assert!(
        0 < t.deepest && t.deepest < hard.problem.buffers.len(),
        "{t:?}"
    );
    assert!(
        0 < t.hottest_failures && t.hottest_failures <= t.check_failures,
        "{t:?}"
    );
}

/// Members that search the time-reversed instance return placements of the instance itself.
#[test]
fn a_time_reversed_strategy_places_the_instance_itself() {
    use crate::generate::{generate, HardSpec, Variant};
    for seed in 0..6u64 {
        let inst = generate(&HardSpec::challenging(seed, 40, Variant::Fits));
        let o = ExactOptions {
            only_strategy: Some(1),
            ..node_capped(50_000)
        };
        assert!(super::STRATEGIES[1].reversed);
        let out = solve(&inst.problem, inst.capacity, &[], &o);
        assert_ne!(out.status, ExactStatus::Infeasible, "{}", inst.name);
        if let Some(p) = out.placement {
            assert!(
                inst.problem.check(&p).unwrap() <= inst.capacity,
                "{}",
                inst.name
            );
        }
    }
}

/// One run of strategy `s` alone on `inst` under `cap`, without limits.
fn run_once(inst: &Instance, cap: u64, cfg: Config, s: super::ordering::Strategy) -> RunEnd {
    let mut memo = Memo::default();
    let mut used = 0;
    Search::new(inst, cap, cfg, (s.pivot, ranks(inst, &s.keys)), &mut memo).run(
        u64::MAX,
        &Limits::UNLIMITED.start(),
        &mut used,
    )
}

/// The peak of a run's placement (`local`: offsets of `inst`'s buffers), checked valid.
fn peak_of(p: &PlacementProblem, inst: &Instance, local: &[u64]) -> u64 {
    let mut offsets = vec![0; p.buffers.len()];
    for (k, &g) in inst.global.iter().enumerate() {
        offsets[g] = local[k];
    }
    p.check(&Placement { offsets }).expect("valid")
}

/// A run with a discrepancy limit skips children, so its failures prove nothing: it may find a
/// placement or give up, but it never calls a feasible capacity infeasible.
#[test]
fn a_discrepancy_limited_run_never_claims_infeasibility_of_a_feasible_capacity() {
    let mut gave_up = 0;
    for (p, opt) in tiny_with_optimum(23, 300) {
        let inst = Instance::new(&p, &[], u64::MAX);
        for limit in [0, 1] {
            for s in STRATEGIES {
                let cfg = Config {
                    discrepancies: limit,
                    ..ExactOptions::default().config()
                };
                match run_once(&inst, opt, cfg, s) {
                    RunEnd::Found(local) => assert!(peak_of(&p, &inst, &local) <= opt),
                    RunEnd::NodeLimit => gave_up += 1,
                    other => panic!("{p:?} at {opt}: {other:?}"),
                }
            }
        }
    }
    assert!(gave_up > 0, "no run was cut by its discrepancy limit");
}

/// Backjumping may skip a child that would have succeeded, so a run that jumped proves
/// nothing: at the optimum it finds a valid placement or gives up, below it it finds nothing,
/// and it is never wrong about infeasibility. Some runs do jump (they give up without limits).
#[test]
fn a_backjumping_run_is_never_wrong_and_proves_nothing_once_it_jumped() {
    let (mut gave_up, mut proved) = (0, 0);
    for (p, opt) in tiny_with_optimum(29, 300) {
        let inst = Instance::new(&p, &[], u64::MAX);
        for cap in [opt, opt - 1] {
            for s in STRATEGIES {
                let cfg = Config {
                    backjump: true,
                    ..ExactOptions::default().config()
                };
                match run_once(&inst, cap, cfg, s) {
                    RunEnd::Found(local) => {
                        assert_eq!(cap, opt, "{p:?}: a placement under the optimum");
                        assert!(peak_of(&p, &inst, &local) <= opt);
                    }
                    RunEnd::Infeasible => {
                        assert!(cap < opt, "{p:?}: the optimum {opt} called infeasible");
                        proved += 1;
                    }
                    RunEnd::NodeLimit => gave_up += 1,
                    RunEnd::TimeLimit => panic!("{p:?} at {cap}: no time limit was set"),
                }
            }
        }
    }
    assert!(gave_up > 0, "no run jumped over a node");
    assert!(proved > 0, "no run proved a capacity infeasible");
}

/// Located failures fire in backjumping runs on generated fits (nodes fail on a window
/// where an earlier subtree failed), and what such a run places is still valid. In tests,
/// every look-up also fingerprints its window from scratch and asserts that the key the
/// search kept up to date, change by change, is the same.
#[test]
fn located_failures_fail_nodes_of_backjumping_runs_and_keep_placements_valid() {
    use crate::generate::{generate, HardSpec, Variant};
    let mut hits = 0;
    for seed in 0..6u64 {
        let g = generate(&HardSpec::challenging(seed, 120, Variant::Fits));
        let inst = Instance::new(&g.problem, &[], u64::MAX);
        for s in STRATEGIES {
            let cfg = Config {
                backjump: true,
                located: true,
                ..ExactOptions::default().config()
            };
            let mut memo = Memo::default();
            let mut used = 0;
            let mut search = Search::new(
                &inst,
                g.capacity,
                cfg,
                (s.pivot, ranks(&inst, &s.keys)),
                &mut memo,
            );
            let end = search.run(20_000, &Limits::UNLIMITED.start(), &mut used);
            hits += search.located_hits();
            match end {
                RunEnd::Found(local) => assert!(peak_of(&g.problem, &inst, &local) <= g.capacity),
                RunEnd::NodeLimit => {}
                other => panic!("{}: {other:?} on a fitting instance", g.name),
            }
        }
    }
    assert!(hits > 0, "no located failure fired");
}

/// Above LOAD the schedule opens with discrepancy passes; on one thread or two the answer and
/// the node count stay the same.
#[test]
fn discrepancy_passes_are_deterministic_on_two_threads() {
    use crate::generate::{generate, HardSpec, Variant};
    let with = |threads: usize| ExactOptions {
        threads,
        ..node_capped(60_000)
    };
    for seed in 0..8u64 {
        let inst = generate(&HardSpec::challenging(seed, 80, Variant::Fits));
        let cap = inst.capacity + inst.capacity / 40;
        let one = solve(&inst.problem, cap, &[], &with(1));
        let two = solve(&inst.problem, cap, &[], &with(2));
        assert_eq!(
            (one.status, &one.placement, one.nodes),
            (two.status, &two.placement, two.nodes),
            "{}",
            inst.name
        );
        if let Some(placement) = &one.placement {
            let capped = PlacementProblem {
                buffers: inst.problem.buffers.clone(),
                capacity: Some(cap),
            };
            assert!(capped.check(placement).is_ok(), "{}", inst.name);
        }
    }
}

/// Each member of the rotation alone (the pivot-free `TWA` member re-ranks every piece of a
/// decomposition) is a complete search: it agrees with brute force below, at and above the
/// optimum.
#[test]
fn every_strategy_alone_agrees_with_brute_force() {
    for (p, opt) in tiny_with_optimum(31, 200) {
        for k in 0..super::strategy_count() {
            let o = ExactOptions {
                only_strategy: Some(k),
                ..ExactOptions::with_limits(Limits::UNLIMITED)
            };
            for cap in [opt - 1, opt, opt + 1] {
                agrees(&p, cap, &[], opt, &o);
            }
        }
    }
}

/// The pivot-free member re-ranks the pieces of a decomposition; on planted packings (which
/// fall apart into pieces as they are placed) it fits the rectangle they were cut from.
#[test]
fn the_reranking_member_fits_planted_packings_in_their_rectangle() {
    assert_eq!(super::STRATEGIES[1].pivot, super::ordering::Pivot::Preorder);
    for seed in 0..20 {
        let p = planted(seed, 64, 1 << 12, 40);
        let load = 1 << 12;
        let o = ExactOptions {
            only_strategy: Some(1),
            ..node_capped(2_000_000)
        };
        let out = solve(&p, load, &[], &o);
        assert_eq!(out.status, ExactStatus::Optimal, "seed {seed}");
        let placement = out.placement.expect("placed");
        assert!(p.check(&placement).unwrap() <= load, "seed {seed}");
    }
}

/// The incremental checks (only touched sections, a node failing with its blocks) are a
/// speed-up only: with every check over the whole piece and every child tried, each member
/// alone and the rotation visit the same nodes and find the same placements.
#[test]
fn incremental_checks_visit_the_same_nodes_as_full_checks() {
    use super::search::FULL_CHECKS;
    use crate::generate::{generate, HardSpec, Variant};
    let mut problems: Vec<PlacementProblem> = (0..8u64)
        .map(|seed| generate(&HardSpec::challenging(seed, 60, Variant::Fits)).problem)
        .collect();
    problems.extend((0..4u64).map(|seed| planted(seed, 30, 200, 60)));
    let mut searched = 0;
    for (i, p) in problems.iter().enumerate() {
        for only_strategy in [None, Some(0), Some(1), Some(2), Some(3)] {
            let o = ExactOptions {
                threads: 1,
                only_strategy,
                ..node_capped(20_000)
            };
            let run = |full: bool| {
                FULL_CHECKS.with(|f| f.set(full));
                let out = solve(p, p.load(), &[], &o);
                FULL_CHECKS.with(|f| f.set(false));
                (out.status, out.placement, out.nodes)
            };
            let (fast, full) = (run(false), run(true));
            assert_eq!(fast, full, "instance {i}, strategy {only_strategy:?}");
            searched += u64::from(fast.2 > 100);
        }
    }
    assert!(searched > 10, "too few runs searched more than 100 nodes");
}

/// A generated 250-buffer instance (the suite's `hard-250-fits-2`) that the canonical search
/// does not place at LOAD in ten million nodes: the rotation places it within a million once
/// the learning member joins, and fails without that member.
#[test]
fn the_learning_member_places_a_packing_the_canonical_search_misses() {
    use crate::generate::{generate, HardSpec, Variant};
    let inst = generate(&HardSpec::challenging(2, 250, Variant::Fits));
    let with = |learning: bool| ExactOptions {
        learning,
        ..node_capped(1_000_000)
    };
    let out = solve(&inst.problem, inst.capacity, &[], &with(true));
    assert_eq!(out.status, ExactStatus::Optimal, "{} nodes", out.nodes);
    let placement = out.placement.expect("a placement comes with Optimal");
    assert!(inst.problem.check(&placement).unwrap() <= inst.capacity);
    let without = solve(&inst.problem, inst.capacity, &[], &with(false));
    assert_eq!(without.status, ExactStatus::Timeout);
}

/// Alone, each learning member places a 250-buffer instance in a few thousand steps (the
/// activity member `hard-250-fits-2`, the bottom-left member `hard-250-fits-27`), proves a
/// capacity below LOAD infeasible at once, and its runs are deterministic.
#[test]
fn each_learning_member_alone_places_and_refutes() {
    use crate::generate::{generate, HardSpec, Variant};
    let first_learner = super::ordering::STRATEGIES.len();
    assert_eq!(super::strategy_count(), first_learner + 2);
    for (member, seed) in [(first_learner, 2), (first_learner + 1, 27)] {
        let alone = ExactOptions {
            only_strategy: Some(member),
            ..node_capped(super::LEARNING_STEP_NODES * 20_000)
        };
        let inst = generate(&HardSpec::challenging(seed, 250, Variant::Fits));
        let first = solve(&inst.problem, inst.capacity, &[], &alone);
        assert_eq!(first.status, ExactStatus::Optimal, "member {member}");
        let again = solve(&inst.problem, inst.capacity, &[], &alone);
        assert_eq!(
            (&first.placement, first.nodes),
            (&again.placement, again.nodes)
        );
        let below = generate(&HardSpec::challenging(seed, 250, Variant::BelowLoad));
        let out = solve(&below.problem, below.capacity, &[], &alone);
        assert_eq!(out.status, ExactStatus::Infeasible, "member {member}");
    }
}

/// The two learning members branch differently: alone, the activity member does not place
/// `hard-250-fits-27` within the steps in which the bottom-left one does (above), so the
/// rotation gains from having both.
#[test]
fn the_learning_members_place_different_instances() {
    use crate::generate::{generate, HardSpec, Variant};
    let inst = generate(&HardSpec::challenging(27, 250, Variant::Fits));
    let alone = |member: usize| ExactOptions {
        only_strategy: Some(member),
        ..node_capped(super::LEARNING_STEP_NODES * 20_000)
    };
    let first_learner = super::ordering::STRATEGIES.len();
    let activity = solve(&inst.problem, inst.capacity, &[], &alone(first_learner));
    let bottom_left = solve(&inst.problem, inst.capacity, &[], &alone(first_learner + 1));
    assert_eq!(bottom_left.status, ExactStatus::Optimal);
    assert_eq!(activity.status, ExactStatus::Timeout);
}

/// Once the learning members join, two threads still change neither the answer nor the node
/// count: every run starts with the memo it has on one thread, whichever thread takes its
/// lane (the lanes run well past the members' first runs within a million nodes here).
#[test]
fn two_threads_agree_once_the_learning_members_join() {
    use crate::generate::{generate, HardSpec, Variant};
    for (seed, variant) in [(2, Variant::Fits), (7, Variant::Grown(3))] {
        let inst = generate(&HardSpec::challenging(seed, 250, variant));
        let nodes = threads_agree(&inst, 1_000_000);
        // Rounds of 250 · 2^r nodes per member: the learning members' first runs come in
        // round 8 (575,000 and 639,000 nodes by their ends); the grown variant, which used to
        // run to the budget, is answered at 969,151 nodes since the backjumping rounds.
        assert!(
            nodes > 300_000,
            "{}: the learning member never ran",
            inst.name
        );
    }
}

/// The lanes on two threads: each lane runs in schedule order and carries its memo from run
/// to run whichever thread takes it, each learning lane runs on its own thread only, both
/// threads take runs, and no run starts after an answer while everything before it runs.
#[test]
fn lanes_keep_their_order_and_memos_across_two_threads() {
    use super::{LANES, LEARNING_LANE};
    use std::sync::Mutex;
    assert_eq!(LANES, 4);
    let runs: [Vec<(u64, u64)>; LANES] =
        std::array::from_fn(|lane| (0..12).map(|i| (4 * i + lane as u64, 1)).collect());
    let lanes = Lanes::new(runs, Default::default(), [u64::MAX; LANES]);
    let answer = AtomicU64::new(u64::MAX);
    let log = Mutex::new(Vec::new());
    let job = |learner: usize| {
        let (answer, log) = (&answer, &log);
        move |r: u64, _: u64, _: u64, memo: &mut Memo| {
            let known = answer.load(Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(5));
            let states = memo.len();
            memo.insert(u128::from(r));
            if r == 20 {
                answer.fetch_min(r, Ordering::Relaxed);
            }
            log.lock().unwrap().push((r, learner, states, known));
            RunReport {
                index: r,
                end: RunEnd::NodeLimit,
                nodes: 1,
                trace: SearchTrace::default(),
                memo: Some(states),
            }
        }
    };
    let (mine, theirs) = std::thread::scope(|s| {
        let other = s.spawn(|| lanes.work(LEARNING_LANE, &answer, job(LEARNING_LANE)));
        let mine = lanes.work(LEARNING_LANE + 1, &answer, job(LEARNING_LANE + 1));
        (mine, other.join().unwrap())
    });
    let log = log.into_inner().unwrap();
    assert!(
        !mine.is_empty() && !theirs.is_empty(),
        "one thread did all the work"
    );
    // Every run up to the answer; a run after it only when it started before the answer
    // was known (the schedule's runs then stop at their next check).
    let mut ran: Vec<u64> = log.iter().map(|&(r, ..)| r).filter(|&r| r <= 20).collect();
    ran.sort_unstable();
    assert_eq!(
        ran,
        (0..=20).collect::<Vec<_>>(),
        "every run up to the answer"
    );
    assert!(
        log.iter().all(|&(r, _, _, known)| r <= known),
        "a run started after the answer"
    );
    for lane in 0..LANES as u64 {
        let seen: Vec<(u64, usize)> = log
            .iter()
            .filter(|&&(r, ..)| r % 4 == lane)
            .map(|&(r, _, states, _)| (r, states))
            .collect();
        let expected: Vec<(u64, usize)> =
            (0..seen.len()).map(|i| (4 * i as u64 + lane, i)).collect();
        assert_eq!(seen, expected, "lane {lane}: schedule order, one memo");
    }
    // A learning lane's runs on its own thread only.
    assert!(log
        .iter()
        .all(|&(r, learner, ..)| r % 4 < 2 || r % 4 == learner as u64));
}

/// A tiny instance whose lifetimes come from a few shared ones, so that blocks form.
fn tiny_in_columns(rng: &mut Rng) -> PlacementProblem {
    const LIVES: [(u64, u64); 5] = [(0, 2), (2, 4), (0, 4), (1, 3), (2, 3)];
    let n = 2 + rng.below(6) as usize;
    PlacementProblem::new(
        (0..n)
            .map(|_| {
                let (s, e) = LIVES[rng.below(LIVES.len() as u64) as usize];
                Buffer {
                    lifetime: Lifetime::new(s, e),
                    size: 1 + rng.below(3),
                    alignment: [1, 1, 2][rng.below(3) as usize],
                }
            })
            .collect(),
    )
}

#[test]
fn blocks_never_change_an_answer_on_tiny_instances_of_shared_lifetimes() {
    let mut rng = Rng::new(29);
    let o = node_capped(1 << 40);
    let mut merged = 0;
    for _ in 0..300 {
        let p = tiny_in_columns(&mut rng);
        merged += usize::from(super::blocks::Blocks::of(&p).is_some());
        let opt = brute_force(&p, &[]);
        for cap in [opt - 1, opt, opt + 1] {
            agrees(&p, cap, &[], opt, &o);
        }
    }
    assert!(merged > 200, "only {merged} of 300 instances formed blocks");
}

/// `hard-100-fits-71`: the buffers' rotation without located failures does not place it
/// within four million nodes; its blocks (glued back pieces of the cut) place it within the
/// share they get. (With located failures the buffers' rotation places it too.)
/// `fixed` with no offset in it is the same question as no `fixed` at all: same answer, same
/// nodes (it once turned the blocks off, and `hard-100-fits-71` needs them, above).
#[test]
fn a_pin_list_that_pins_nothing_asks_the_same_question_as_none() {
    use crate::generate::{generate, HardSpec, Variant};
    let inst = generate(&HardSpec::challenging(71, 100, Variant::Fits));
    let opts = ExactOptions {
        located_failures: false,
        ..node_capped(4_000_000)
    };
    let none = solve(&inst.problem, inst.capacity, &[], &opts);
    let free = vec![None; inst.problem.buffers.len()];
    let unpinned = solve(&inst.problem, inst.capacity, &free, &opts);
    assert_eq!(none.status, ExactStatus::Optimal);
    assert_eq!(
        (unpinned.status, unpinned.nodes, unpinned.placement),
        (none.status, none.nodes, none.placement)
    );
}

#[test]
fn the_blocks_place_a_cut_instance_the_buffers_alone_miss() {
    use crate::generate::{generate, HardSpec, Variant};
    let inst = generate(&HardSpec::challenging(71, 100, Variant::Fits));
    let budget = 4_000_000;
    let opts = ExactOptions {
        located_failures: false,
        ..node_capped(budget)
    };
    let with = solve(&inst.problem, inst.capacity, &[], &opts);
    let without = solve(
        &inst.problem,
        inst.capacity,
        &[],
        &ExactOptions {
            blocks: false,
            ..opts.clone()
        },
    );
    let located = solve(
        &inst.problem,
        inst.capacity,
        &[],
        &ExactOptions {
            blocks: false,
            ..node_capped(budget)
        },
    );
    assert_eq!(
        located.status,
        ExactStatus::Optimal,
        "{} nodes",
        located.nodes
    );
    assert_eq!(with.status, ExactStatus::Optimal, "{} nodes", with.nodes);
    assert_eq!(without.status, ExactStatus::Timeout);
    assert!(with.nodes < budget / 4 + 256 * 100, "{} nodes", with.nodes);
    let placed = with.placement.expect("a placement");
    assert_eq!(inst.problem.check(&placed), Ok(inst.capacity));
}

#[test]
fn one_member_alone_and_fixed_buffers_never_turn_to_blocks() {
    use crate::generate::{generate, HardSpec, Variant};
    let inst = generate(&HardSpec::challenging(71, 100, Variant::Fits));
    let capped = node_capped(1_000_000);
    assert!(super::blocks_of(&inst.problem, &[], &capped).is_some());
    let alone = ExactOptions {
        only_strategy: Some(0),
        ..capped.clone()
    };
    assert!(super::blocks_of(&inst.problem, &[], &alone).is_none());
    let mut fixed = vec![None; inst.problem.buffers.len()];
    fixed[0] = Some(inst.witness.offsets[0]);
    assert!(super::blocks_of(&inst.problem, &fixed, &capped).is_none());
    let unlimited = ExactOptions::default();
    assert!(super::blocks_of(&inst.problem, &[], &unlimited).is_none());
}

/// Solves `inst` with `opts` on one thread and on two, requires the same status, placement,
/// node count and trace (its work included), and the same memo size at the start of every
/// run (each run sees the states of its side's runs before it, whichever thread ran them),
/// and returns the outcome on one thread.
fn agree_on_threads(inst: &crate::generate::HardInstance, opts: &ExactOptions) -> ExactOutcome {
    let with = |threads: usize| ExactOptions {
        threads,
        ..opts.clone()
    };
    let runs = || super::RUN_MEMOS.with(|r| r.take());
    let one = solve(&inst.problem, inst.capacity, &[], &with(1));
    let one_runs = runs();
    let two = solve(&inst.problem, inst.capacity, &[], &with(2));
    assert_eq!(
        (one.status, &one.placement, one.nodes, one.trace),
        (two.status, &two.placement, two.nodes, two.trace),
        "{}",
        inst.name
    );
    assert_eq!(
        one_runs,
        runs(),
        "{}: memo sizes at the runs' starts",
        inst.name
    );
    one
}

/// A work limit stops a search whose node cap alone lets it run on, at the same point on one
/// thread and on two, and bounds the work of the runs counted: each of the two search lanes
/// may do half of it, plus what a run did since its last node.
#[test]
fn a_work_limit_stops_the_search_at_the_same_point_on_one_thread_and_two() {
    use crate::generate::{generate, HardSpec, Variant};
    let limit = 30_000_000;
    for seed in [3u64, 8] {
        let inst = generate(&HardSpec::challenging(seed, 450, Variant::Fits));
        let nodes_only = agree_on_threads(&inst, &node_capped(200_000));
        let capped = agree_on_threads(
            &inst,
            &ExactOptions {
                work_limit: Some(limit),
                ..node_capped(200_000)
            },
        );
        assert_eq!(capped.status, ExactStatus::Timeout, "{}", inst.name);
        assert!(
            capped.nodes < nodes_only.nodes,
            "{}: {} nodes with the work limit, {} without",
            inst.name,
            capped.nodes,
            nodes_only.nodes
        );
        assert!(
            capped.trace.work < nodes_only.trace.work,
            "{}: {:?} {:?}",
            inst.name,
            capped.trace,
            nodes_only.trace
        );
        // Each lane stops once its half is used, overshooting by what a run did since its
        // last node.
        assert!(
            (limit / 2..=2 * limit).contains(&capped.trace.work),
            "{}: {} work units counted under a limit of {limit}",
            inst.name,
            capped.trace.work
        );
    }
}

/// Without a work limit, the work is counted but changes nothing: the same answer and node
/// count as with a limit no search reaches (on instances whose learning model is within
/// `LEARNING_WORK_MAX_ENTRIES`, where the learning members join either way).
#[test]
fn a_work_limit_no_search_reaches_changes_nothing() {
    use crate::generate::{generate, HardSpec, Variant};
    for seed in [1u64, 2] {
        let inst = generate(&HardSpec::challenging(seed, 100, Variant::Fits));
        let free = solve(&inst.problem, inst.capacity, &[], &node_capped(100_000));
        let far = solve(
            &inst.problem,
            inst.capacity,
            &[],
            &ExactOptions {
                work_limit: Some(u64::MAX / 2),
                ..node_capped(100_000)
            },
        );
        assert_eq!(
            (free.status, &free.placement, free.nodes, free.trace),
            (far.status, &far.placement, far.nodes, far.trace),
            "{}",
            inst.name
        );
        assert!(free.trace.work > 0, "{}: no work counted", inst.name);
    }
}

/// The minimisation shares a work limit over its questions: it stops earlier than with its
/// node cap alone, never worse than its start, and the same on one thread and on two.
#[test]
fn a_work_limited_minimisation_is_deterministic_and_stops_earlier() {
    use crate::generate::{generate, HardSpec, Variant};
    let inst = generate(&HardSpec::challenging(5, 450, Variant::Fits));
    let p = PlacementProblem::new(inst.problem.buffers.clone());
    let start = crate::placement::portfolio(&p, &Limits::UNLIMITED)
        .unwrap()
        .placement;
    let run = |threads: usize, work_limit: Option<u64>| {
        minimise(
            &p,
            &start,
            &ExactOptions {
                threads,
                work_limit,
                ..node_capped(200_000)
            },
        )
    };
    let (one, two) = (run(1, Some(30_000_000)), run(2, Some(30_000_000)));
    assert_eq!(
        (&one.placement, one.peak, one.lower_bound, one.nodes),
        (&two.placement, two.peak, two.lower_bound, two.nodes)
    );
    assert!(one.peak <= p.check(&start).unwrap());
    let free = run(2, None);
    assert!(
        one.nodes < free.nodes,
        "{} nodes with the work limit, {} without",
        one.nodes,
        free.nodes
    );
}

/// With a work limit, the learning members sit out on a model too wide for their steps to be
/// weighed (more than `LEARNING_WORK_MAX_ENTRIES` task entries), and join as before on the
/// generated instances and without a limit.
#[test]
fn with_a_work_limit_the_learning_members_sit_out_on_wide_models_only() {
    use crate::generate::{generate, HardSpec, Variant};
    // 400 buffers of 300 steps each, starting anywhere in 1,000: many maximal cliques of
    // about 120 (as when every op reads any of the last few hundred tensors).
    let mut rng = Rng::new(9);
    let wide = PlacementProblem::new(
        (0..400)
            .map(|_| {
                let lower = rng.below(1000);
                buf(lower, lower + 300, 1 + rng.below(64))
            })
            .collect(),
    );
    let wide = Instance::new(&wide, &[], u64::MAX);
    assert!(learning::Learning::entries(&wide) > super::LEARNING_WORK_MAX_ENTRIES);
    let limited = ExactOptions {
        work_limit: Some(1 << 40),
        ..ExactOptions::default()
    };
    assert!(!super::learners_join(&wide, &limited));
    assert!(super::learners_join(&wide, &ExactOptions::default()));
    let cut = generate(&HardSpec::challenging(1, 1000, Variant::Fits));
    let cut = Instance::new(&cut.problem, &[], u64::MAX);
    assert!(super::learners_join(&cut, &limited));
}

/// A lane that has used its work runs no more, whichever thread would take it; the other
/// lanes run on, and each run is given what its lane has left.
#[test]
fn a_lane_that_has_used_its_work_runs_no_more() {
    use super::{LANES, LEARNING_LANE};
    use std::sync::Mutex;
    let runs: [Vec<(u64, u64)>; LANES] =
        std::array::from_fn(|lane| (0..6).map(|i| (4 * i + lane as u64, 1)).collect());
    // Lane 0 may do 25 units, lane 1 without limit; each run does 10.
    let mut left = [u64::MAX; LANES];
    left[0] = 25;
    let lanes = Lanes::new(runs, Default::default(), left);
    let answer = AtomicU64::new(u64::MAX);
    let log = Mutex::new(Vec::new());
    let job = |log: &'static Mutex<Vec<(u64, u64)>>| {
        move |r: u64, _: u64, work_left: u64, _: &mut Memo| {
            log.lock().unwrap().push((r, work_left));
            RunReport {
                index: r,
                end: RunEnd::NodeLimit,
                nodes: 1,
                trace: SearchTrace {
                    work: 10,
                    ..SearchTrace::default()
                },
                memo: Some(0),
            }
        }
    };
    let log: &'static Mutex<Vec<(u64, u64)>> = Box::leak(Box::new(log));
    std::thread::scope(|s| {
        let other = s.spawn(|| lanes.work(LEARNING_LANE, &answer, job(log)));
        lanes.work(LEARNING_LANE + 1, &answer, job(log));
        other.join().unwrap();
    });
    let mut log = log.lock().unwrap().clone();
    log.sort_unstable();
    let lane0: Vec<(u64, u64)> = log.iter().copied().filter(|(r, _)| r % 4 == 0).collect();
    assert_eq!(
        lane0,
        vec![(0, 25), (4, 15), (8, 5)],
        "lane 0 stops once its 25 units are used"
    );
    assert_eq!(
        log.iter().filter(|(r, _)| r % 4 == 1).count(),
        6,
        "lane 1 runs on"
    );
}
