//! Dynamic batching into a reservation (issue 17, point 3: utilisation of the P99 arena).
//!
//! # Idea
//!
//! A reservation sized for the 0.99 quantile of a skewed request distribution sits mostly
//! idle when each request runs alone: most requests are small, and
//! [`super::Reservation::average_utilisation`] reports exactly that (23 % on the bundled
//! sample). Inference servers therefore merge queued requests along the batch symbol into one
//! run (Triton's and TorchServe's dynamic batchers). This module simulates that batcher over
//! the symbolic plan and reports the utilisation of the reserved arena per run.
//!
//! - **Capacity.** `C` = the largest value `v` of the batch symbol such that every value from
//!   the symbol's minimum up to `v` has an instantiated peak within the reservation
//!   (a prefix: with pieces, peaks need not be monotone).
//! - **Stream.** `requests` requests drawn from the histogram's weights with a seeded
//!   SplitMix64 generator (deterministic: the same seed gives the same stream).
//! - **Batcher.** A queue holds up to `window` waiting requests, refilled from the stream in
//!   arrival order. A run takes the oldest waiting request, then every other waiting request,
//!   oldest first, that still fits (`sum ≤ C`): first fit by arrival. A request above `C` is
//!   split first: `⌊b / C⌋` runs at `C` alone, the remainder (padded up to the symbol's
//!   minimum) joins the queue as a request.
//! - **Utilisation** of a run = instantiated peak at the merged value ÷ reserved bytes;
//!   [`BatchingReport::average_utilisation`] is the plain mean over runs (every run holds the
//!   arena once; weighting by run time, which grows with the batch, would only raise it).
//!
//! # Complexity
//!
//! `O(range)` instantiations for the capacity and the peak table (each `O(buffers + edges)`),
//! then `O(requests × window)` for the simulation.
//!
//! # Reference
//!
//! Seed 001 §3.1 (P99 pre-allocation with an elastic reserve, ≥ 95 % utilisation); the
//! dynamic batcher of NVIDIA Triton Inference Server (`max_queue_delay`, preferred sizes).

use super::plan::SymbolicPlan;
use super::reserve::Reservation;
use super::{Binding, SymbolicError};
use memplan_solver::generate::SplitMix64;
use serde::Serialize;
use std::collections::VecDeque;

/// The largest queue the batcher simulates ([`BatchingOptions::window`]): merging scans the
/// queue once per run, so the simulation costs up to `requests × window` steps.
pub const MAX_BATCHING_WINDOW: usize = 1024;

/// The longest simulated stream ([`BatchingOptions::requests`]): a million requests pin the
/// per-run averages to a few parts in a thousand, in about a second at the largest window.
pub const MAX_BATCHING_REQUESTS: usize = 1_000_000;

/// The batcher's switches (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchingOptions {
    /// How many requests may wait in the queue (1 ..= [`MAX_BATCHING_WINDOW`]; 1 = no
    /// merging). Default 16.
    pub window: usize,
    /// Requests in the simulated stream (1 ..= [`MAX_BATCHING_REQUESTS`]). Default 10,000.
    pub requests: usize,
    /// The stream's seed. Default 0.
    pub seed: u64,
}

impl Default for BatchingOptions {
    fn default() -> Self {
        BatchingOptions {
            window: 16,
            requests: 10_000,
            seed: 0,
        }
    }
}

/// What the simulated batcher did with the stream (module doc).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchingReport {
    /// The merged symbol.
    pub symbol: String,
    /// The queue size used.
    pub window: usize,
    /// Requests simulated.
    pub requests: usize,
    /// The seed of the stream.
    pub seed: u64,
    /// The largest value of `symbol` that runs within the reservation (capacity `C`).
    pub capacity: u64,
    /// Runs of the plan (each at a merged value ≤ `capacity`).
    pub runs: usize,
    /// Requests larger than the capacity, split before merging.
    pub split_requests: usize,
    /// Mean merged value of `symbol` per run.
    pub average_value: f64,
    /// Mean number of requests (or request parts) per run.
    pub average_requests_per_run: f64,
    /// Mean over runs of the instantiated peak ÷ reserved bytes.
    pub average_utilisation: f64,
    /// The smallest utilisation of a run.
    pub min_utilisation: f64,
}

/// Simulates dynamic batching of `samples` (the distribution the reservation was made for;
/// every binding names `symbol`, and the other symbols are the same in all) into `reservation` under `plan` (module doc). Errors: an undeclared
/// symbol, a window or request count of 0, a histogram without positive weight, or a
/// reservation in which not even the symbol's minimum fits.
pub fn simulate_batching(
    plan: &SymbolicPlan,
    samples: &[(Binding, f64)],
    reservation: &Reservation,
    symbol: &str,
    options: &BatchingOptions,
) -> Result<BatchingReport, SymbolicError> {
    let err = |m: String| SymbolicError::Reserve(m);
    let range = *plan.symbols().get(symbol).ok_or_else(|| {
        err(format!(
            "batching symbol {symbol:?} is not declared (declared: {})",
            plan.symbols()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    if options.window == 0 || options.requests == 0 {
        return Err(err(format!(
            "batching needs a window and a request count of at least 1 (window {}, requests {})",
            options.window, options.requests
        )));
    }
    if options.window > MAX_BATCHING_WINDOW || options.requests > MAX_BATCHING_REQUESTS {
        return Err(err(format!(
            "batching simulates a window of at most {MAX_BATCHING_WINDOW} and at most \
             {MAX_BATCHING_REQUESTS} requests (window {}, requests {})",
            options.window, options.requests
        )));
    }
    // Every sample binds `symbol`; requests merge only when their other symbols agree, so the
    // other symbols must be the same in every sample (runs keep them).
    let others = |b: &Binding| {
        let mut o = b.0.clone();
        o.remove(symbol);
        o
    };
    let first_others = samples.first().map(|(b, _)| others(b));
    let mut values = Vec::with_capacity(samples.len());
    let mut total = 0.0;
    for (b, w) in samples {
        let v = *b.0.get(symbol).ok_or_else(|| {
            err(format!(
                "binding {b} does not name the batching symbol {symbol:?}"
            ))
        })?;
        if first_others.as_ref() != Some(&others(b)) {
            return Err(err(format!(
                "binding {b}: batching merges requests along {symbol:?} only, so the other \
                 symbols must be the same in every sample; reserve without --batching, or one \
                 distribution per value of the others"
            )));
        }
        if !(w.is_finite() && *w >= 0.0) {
            return Err(err(format!(
                "binding {b} has weight {w}; weights are finite and >= 0"
            )));
        }
        if *w > 0.0 {
            total += w;
            values.push((v, total));
        }
    }
    let Some(base) = samples.first().map(|(b, _)| b.clone()) else {
        return Err(err("no samples to batch".into()));
    };
    if total <= 0.0 {
        return Err(err("no samples with a positive weight to batch".into()));
    }
    let reserved = reservation.reserved_bytes;
    // The peak table and the capacity: the longest prefix of values that fits.
    let mut peaks = Vec::new();
    for v in range.min..=range.max {
        let p = plan.peak_at(&base.clone().with(symbol, v))?;
        if p > reserved {
            break;
        }
        peaks.push(p);
    }
    if peaks.is_empty() {
        return Err(err(format!(
            "not even {symbol}={} fits the reservation of {reserved} B",
            range.min
        )));
    }
    let capacity = range.min + peaks.len() as u64 - 1;
    let peak_of = |v: u64| peaks[(v - range.min) as usize];
    let utilisation = |v: u64| {
        if reserved == 0 {
            1.0
        } else {
            peak_of(v) as f64 / reserved as f64
        }
    };

    let mut rng = SplitMix64::new(options.seed);
    let mut draw = || {
        let x = rng.unit() * total;
        let i = values.partition_point(|&(_, cum)| cum <= x);
        values[i.min(values.len() - 1)].0
    };
    let mut queue: VecDeque<u64> = VecDeque::with_capacity(options.window);
    let (mut drawn, mut runs, mut split_requests, mut parts) = (0usize, 0usize, 0usize, 0usize);
    let (mut sum_value, mut sum_util, mut min_util) = (0.0, 0.0, f64::INFINITY);
    // `times` runs of `v` merging `n` requests each.
    let mut record = |v: u64, n: usize, times: u64| {
        let u = utilisation(v);
        let k = usize::try_from(times).unwrap_or(usize::MAX);
        runs = runs.saturating_add(k);
        parts = parts.saturating_add(n.saturating_mul(k));
        sum_value += v as f64 * times as f64;
        sum_util += u * times as f64;
        min_util = f64::min(min_util, u);
    };
    loop {
        while queue.len() < options.window && drawn < options.requests {
            let mut v = draw();
            drawn += 1;
            if v > capacity {
                split_requests += 1;
                record(capacity, 1, v / capacity);
                v %= capacity;
                if v == 0 {
                    continue;
                }
                // A remainder below the symbol's minimum is padded up to it.
                v = v.max(range.min);
            }
            queue.push_back(v);
        }
        let Some(first) = queue.pop_front() else {
            break;
        };
        let mut sum = first;
        let mut n = 1;
        let mut i = 0;
        while i < queue.len() {
            if sum + queue[i] <= capacity {
                sum += queue[i];
                n += 1;
                queue.remove(i);
            } else {
                i += 1;
            }
        }
        record(sum, n, 1);
    }
    Ok(BatchingReport {
        symbol: symbol.to_string(),
        window: options.window,
        requests: options.requests,
        seed: options.seed,
        capacity,
        runs,
        split_requests,
        average_value: sum_value / runs.max(1) as f64,
        average_requests_per_run: parts as f64 / runs.max(1) as f64,
        average_utilisation: sum_util / runs.max(1) as f64,
        min_utilisation: if runs == 0 { 0.0 } else { min_util },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::PipelineOptions;
    use crate::symbolic::{plan_symbolic, reserve, SymbolicGraph};

    fn chain_plan() -> SymbolicPlan {
        // Two activations of 1000·B bytes each plus a fixed 4000-byte weight.
        let g = r#"{"format": "memplan-graph/1", "name": "chain", "alignment": 1,
          "symbols": {"B": {"min": 1, "max": 32}},
          "tensors": [
            {"name": "w", "size": 4000, "kind": "weight"},
            {"name": "x", "size": "1000*B", "kind": "input"},
            {"name": "h", "size": "1000*B", "kind": "activation"},
            {"name": "y", "size": "1000*B", "kind": "output"}],
          "ops": [
            {"name": "a", "type": "relu", "inputs": ["x", "w"], "outputs": ["h"]},
            {"name": "b", "type": "relu", "inputs": ["h"], "outputs": ["y"]}]}"#;
        let sg = SymbolicGraph::parse(g).unwrap();
        let opts = PipelineOptions {
            effort: 0,
            ..PipelineOptions::default()
        };
        plan_symbolic(&sg, &opts).unwrap()
    }

    fn geometric() -> Vec<(Binding, f64)> {
        (1..=32)
            .map(|b| {
                (
                    Binding::new().with("B", b),
                    1000.0 * 0.8f64.powi(b as i32 - 1),
                )
            })
            .collect()
    }

    #[test]
    fn merging_small_requests_fills_the_reservation_far_better_than_running_them_alone() {
        let plan = chain_plan();
        let samples = geometric();
        let r = reserve(&plan, &samples, 0.99, Some("B")).unwrap();
        let alone = simulate_batching(
            &plan,
            &samples,
            &r,
            "B",
            &BatchingOptions {
                window: 1,
                ..BatchingOptions::default()
            },
        )
        .unwrap();
        let merged =
            simulate_batching(&plan, &samples, &r, "B", &BatchingOptions::default()).unwrap();
        assert!(alone.average_utilisation < 0.5, "{alone:?}");
        assert!(merged.average_utilisation > 0.9, "{merged:?}");
        assert!((alone.average_requests_per_run - 1.0).abs() < 1e-9);
        assert!(merged.average_requests_per_run > 2.0);
        assert!(merged.min_utilisation > 0.0 && merged.min_utilisation <= 1.0);
        // Every run fits: the merged value never exceeds the capacity.
        assert!(merged.average_value <= merged.capacity as f64);
        assert!(merged.capacity >= r.quantile_binding.0["B"]);
    }

    #[test]
    fn the_same_seed_gives_the_same_report_and_another_seed_a_different_stream() {
        let plan = chain_plan();
        let samples = geometric();
        let r = reserve(&plan, &samples, 0.9, Some("B")).unwrap();
        let o = BatchingOptions {
            requests: 500,
            ..BatchingOptions::default()
        };
        let a = simulate_batching(&plan, &samples, &r, "B", &o).unwrap();
        let b = simulate_batching(&plan, &samples, &r, "B", &o).unwrap();
        assert_eq!(a, b);
        let c =
            simulate_batching(&plan, &samples, &r, "B", &BatchingOptions { seed: 7, ..o }).unwrap();
        assert_ne!(
            a.runs as f64 + a.average_utilisation,
            c.runs as f64 + c.average_utilisation
        );
    }

    #[test]
    fn requests_above_the_capacity_are_split_into_full_runs() {
        let plan = chain_plan();
        // All the weight at B=1 reserves for B=1 alone; a rare B=32 must be split 32 ways.
        let samples = vec![
            (Binding::new().with("B", 1), 1000.0),
            (Binding::new().with("B", 32), 1.0),
        ];
        let r = reserve(&plan, &samples, 0.99, Some("B")).unwrap();
        let rep = simulate_batching(&plan, &samples, &r, "B", &BatchingOptions::default()).unwrap();
        assert_eq!(rep.capacity, 1);
        assert!((rep.average_utilisation - 1.0).abs() < 1e-9, "{rep:?}");
        assert!(rep.split_requests > 0);
        assert_eq!(
            rep.runs,
            10_000 - rep.split_requests + 32 * rep.split_requests
        );
    }

    #[test]
    fn bad_batching_input_is_refused_with_a_message_naming_it() {
        let plan = chain_plan();
        let samples = geometric();
        let r = reserve(&plan, &samples, 0.99, Some("B")).unwrap();
        let e = simulate_batching(&plan, &samples, &r, "S", &BatchingOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"S\"") && e.contains("not declared"), "{e}");
        let e = simulate_batching(
            &plan,
            &samples,
            &r,
            "B",
            &BatchingOptions {
                window: 0,
                ..BatchingOptions::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("window 0"), "{e}");
        // Past the caps: refused (a window of usize::MAX used to abort on its allocation).
        for (window, requests) in [
            (usize::MAX, 10),
            (MAX_BATCHING_WINDOW + 1, 10),
            (16, MAX_BATCHING_REQUESTS + 1),
        ] {
            let opts = BatchingOptions {
                window,
                requests,
                seed: 0,
            };
            let e = simulate_batching(&plan, &samples, &r, "B", &opts)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("(window {window}, requests {requests})"))
                    && e.contains("at most"),
                "{e}"
            );
        }
        let at_caps = BatchingOptions {
            window: MAX_BATCHING_WINDOW,
            requests: 1000,
            seed: 0,
        };
        assert!(simulate_batching(&plan, &samples, &r, "B", &at_caps).is_ok());
    }
}
