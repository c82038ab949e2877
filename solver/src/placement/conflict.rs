//! Placement under an explicit conflict relation: buffers that may not share bytes are given
//! as pairs, not derived from `[start, end)` lifetimes. Parallel plans need it: when ops run
//! on several streams, two buffers may share bytes only if one's last use happens before the
//! other's first write (a partial order), which no single list of steps expresses.
//!
//! Idea: the interval placers' greedy rules on the conflict graph. Each [`ConflictPlacer`]
//! fixes an order of the buffers; each buffer goes into the tightest gap (best fit, after
//! alignment) left between its already placed conflicting neighbours, or on top of them. The
//! [`portfolio`] keeps the lowest peak (ties: the earlier registry entry), and a given
//! placement (the single-stream one, when it is valid for the relation) competes too.
//!
//! Bound: the heaviest clique found greedily (each buffer with its neighbours taken by
//! decreasing size while they stay pairwise conflicting) is a proven lower bound: a clique's
//! buffers are pairwise disjoint in bytes.
//!
//! Cost: `O(n log n + Σ deg · log deg)` per placer for `n` buffers; the clique bound
//! `O(Σ deg²)` with adjacency bitsets for up to 4096 buffers, a neighbour scan above.
//! Reference: Pisarchyk & Lee 2020 (TFLite's greedy by size) for the rule; graph colouring
//! with weights (interval colouring generalised to arbitrary conflict graphs) for the model.

use crate::limits::Limits;
use crate::problem::{align_up, Placement, PlacementError};

/// A placement problem with explicit conflicts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConflictProblem {
    /// Buffer sizes (bytes, > 0).
    pub sizes: Vec<u64>,
    /// Buffer alignments (bytes, powers of two).
    pub alignments: Vec<u64>,
    /// `conflicts[i]`: the buffers that may not share bytes with `i` (symmetric, no self).
    pub conflicts: Vec<Vec<u32>>,
}

impl ConflictProblem {
    /// A problem of `sizes` and `alignments` without conflicts yet.
    pub fn new(sizes: Vec<u64>, alignments: Vec<u64>) -> ConflictProblem {
        let n = sizes.len();
        ConflictProblem {
            sizes,
            alignments,
            conflicts: vec![Vec::new(); n],
        }
    }

    /// Declares that `a` and `b` may not share bytes.
    pub fn add_conflict(&mut self, a: usize, b: usize) {
        if a != b {
            self.conflicts[a].push(b as u32);
            self.conflicts[b].push(a as u32);
        }
    }

    /// Sorts and deduplicates the neighbour lists.
    pub fn normalise(&mut self) {
        for c in &mut self.conflicts {
            c.sort_unstable();
            c.dedup();
        }
    }

    /// Checks `p` (one aligned offset per buffer, conflicting buffers disjoint); returns
    /// its peak (bytes).
    pub fn check(&self, p: &Placement) -> Result<u64, PlacementError> {
        let n = self.sizes.len();
        if p.offsets.len() != n {
            return Err(PlacementError::WrongLength {
                expected: n,
                got: p.offsets.len(),
            });
        }
        let mut peak = 0u64;
        for i in 0..n {
            let o = p.offsets[i];
            if o % self.alignments[i].max(1) != 0 {
                return Err(PlacementError::Misaligned {
                    index: i,
                    offset: o,
                    alignment: self.alignments[i],
                });
            }
            let hi = o
                .checked_add(self.sizes[i])
                .ok_or(PlacementError::Overflow { index: i })?;
            peak = peak.max(hi);
            for &j in &self.conflicts[i] {
                let j = j as usize;
                let (oj, hj) = (p.offsets[j], p.offsets[j].saturating_add(self.sizes[j]));
                if o < hj && oj < hi {
                    return Err(PlacementError::Overlap { a: i, b: j });
                }
            }
        }
        Ok(peak)
    }

    /// The heaviest clique found greedily (bytes): a proven lower bound on every peak.
    ///
    /// From each start buffer (the heaviest neighbourhoods first: own size plus the sizes of
    /// its conflicts), the clique grows by the largest candidate that conflicts with every
    /// member; a count per candidate of the members it conflicts with makes each step one
    /// pass over the new member's conflicts, `O(d + Σ deg(member))` per start. The starts
    /// stop once [`CLIQUE_WORK`] steps are spent (deterministic: a weaker bound on dense
    /// relations of thousands of buffers, never a wrong one; before the cap, 1,500-op graphs
    /// with dense relations spent a minute here).
    pub fn clique_bound(&self) -> u64 {
        let n = self.sizes.len();
        let weight = |v: usize| -> u128 {
            u128::from(self.sizes[v])
                + self.conflicts[v]
                    .iter()
                    .map(|&x| u128::from(self.sizes[x as usize]))
                    .sum::<u128>()
        };
        let mut starts: Vec<(u128, usize)> = (0..n).map(|v| (weight(v), v)).collect();
        starts.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        // count[x]: members of the current clique that x conflicts with, valid where
        // stamp[x] is the current start.
        let mut count = vec![0u32; n];
        let mut stamp = vec![usize::MAX; n];
        let mut best = 0u64;
        let mut work = 0u64;
        for &(_, v) in &starts {
            if work >= CLIQUE_WORK {
                break;
            }
            let mut nb: Vec<usize> = self.conflicts[v].iter().map(|&x| x as usize).collect();
            nb.sort_unstable_by_key(|&x| (std::cmp::Reverse(self.sizes[x]), x));
            work += nb.len() as u64 + 1;
            let mut members = 0u32;
            let mut sum = self.sizes[v];
            for &x in &nb {
                let seen = if stamp[x] == v { count[x] } else { 0 };
                if seen == members {
                    members += 1;
                    sum = sum.saturating_add(self.sizes[x]);
                    work += self.conflicts[x].len() as u64;
                    for &y in &self.conflicts[x] {
                        let y = y as usize;
                        if stamp[y] != v {
                            stamp[y] = v;
                            count[y] = 0;
                        }
                        count[y] += 1;
                    }
                }
            }
            best = best.max(sum);
        }
        best
    }
}

/// Steps [`ConflictProblem::clique_bound`] may spend over all its starts (one step per
/// neighbour scanned): about a tenth of a second.
pub const CLIQUE_WORK: u64 = 50_000_000;

/// A placement rule for a [`ConflictProblem`].
pub trait ConflictPlacer: Send + Sync {
    /// Stable short name.
    fn name(&self) -> &'static str;
    /// The order in which buffers are placed (a permutation of `0..n`); deterministic.
    fn order(&self, problem: &ConflictProblem) -> Vec<usize>;
}

/// Decreasing size (ties: lower index).
#[derive(Debug, Clone, Copy, Default)]
pub struct BySize;

impl ConflictPlacer for BySize {
    fn name(&self) -> &'static str {
        "conflict-size"
    }
    fn order(&self, p: &ConflictProblem) -> Vec<usize> {
        let mut o: Vec<usize> = (0..p.sizes.len()).collect();
        o.sort_unstable_by_key(|&i| (std::cmp::Reverse(p.sizes[i]), i));
        o
    }
}

/// Decreasing `size × (1 + conflicting bytes)`: the most constrained first (TFLite's
/// greedy by breadth on conflicts).
#[derive(Debug, Clone, Copy, Default)]
pub struct ByPressure;

impl ConflictPlacer for ByPressure {
    fn name(&self) -> &'static str {
        "conflict-pressure"
    }
    fn order(&self, p: &ConflictProblem) -> Vec<usize> {
        let key = |i: usize| -> u128 {
            let around: u128 = p.conflicts[i]
                .iter()
                .map(|&j| p.sizes[j as usize] as u128)
                .sum();
            (p.sizes[i] as u128).saturating_mul(1 + around / (1 << 20))
        };
        let mut o: Vec<usize> = (0..p.sizes.len()).collect();
        o.sort_by_cached_key(|&i| (std::cmp::Reverse(key(i)), std::cmp::Reverse(p.sizes[i]), i));
        o
    }
}

/// Every conflict placer, in portfolio order.
pub fn registry() -> Vec<Box<dyn ConflictPlacer>> {
    vec![Box::new(BySize), Box::new(ByPressure)]
}

/// Places buffers in `order`, each in the tightest gap between its placed neighbours.
pub fn place_in_order(
    problem: &ConflictProblem,
    order: &[usize],
) -> Result<Placement, PlacementError> {
    let n = problem.sizes.len();
    let mut offsets = vec![u64::MAX; n];
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for &i in order {
        let (size, align) = (problem.sizes[i], problem.alignments[i].max(1));
        spans.clear();
        for &j in &problem.conflicts[i] {
            let o = offsets[j as usize];
            if o != u64::MAX {
                spans.push((o, o.saturating_add(problem.sizes[j as usize])));
            }
        }
        spans.sort_unstable();
        let mut best: Option<(u64, u64)> = None; // (gap size, offset)
        let mut cursor = 0u64;
        for &(lo, hi) in &spans {
            let at = align_up(cursor, align).ok_or(PlacementError::Overflow { index: i })?;
            if lo > at && lo - at >= size {
                let gap = lo - cursor;
                if best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, at));
                }
            }
            cursor = cursor.max(hi);
        }
        let top = align_up(cursor, align).ok_or(PlacementError::Overflow { index: i })?;
        offsets[i] = best.map_or(top, |(_, at)| at);
    }
    Ok(Placement { offsets })
}

/// Repairs `start` towards `problem` under an arena `cap` (bytes): each buffer, in `order`,
/// that overlaps a conflicting buffer moves to the tightest gap free of all its conflicting
/// buffers that ends at or below `cap`, when there is one. A buffer that moves overlaps
/// nothing it conflicts with, so no new overlap appears: the overlapping conflicting pairs
/// of the result are a subset of `start`'s (those no gap under `cap` could separate).
///
/// Parallel plans use it to keep the single-stream placement's peak while separating the
/// buffers whose sharing would serialise streams. Cost: `O(Σ deg · log deg)`.
pub fn repair(
    problem: &ConflictProblem,
    start: &Placement,
    cap: u64,
    order: &[usize],
) -> Placement {
    let mut offsets = start.offsets.clone();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for &i in order {
        let (size, align) = (problem.sizes[i], problem.alignments[i].max(1));
        let (lo, hi) = (offsets[i], offsets[i].saturating_add(size));
        spans.clear();
        let mut clash = false;
        for &j in &problem.conflicts[i] {
            let o = offsets[j as usize];
            let e = o.saturating_add(problem.sizes[j as usize]);
            clash |= o < hi && lo < e;
            spans.push((o, e));
        }
        if !clash {
            continue;
        }
        spans.sort_unstable();
        let mut best: Option<(u64, u64)> = None;
        let mut cursor = 0u64;
        let consider = |cursor: u64, end: u64, best: &mut Option<(u64, u64)>| {
            if let Some(at) = align_up(cursor, align) {
                if at.saturating_add(size) <= end.min(cap) {
                    let gap = end.saturating_sub(cursor);
                    if best.is_none_or(|(g, _)| gap < g) {
                        *best = Some((gap, at));
                    }
                }
            }
        };
        for &(a, z) in &spans {
            if a > cursor {
                consider(cursor, a, &mut best);
            }
            cursor = cursor.max(z);
        }
        consider(cursor, u64::MAX, &mut best);
        if let Some((_, at)) = best {
            offsets[i] = at;
        }
    }
    Placement { offsets }
}

/// What [`portfolio`] found.
#[derive(Debug, Clone)]
pub struct ConflictResult {
    /// The best placement.
    pub placement: Placement,
    /// Its peak (bytes).
    pub peak: u64,
    /// The member (or `given`) that reached it.
    pub method: &'static str,
    /// The clique lower bound (bytes).
    pub lower_bound: u64,
}

/// Runs every registered placer, and `given` when it is valid, and keeps the lowest peak
/// (ties: `given`, then registry order). `limits` is honoured between members.
pub fn portfolio(
    problem: &ConflictProblem,
    given: Option<&Placement>,
    limits: &Limits,
) -> Result<ConflictResult, PlacementError> {
    let lower_bound = problem.clique_bound();
    let mut best: Option<ConflictResult> = None;
    if let Some(p) = given {
        if let Ok(peak) = problem.check(p) {
            best = Some(ConflictResult {
                placement: p.clone(),
                peak,
                method: "given",
                lower_bound,
            });
        }
    }
    for placer in registry() {
        if best.as_ref().is_some_and(|b| b.peak <= lower_bound) || limits.is_cancelled() {
            break;
        }
        let placement = place_in_order(problem, &placer.order(problem))?;
        let peak = problem.check(&placement)?;
        if best.as_ref().is_none_or(|b| peak < b.peak) {
            best = Some(ConflictResult {
                placement,
                peak,
                method: placer.name(),
                lower_bound,
            });
        }
    }
    match best {
        Some(b) => Ok(b),
        None => {
            let placement = place_in_order(problem, &BySize.order(problem))?;
            let peak = problem.check(&placement)?;
            Ok(ConflictResult {
                placement,
                peak,
                method: BySize.name(),
                lower_bound,
            })
        }
    }
}

/// The largest big-M (the warm peak in model units) [`place_ilp`] builds a model for.
const MAX_ILP_UNITS: u64 = 1 << 20;

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Limits of [`place_ilp`].
#[derive(Debug, Clone, PartialEq)]
pub struct ConflictIlpOptions {
    /// Largest number of conflicting pairs modelled (one binary each); above it the model is
    /// not built and the warm start comes back.
    pub max_pairs: usize,
    /// Branch-and-bound node cap (deterministic effort).
    pub max_nodes: u64,
    /// Wall-clock cap (seconds).
    pub time_limit: Option<f64>,
}

impl Default for ConflictIlpOptions {
    fn default() -> Self {
        ConflictIlpOptions {
            max_pairs: 1_500,
            max_nodes: 500,
            time_limit: Some(2.0),
        }
    }
}

/// The big-M disjunctive placement model (OLLA, TelaMalloc) on the conflict pairs, solved by
/// HiGHS through [`crate::mip`]: minimise the peak `P` with `offset_i = alignment_i · k_i`,
/// `offset_i + size_i ≤ P`, and for every conflicting pair one binary choosing which lies
/// below (`M` = the warm start's peak, also `P`'s upper bound). Warm-started from `warm`
/// (a valid placement), so the result is valid and never worse; its lower bound is
/// `max(clique bound, ⌈dual bound⌉)`. Returns the warm start unchanged when the model would
/// exceed `max_pairs`. Size: `1 + n + c` columns and `n + 2c` rows for `n` buffers and `c`
/// pairs.
pub fn place_ilp(
    problem: &ConflictProblem,
    warm: &Placement,
    opts: &ConflictIlpOptions,
    limits: &Limits,
) -> Result<ConflictResult, PlacementError> {
    use crate::mip::{self, MipOptions, Model, Watch};
    let warm_peak = problem.check(warm)?;
    let lower_bound = problem.clique_bound();
    let result =
        |placement: Placement, peak: u64, bound: u64, method: &'static str| ConflictResult {
            placement,
            peak,
            method,
            lower_bound: bound.max(lower_bound).min(peak),
        };
    let n = problem.sizes.len();
    let pairs: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| {
            problem.conflicts[i]
                .iter()
                .map(move |&j| (i, j as usize))
                .filter(|&(i, j)| i < j)
        })
        .collect();
    if n == 0 || pairs.len() > opts.max_pairs || warm_peak <= lower_bound || warm_peak >= 1 << 52 {
        return Ok(result(warm.clone(), warm_peak, lower_bound, "given"));
    }
    // Model unit: the gcd of every size and alignment (offsets are multiples of it), which
    // keeps the coefficients small; a model whose big-M stays large is not built (HiGHS'
    // presolve inside its sub-MIP heuristics can stall on such rows).
    let unit = problem
        .sizes
        .iter()
        .chain(&problem.alignments)
        .fold(0u64, |g, &x| gcd(g, x.max(1)))
        .max(1);
    if warm_peak / unit > MAX_ILP_UNITS {
        return Ok(result(warm.clone(), warm_peak, lower_bound, "given"));
    }
    let m = (warm_peak / unit) as f64;
    let size = |i: usize| (problem.sizes[i] / unit) as f64;
    let align = |i: usize| (problem.alignments[i].max(1).max(unit) / unit) as f64;
    let mut model = Model::new();
    let p = model.add_column(1.0, ((lower_bound / unit) as f64).min(m)..=m);
    let mut start = vec![m];
    let ks: Vec<_> = (0..n)
        .map(|i| {
            let a = problem.alignments[i].max(1).max(unit);
            let hi = (warm_peak - problem.sizes[i].min(warm_peak)) / a;
            start.push((warm.offsets[i] / a) as f64);
            model.add_integer_column(0.0, 0.0..=hi as f64)
        })
        .collect();
    for (i, &k) in ks.iter().enumerate() {
        model.add_row(..=-size(i), [(k, align(i)), (p, -1.0)]);
    }
    for &(i, j) in &pairs {
        let z = model.add_integer_column(0.0, 0.0..=1.0);
        // z = 1: i above j.
        start.push(if warm.offsets[i] >= warm.offsets[j] {
            1.0
        } else {
            0.0
        });
        model.add_row(
            ..=-size(i),
            [(ks[i], align(i)), (ks[j], -align(j)), (z, -m)],
        );
        model.add_row(
            ..=m - size(j),
            [(ks[j], align(j)), (ks[i], -align(i)), (z, m)],
        );
    }
    let options = MipOptions {
        time_limit: opts.time_limit,
        max_nodes: Some(opts.max_nodes),
        // Root heuristics a node cap does not bound.
        switched_off: mip::NODE_CAPPED_OFF.to_vec(),
        lenient: true,
        ..MipOptions::default()
    };
    let flag = limits.cancel.as_ref().map(|c| c.flag());
    let watch = Watch {
        cancel: flag,
        ..Watch::NONE
    };
    let Ok(sol) = mip::solve(model, &options, &start, &watch) else {
        return Ok(result(warm.clone(), warm_peak, lower_bound, "given"));
    };
    let bound = sol
        .dual_bound
        .map_or(0, |d| (d - 1e-6).ceil().max(0.0) as u64 * unit);
    if let Some(cols) = sol.columns {
        let placement = Placement {
            offsets: (0..n)
                .map(|i| {
                    cols[ks[i].index()].round().max(0.0) as u64
                        * problem.alignments[i].max(1).max(unit)
                })
                .collect(),
        };
        if let Ok(peak) = problem.check(&placement) {
            if peak < warm_peak {
                return Ok(result(placement, peak, bound, "conflict-ilp"));
            }
        }
    }
    Ok(result(warm.clone(), warm_peak, bound, "given"))
}

/// How [`exact`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExactStatus {
    /// The search finished (or met the lower bound): the peak is optimal.
    Optimal,
    /// The node limit or the stop flag ended it first: the best placement found.
    NodeLimit,
}

/// Exact search for the least peak under a conflict relation, by depth-first branching on
/// which buffer is placed next, each at its lowest feasible offset given the placed ones.
///
/// Why it is exact: sort an optimal placement by offset and place its buffers in that order,
/// each at its lowest feasible offset: every buffer lands at or below its offset in the
/// optimum (a conflicting buffer placed earlier started at or below it and now ends at or
/// below where it ended), so some branch reaches a peak at most the optimum's.
/// Pruning: a branch whose peak, or whose any unplaced buffer's lowest top, reaches the best
/// peak found is cut; two non-conflicting buffers commute (placing one never moves the other),
/// so after `a` only `b` > `a` or `b` conflicting with `a` is tried. Starts from `incumbent`
/// (a valid placement); the bound is the clique bound.
///
/// Cost: exponential in the worst case; `max_nodes` (deterministic effort) caps it, and
/// `limits`' stop flag is polled per node. Reference: the branch-and-bound over canonical
/// placements of MiniMalloc (Moffitt, ASPLOS 2023), here on a conflict graph instead of
/// time sections.
pub fn exact(
    problem: &ConflictProblem,
    incumbent: &Placement,
    max_nodes: u64,
    limits: &Limits,
) -> Result<(ConflictResult, ExactStatus, u64), PlacementError> {
    let n = problem.sizes.len();
    let mut best_peak = problem.check(incumbent)?;
    let mut best = incumbent.offsets.clone();
    let lower_bound = problem.clique_bound();
    let mut nodes = 0u64;
    let mut stopped = false;
    if best_peak > lower_bound && n > 0 {
        let mut offsets = vec![u64::MAX; n];
        let mut order: Vec<usize> = Vec::with_capacity(n);
        search(
            problem,
            &mut offsets,
            &mut order,
            0,
            &mut best_peak,
            &mut best,
            lower_bound,
            &mut nodes,
            max_nodes,
            limits,
            &mut stopped,
        )?;
    }
    let placement = Placement { offsets: best };
    let peak = problem.check(&placement)?;
    let status = if stopped && peak > lower_bound {
        ExactStatus::NodeLimit
    } else {
        ExactStatus::Optimal
    };
    let bound = if status == ExactStatus::Optimal {
        peak
    } else {
        lower_bound
    };
    Ok((
        ConflictResult {
            placement,
            peak,
            method: "conflict-exact",
            lower_bound: bound,
        },
        status,
        nodes,
    ))
}

/// The lowest aligned offset of `i` overlapping no placed conflicting buffer.
fn lowest_fit(problem: &ConflictProblem, offsets: &[u64], i: usize) -> Option<u64> {
    let (size, align) = (problem.sizes[i], problem.alignments[i].max(1));
    let mut spans: Vec<(u64, u64)> = problem.conflicts[i]
        .iter()
        .filter(|&&j| offsets[j as usize] != u64::MAX)
        .map(|&j| {
            let o = offsets[j as usize];
            (o, o.saturating_add(problem.sizes[j as usize]))
        })
        .collect();
    spans.sort_unstable();
    let mut at = 0u64;
    for (lo, hi) in spans {
        if at.checked_add(size)? <= lo {
            break;
        }
        if hi > at {
            at = align_up(hi, align)?;
        }
    }
    Some(at)
}

#[allow(clippy::too_many_arguments)]
fn search(
    problem: &ConflictProblem,
    offsets: &mut [u64],
    order: &mut Vec<usize>,
    peak: u64,
    best_peak: &mut u64,
    best: &mut Vec<u64>,
    lower_bound: u64,
    nodes: &mut u64,
    max_nodes: u64,
    limits: &Limits,
    stopped: &mut bool,
) -> Result<(), PlacementError> {
    if *stopped || *best_peak <= lower_bound {
        return Ok(());
    }
    *nodes += 1;
    if *nodes > max_nodes || limits.is_cancelled() {
        *stopped = true;
        return Ok(());
    }
    let n = problem.sizes.len();
    if order.len() == n {
        if peak < *best_peak {
            *best_peak = peak;
            best.copy_from_slice(offsets);
        }
        return Ok(());
    }
    // Each unplaced buffer's lowest fit; a branch is hopeless if any top reaches the best.
    let mut cands: Vec<(u64, usize)> = Vec::new();
    for i in 0..n {
        if offsets[i] != u64::MAX {
            continue;
        }
        let at = lowest_fit(problem, offsets, i).ok_or(PlacementError::Overflow { index: i })?;
        if at.saturating_add(problem.sizes[i]) >= *best_peak {
            return Ok(());
        }
        cands.push((at, i));
    }
    let last = order.last().copied();
    // Lowest first, then larger first (good placements early).
    cands.sort_unstable_by_key(|&(at, i)| (at, std::cmp::Reverse(problem.sizes[i]), i));
    for (at, i) in cands {
        if let Some(a) = last {
            let conflicts = problem.conflicts[a].binary_search(&(i as u32)).is_ok();
            if i < a && !conflicts {
                continue;
            }
        }
        offsets[i] = at;
        order.push(i);
        let top = peak.max(at + problem.sizes[i]);
        search(
            problem,
            offsets,
            order,
            top,
            best_peak,
            best,
            lower_bound,
            nodes,
            max_nodes,
            limits,
            stopped,
        )?;
        order.pop();
        offsets[i] = u64::MAX;
        if *stopped {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random conflict problems: sizes 1..=1000 aligned 1..64, each pair in conflict with
    /// probability `p` / 100.
    fn random(seed: u64, n: usize, p: u64) -> ConflictProblem {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let sizes = (0..n).map(|_| 1 + next() % 1000).collect();
        let alignments = (0..n).map(|_| 1 << (next() % 7)).collect();
        let mut pr = ConflictProblem::new(sizes, alignments);
        for a in 0..n {
            for b in a + 1..n {
                if next() % 100 < p {
                    pr.add_conflict(a, b);
                }
            }
        }
        pr.normalise();
        pr
    }

    /// The greedy clique from every start, straight from the definition (adjacency by
    /// binary search): what `clique_bound` must equal while its work cap does not bind.
    fn clique_by_definition(pr: &ConflictProblem) -> u64 {
        let adjacent = |a: usize, b: usize| pr.conflicts[a].binary_search(&(b as u32)).is_ok();
        (0..pr.sizes.len())
            .map(|v| {
                let mut nb: Vec<usize> = pr.conflicts[v].iter().map(|&x| x as usize).collect();
                nb.sort_unstable_by_key(|&x| (std::cmp::Reverse(pr.sizes[x]), x));
                let mut clique = vec![v];
                for x in nb {
                    if clique.iter().all(|&c| c == v || adjacent(c, x)) {
                        clique.push(x);
                    }
                }
                clique.iter().map(|&c| pr.sizes[c]).sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn the_clique_bound_is_the_greedy_clique_of_the_best_start() {
        for seed in 0..40 {
            for p in [0, 10, 50, 90, 100] {
                let pr = random(seed, 30 + seed as usize, p);
                assert_eq!(
                    pr.clique_bound(),
                    clique_by_definition(&pr),
                    "seed {seed}, p {p}"
                );
            }
        }
    }

    #[test]
    fn the_clique_bound_of_a_dense_relation_stops_at_its_work_cap_with_a_valid_bound() {
        // 4,000 buffers, every pair in conflict: the whole set is one clique, found from the
        // first start; the others are cut by the cap (without it, 4,000 starts of 16 M steps).
        let n = 4000;
        let mut pr = ConflictProblem::new((1..=n as u64).collect(), vec![1; n]);
        pr.conflicts = (0..n)
            .map(|i| (0..n as u32).filter(|&j| j as usize != i).collect())
            .collect();
        assert_eq!(pr.clique_bound(), (1..=n as u64).sum::<u64>());
    }

    #[test]
    fn every_member_gives_a_valid_placement_at_or_above_the_clique_bound() {
        for seed in 0..40 {
            let pr = random(seed, 60, seed % 90);
            let bound = pr.clique_bound();
            for placer in registry() {
                let p = place_in_order(&pr, &placer.order(&pr)).unwrap();
                let peak = pr.check(&p).unwrap();
                assert!(peak >= bound, "{} below the bound", placer.name());
            }
        }
    }

    #[test]
    fn a_complete_conflict_graph_stacks_every_buffer() {
        let mut pr = ConflictProblem::new(vec![100, 200, 300], vec![1, 1, 1]);
        pr.add_conflict(0, 1);
        pr.add_conflict(1, 2);
        pr.add_conflict(0, 2);
        pr.normalise();
        let r = portfolio(&pr, None, &Limits::UNLIMITED).unwrap();
        assert_eq!((r.peak, r.lower_bound), (600, 600));
    }

    #[test]
    fn buffers_without_conflicts_share_bytes() {
        let pr = ConflictProblem::new(vec![100, 200, 300], vec![1, 1, 1]);
        let r = portfolio(&pr, None, &Limits::UNLIMITED).unwrap();
        assert_eq!(r.peak, 300);
    }

    #[test]
    fn a_given_valid_placement_wins_ties_and_an_invalid_one_is_ignored() {
        let mut pr = ConflictProblem::new(vec![100, 100], vec![1, 1]);
        pr.add_conflict(0, 1);
        pr.normalise();
        let good = Placement {
            offsets: vec![100, 0],
        };
        let r = portfolio(&pr, Some(&good), &Limits::UNLIMITED).unwrap();
        assert_eq!((r.method, r.peak), ("given", 200));
        let bad = Placement {
            offsets: vec![0, 0],
        };
        let r = portfolio(&pr, Some(&bad), &Limits::UNLIMITED).unwrap();
        assert_ne!(r.method, "given");
        assert!(pr.check(&r.placement).is_ok());
    }

    #[test]
    fn repair_separates_what_fits_under_the_cap_and_never_adds_an_overlap() {
        for seed in 0..40 {
            let pr = random(seed, 50, 20);
            // A start where everything sits at 0 (every conflicting pair overlaps).
            let start = Placement {
                offsets: vec![0; 50],
            };
            let cap = pr.sizes.iter().sum::<u64>() / 3;
            let order: Vec<usize> = (0..50).collect();
            let r = repair(&pr, &start, cap, &order);
            for i in 0..50 {
                let moved = r.offsets[i] != 0;
                assert!(!moved || r.offsets[i] + pr.sizes[i] <= cap);
                for &j in &pr.conflicts[i] {
                    let j = j as usize;
                    let ov = |o: &[u64]| o[i] < o[j] + pr.sizes[j] && o[j] < o[i] + pr.sizes[i];
                    assert!(!ov(&r.offsets) || ov(&start.offsets));
                }
            }
        }
        // With room, every clash goes.
        let pr = random(7, 30, 30);
        let r = repair(
            &pr,
            &Placement {
                offsets: vec![0; 30],
            },
            u64::MAX,
            &(0..30).collect::<Vec<_>>(),
        );
        assert!(pr.check(&r).is_ok());
    }

    #[test]
    fn the_ilp_never_returns_worse_than_its_warm_start_and_its_bound_is_below_the_peak() {
        for seed in 0..12 {
            let pr = random(seed, 14, 30 + seed * 4);
            let warm = place_in_order(&pr, &BySize.order(&pr)).unwrap();
            let wp = pr.check(&warm).unwrap();
            let r = place_ilp(
                &pr,
                &warm,
                &ConflictIlpOptions::default(),
                &Limits::UNLIMITED,
            )
            .unwrap();
            assert_eq!(pr.check(&r.placement).unwrap(), r.peak);
            assert!(r.peak <= wp);
            assert!(r.lower_bound <= r.peak);
            assert!(r.lower_bound >= pr.clique_bound().min(r.peak));
        }
    }

    #[test]
    fn the_ilp_finds_the_optimum_where_greedy_by_size_misses_it() {
        // A 4-cycle 0-1-2-3-0 of sizes 100, 60, 100, 60: 0 and 2 share bytes, 1 and 3 too,
        // so the optimum is 160 (the clique bound); the warm start stacks all four (320).
        let mut pr = ConflictProblem::new(vec![100, 60, 100, 60], vec![1, 1, 1, 1]);
        for (a, b) in [(0, 1), (1, 2), (2, 3), (3, 0)] {
            pr.add_conflict(a, b);
        }
        pr.normalise();
        let bad = Placement {
            offsets: vec![0, 100, 160, 260],
        };
        assert_eq!(pr.check(&bad).unwrap(), 320);
        let r = place_ilp(
            &pr,
            &bad,
            &ConflictIlpOptions::default(),
            &Limits::UNLIMITED,
        )
        .unwrap();
        assert_eq!((r.peak, r.lower_bound), (160, 160), "{:?}", r.placement);
    }

    /// The least peak by trying every placement order with lowest fit (tiny problems).
    fn brute(pr: &ConflictProblem) -> u64 {
        fn go(pr: &ConflictProblem, offsets: &mut Vec<u64>, left: &mut Vec<usize>, best: &mut u64) {
            if left.is_empty() {
                let peak = (0..offsets.len())
                    .map(|i| offsets[i] + pr.sizes[i])
                    .max()
                    .unwrap();
                *best = (*best).min(peak);
                return;
            }
            for k in 0..left.len() {
                let i = left.remove(k);
                offsets[i] = lowest_fit(pr, offsets, i).unwrap();
                go(pr, offsets, left, best);
                offsets[i] = u64::MAX;
                left.insert(k, i);
            }
        }
        let n = pr.sizes.len();
        let mut best = u64::MAX;
        go(pr, &mut vec![u64::MAX; n], &mut (0..n).collect(), &mut best);
        best
    }

    #[test]
    fn the_exact_search_matches_brute_force_on_small_problems_and_proves_it() {
        for seed in 0..60 {
            let pr = random(seed, 6 + (seed % 3) as usize, 20 + seed % 60);
            let warm = place_in_order(&pr, &BySize.order(&pr)).unwrap();
            let (r, status, _) = exact(&pr, &warm, 1_000_000, &Limits::UNLIMITED).unwrap();
            assert_eq!(status, ExactStatus::Optimal);
            assert_eq!(r.peak, brute(&pr), "seed {seed}");
            assert_eq!(pr.check(&r.placement).unwrap(), r.peak);
            assert_eq!(r.lower_bound, r.peak);
        }
    }

    #[test]
    fn a_node_limit_keeps_the_incumbent_and_the_clique_bound() {
        let pr = random(3, 40, 50);
        let warm = place_in_order(&pr, &BySize.order(&pr)).unwrap();
        let wp = pr.check(&warm).unwrap();
        let (r, status, nodes) = exact(&pr, &warm, 10, &Limits::UNLIMITED).unwrap();
        assert!(r.peak <= wp);
        assert!(nodes <= 11);
        if status == ExactStatus::NodeLimit {
            assert_eq!(r.lower_bound, pr.clique_bound());
        }
    }

    #[test]
    fn an_overlap_of_conflicting_buffers_is_named() {
        let mut pr = ConflictProblem::new(vec![100, 100], vec![1, 1]);
        pr.add_conflict(0, 1);
        pr.normalise();
        let e = pr
            .check(&Placement {
                offsets: vec![0, 50],
            })
            .unwrap_err();
        assert_eq!(e, PlacementError::Overlap { a: 0, b: 1 });
    }
}
