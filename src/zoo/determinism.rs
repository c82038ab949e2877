//! Determinism checks: the same graph and options must give a byte-identical plan,
//! timing fields aside, on any machine and under any load. [`without_timing`] is the plan text
//! compared; [`BusyLoad`] keeps every core busy for a bounded time; [`plan_idle_and_loaded`]
//! plans a graph once at idle and once under that load and compares the two plans. Used by
//! `tests/determinism.rs` and the benchmarks' `--only determinism`.

use crate::graph::Graph;
use crate::pipeline::{self, Control, PipelineError, PipelineOptions, PipelineResult};
use crate::plan::Plan;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The plan's compact JSON with every timing field of its `stats` set to 0: `elapsed_ms` and
/// every field called `ms` or ending in `_ms`, at any depth (order heuristics, placers, exact
/// search, HiGHS models). Two runs of the same graph and options must give equal text.
pub fn without_timing(plan: &Plan) -> String {
    // Serialising plain data cannot fail; NaN becomes null, which compares equal as well.
    let mut v = serde_json::to_value(plan).unwrap_or(Value::Null);
    if let Some(stats) = v.get_mut("stats") {
        blank_timing(stats);
    }
    serde_json::to_string(&v).unwrap_or_default()
}

fn is_timing(key: &str) -> bool {
    key == "ms" || key.ends_with("_ms")
}

fn blank_timing(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                if is_timing(k) {
                    *x = Value::from(0);
                } else {
                    blank_timing(x);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(blank_timing),
        _ => {}
    }
}

/// The cores the OS reports, at least 2 (the threads a load needs to keep every core busy).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}

/// Threads that spin on every core until [`BusyLoad::stop`] (or drop), or until their own
/// time bound has passed: they never outlive it, whatever the caller does.
#[derive(Debug)]
pub struct BusyLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<u64>>,
}

impl BusyLoad {
    /// Starts `threads` spinning threads that stop by themselves after `max`.
    pub fn start(threads: usize, max: Duration) -> BusyLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let until = Instant::now() + max;
        let threads = (0..threads)
            .map(|seed| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || spin(&stop, until, seed as u64))
            })
            .collect();
        BusyLoad { stop, threads }
    }

    /// One spinning thread per core ([`cores`]).
    pub fn all_cores(max: Duration) -> BusyLoad {
        BusyLoad::start(cores(), max)
    }

    /// How many threads spin.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Stops the threads and waits for them.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            // A spinning thread cannot panic; a join error would only mean it did.
            let _ = t.join();
        }
    }
}

impl Drop for BusyLoad {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Integer work until `stop` is raised or `until` has passed; returns the work's result so
/// that the loop is not optimised away.
fn spin(stop: &AtomicBool, until: Instant, seed: u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    loop {
        for _ in 0..100_000 {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        x = std::hint::black_box(x);
        if stop.load(Ordering::Relaxed) || Instant::now() >= until {
            return x;
        }
    }
}

/// A graph planned at idle and under load.
#[derive(Debug, Clone)]
pub struct LoadComparison {
    /// The run at idle.
    pub idle: PipelineResult,
    /// The run while [`BusyLoad`] kept every core busy.
    pub loaded: PipelineResult,
    /// Wall time of the idle run (ms).
    pub idle_ms: f64,
    /// Wall time of the loaded run (ms).
    pub loaded_ms: f64,
    /// Whether the two plans are byte-identical after [`without_timing`].
    pub identical: bool,
}

/// Plans `graph` with `options` at idle, then again while `busy_threads` threads spin (bounded
/// by twice the options' time cap plus 10 s), and compares the plans without their timing.
pub fn plan_idle_and_loaded(
    graph: &Graph,
    options: &PipelineOptions,
    busy_threads: usize,
) -> Result<LoadComparison, PipelineError> {
    let t = Instant::now();
    let idle = pipeline::run(graph, options, &Control::default())?;
    let idle_ms = t.elapsed().as_secs_f64() * 1e3;
    let bound = Duration::from_secs_f64(2.0 * options.time_limit_s.clamp(0.0, 3600.0) + 10.0);
    let load = BusyLoad::start(busy_threads, bound);
    // Let the spinning threads reach the cores before the planner starts.
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    let loaded = pipeline::run(graph, options, &Control::default());
    let loaded_ms = t.elapsed().as_secs_f64() * 1e3;
    load.stop();
    let loaded = loaded?;
    let identical = without_timing(&idle.plan) == without_timing(&loaded.plan);
    Ok(LoadComparison {
        idle,
        loaded,
        idle_ms,
        loaded_ms,
        identical,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_fields_are_blanked_at_any_depth_and_nothing_else() {
        let g = Graph::parse(crate::graph::SAMPLE_JSON).unwrap();
        let r = pipeline::run(&g, &PipelineOptions::default(), &Control::default()).unwrap();
        let mut a = r.plan.clone();
        a.stats.elapsed_ms = 1.0;
        let mut b = r.plan.clone();
        b.stats.elapsed_ms = 2.0;
        for m in b.stats.order_members.iter_mut().chain(&mut b.stats.members) {
            m.ms += 7.0;
        }
        assert_eq!(without_timing(&a), without_timing(&b));
        b.stats.peak_bytes += 1;
        assert_ne!(without_timing(&a), without_timing(&b));
        assert!(!without_timing(&a).contains("\"elapsed_ms\":1"));
    }

    #[test]
    fn a_busy_load_stops_by_itself() {
        let t = Instant::now();
        let load = BusyLoad::start(2, Duration::from_millis(50));
        assert_eq!(load.threads(), 2);
        // Joining waits for the threads' own bound, not for a stop flag.
        for h in std::mem::take(&mut std::mem::ManuallyDrop::new(load).threads) {
            h.join().unwrap();
        }
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
