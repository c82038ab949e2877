//! Local search over the placement order with a first-fit decoder: hill climbing with
//! sideways moves over permutations, as in the iterated-greedy methods for permutation
//! problems (Ruiz & Stützle 2007, "A simple and effective iterated greedy algorithm for the
//! permutation flowshop scheduling problem", EJOR 177), here with moves aimed at the buffers
//! that make the peak, in the spirit of squeaky-wheel optimisation (Joslin & Clements 1999).
//!
//! A solution is an order of the buffers, decoded by placing them one by one at the lowest
//! aligned offset free of the already placed buffers alive with them (first fit by address).
//! This decoder reaches every placement worth having: decoding the buffers of any placement
//! by increasing offset reproduces it or lowers some buffers (each buffer's old slot is still
//! free when its turn comes). So the search starts from the best placement of the portfolio
//! members before it (alone: from [`super::skyline`]), sorted by offset, and never returns a
//! higher peak.
//!
//! Each step changes the order and decodes again from the first changed position: half the
//! steps move a buffer that ends at the peak to a random earlier position, the others move or
//! swap two random positions. A step is kept when the peak does not rise (sideways steps
//! cross plateaus). The decode stops as soon as a buffer ends above the current peak, and a
//! buffer none of whose earlier neighbours moved keeps its offset without a new fit. Moves
//! come from a xorshift generator with a fixed seed, so a run is deterministic.
//!
//! The decoder reads explicit conflict lists, built by a sweep over lifetime events; a full
//! decode costs `O(n + Σ d log d)` for degrees `d`. With more than [`MAX_PAIRS`] overlapping
//! pairs the lists would cost more than the few steps the work cap then allows, and the start
//! is returned unchanged (the instances of the zoo and traces above it, densenet121.16.train,
//! efficientnet_b0.8.train and iopddl_S_1, are within 0.2% of LOAD without the search). A run
//! stops at the lower bound (LOAD tightened by alignment), after [`WORK`] work units (one per
//! buffer visited and per conflict read, plus `m log m` per fit over `m` placed neighbours:
//! about 5 ms), after [`STALL`] steps without a new best peak, or when the [`Limits`] runs out
//! (one node per step).

use super::fit::{peak_of, place_in_order_by, Rule};
use super::skyline::Skyline;
use super::Placer;
use crate::limits::Limits;
use crate::problem::{align_up, Buffer, Placement, PlacementError, PlacementProblem};

/// Most overlapping pairs for which the search runs (its lists take 8 bytes a pair).
pub const MAX_PAIRS: u64 = 1 << 18;

/// Work units per run (about 3 ns each).
pub const WORK: u64 = 1 << 21;

/// Steps without a new best peak after which a run stops.
pub const STALL: u64 = 500;

/// Seed of the move generator.
const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// Order local search with a first-fit decoder.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalSearch;

/// Conflict lists in compressed rows: the buffers overlapping buffer `i` in time are
/// `adj[start[i]..start[i + 1]]`.
struct Conflicts {
    start: Vec<usize>,
    adj: Vec<u32>,
}

impl Conflicts {
    /// The conflict lists of `buffers`, or `None` with more than `max_pairs` overlapping pairs
    /// (or more than `u32::MAX` buffers).
    fn new(buffers: &[Buffer], max_pairs: u64) -> Option<Self> {
        let n = buffers.len();
        // (time, 0 = end / 1 = start, index): ends first, touching lifetimes do not conflict.
        let mut events: Vec<(u64, u8, u32)> = Vec::with_capacity(2 * n);
        for (i, b) in buffers.iter().enumerate() {
            let i = u32::try_from(i).ok()?;
            events.push((b.lifetime.start, 1, i));
            events.push((b.lifetime.end, 0, i));
        }
        events.sort_unstable();
        let (mut live, mut pairs) = (0u64, 0u64);
        for &(_, kind, _) in &events {
            if kind == 1 {
                pairs = pairs.saturating_add(live);
                live = live.saturating_add(1);
            } else {
                live = live.saturating_sub(1);
            }
        }
        if pairs > max_pairs {
            return None;
        }
        // Each pair once, at the later start, then both directions by counting sort.
        let mut alive: Vec<u32> = Vec::new();
        let mut pos = vec![usize::MAX; n];
        let mut edges: Vec<(u32, u32)> = Vec::with_capacity(usize::try_from(pairs).ok()?);
        for &(_, kind, i) in &events {
            let slot = i as usize;
            if kind == 1 {
                edges.extend(alive.iter().map(|&j| (i, j)));
                pos[slot] = alive.len();
                alive.push(i);
            } else if let Some(&p) = pos.get(slot) {
                alive.swap_remove(p);
                if let Some(&moved) = alive.get(p) {
                    pos[moved as usize] = p;
                }
            }
        }
        let mut start = vec![0usize; n + 1];
        for &(a, b) in &edges {
            start[a as usize + 1] += 1;
            start[b as usize + 1] += 1;
        }
        for k in 0..n {
            start[k + 1] += start[k];
        }
        let mut fill = start.clone();
        let mut adj = vec![0u32; start[n]];
        for &(a, b) in &edges {
            adj[fill[a as usize]] = b;
            fill[a as usize] += 1;
            adj[fill[b as usize]] = a;
            fill[b as usize] += 1;
        }
        Some(Conflicts { start, adj })
    }

    /// The buffers overlapping buffer `i`.
    fn of(&self, i: usize) -> &[u32] {
        &self.adj[self.start[i]..self.start[i + 1]]
    }
}

/// A xorshift64 generator (Marsaglia 2003, "Xorshift RNGs").
struct Rng(u64);

impl Rng {
    /// A number in `0..m` (`m > 0`).
    fn below(&mut self, m: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x % m as u64) as usize
    }
}

/// The search state: the current order and its decoded offsets.
struct Search<'a> {
    buffers: &'a [Buffer],
    conflicts: Conflicts,
    order: Vec<usize>,
    /// Position of each buffer in `order`.
    rank: Vec<usize>,
    /// Offsets of the current order.
    offsets: Vec<u64>,
    /// Offsets of a trial, valid for the buffers at positions from its first change on.
    trial: Vec<u64>,
    /// `prefix[k]`: the highest end among `order[..k]` in the current decode.
    prefix: Vec<u64>,
    /// `mark[i] == stamp`: buffer `i` moved in the order or was displaced in this trial.
    mark: Vec<u32>,
    stamp: u32,
    /// Fit scratch: byte ranges of placed neighbours.
    taken: Vec<(u64, u64)>,
    /// Work units spent, and the most allowed.
    work: u64,
    cap: u64,
}

impl Search<'_> {
    /// Starts a trial: no buffer is marked as moved or displaced.
    fn new_trial(&mut self) {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.mark.fill(0);
            self.stamp = 1;
        }
    }

    /// Decodes `order[from..]` into `trial`, reading the offsets of `order[..from]` from
    /// `offsets`; the buffers moved by the trial must be marked. Returns the peak of the whole
    /// order, or `None` as soon as a buffer ends above `limit` or the work cap is reached.
    fn decode(&mut self, from: usize, limit: u64) -> Option<u64> {
        let mut peak = self.prefix[from];
        for k in from..self.order.len() {
            let i = self.order[k];
            let b = &self.buffers[i];
            let adj = self.conflicts.of(i);
            self.work = self.work.saturating_add(1 + adj.len() as u64);
            // Same earlier neighbours at the same offsets: same fit.
            if self.mark[i] != self.stamp
                && adj.iter().all(|&j| self.mark[j as usize] != self.stamp)
            {
                let off = self.offsets[i];
                self.trial[i] = off;
                peak = peak.max(off.saturating_add(b.size));
                continue;
            }
            self.taken.clear();
            for &j in adj {
                let j = j as usize;
                let r = self.rank[j];
                if r < k {
                    let o = if r < from {
                        self.offsets[j]
                    } else {
                        self.trial[j]
                    };
                    self.taken.push((o, o.saturating_add(self.buffers[j].size)));
                }
            }
            let m = self.taken.len() as u64;
            self.work = self
                .work
                .saturating_add(m.saturating_mul(u64::from(64 - m.leading_zeros())));
            if self.work > self.cap {
                return None;
            }
            self.taken.sort_unstable();
            let mut prev = 0u64;
            let mut chosen = None;
            for &(lo, hi) in &self.taken {
                if lo > prev {
                    let o = align_up(prev, b.alignment)?;
                    if o.checked_add(b.size)? <= lo {
                        chosen = Some(o);
                        break;
                    }
                }
                prev = prev.max(hi);
            }
            let off = match chosen {
                Some(o) => o,
                None => align_up(prev, b.alignment)?,
            };
            let end = off.checked_add(b.size)?;
            if end > limit {
                return None;
            }
            peak = peak.max(end);
            self.trial[i] = off;
            if off != self.offsets[i] {
                self.mark[i] = self.stamp;
            }
        }
        Some(peak)
    }

    /// Makes the trial decoded from `from` current.
    fn accept(&mut self, from: usize) {
        for k in from..self.order.len() {
            let i = self.order[k];
            self.offsets[i] = self.trial[i];
            let end = self.offsets[i].saturating_add(self.buffers[i].size);
            self.prefix[k + 1] = self.prefix[k].max(end);
        }
    }

    /// Moves the buffer at position `from` to position `to`, shifting those in between.
    fn shift(&mut self, from: usize, to: usize) {
        if from < to {
            self.order[from..=to].rotate_left(1);
        } else {
            self.order[to..=from].rotate_right(1);
        }
        for k in from.min(to)..=from.max(to) {
            self.rank[self.order[k]] = k;
        }
    }

    /// Swaps the buffers at positions `a` and `b`.
    fn swap(&mut self, a: usize, b: usize) {
        self.order.swap(a, b);
        self.rank[self.order[a]] = a;
        self.rank[self.order[b]] = b;
    }
}

/// A change of the order, undone when its trial is rejected.
#[derive(Debug, Clone, Copy)]
enum Move {
    /// The buffer at the first position went to the second.
    Shift(usize, usize),
    /// The buffers at the two positions were swapped.
    Swap(usize, usize),
}

/// Improves `start` (a valid placement of `problem`, capacity ignored) by the search of the
/// module doc; never returns a higher peak.
pub(crate) fn improve(
    problem: &PlacementProblem,
    start: &Placement,
    limits: &Limits,
) -> Result<Placement, PlacementError> {
    let buffers = &problem.buffers;
    let n = buffers.len();
    let bound = problem.aligned_load();
    let start_peak = peak_of(buffers, start);
    if n < 2 || start_peak <= bound || start.offsets.len() != n {
        return Ok(start.clone());
    }
    let Some(conflicts) = Conflicts::new(buffers, MAX_PAIRS) else {
        return Ok(start.clone());
    };
    // First fit by increasing offset lowers buffers where it can, never raises one.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by_key(|&i| (start.offsets[i], i));
    let compact = place_in_order_by(problem, &order, Rule::LowestFit)?;
    let mut peak = peak_of(buffers, &compact);
    if peak > start_peak {
        return Ok(start.clone());
    }
    let mut rank = vec![0usize; n];
    let mut prefix = vec![0u64; n + 1];
    for (k, &i) in order.iter().enumerate() {
        rank[i] = k;
        prefix[k + 1] = prefix[k].max(compact.offsets[i].saturating_add(buffers[i].size));
    }
    let mut s = Search {
        buffers,
        conflicts,
        order,
        rank,
        trial: compact.offsets.clone(),
        offsets: compact.offsets,
        prefix,
        mark: vec![0; n],
        stamp: 0,
        taken: Vec::new(),
        work: 0,
        cap: WORK,
    };
    let mut clock = limits.start();
    let mut rng = Rng(SEED);
    let mut critical: Vec<usize> = Vec::new();
    let mut stale = true;
    let mut idle = 0u64;
    while peak > bound && s.work < s.cap && idle < STALL && clock.tick().is_none() {
        if stale {
            critical.clear();
            critical.extend((0..n).filter(|&i| {
                s.offsets[i].saturating_add(buffers[i].size) == peak && s.rank[i] > 0
            }));
            stale = false;
        }
        idle = idle.saturating_add(1);
        s.new_trial();
        let mv = if rng.below(2) == 0 && !critical.is_empty() {
            let c = critical[rng.below(critical.len())];
            let j = s.rank[c];
            Move::Shift(j, rng.below(j))
        } else {
            let (a, b) = (rng.below(n), rng.below(n));
            if a == b {
                continue;
            }
            if rng.below(2) == 0 {
                Move::Swap(a, b)
            } else {
                Move::Shift(a, b)
            }
        };
        let from = match mv {
            Move::Shift(a, b) | Move::Swap(a, b) => {
                s.mark[s.order[a]] = s.stamp;
                s.mark[s.order[b]] = s.stamp;
                a.min(b)
            }
        };
        match mv {
            Move::Shift(a, b) => s.shift(a, b),
            Move::Swap(a, b) => s.swap(a, b),
        }
        match s.decode(from, peak) {
            Some(p) => {
                s.accept(from);
                if p < peak {
                    idle = 0;
                }
                peak = p;
                stale = true;
            }
            None => match mv {
                Move::Shift(a, b) => s.shift(b, a),
                Move::Swap(a, b) => s.swap(a, b),
            },
        }
    }
    Ok(Placement { offsets: s.offsets })
}

impl Placer for LocalSearch {
    fn name(&self) -> &'static str {
        "local-search"
    }

    fn place(
        &self,
        problem: &PlacementProblem,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        let seed = Skyline.place(problem, limits)?;
        improve(problem, &seed, limits)
    }

    fn place_from(
        &self,
        problem: &PlacementProblem,
        best: Option<(&Placement, u64)>,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        match best {
            Some((placement, _)) => improve(problem, placement, limits),
            None => self.place(problem, limits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fit::place_in_order;
    use super::super::greedy_by_size::size_order;
    use super::*;

    use crate::problem::fixtures::buf;
    #[test]
    fn conflict_lists_hold_each_overlapping_pair_both_ways() {
        let b = vec![buf(0, 2, 1), buf(1, 3, 1), buf(2, 4, 1), buf(0, 4, 1)];
        let c = Conflicts::new(&b, 100).unwrap();
        let mut got: Vec<Vec<u32>> = (0..4).map(|i| c.of(i).to_vec()).collect();
        got.iter_mut().for_each(|l| l.sort_unstable());
        assert_eq!(
            got,
            vec![vec![1, 3], vec![0, 2, 3], vec![1, 3], vec![0, 1, 2]]
        );
        assert!(Conflicts::new(&b, 4).is_none());
    }

    #[test]
    fn the_offset_order_first_fit_never_raises_a_buffer() {
        // A valid placement with slack: gravity lowers 2 into the hole 0 leaves at step 2.
        let p = PlacementProblem::new(vec![buf(0, 2, 10), buf(0, 4, 10), buf(2, 4, 10)]);
        let start = Placement {
            offsets: vec![0, 10, 20],
        };
        assert_eq!(p.check(&start), Ok(30));
        let pl = improve(&p, &start, &Limits::UNLIMITED).unwrap();
        assert_eq!(p.check(&pl), Ok(20));
    }

    #[test]
    fn the_search_finds_load_where_the_compacted_start_does_not() {
        // Greedy by size peaks at 15 and first fit in its offset order keeps 15; LOAD is 11
        // (the instance of the squeaky tests).
        let p = PlacementProblem::new(vec![buf(1, 2, 6), buf(2, 5, 4), buf(1, 3, 5), buf(3, 5, 7)]);
        let start = place_in_order(&p, &size_order(&p)).unwrap();
        assert_eq!(start.offsets, vec![0, 11, 6, 0]);
        let compact = place_in_order_by(&p, &[0, 3, 2, 1], Rule::LowestFit).unwrap();
        assert_eq!(p.check(&compact), Ok(15));
        let pl = improve(&p, &start, &Limits::UNLIMITED).unwrap();
        assert_eq!(p.check(&pl), Ok(11));
        assert_eq!(p.load(), 11);
    }

    #[test]
    fn a_one_node_budget_stops_before_the_first_step() {
        let p = PlacementProblem::new(vec![buf(1, 2, 6), buf(2, 5, 4), buf(1, 3, 5), buf(3, 5, 7)]);
        let start = place_in_order(&p, &size_order(&p)).unwrap();
        let limits = Limits {
            time: None,
            nodes: Some(1),
            ..Limits::UNLIMITED
        };
        let pl = improve(&p, &start, &limits).unwrap();
        assert_eq!(p.check(&pl), Ok(15));
    }

    #[test]
    fn a_start_at_load_is_returned_unchanged() {
        let p = PlacementProblem::new(vec![buf(0, 2, 10), buf(1, 3, 5)]);
        let start = Placement {
            offsets: vec![0, 10],
        };
        let got = LocalSearch
            .place_from(&p, Some((&start, 15)), &Limits::UNLIMITED)
            .unwrap();
        assert_eq!(got, start);
    }
}
