//! Temporal decomposition: split the buffers still to place at section boundaries that none of
//! them crosses, and solve the pieces one after the other.
//!
//! Idea (Moffitt, "MiniMalloc", ASPLOS 2023, §5.3 "dynamic decomposition"): once the buffers
//! crossing a boundary are all placed, the unplaced buffers on either side never live together,
//! so (with the placed buffers fixed) the two sides are independent problems. Solving them one
//! after the other turns a product of search trees into a sum: a failure in the second piece
//! no longer re-explores the first. Each piece restarts the canonical order (a relaxation,
//! hence still complete) and checks only its own sections. A *cut count* per boundary (the
//! unplaced buffers crossing it) finds the boundaries: a placement decrements the counts it
//! crosses and a split is tried only when one of them reaches zero.
//!
//! Complexity: counts are `O(span)` per placement and undo; a split is `O(S_g + k log z)` for
//! a piece of `S_g` sections, `k` unplaced buffers and `z` zero cuts.

use super::sections::Instance;

/// Unplaced buffers crossing each boundary: `cuts[k]` counts buffers alive in both section
/// `k` and section `k + 1`.
pub(crate) fn initial_cuts(inst: &Instance) -> Vec<u32> {
    let mut cuts = vec![0u32; inst.n_sec.saturating_sub(1)];
    for i in 0..inst.len() {
        for k in inst.lo[i]..inst.hi[i].saturating_sub(1) {
            cuts[k as usize] += 1;
        }
    }
    cuts
}

/// One independent piece: its buffers and its section range `[s0, s1)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Unplaced buffers of the piece (local indices, in the order given).
    pub members: Vec<u32>,
    /// First section.
    pub s0: u32,
    /// One past the last section.
    pub s1: u32,
}

/// Splits the unplaced buffers `members` of the section range `[s0, s1)` at every boundary
/// with a zero cut count; pieces without buffers are dropped, the rest come in time order.
pub(crate) fn split(
    inst: &Instance,
    cuts: &[u32],
    members: impl Iterator<Item = u32>,
    s0: u32,
    s1: u32,
) -> Vec<Piece> {
    let zeros: Vec<u32> = (s0..s1.saturating_sub(1))
        .filter(|&k| cuts.get(k as usize) == Some(&0))
        .collect();
    let mut pieces: Vec<Piece> = (0..=zeros.len())
        .map(|j| Piece {
            members: Vec::new(),
            s0: if j == 0 { s0 } else { zeros[j - 1] + 1 },
            s1: zeros.get(j).map_or(s1, |&z| z + 1),
        })
        .collect();
    for b in members {
        let lo = inst.lo[b as usize];
        let j = zeros.partition_point(|&z| z < lo);
        pieces[j].members.push(b);
    }
    pieces.retain(|p| !p.members.is_empty());
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Buffer, Lifetime, PlacementProblem};

    #[test]
    fn buffers_split_where_no_buffer_crosses_and_empty_pieces_vanish() {
        let buf = |s, e| Buffer {
            lifetime: Lifetime::new(s, e),
            size: 1,
            alignment: 1,
        };
        // Sections [0,1) [1,2) [2,3) [3,4) [4,5); boundaries 0..4.
        let p = PlacementProblem::new(vec![buf(0, 2), buf(2, 3), buf(3, 5), buf(1, 4)]);
        let inst = Instance::new(&p, &[], u64::MAX);
        let mut cuts = initial_cuts(&inst);
        assert_eq!(cuts, vec![1, 1, 1, 1]);
        assert_eq!(split(&inst, &cuts, 0..4, 0, 5).len(), 1);
        // Placing buffer 3 ([1,4): boundaries 1 and 2) frees those boundaries.
        cuts[1] -= 1;
        cuts[2] -= 1;
        let pieces = split(&inst, &cuts, [0, 1, 2].into_iter(), 0, 5);
        assert_eq!(
            pieces,
            vec![
                Piece {
                    members: vec![0],
                    s0: 0,
                    s1: 2
                },
                Piece {
                    members: vec![1],
                    s0: 2,
                    s1: 3
                },
                Piece {
                    members: vec![2],
                    s0: 3,
                    s1: 5
                },
            ]
        );
    }
}
