//! Tests of the guarded solve ([`super`]) on models HiGHS solves normally: the answer is the
//! unguarded one, progress reaches the calling thread, and a raised flag is honoured. (A model
//! on which HiGHS overruns its limit is in `tests/highs_overrun.rs`.)

use super::super::{solve, MipOptions, MipStatus, Model, Watch};
use super::*;
use crate::limits::ProgressFn;
use std::sync::Mutex;

/// A covering knapsack: 30 binaries with weights and costs from a fixed formula, minimise the
/// cost of at least half the total weight; the warm start takes every item (feasible, dear).
fn knapsack() -> (Model, Vec<f64>) {
    let mut model = Model::new();
    let items: Vec<(f64, f64)> = (0..30u32)
        .map(|i| (f64::from(7 + (i * 37) % 23), f64::from(5 + (i * 53) % 29)))
        .collect();
    let cols: Vec<_> = items
        .iter()
        .map(|&(_, cost)| model.add_integer_column(cost, 0.0..=1.0))
        .collect();
    let half = items.iter().map(|&(w, _)| w).sum::<f64>() / 2.0;
    model.add_row(half.., cols.iter().zip(&items).map(|(&c, &(w, _))| (c, w)));
    (model, vec![1.0; items.len()])
}

#[test]
fn a_guarded_solve_answers_as_an_unguarded_one() {
    let options = MipOptions::default();
    let (model, start) = knapsack();
    let plain = solve(model, &options, &start, &Watch::NONE).unwrap();
    let (model, start) = knapsack();
    let limited = MipOptions {
        time_limit: Some(60.0),
        ..options
    };
    let guarded = solve(model, &limited, &start, &Watch::NONE).unwrap();
    assert_eq!(plain.status, MipStatus::Optimal);
    assert!(!plain.abandoned && !guarded.abandoned);
    assert_eq!(plain, guarded);
}

#[test]
fn progress_reaches_the_calling_thread_for_every_improving_solution() {
    let seen: std::sync::Arc<Mutex<Vec<(u64, u64, std::thread::ThreadId)>>> = Default::default();
    let log = std::sync::Arc::clone(&seen);
    let progress = ProgressFn::new(move |primal, dual| {
        log.lock()
            .unwrap()
            .push((primal, dual, std::thread::current().id()));
    });
    let watch = Watch {
        progress: Some(&progress),
        scale: 2.0,
        ..Watch::NONE
    };
    let (model, start) = knapsack();
    let solution = solve(model, &MipOptions::default(), &start, &watch).unwrap();
    let reports = seen.lock().unwrap().clone();
    assert!(!reports.is_empty(), "no improving solution reported");
    let here = std::thread::current().id();
    assert!(reports.iter().all(|&(_, _, t)| t == here));
    // Bytes are objective × scale, the dual bound capped at the primal, the primal falling.
    let best = solution.objective.unwrap();
    let &(last, dual, _) = reports.last().unwrap();
    assert_eq!(last, (best * 2.0) as u64);
    assert!(dual <= last);
    assert!(reports.windows(2).all(|w| w[1].0 <= w[0].0));
}

#[test]
fn a_flag_raised_before_a_guarded_solve_stops_it_at_once() {
    let flag = std::sync::atomic::AtomicBool::new(true);
    let watch = Watch {
        cancel: Some(&flag),
        ..Watch::NONE
    };
    let (model, start) = knapsack();
    let started = Instant::now();
    let solution = solve(model, &MipOptions::default(), &start, &watch).unwrap();
    assert!(started.elapsed() < STOP_GRACE + Duration::from_secs(1));
    // HiGHS either stops at its first interrupt check or, having solved the model before
    // one, answers in full: either way nothing wrong is claimed.
    match solution.status {
        MipStatus::Interrupt => {}
        MipStatus::Optimal => assert!(!solution.abandoned),
        other => panic!("{other:?}"),
    }
}
