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

/// SplitMix64 (Steele, Lea and Flood 2014): a tiny seeded generator, enough to draw a
/// reproducible mix of operations and jittered waits.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`; the modulo bias is negligible for small `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

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
