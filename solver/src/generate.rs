//! Hard placement instances with known answers, built like MiniMalloc's "challenging" suite.
//!
//! Idea: take the rectangle `[0, horizon) × [0, capacity)` (time × bytes) and cut it into
//! rectangles on a grid: guillotine cuts across time or across bytes, and non-guillotine
//! "pinwheel" cuts (five pieces around an inner rectangle, which no sequence of guillotine
//! cuts can produce). Each piece is a buffer: its time range is the lifetime, its byte range
//! the size, and its byte start a placement of the whole set under `capacity` — a witness.
//! Pieces are then deleted at random, never one that crosses a chosen *spine* time, so the
//! spine's column stays full: LOAD = capacity, and the witness places every buffer at
//! capacity = LOAD. Alignments are random powers of two dividing the witness offset, so the
//! witness stays aligned. Buffers are shuffled so that the input order tells nothing.
//!
//! Variants ([`Variant`]): [`Variant::Fits`] (capacity = LOAD, a placement exists),
//! [`Variant::BelowLoad`] (capacity one grid unit below LOAD: infeasible by the LOAD bound),
//! and [`Variant::Grown`] (a few buffers grown by one or two grid units: the optimum is
//! unknown, at least LOAD).
//!
//! Every instance follows from its [`HardSpec`] (a seed and a few sizes) through a SplitMix64
//! stream, so a spec reproduces its instance on any machine. Complexity: `O(n²)` for `n`
//! pieces (each cut draws a piece by area over the list), negligible next to any solver.
//!
//! Reference: Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated
//! Machine Learning" (ASPLOS 2023), §6 (the challenging benchmarks are cut from a full
//! rectangle); pinwheel packings: Lodi, Martello and Monaci, "Two-dimensional packing
//! problems: a survey" (EJOR 2002).

use crate::problem::{Buffer, Lifetime, Placement, PlacementProblem};

/// A SplitMix64 stream (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): small, seeded, the same on every platform.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting at `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `[lo, hi]` (`lo` when `hi < lo`).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// A float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Which question an instance asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Capacity = LOAD and a placement exists (the witness).
    Fits,
    /// Capacity = LOAD − one grid unit: no placement exists (the LOAD bound proves it).
    BelowLoad,
    /// The fitting instance with this many buffers grown by one or two grid units; capacity
    /// = the new LOAD; whether a placement exists is unknown.
    Grown(usize),
}

impl Variant {
    /// Stable lower-case name (`fits`, `below-load`, `grown`).
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Fits => "fits",
            Variant::BelowLoad => "below-load",
            Variant::Grown(_) => "grown",
        }
    }
}

/// The recipe of one instance. Sizes are bytes; `capacity` and `horizon` are rounded down to
/// multiples of `grid`.
#[derive(Debug, Clone, PartialEq)]
pub struct HardSpec {
    /// Seed of the random stream.
    pub seed: u64,
    /// Number of buffers (before deletions are undone by extra cuts: the instance has exactly
    /// this many unless the rectangle has too few grid cells or `keep` is 1).
    pub buffers: usize,
    /// Height of the rectangle (bytes), the capacity of a [`Variant::Fits`] instance.
    pub capacity: u64,
    /// Width of the rectangle (time steps).
    pub horizon: u64,
    /// Grid unit of cuts, in bytes and in steps (the smallest size and lifetime).
    pub grid: u64,
    /// Fraction of pieces kept (the rest are deleted away from the spine), in `(0, 1]`; at 1
    /// nothing is deleted, the buffers tile the whole rectangle (and may be up to four more
    /// than `buffers`, when the last cut was a pinwheel).
    pub keep: f64,
    /// Chance that a cut is a pinwheel (non-guillotine) cut where one fits, in `[0, 1]`.
    pub pinwheel: f64,
    /// Chance that a buffer gets an alignment above `grid` (a power of two dividing its
    /// witness offset), in `[0, 1]`.
    pub aligned: f64,
    /// The question asked.
    pub variant: Variant,
}

impl HardSpec {
    /// The challenging suite's shape: capacity and horizon 2²⁰, grid 1024, `buffers`
    /// buffers, 85–100 % of the pieces kept, a quarter of the cuts pinwheels, a tenth of the
    /// buffers aligned above the grid.
    pub fn challenging(seed: u64, buffers: usize, variant: Variant) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0x5eed_0fc0_ffee);
        HardSpec {
            seed,
            buffers,
            capacity: 1 << 20,
            horizon: 1 << 20,
            grid: 1024,
            keep: 0.85 + 0.15 * rng.unit(),
            pinwheel: 0.25,
            aligned: 0.1,
            variant,
        }
    }

    /// A short stable name: `hard-<buffers>-<variant>-<seed>`.
    pub fn name(&self) -> String {
        format!(
            "hard-{}-{}-{}",
            self.buffers,
            self.variant.as_str(),
            self.seed
        )
    }
}

/// What is known about an instance's answer at its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Known {
    /// A placement under the capacity exists (the witness).
    Fits,
    /// No placement exists (the LOAD bound exceeds the capacity).
    Infeasible,
    /// Not known.
    Unknown,
}

/// A generated instance.
#[derive(Debug, Clone, PartialEq)]
pub struct HardInstance {
    /// The spec's name.
    pub name: String,
    /// The buffers (capacity set).
    pub problem: PlacementProblem,
    /// The capacity the instance asks about (bytes).
    pub capacity: u64,
    /// LOAD of the buffers (bytes).
    pub load: u64,
    /// What is known at `capacity`.
    pub known: Known,
    /// A placement at capacity = LOAD of the uncut buffers ([`Variant::Fits`] and
    /// [`Variant::BelowLoad`]; for [`Variant::Grown`] the witness of the instance before the
    /// growth, which may no longer be valid).
    pub witness: Placement,
}

/// A piece of the rectangle in grid units: time `[t0, t1)` × bytes `[y0, y1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    t0: u64,
    t1: u64,
    y0: u64,
    y1: u64,
}

impl Piece {
    fn width(&self) -> u64 {
        self.t1 - self.t0
    }
    fn height(&self) -> u64 {
        self.y1 - self.y0
    }
    fn area(&self) -> u64 {
        self.width() * self.height()
    }
}

/// Cuts `piece` in place and pushes the new pieces; false when it is one grid cell.
fn cut(piece: &mut Piece, out: &mut Vec<Piece>, spec: &HardSpec, rng: &mut SplitMix64) -> bool {
    let p = *piece;
    let (w, h) = (p.width(), p.height());
    if w < 2 && h < 2 {
        return false;
    }
    if w >= 3 && h >= 3 && rng.unit() < spec.pinwheel {
        // Inner rectangle [a, b) × [c, d) strictly inside; five pieces around and in it.
        let a = rng.between(p.t0 + 1, p.t1 - 2);
        let b = rng.between(a + 1, p.t1 - 1);
        let c = rng.between(p.y0 + 1, p.y1 - 2);
        let d = rng.between(c + 1, p.y1 - 1);
        *piece = Piece {
            t0: a,
            t1: b,
            y0: c,
            y1: d,
        };
        out.push(Piece {
            t0: p.t0,
            t1: b,
            y0: p.y0,
            y1: c,
        });
        out.push(Piece {
            t0: b,
            t1: p.t1,
            y0: p.y0,
            y1: d,
        });
        out.push(Piece {
            t0: a,
            t1: p.t1,
            y0: d,
            y1: p.y1,
        });
        out.push(Piece {
            t0: p.t0,
            t1: a,
            y0: c,
            y1: p.y1,
        });
        return true;
    }
    // Guillotine: across the longer side more often, so pieces stay varied but not slivers.
    let across_time = if w < 2 {
        false
    } else if h < 2 {
        true
    } else {
        rng.unit() < w as f64 / (w + h) as f64
    };
    if across_time {
        let m = rng.between(p.t0 + 1, p.t1 - 1);
        piece.t1 = m;
        out.push(Piece { t0: m, ..p });
    } else {
        let m = rng.between(p.y0 + 1, p.y1 - 1);
        piece.y1 = m;
        out.push(Piece { y0: m, ..p });
    }
    true
}

/// The largest power of two dividing `x` (`u64::MAX`'s top bit for 0).
fn pow2_dividing(x: u64) -> u64 {
    if x == 0 {
        1 << 63
    } else {
        1 << x.trailing_zeros()
    }
}

/// Builds the instance of `spec` (deterministic in `spec`).
pub fn generate(spec: &HardSpec) -> HardInstance {
    let grid = spec.grid.max(1);
    let cols = (spec.horizon / grid).max(1);
    let rows = (spec.capacity / grid).max(1);
    let mut rng = SplitMix64::new(spec.seed);
    let keep = spec.keep.clamp(0.01, 1.0);
    let target = spec.buffers.max(1);
    let pieces_wanted = ((target as f64 / keep).ceil() as usize).max(target);
    let spine = rng.below(cols);
    let mut pieces = vec![Piece {
        t0: 0,
        t1: cols,
        y0: 0,
        y1: rows,
    }];
    let mut fresh = Vec::new();
    while pieces.len() < pieces_wanted {
        // Draw a piece by area, so large pieces are cut first but not always.
        let total: u64 = pieces.iter().map(Piece::area).sum();
        let mut r = rng.below(total);
        let mut pick = pieces.len() - 1;
        for (i, p) in pieces.iter().enumerate() {
            if r < p.area() {
                pick = i;
                break;
            }
            r -= p.area();
        }
        fresh.clear();
        if !cut(&mut pieces[pick], &mut fresh, spec, &mut rng) {
            // One grid cell: look for any piece that can still be cut.
            match pieces.iter().position(|p| p.area() > 1) {
                Some(i) => {
                    let _ = cut(&mut pieces[i], &mut fresh, spec, &mut rng);
                }
                None => break,
            }
        }
        pieces.append(&mut fresh);
    }
    // Delete pieces off the spine until `target` remain (the spine column stays full); with
    // everything kept, none (a last pinwheel may leave a few more than `target`).
    let mut off_spine: Vec<usize> = (0..pieces.len())
        .filter(|&i| !(pieces[i].t0 <= spine && spine < pieces[i].t1))
        .collect();
    let mut dead = vec![false; pieces.len()];
    let mut extra = if keep >= 1.0 {
        0
    } else {
        pieces.len().saturating_sub(target)
    };
    while extra > 0 && !off_spine.is_empty() {
        let k = rng.below(off_spine.len() as u64) as usize;
        dead[off_spine.swap_remove(k)] = true;
        extra -= 1;
    }
    let mut kept: Vec<Piece> = pieces
        .iter()
        .zip(&dead)
        .filter(|(_, d)| !**d)
        .map(|(p, _)| *p)
        .collect();
    // Shuffle (Fisher–Yates).
    for i in (1..kept.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        kept.swap(i, j);
    }
    let mut buffers = Vec::with_capacity(kept.len());
    let mut offsets = Vec::with_capacity(kept.len());
    for p in &kept {
        let offset = p.y0 * grid;
        let mut alignment = 1;
        if rng.unit() < spec.aligned {
            let max = pow2_dividing(offset).min(64 * grid.next_power_of_two());
            let lo = (grid.next_power_of_two() * 2).trailing_zeros();
            let hi = max.trailing_zeros();
            if hi >= lo {
                alignment = 1 << rng.between(u64::from(lo), u64::from(hi));
            }
        }
        buffers.push(Buffer {
            lifetime: Lifetime::new(p.t0 * grid, p.t1 * grid),
            size: p.height() * grid,
            alignment,
        });
        offsets.push(offset);
    }
    let witness = Placement { offsets };
    if let Variant::Grown(k) = spec.variant {
        for _ in 0..k.min(buffers.len()) {
            let i = rng.below(buffers.len() as u64) as usize;
            buffers[i].size += grid * rng.between(1, 2);
        }
    }
    let mut problem = PlacementProblem::new(buffers);
    let load = problem.load();
    let (capacity, known) = match spec.variant {
        Variant::Fits => (load, Known::Fits),
        Variant::BelowLoad => (load.saturating_sub(grid), Known::Infeasible),
        Variant::Grown(_) => (load, Known::Unknown),
    };
    problem.capacity = Some(capacity);
    HardInstance {
        name: spec.name(),
        problem,
        capacity,
        load,
        known,
        witness,
    }
}

/// Buffer counts of [`suite`]'s size classes.
pub const SUITE_SIZES: [usize; 5] = [100, 250, 450, 700, 1000];

/// The generated suite: `count` specs spread over [`SUITE_SIZES`] with seeds
/// `first_seed, first_seed + 1, …`; in every ten consecutive specs of a size class, eight
/// ask [`Variant::Fits`], one [`Variant::BelowLoad`] and one [`Variant::Grown`] (three
/// buffers grown).
pub fn suite(count: usize, first_seed: u64) -> Vec<HardSpec> {
    (0..count)
        .map(|i| {
            let size = SUITE_SIZES[i % SUITE_SIZES.len()];
            let variant = match (i / SUITE_SIZES.len()) % 10 {
                8 => Variant::BelowLoad,
                9 => Variant::Grown(3),
                _ => Variant::Fits,
            };
            HardSpec::challenging(first_seed + i as u64, size, variant)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_witness_places_every_fitting_instance_at_load() {
        for seed in 0..40 {
            let spec = HardSpec::challenging(seed, 50 + 25 * (seed as usize % 8), Variant::Fits);
            let inst = generate(&spec);
            assert_eq!(inst.problem.buffers.len(), spec.buffers, "{}", inst.name);
            assert_eq!(
                inst.load, spec.capacity,
                "{}: the spine column is full",
                inst.name
            );
            assert_eq!(inst.capacity, inst.load);
            let peak = inst.problem.check(&inst.witness).expect("witness is valid");
            assert!(peak <= inst.capacity, "{}", inst.name);
        }
    }

    #[test]
    fn the_same_spec_gives_the_same_instance_and_another_seed_another() {
        let a = generate(&HardSpec::challenging(7, 200, Variant::Fits));
        let b = generate(&HardSpec::challenging(7, 200, Variant::Fits));
        let c = generate(&HardSpec::challenging(8, 200, Variant::Fits));
        assert_eq!(a, b);
        assert_ne!(a.problem, c.problem);
    }

    #[test]
    fn below_load_instances_ask_for_one_grid_unit_less_than_load() {
        let inst = generate(&HardSpec::challenging(3, 120, Variant::BelowLoad));
        assert_eq!(inst.known, Known::Infeasible);
        assert_eq!(inst.capacity + 1024, inst.load);
        assert!(inst.problem.load() > inst.capacity);
    }

    #[test]
    fn grown_instances_differ_from_their_fitting_twin_in_a_few_sizes_only() {
        let fits = generate(&HardSpec::challenging(11, 300, Variant::Fits));
        let grown = generate(&HardSpec::challenging(11, 300, Variant::Grown(3)));
        let changed = fits
            .problem
            .buffers
            .iter()
            .zip(&grown.problem.buffers)
            .filter(|(a, b)| a != b)
            .count();
        assert!((1..=3).contains(&changed), "{changed} buffers changed");
        assert_eq!(grown.known, Known::Unknown);
        assert!(grown.load >= fits.load);
    }

    #[test]
    fn alignments_are_powers_of_two_that_the_witness_honours() {
        let mut aligned = 0;
        for seed in 0..20 {
            let inst = generate(&HardSpec::challenging(seed, 300, Variant::Fits));
            for (b, o) in inst.problem.buffers.iter().zip(&inst.witness.offsets) {
                assert!(b.alignment.is_power_of_two());
                assert_eq!(o % b.alignment, 0);
                aligned += usize::from(b.alignment > 1);
            }
        }
        assert!(aligned > 100, "only {aligned} aligned buffers");
    }

    #[test]
    fn pinwheel_cuts_tile_their_piece_exactly() {
        let spec = HardSpec {
            pinwheel: 1.0,
            ..HardSpec::challenging(5, 10, Variant::Fits)
        };
        let mut rng = SplitMix64::new(1);
        for _ in 0..200 {
            let mut p = Piece {
                t0: 3,
                t1: 3 + rng.between(3, 20),
                y0: 7,
                y1: 7 + rng.between(3, 20),
            };
            let whole = p;
            let mut out = Vec::new();
            assert!(cut(&mut p, &mut out, &spec, &mut rng));
            assert_eq!(out.len(), 4);
            out.push(p);
            assert_eq!(out.iter().map(Piece::area).sum::<u64>(), whole.area());
            for (i, a) in out.iter().enumerate() {
                assert!(a.area() > 0);
                assert!(
                    a.t0 >= whole.t0 && a.t1 <= whole.t1 && a.y0 >= whole.y0 && a.y1 <= whole.y1
                );
                for b in &out[i + 1..] {
                    let apart = a.t1 <= b.t0 || b.t1 <= a.t0 || a.y1 <= b.y0 || b.y1 <= a.y0;
                    assert!(apart, "{a:?} overlaps {b:?}");
                }
            }
        }
    }

    #[test]
    fn the_suite_has_every_size_class_and_variant() {
        let specs = suite(200, 1);
        assert_eq!(specs.len(), 200);
        for size in SUITE_SIZES {
            let of_size: Vec<_> = specs.iter().filter(|s| s.buffers == size).collect();
            assert_eq!(of_size.len(), 40);
            assert_eq!(
                of_size
                    .iter()
                    .filter(|s| s.variant == Variant::Fits)
                    .count(),
                32
            );
            assert_eq!(
                of_size
                    .iter()
                    .filter(|s| s.variant == Variant::BelowLoad)
                    .count(),
                4
            );
        }
    }

    #[test]
    fn keeping_every_piece_tiles_the_whole_rectangle() {
        for seed in 1..20 {
            let mut spec =
                HardSpec::challenging(seed, 100 + 50 * (seed as usize % 4), Variant::Fits);
            spec.keep = 1.0;
            let inst = generate(&spec);
            let area: u128 = inst
                .problem
                .buffers
                .iter()
                .map(|b| u128::from(b.lifetime.len()) * u128::from(b.size))
                .sum();
            assert_eq!(
                area,
                u128::from(spec.capacity) * u128::from(spec.horizon),
                "{}",
                inst.name
            );
            assert!(inst.problem.buffers.len() >= spec.buffers, "{}", inst.name);
            assert!(inst.problem.check(&inst.witness).is_ok(), "{}", inst.name);
        }
    }
}
