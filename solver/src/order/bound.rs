//! A LOAD lower bound that holds for every topological order (no spill, no recompute).
//!
//! [`order_lower_bound`] reports the larger of the per-node bound below ([`per_node_bound`])
//! and the min-cut bound of [`super::mincut`], which dominates it step by step.
//!
//! Idea (the order-independent bound of memory-aware scheduling, cf. OLLA / MODeL, and
//! `shared/tools/order_lower_bound.py`): whatever the order, when node `v` runs every value
//! produced by `v` or an ancestor of `v` (graph inputs: always) and read by `v` or a descendant
//! of `v` (graph outputs: always; an unread output counts at its producer) is reserved, and so is
//! `v`'s workspace. The bound is the maximum over `v` of those bytes. Two cheap facts are added:
//! the first step of any order runs a source node while every reserved graph input is live, and
//! the last step runs a sink while every graph output is live.
//!
//! With in-place merging on, an output shares its donor's bytes only at the step where the donor
//! dies (the donor's last reader, which produces the output), so at node `v` the bound subtracts
//! the size of each of `v`'s outputs named in an in-place pair that could merge (the output fits
//! in the donor's bytes and its alignment divides the largest alignment of any buffer the donor
//! could belong to, as [`super::lifetimes()`] requires). A malformed pair whose output is not
//! produced by the pair's node could hide that value anywhere, so such a value is left out.
//!
//! Complexity: ancestor and descendant sets are bitsets over a Kahn topological order, built in
//! blocks of at most [`BLOCK_BYTES`] so memory stays bounded: time
//! `O((n + e + Σ readers) · n / 64)` word operations plus one addition per (node, live value)
//! pair. When either exceeds [`MAX_WORK`] (about n > 60,000 on DNN graphs) it falls back to an
//! `O(n + e)` bound that only counts what is surely live together: at each node the values it
//! reads or writes plus the graph inputs live to the end (minus in-place savings), and the
//! first/last-step facts above. No recursion.

use super::lifetimes::inplace_fits;
use super::mincut::{min_cut_with_facts, DEFAULT_WORK};
use super::{LifetimeOptions, OrderProblem};
use crate::limits::Limits;

/// Word operations (or node/value additions) above which the exact bitset bound is replaced
/// by the linear fallback.
pub const MAX_WORK: u128 = 1 << 28;

/// Memory budget of one block of ancestor + descendant bitsets.
pub const BLOCK_BYTES: usize = 64 << 20;

/// The order bound reported by the planner: the larger of [`per_node_bound`] and the min-cut
/// bound of [`super::mincut`] (default work budget, steps ranked by the listed order). Valid
/// for every topological order of `problem` (0 if it has a cycle).
pub fn order_lower_bound(problem: &OrderProblem, opts: &LifetimeOptions) -> u64 {
    order_lower_bound_hinted(problem, opts, None)
}

/// [`order_lower_bound`] with a reference order (e.g. the best order found) that ranks the
/// steps the min-cut bound evaluates first; the bound is valid whatever the hint.
pub fn order_lower_bound_hinted(
    problem: &OrderProblem,
    opts: &LifetimeOptions,
    hint: Option<&[usize]>,
) -> u64 {
    order_lower_bound_within(problem, opts, hint, &Limits::UNLIMITED)
}

/// [`order_lower_bound_hinted`] whose min cut also stops when `limits`' time is spent or its
/// stop flag is raised (a weaker bound then, never a wrong one; the per-node bound is always
/// computed in full). Without a time limit or a flag it is [`order_lower_bound_hinted`].
pub fn order_lower_bound_within(
    problem: &OrderProblem,
    opts: &LifetimeOptions,
    hint: Option<&[usize]>,
    limits: &Limits,
) -> u64 {
    let facts = Facts::new(problem, opts);
    let (cheap, topo) = per_node_with_facts(problem, &facts);
    let Some(topo) = topo else {
        return cheap;
    };
    let clock = limits.start_time_and_flag();
    min_cut_with_facts(
        problem,
        &facts,
        hint,
        Some(&topo),
        cheap,
        (DEFAULT_WORK, &clock),
    )
    .bytes
}

/// Distinct rounding wastes tried as thresholds by [`aligned_order_bound`] (the largest ones).
pub const WASTE_THRESHOLDS: usize = 3;

/// A lower bound of the arena peak of every order (bytes), never below `floor` (pass the
/// [`order_lower_bound_hinted`] already known): the order bound tightened by alignment, as
/// `PlacementProblem::aligned_load` tightens LOAD. It bounds peaks, not the LOAD of orders
/// (which ignores alignment), so an order search must not stop on it.
///
/// When every value and workspace alignment is a multiple of `g` (the smallest of them), the
/// buffers alive together in a set `S` need at least `Σ_S r − max_S w` bytes, `r` being a
/// size rounded up to `g` and `w = r − size` (all rounded but the topmost). For a threshold
/// `θ`, count each value at `r` where `w ≤ θ` and at its size where `w > θ`, and take `θ`
/// off the sum: if `S` holds a value above the threshold, its own waste is already taken off
/// (at least `max_S w − θ`), and otherwise `θ ≥ max_S w`; either way the result is at most
/// `Σ_S r − max_S w`. Every term of the order bound (per node, first and last step, min cut)
/// is such a sum over one step's live values, so the order bound of the adjusted sizes minus
/// `θ` holds for every order's placement. The maximum over the [`WASTE_THRESHOLDS`] largest
/// distinct wastes (θ = 0 is the order bound itself). With in-place merging on (one buffer
/// for several values) it returns `floor`. Cost: up to [`WASTE_THRESHOLDS`] order bounds, each
/// stopped by `limits` as in [`order_lower_bound_within`] (none is started once they are spent).
pub fn aligned_order_bound(
    problem: &OrderProblem,
    opts: &LifetimeOptions,
    hint: Option<&[usize]>,
    floor: u64,
    limits: &Limits,
) -> u64 {
    let started = std::time::Instant::now();
    let has_workspace = problem.nodes.iter().any(|v| v.workspace > 0);
    let g = problem
        .values
        .iter()
        .map(|t| t.alignment)
        .chain(has_workspace.then_some(problem.workspace_alignment))
        .min()
        .unwrap_or(1)
        .max(1);
    if opts.inplace || g == 1 || !g.is_power_of_two() {
        return floor;
    }
    let waste = |size: u64| crate::problem::align_up(size, g).map_or(0, |r| r - size);
    let mut wastes: Vec<u64> = problem
        .values
        .iter()
        .map(|t| waste(t.size))
        .chain(
            problem
                .nodes
                .iter()
                .filter(|v| v.workspace > 0)
                .map(|v| waste(v.workspace)),
        )
        .filter(|&w| w > 0)
        .collect();
    wastes.sort_unstable_by(|a, b| b.cmp(a));
    wastes.dedup();
    let mut best = floor;
    for &theta in wastes.iter().take(WASTE_THRESHOLDS) {
        let left = limits.remaining_after(started.elapsed());
        if left.is_cancelled() || left.time.is_some_and(|t| t.is_zero()) {
            break;
        }
        let adjust = |size: u64| {
            if size == 0 || waste(size) > theta {
                size
            } else {
                size + waste(size)
            }
        };
        let mut adjusted = problem.clone();
        for t in &mut adjusted.values {
            t.size = adjust(t.size);
        }
        for v in &mut adjusted.nodes {
            v.workspace = adjust(v.workspace);
        }
        let bound = order_lower_bound_within(&adjusted, opts, hint, &left).saturating_sub(theta);
        best = best.max(bound);
    }
    best
}

/// The per-node bound of the module doc alone (no min cut): cheaper and weaker than
/// [`order_lower_bound`]. Valid for every topological order (0 if `problem` has a cycle).
pub fn per_node_bound(problem: &OrderProblem, opts: &LifetimeOptions) -> u64 {
    per_node_with_facts(problem, &Facts::new(problem, opts)).0
}

/// The per-node bound and the listed topological order (`None` for an empty problem or one
/// with a cycle).
fn per_node_with_facts(problem: &OrderProblem, facts: &Facts) -> (u64, Option<Vec<usize>>) {
    let n = problem.nodes.len();
    let ends = facts.first_and_last_steps(problem);
    if n == 0 {
        return (ends, None);
    }
    let Ok(topo) = problem.listed_topological_order() else {
        return (0, None);
    };
    let words = n.div_ceil(64) as u128;
    let edges: usize = problem.nodes.iter().map(|v| v.inputs.len()).sum::<usize>()
        + problem
            .values
            .iter()
            .map(|t| 1 + t.consumers.len())
            .sum::<usize>();
    let work = (n + edges) as u128 * words;
    let per_node = if work <= MAX_WORK {
        exact_bound(problem, &topo, facts).unwrap_or_else(|| local_bound(problem, facts))
    } else {
        local_bound(problem, facts)
    };
    (per_node.max(ends), Some(topo))
}

/// What the in-place rules allow, computed once: values left out and per-node savings.
pub(crate) struct Facts {
    /// Values never counted (named as the output of an in-place pair on a node that does not
    /// produce them).
    excluded: Vec<bool>,
    /// Bytes that in-place merging may save at each node.
    pub(crate) saving: Vec<u64>,
}

impl Facts {
    pub(crate) fn new(problem: &OrderProblem, opts: &LifetimeOptions) -> Self {
        let (n, m) = (problem.nodes.len(), problem.values.len());
        let mut facts = Facts {
            excluded: vec![false; m],
            saving: vec![0; n],
        };
        if !opts.inplace {
            return facts;
        }
        // Largest alignment of any buffer a value could end up in, propagated along in-place
        // pairs in topological order (a merge needs the output to fit in the donor's own
        // bytes, and its alignment to divide the buffer's).
        let mut max_align: Vec<u64> = problem.values.iter().map(|t| t.alignment).collect();
        let order = problem
            .listed_topological_order()
            .unwrap_or_else(|_| (0..n).collect());
        let mut done = vec![false; n];
        let mut stamp = vec![usize::MAX; m];
        for &v in &order {
            for &(out, inp) in &problem.nodes[v].inplace {
                if out >= m || inp >= m || out == inp || problem.values[inp].live_at_end {
                    continue;
                }
                if problem.values[out].producer != Some(v) {
                    facts.excluded[out] = true;
                    continue;
                }
                // A donor whose producer is not handled yet may sit in any buffer.
                let settled = match problem.values[inp].producer {
                    None => true,
                    Some(p) => p == v || done[p],
                };
                let cap_align = if settled { max_align[inp] } else { u64::MAX };
                let ov = &problem.values[out];
                if inplace_fits(ov, &problem.values[inp], cap_align) {
                    if stamp[out] != v {
                        stamp[out] = v;
                        facts.saving[v] = facts.saving[v].saturating_add(ov.size);
                    }
                    max_align[out] = max_align[out].max(cap_align);
                }
            }
            done[v] = true;
        }
        facts
    }

    /// Whether value `t` holds bytes that the bound may count.
    pub(crate) fn counts(&self, problem: &OrderProblem, t: usize) -> bool {
        let val = &problem.values[t];
        !self.excluded[t]
            && (val.producer.is_some() || val.live_at_end || !val.consumers.is_empty())
    }

    /// Bytes surely live at the first step (every reserved graph input plus a source node's
    /// outputs and workspace) and at the last step (every graph output plus a sink node's
    /// inputs, outputs and workspace); the larger of the two. Minimised over sources / sinks.
    fn first_and_last_steps(&self, problem: &OrderProblem) -> u64 {
        let n = problem.nodes.len();
        let mut inputs = 0u64;
        let mut outputs = 0u64;
        for (t, val) in problem.values.iter().enumerate() {
            if !self.counts(problem, t) {
                continue;
            }
            if val.producer.is_none() {
                inputs = inputs.saturating_add(val.size);
            }
            if val.live_at_end {
                outputs = outputs.saturating_add(val.size);
            }
        }
        if n == 0 {
            return inputs.max(outputs);
        }
        // Per node: bytes of the counted values it reads (not live to the end) and of those it
        // produces (all, and those not live to the end).
        let mut reads = vec![0u64; n];
        let mut writes = vec![0u64; n];
        let mut writes_dying = vec![0u64; n];
        for (t, val) in problem.values.iter().enumerate() {
            if !self.counts(problem, t) {
                continue;
            }
            if !val.live_at_end {
                for &c in val.consumers.iter().filter(|&&c| c < n) {
                    reads[c] = reads[c].saturating_add(val.size);
                }
            }
            if let Some(p) = val.producer.filter(|&p| p < n) {
                writes[p] = writes[p].saturating_add(val.size);
                if !val.live_at_end {
                    writes_dying[p] = writes_dying[p].saturating_add(val.size);
                }
            }
        }
        let preds = problem.predecessors();
        let mut has_succ = vec![false; n];
        for &p in preds.iter().flatten() {
            has_succ[p] = true;
        }
        let mut first = u64::MAX;
        let mut last = u64::MAX;
        for (v, node) in problem.nodes.iter().enumerate() {
            if preds[v].is_empty() {
                let here = inputs
                    .saturating_add(writes[v])
                    .saturating_add(node.workspace)
                    .saturating_sub(self.saving[v]);
                first = first.min(here);
            }
            if !has_succ[v] {
                let here = outputs
                    .saturating_add(reads[v])
                    .saturating_add(writes_dying[v])
                    .saturating_add(node.workspace)
                    .saturating_sub(self.saving[v]);
                last = last.min(here);
            }
        }
        let first = if first == u64::MAX { 0 } else { first };
        let last = if last == u64::MAX { 0 } else { last };
        first.max(last)
    }
}

/// ORs row `src` of `rows` (rows of `stride` words, first `w` used) into row `dst`.
fn or_row(rows: &mut [u64], stride: usize, w: usize, dst: usize, src: usize) {
    if dst == src {
        return;
    }
    let (d, s) = if dst < src {
        let (head, tail) = rows.split_at_mut(src * stride);
        (&mut head[dst * stride..dst * stride + w], &tail[..w])
    } else {
        let (head, tail) = rows.split_at_mut(dst * stride);
        (&mut tail[..w], &head[src * stride..src * stride + w])
    };
    for (x, y) in d.iter_mut().zip(s) {
        *x |= *y;
    }
}

/// The ancestor/descendant bound, max over nodes, computed block by block of node indices;
/// `None` when the (node, live value) pairs to add up exceed [`MAX_WORK`].
fn exact_bound(problem: &OrderProblem, topo: &[usize], facts: &Facts) -> Option<u64> {
    let n = problem.nodes.len();
    let preds = problem.predecessors();
    let succ = problem.successors();
    let mut load = vec![0u64; n];
    let total_words = n.div_ceil(64);
    let stride = (BLOCK_BYTES / 16 / n.max(1)).clamp(1, total_words);
    let mut anc = vec![0u64; n * stride];
    let mut desc = vec![0u64; n * stride];
    let mut read = vec![0u64; stride];
    let mut pairs: u128 = 0;
    let mut first_word = 0;
    while first_word < total_words {
        let w = stride.min(total_words - first_word);
        let lo = first_word * 64;
        let hi = ((first_word + w) * 64).min(n);
        let bit = |v: usize| -> Option<(usize, u64)> {
            (lo <= v && v < hi).then(|| ((v - lo) / 64, 1u64 << ((v - lo) % 64)))
        };
        // Ancestors (incl. self) restricted to [lo, hi), in topological order; descendants in
        // reverse topological order.
        for &v in topo {
            anc[v * stride..v * stride + w].fill(0);
            for &p in &preds[v] {
                or_row(&mut anc, stride, w, v, p);
            }
            if let Some((i, b)) = bit(v) {
                anc[v * stride + i] |= b;
            }
        }
        for &v in topo.iter().rev() {
            desc[v * stride..v * stride + w].fill(0);
            for &s in &succ[v] {
                or_row(&mut desc, stride, w, v, s);
            }
            if let Some((i, b)) = bit(v) {
                desc[v * stride + i] |= b;
            }
        }
        let full_mask = |i: usize| -> u64 {
            let live = hi.saturating_sub(lo + i * 64).min(64);
            if live == 64 {
                u64::MAX
            } else {
                (1u64 << live) - 1
            }
        };
        for (t, val) in problem.values.iter().enumerate() {
            if !facts.counts(problem, t) {
                continue;
            }
            // Read mask: nodes at or before which some reader still comes.
            if val.live_at_end {
                for (i, r) in read[..w].iter_mut().enumerate() {
                    *r = full_mask(i);
                }
            } else {
                read[..w].fill(0);
                for &c in &val.consumers {
                    if c < n {
                        for (r, a) in read[..w].iter_mut().zip(&anc[c * stride..c * stride + w]) {
                            *r |= *a;
                        }
                    }
                }
                if let Some((i, b)) = val.producer.and_then(bit) {
                    read[i] |= b;
                }
            }
            // Born mask: nodes at which it has surely been produced.
            for (i, &r) in read[..w].iter().enumerate() {
                let born = match val.producer {
                    None => full_mask(i),
                    Some(p) if p < n => desc[p * stride + i],
                    Some(_) => 0,
                };
                let mut s = born & r;
                pairs += u128::from(s.count_ones());
                while s != 0 {
                    let v = lo + i * 64 + s.trailing_zeros() as usize;
                    load[v] = load[v].saturating_add(val.size);
                    s &= s - 1;
                }
            }
            if pairs > MAX_WORK {
                return None;
            }
        }
        first_word += w;
    }
    Some(finish(problem, facts, load))
}

/// The linear fallback for very large graphs, `O(n + e)`: at node `v`, the values it reads and
/// writes and every graph input that stays live to the end are surely reserved together (plus
/// its workspace, minus in-place savings). Weaker than the ancestor/descendant bound (it ignores
/// values that merely pass over `v`) but valid for every order.
fn local_bound(problem: &OrderProblem, facts: &Facts) -> u64 {
    let n = problem.nodes.len();
    let mut load = vec![0u64; n];
    let mut always = 0u64;
    for (t, val) in problem.values.iter().enumerate() {
        if !facts.counts(problem, t) {
            continue;
        }
        if val.producer.is_none() && val.live_at_end {
            always = always.saturating_add(val.size);
            continue;
        }
        for &c in &val.consumers {
            if c < n {
                load[c] = load[c].saturating_add(val.size);
            }
        }
        if let Some(p) = val.producer.filter(|&p| p < n) {
            load[p] = load[p].saturating_add(val.size);
        }
    }
    for l in &mut load {
        *l = l.saturating_add(always);
    }
    finish(problem, facts, load)
}

/// Adds workspaces, subtracts in-place savings and takes the maximum over nodes.
fn finish(problem: &OrderProblem, facts: &Facts, load: Vec<u64>) -> u64 {
    load.into_iter()
        .zip(&problem.nodes)
        .zip(&facts.saving)
        .map(|((l, node), &s)| l.saturating_add(node.workspace).saturating_sub(s))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::local_search::tests::{all_orders, chain, random_problem, value};
    use crate::order::Node;

    fn best_load(p: &OrderProblem, opts: &LifetimeOptions) -> u64 {
        all_orders(p)
            .iter()
            .map(|o| p.load(o, opts))
            .min()
            .unwrap_or(0)
    }

    /// The smallest aligned LOAD of any order's lifetimes: no placement of any order peaks
    /// lower.
    fn best_aligned_load(p: &OrderProblem, opts: &LifetimeOptions) -> u64 {
        all_orders(p)
            .iter()
            .map(|o| crate::order::lifetimes(p, o, opts).problem.aligned_load())
            .min()
            .unwrap_or(0)
    }

    #[test]
    fn the_aligned_order_bound_lies_between_the_order_bound_and_every_orders_aligned_load() {
        let opts = LifetimeOptions::default();
        let mut above = 0;
        for seed in 0..300 {
            let mut p = random_problem(7000 + seed, 7);
            for t in &mut p.values {
                t.alignment = 16;
            }
            p.workspace_alignment = 16;
            let floor = order_lower_bound(&p, &opts);
            let bound = aligned_order_bound(&p, &opts, None, floor, &Limits::UNLIMITED);
            let best = best_aligned_load(&p, &opts);
            assert!(
                floor <= bound && bound <= best,
                "seed {seed}: order bound {floor}, aligned {bound}, best aligned LOAD {best}"
            );
            above += usize::from(bound > floor);
        }
        assert!(above > 150, "only {above} of 300 above the order bound");
    }

    /// A random problem whose values and workspaces are all 16-byte aligned.
    fn aligned_16() -> OrderProblem {
        let mut p = random_problem(7, 7);
        for t in &mut p.values {
            t.alignment = 16;
        }
        p.workspace_alignment = 16;
        p
    }

    #[test]
    fn the_aligned_order_bound_is_the_floor_with_inplace_merging_or_unaligned_values() {
        let mut p = aligned_16();
        let opts = LifetimeOptions::default();
        let floor = order_lower_bound(&p, &opts);
        assert!(aligned_order_bound(&p, &opts, None, floor, &Limits::UNLIMITED) > floor);
        let inplace = LifetimeOptions { inplace: true };
        assert_eq!(
            aligned_order_bound(&p, &inplace, None, 5, &Limits::UNLIMITED),
            5
        );
        p.values[0].alignment = 1;
        assert_eq!(
            aligned_order_bound(&p, &opts, None, floor, &Limits::UNLIMITED),
            floor
        );
    }

    #[test]
    fn a_spent_time_limit_leaves_the_aligned_order_bound_at_its_floor() {
        let p = aligned_16();
        let opts = LifetimeOptions::default();
        let floor = order_lower_bound(&p, &opts);
        let spent = Limits::with_time(std::time::Duration::ZERO);
        assert_eq!(aligned_order_bound(&p, &opts, None, floor, &spent), floor);
        let open = Limits::with_time(std::time::Duration::from_secs(3600));
        assert_eq!(
            aligned_order_bound(&p, &opts, None, floor, &open),
            aligned_order_bound(&p, &opts, None, floor, &Limits::UNLIMITED)
        );
        assert_eq!(
            order_lower_bound_within(&p, &opts, None, &spent),
            per_node_bound(&p, &opts)
        );
    }

    /// in(100) -> a -> v(100) -> b (workspace 7) -> out(10); a may work in place.
    fn small_chain() -> OrderProblem {
        OrderProblem {
            nodes: vec![
                Node {
                    inputs: vec![0],
                    outputs: vec![1],
                    workspace: 0,
                    inplace: vec![(1, 0)],
                },
                Node {
                    inputs: vec![1],
                    outputs: vec![2],
                    workspace: 7,
                    inplace: vec![],
                },
            ],
            values: vec![
                value(100, None, vec![0], false),
                value(100, Some(0), vec![1], false),
                value(10, Some(1), vec![], true),
            ],
            workspace_alignment: 1,
        }
    }

    #[test]
    fn the_bound_of_a_chain_is_its_only_order_load() {
        let p = small_chain();
        for inplace in [false, true] {
            let opts = LifetimeOptions { inplace };
            assert_eq!(order_lower_bound(&p, &opts), p.load(&[0, 1], &opts));
        }
        assert_eq!(
            order_lower_bound(&p, &LifetimeOptions { inplace: true }),
            117
        );
    }

    #[test]
    fn a_value_read_by_a_later_branch_counts_at_the_nodes_that_must_precede_that_branch() {
        // in -> a -> x(50); x read by b (-> y(5)) and by c, which also reads y (-> out(1)).
        // Whatever the order, x is live while b runs.
        let p = OrderProblem {
            nodes: vec![
                Node {
                    inputs: vec![0],
                    outputs: vec![1],
                    ..Node::default()
                },
                Node {
                    inputs: vec![1],
                    outputs: vec![2],
                    ..Node::default()
                },
                Node {
                    inputs: vec![1, 2],
                    outputs: vec![3],
                    ..Node::default()
                },
            ],
            values: vec![
                value(10, None, vec![0], false),
                value(50, Some(0), vec![1, 2], false),
                value(5, Some(1), vec![2], false),
                value(1, Some(2), vec![], true),
            ],
            workspace_alignment: 1,
        };
        let opts = LifetimeOptions::default();
        assert_eq!(order_lower_bound(&p, &opts), 60);
        assert_eq!(best_load(&p, &opts), 60);
    }

    #[test]
    fn every_graph_input_counts_at_the_first_step() {
        // Two unrelated nodes, each reading its own input: no node is an ancestor of the
        // other, but both inputs are live at step 0.
        let p = OrderProblem {
            nodes: vec![
                Node {
                    inputs: vec![0],
                    outputs: vec![2],
                    ..Node::default()
                },
                Node {
                    inputs: vec![1],
                    outputs: vec![3],
                    ..Node::default()
                },
            ],
            values: vec![
                value(40, None, vec![0], false),
                value(30, None, vec![1], false),
                value(1, Some(0), vec![], true),
                value(1, Some(1), vec![], true),
            ],
            workspace_alignment: 1,
        };
        let opts = LifetimeOptions::default();
        assert_eq!(order_lower_bound(&p, &opts), 71);
        assert_eq!(best_load(&p, &opts), 71);
    }

    #[test]
    fn a_malformed_inplace_pair_never_makes_the_bound_exceed_a_load() {
        // Node 1 names node 0's output as its in-place output.
        let mut p = small_chain();
        p.nodes[1].inplace = vec![(1, 0)];
        p.nodes[0].inplace = vec![];
        for inplace in [false, true] {
            let opts = LifetimeOptions { inplace };
            assert!(order_lower_bound(&p, &opts) <= best_load(&p, &opts));
        }
    }

    #[test]
    fn the_bound_never_exceeds_the_best_load_of_random_dags() {
        for seed in 0..300 {
            let p = random_problem(seed, 7);
            for inplace in [false, true] {
                let opts = LifetimeOptions { inplace };
                let bound = order_lower_bound(&p, &opts);
                assert!(
                    bound <= best_load(&p, &opts),
                    "seed {seed} inplace {inplace}"
                );
            }
        }
    }

    #[test]
    fn the_empty_problem_has_a_zero_bound() {
        assert_eq!(
            order_lower_bound(&OrderProblem::default(), &LifetimeOptions::default()),
            0
        );
    }

    #[test]
    fn the_linear_fallback_bounds_a_million_node_chain_exactly_and_fast() {
        let n = 1_000_000;
        let p = chain(n);
        let order: Vec<usize> = (0..n).collect();
        let started = std::time::Instant::now();
        for inplace in [false, true] {
            let opts = LifetimeOptions { inplace };
            // A chain has one order, and at each node only its input and output are live.
            assert_eq!(order_lower_bound(&p, &opts), p.load(&order, &opts));
        }
        assert!(started.elapsed().as_secs_f64() < 10.0);
    }

    #[test]
    fn the_linear_fallback_agrees_with_the_exact_bound_on_chains() {
        let p = chain(500);
        for inplace in [false, true] {
            let opts = LifetimeOptions { inplace };
            let facts = Facts::new(&p, &opts);
            let topo: Vec<usize> = (0..500).collect();
            assert_eq!(
                exact_bound(&p, &topo, &facts),
                Some(local_bound(&p, &facts))
            );
        }
    }
}
