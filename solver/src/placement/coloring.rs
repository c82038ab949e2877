//! Interference-graph colouring, then best fit of the colour groups (a hybrid of
//! "colour first to group tensors that never conflict, then place each group by size and time
//! with best fit"; the colouring side is Chaitin-style register allocation, the placement side
//! TFLite's greedy by size, Pisarchyk & Lee 2020).
//!
//! 1. The interference graph (an edge joins two buffers whose lifetimes overlap) is built by a
//!    sweep over lifetime events into a `petgraph` compressed-sparse-row graph, each edge
//!    oriented towards the buffer coloured first so that colouring reads contiguous slices.
//!    It can be quadratic (iopddl_S_1: 28k buffers, 43M overlapping pairs), so only a prefix
//!    of the buffers by decreasing size enters it: the longest with at most [`EDGE_CAP`]
//!    edges, found in `O(n log n)` with Fenwick trees. The rest, the smallest buffers, stay
//!    singleton groups.
//! 2. Greedy colouring by decreasing size: a buffer takes, among the colours none of its
//!    coloured neighbours has, the one with the smallest block (the size of its first,
//!    largest member), provided that block is at most [`MAX_WASTE`] times its own size;
//!    otherwise it opens a new colour. Buffers of one colour never overlap in time.
//! 3. Each colour is a virtual buffer: its block size, the largest alignment of its members,
//!    and its lifetime profile (the members' lifetimes, abutting ones joined). Groups are
//!    placed by decreasing block size (ties: earlier start, lower first index) in the smallest
//!    gap free over the whole profile, or on top; every member gets its group's offset.
//!
//! Blocks reserve their full size over every member's lifetime and a group moves as one, so
//! this member is usually weaker than greedy by size. Cost: `O(n log n)` for the prefix,
//! `O(E log E)` for graph and colouring, plus one occupancy query and insertion per profile
//! interval (see `fit.rs`). The group placement looks at the limits every 64 groups; cut
//! short, it ends as a cut greedy pass does (the groups not reached go online).

use super::fit::{best_gap, finish_cut, normalize, Occupancy, CLOCK_EVERY};
use super::greedy_by_size::size_order;
use super::Placer;
use crate::limits::Limits;
use crate::problem::{Buffer, Lifetime, Placement, PlacementError, PlacementProblem};
use petgraph::csr::Csr;
use petgraph::Directed;

/// Most edges the interference graph may hold (4 bytes each in its compressed rows, 8 while
/// sorting). On iopddl_S_1, caps of 2^19 to 2^21 only slowed the member (the extra buffers
/// coloured are small ones), without lowering its peak.
pub const EDGE_CAP: u64 = 1 << 18;

/// A buffer joins a colour only if the colour's block is at most this many times its size.
/// 1 (same-size colours only) measured best: at 2 or 4 the wasted block space outweighed the
/// reuse (iopddl_S_1: 1.06, 1.15, 1.33 × LOAD).
pub const MAX_WASTE: u64 = 1;

/// Colour groups placed as blocks by best fit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Coloring;

/// The longest prefix of `order` whose overlapping pairs number at most [`EDGE_CAP`], as
/// `(length, pairs)`: buffers are added one by one and the ones they overlap among those already
/// added are counted with two Fenwick trees over the lifetime boundaries (`O(n log n)`).
fn graph_prefix(buffers: &[Buffer], order: &[usize]) -> (usize, u64) {
    let points = crate::problem::time_points(buffers);
    let rank = |t: u64| points.partition_point(|&p| p < t);
    let m = points.len();
    // Fenwick trees (1-based) counting added starts and added ends per boundary.
    let (mut starts, mut ends) = (vec![0u64; m + 1], vec![0u64; m + 1]);
    let add = |tree: &mut Vec<u64>, pos: usize| {
        let mut k = pos + 1;
        while k <= m {
            tree[k] += 1;
            k += k & k.wrapping_neg();
        }
    };
    // Number of added entries at ranks `< pos`.
    let below = |tree: &Vec<u64>, pos: usize| {
        let (mut k, mut s) = (pos, 0u64);
        while k > 0 {
            s += tree[k];
            k &= k - 1;
        }
        s
    };
    let mut pairs = 0u64;
    for (k, &i) in order.iter().enumerate() {
        let lt = buffers[i].lifetime;
        // Added buffers that start before our end, minus those that end at or before our start.
        let overlapping =
            below(&starts, rank(lt.end)).saturating_sub(below(&ends, rank(lt.start) + 1));
        if pairs.saturating_add(overlapping) > EDGE_CAP {
            return (k, pairs);
        }
        pairs += overlapping;
        add(&mut starts, rank(lt.start));
        add(&mut ends, rank(lt.end));
    }
    (order.len(), pairs)
}

/// The interference graph of `members` (node `k` is `members[k]`, in colouring order), with
/// each edge oriented from the later node to the earlier one, in compressed sparse rows: the
/// colouring reads, for each node, its already coloured neighbours as one contiguous slice.
/// Edges come from a sweep over lifetime events (ends before starts at the same step, so
/// touching lifetimes do not conflict), then are sorted.
fn interference_graph(
    buffers: &[Buffer],
    members: &[usize],
    edges: u64,
) -> Option<Csr<(), (), Directed, u32>> {
    let mut events: Vec<(u64, u8, u32)> = Vec::with_capacity(members.len() * 2);
    for (k, &i) in members.iter().enumerate() {
        let k = u32::try_from(k).ok()?;
        events.push((buffers[i].lifetime.start, 1, k));
        events.push((buffers[i].lifetime.end, 0, k));
    }
    events.sort_unstable();
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(usize::try_from(edges).unwrap_or(0));
    let mut live: Vec<u32> = Vec::new();
    let mut pos = vec![usize::MAX; members.len()];
    for (_, kind, k) in events {
        let slot = k as usize;
        if kind == 1 {
            pairs.extend(live.iter().map(|&j| (j.max(k), j.min(k))));
            pos[slot] = live.len();
            live.push(k);
        } else if let Some(&p) = pos.get(slot) {
            live.swap_remove(p);
            if let Some(&moved) = live.get(p) {
                pos[moved as usize] = p;
            }
        }
    }
    pairs.sort_unstable();
    // Sorted and without repeats (each overlapping pair is seen once, at the later start).
    Csr::from_sorted_edges(&pairs).ok()
}

/// Colour of each graph node, by the rule of the module doc; nodes are in decreasing size and
/// `earlier.neighbors_slice(v)` lists `v`'s neighbours before it.
fn colour(earlier: &Csr<(), (), Directed, u32>, sizes: &[u64]) -> Vec<usize> {
    const NONE: usize = usize::MAX;
    let mut colour = vec![NONE; sizes.len()];
    let mut block: Vec<u64> = Vec::new(); // block size per colour, non-increasing
    let mut stamp: Vec<usize> = Vec::new(); // colour -> last node that saw it taken, plus one
    for (v, &size) in sizes.iter().enumerate() {
        if v < earlier.node_count() {
            for &u in earlier.neighbors_slice(v as u32) {
                if let Some(&c) = colour.get(u as usize) {
                    if c != NONE {
                        stamp[c] = v + 1;
                    }
                }
            }
        }
        // Tightest free colour: the last one not taken (blocks shrink with the index).
        let limit = size.saturating_mul(MAX_WASTE);
        let mut chosen = NONE;
        for c in (0..block.len()).rev() {
            if block[c] > limit {
                break;
            }
            if stamp[c] != v + 1 {
                chosen = c;
                break;
            }
        }
        if chosen == NONE {
            chosen = block.len();
            block.push(size);
            stamp.push(0);
        }
        colour[v] = chosen;
    }
    colour
}

/// One group: its block size, alignment, members and joined member lifetimes.
#[derive(Debug, Clone)]
struct Group {
    size: u64,
    alignment: u64,
    members: Vec<usize>,
    profile: Vec<Lifetime>,
}

impl Group {
    /// A group of `members` (non-empty, first one the largest).
    fn new(buffers: &[Buffer], members: Vec<usize>) -> Self {
        let size = members.iter().map(|&i| buffers[i].size).max().unwrap_or(0);
        let alignment = members
            .iter()
            .map(|&i| buffers[i].alignment)
            .max()
            .unwrap_or(1);
        let mut lts: Vec<Lifetime> = members.iter().map(|&i| buffers[i].lifetime).collect();
        lts.sort_unstable();
        let mut profile: Vec<Lifetime> = Vec::with_capacity(lts.len());
        for lt in lts {
            match profile.last_mut() {
                Some(last) if last.end >= lt.start => last.end = last.end.max(lt.end),
                _ => profile.push(lt),
            }
        }
        Group {
            size,
            alignment,
            members,
            profile,
        }
    }

    /// Sort key: larger block, earlier start, lower first member.
    fn key(&self) -> (std::cmp::Reverse<u64>, u64, usize) {
        (
            std::cmp::Reverse(self.size),
            self.profile.first().map_or(0, |lt| lt.start),
            self.members.first().copied().unwrap_or(0),
        )
    }
}

/// The colour groups of a problem (each a list of buffer indices, largest first), the
/// singletons beyond the graph's prefix included, in no particular order.
fn groups(problem: &PlacementProblem) -> Vec<Vec<usize>> {
    let buffers = &problem.buffers;
    let order = size_order(problem);
    let (lo, edges) = graph_prefix(buffers, &order);
    // A graph that cannot be built (more than `u32::MAX` nodes) leaves every buffer alone.
    let (lo, g) = match interference_graph(buffers, &order[..lo], edges) {
        Some(g) => (lo, g),
        None => (0, Csr::new()),
    };
    let prefix = &order[..lo];
    let sizes: Vec<u64> = prefix.iter().map(|&i| buffers[i].size).collect();
    let colours = colour(&g, &sizes);
    let count = colours.iter().map(|&c| c + 1).max().unwrap_or(0);
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (k, &c) in colours.iter().enumerate() {
        out[c].push(prefix[k]);
    }
    out.extend(order[lo..].iter().map(|&i| vec![i]));
    out
}

impl Placer for Coloring {
    fn name(&self) -> &'static str {
        "coloring"
    }

    fn place(
        &self,
        problem: &PlacementProblem,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        let clock = limits.start_time_and_flag();
        let buffers = &problem.buffers;
        let mut groups: Vec<Group> = groups(problem)
            .into_iter()
            .filter(|m| !m.is_empty())
            .map(|m| Group::new(buffers, m))
            .collect();
        groups.sort_by_key(Group::key);
        let mut occ = Occupancy::new(buffers);
        let mut offsets = vec![0u64; buffers.len()];
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut peak = 0u64;
        for (k, g) in groups.iter().enumerate() {
            // Cut short: the groups not reached go online, as a cut greedy pass ends.
            if k % CLOCK_EVERY == 0 && k > 0 && clock.exhausted().is_some() {
                let rest: Vec<usize> = groups[k..]
                    .iter()
                    .flat_map(|g| g.members.iter().copied())
                    .collect();
                return finish_cut(buffers, offsets, peak, &rest);
            }
            let first = g.members.first().copied().unwrap_or(0);
            let off = if let [lt] = g.profile[..] {
                best_gap(occ.gather(lt), g.size, g.alignment)
            } else {
                taken.clear();
                for &lt in &g.profile {
                    taken.extend_from_slice(occ.gather(lt));
                }
                normalize(&mut taken);
                best_gap(&taken, g.size, g.alignment)
            }
            .ok_or(PlacementError::Overflow { index: first })?;
            let end = off
                .checked_add(g.size)
                .ok_or(PlacementError::Overflow { index: first })?;
            for &lt in &g.profile {
                occ.insert(lt, off, end);
            }
            for &i in &g.members {
                offsets[i] = off;
            }
            peak = peak.max(end);
        }
        Ok(Placement { offsets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::problem::fixtures::buf;
    #[test]
    fn the_sweep_graph_has_an_edge_per_overlapping_pair() {
        let b = vec![buf(0, 2, 1), buf(1, 3, 1), buf(2, 4, 1), buf(0, 4, 1)];
        let all = [0, 1, 2, 3];
        assert_eq!(graph_prefix(&b, &all), (4, 5));
        let g = interference_graph(&b, &all, 5).unwrap();
        // All pairs but (0, 2), each from the later node to the earlier one.
        assert_eq!(g.edge_count(), 5);
        assert_eq!(g.neighbors_slice(0), &[] as &[u32]);
        assert_eq!(g.neighbors_slice(1), &[0]);
        assert_eq!(g.neighbors_slice(2), &[1]);
        assert_eq!(g.neighbors_slice(3), &[0, 1, 2]);
    }

    #[test]
    fn time_disjoint_buffers_of_one_size_share_a_colour_and_an_offset() {
        // 0 and 2 never overlap and have the same size: one group. 1 overlaps both.
        let p = PlacementProblem::new(vec![buf(0, 2, 100), buf(0, 4, 30), buf(2, 4, 100)]);
        let mut gs = groups(&p);
        gs.sort();
        assert_eq!(gs, vec![vec![0, 2], vec![1]]);
        let pl = Coloring.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 100, 0]);
        assert_eq!(p.check(&pl), Ok(130));
    }

    #[test]
    fn a_smaller_buffer_opens_its_own_colour_instead_of_wasting_a_block() {
        // 2 (10 bytes) could join 0's colour in time, but 0's block is larger than 10.
        let p = PlacementProblem::new(vec![buf(0, 2, 100), buf(0, 4, 30), buf(2, 4, 10)]);
        let mut gs = groups(&p);
        gs.sort();
        assert_eq!(gs, vec![vec![0], vec![1], vec![2]]);
        let pl = Coloring.place(&p, &Limits::UNLIMITED).unwrap();
        // Blocks by size: 0 @0, 1 @100, 2 [2,4) takes the gap [0,100) left by 0 -> 0.
        assert_eq!(pl.offsets, vec![0, 100, 0]);
        assert_eq!(p.check(&pl), Ok(130));
    }

    #[test]
    fn a_group_is_placed_where_its_profile_is_free_not_over_its_hull() {
        // Colours: {1} (200), {0, 2} (50: they never overlap), {3} (30: it overlaps 2).
        // The group {0, 2} lives [0,1) and [3,4): free at 0 although 1 holds [0,200) in
        // between. 3 [2,4) then meets 1 and the group: on top at 200.
        let p = PlacementProblem::new(vec![
            buf(0, 1, 50),
            buf(1, 3, 200),
            buf(3, 4, 50),
            buf(2, 4, 30),
        ]);
        let mut gs = groups(&p);
        gs.sort();
        assert_eq!(gs, vec![vec![0, 2], vec![1], vec![3]]);
        let pl = Coloring.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 0, 0, 200]);
        assert_eq!(p.check(&pl), Ok(230));
    }
}
