//! Small tools of the load test: latency percentiles, a seeded generator, and formatting.

use std::time::Duration;

/// The `p`-th percentile (nearest rank) of sorted latencies, in milliseconds (NaN when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

/// p50, p99 and max of `latencies` (sorted in place) as table cells in milliseconds.
pub fn latency_cells(latencies: &mut [Duration]) -> [String; 3] {
    latencies.sort();
    let cell = |ms: f64| {
        if ms.is_nan() {
            "–".to_string()
        } else {
            format!("{ms:.0}")
        }
    };
    [
        cell(percentile(latencies, 50.0)),
        cell(percentile(latencies, 99.0)),
        cell(latencies.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)),
    ]
}

/// The seeded generator of the load test's mix of operations and jittered waits (the
/// solver's SplitMix64, also behind the hard placement instances).
pub use memplan_solver::generate::SplitMix64;

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_reproducible_and_spread() {
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        let xs: Vec<u64> = (0..100).map(|_| a.below(5)).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.below(5)).collect();
        assert_eq!(xs, ys);
        assert!((0..5).all(|k| xs.contains(&k)));
        assert!((0..1000).all(|_| (0.0..1.0).contains(&a.unit())));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&ms, 50.0), 50.0);
        assert_eq!(percentile(&ms, 99.0), 99.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
