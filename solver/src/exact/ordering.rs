//! Dynamic ordering: where the search branches next and in which order it tries the buffers.
//!
//! Idea (after Moffitt, "MiniMalloc", ASPLOS 2023, §5.1, and the "fewest options first" rule of
//! exact-cover search, Knuth's Dancing Links): every node works at the current *level* (the
//! lowest free offset of the partial placement), so the branching point follows the placement
//! adaptively. Among the sections of the level, the node branches on the candidates covering
//! the *pivot* section: the one with the fewest candidates (`Pivot::Fewest`) or the least
//! slack (`Pivot::Tightest`); a section with one candidate is a forced move. Candidates are
//! tried first by *flushness* (how many of its two time neighbours end exactly at the
//! candidate's top once placed: flat profiles leave no slivers), then by a static *preorder*
//! rank that puts the buffers hardest to place first; with `Pivot::Preorder` every candidate
//! of the level is tried, by rank alone. A preorder compares, key by key and all
//! descending, `Z` (size), `A` (area: lifetime width × size), `W` (lifetime width) and `T` (the
//! largest section total the buffer lives in), ties by index. A *strategy* is a pivot rule, a
//! preorder and an orientation: half of them search the *time-reversed* instance (lifetime
//! `[s, e)` becomes `[T − e, T − s)`; a placement of one is a placement of the other, but the
//! search meets the buffers in another order and falls into other dead ends). Restarts rotate
//! `STRATEGIES` under a doubling node limit, which tames the heavy tail of any single
//! ordering.
//!
//! Complexity: a rank is `O(n log n)` to compute; a pivot is `O(Σ spans)` over the candidates;
//! sorting `k` candidates is `O(k log k)`.

use super::sections::Instance;

/// One preorder key (all descending).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    /// Lifetime width.
    Width,
    /// Width × size.
    Area,
    /// Largest total of the sections the buffer lives in.
    Total,
    /// Size.
    Size,
}

/// Which section of the level a node branches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pivot {
    /// Fewest candidates covering it, then least slack.
    Fewest,
    /// Least slack, then fewest candidates.
    Tightest,
    /// No pivot: every candidate at the level, by preorder rank alone (MiniMalloc's own
    /// order, where a child excludes the candidates ranked before it).
    Preorder,
}

/// A pivot rule, a preorder and an orientation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Strategy {
    /// Pivot rule.
    pub pivot: Pivot,
    /// Preorder keys.
    pub keys: [Key; 3],
    /// Search the time-reversed instance (when it has no fixed buffers; else the instance).
    pub reversed: bool,
}

/// The restart rotation (the first alone without restarts). Measured on the MiniMalloc
/// benchmarks A–F: ZAW with the fewest-candidates pivot solves all six; the others cover its
/// slow cases (A, B, F in a few hundred nodes). On generated 100-buffer instances
/// (`exact-suite`, seeds 1–100, 3 s each) reversing the second and fourth members raised the
/// rotation from 12 to 14 of 16 solved, each in under 0.04 s. The second member is
/// MiniMalloc's `TWA` order without a pivot, on the reversed instance: the other three
/// (with any pivot or preorder tried) leave two of MiniMalloc's larger benchmarks (asplos2024
/// I and K, 374 and 454 buffers) unsolved after 30 s, and it solves both in a few thousand
/// nodes once pieces are re-ranked ([`super::search`]).
pub(crate) const STRATEGIES: [Strategy; 4] = [
    Strategy {
        pivot: Pivot::Fewest,
        keys: [Key::Size, Key::Area, Key::Width],
        reversed: false,
    },
    Strategy {
        pivot: Pivot::Preorder,
        keys: [Key::Total, Key::Width, Key::Area],
        reversed: true,
    },
    Strategy {
        pivot: Pivot::Tightest,
        keys: [Key::Size, Key::Area, Key::Width],
        reversed: false,
    },
    Strategy {
        pivot: Pivot::Fewest,
        keys: [Key::Width, Key::Area, Key::Total],
        reversed: true,
    },
];

/// Rank of each local buffer (0 = first) under `keys`, or by index when `keys` is empty.
pub(crate) fn ranks(inst: &Instance, keys: &[Key]) -> Vec<u32> {
    let all: Vec<u32> = (0..inst.len() as u32).collect();
    let mut rank = vec![0u32; inst.len()];
    for (r, b) in preorder(inst, keys, &all, &inst.total)
        .into_iter()
        .enumerate()
    {
        rank[b as usize] = r as u32;
    }
    rank
}

/// `members` sorted by `keys` (at most three, each descending; ties by index), `T` read from
/// the section totals `total`: the instance's for [`ranks`], the search's current ones when a
/// piece of a decomposition is re-ranked. Each key is computed once per member.
pub(crate) fn preorder(inst: &Instance, keys: &[Key], members: &[u32], total: &[u64]) -> Vec<u32> {
    debug_assert!(keys.len() <= 3, "a preorder has at most three keys");
    let value = |k: Key, i: usize| -> u128 {
        let width = inst.bufs[i].lifetime.len();
        match k {
            Key::Width => u128::from(width),
            Key::Area => u128::from(width) * u128::from(inst.bufs[i].size),
            Key::Size => u128::from(inst.bufs[i].size),
            Key::Total => u128::from(
                (inst.lo[i]..inst.hi[i])
                    .map(|s| total.get(s as usize).copied().unwrap_or(0))
                    .max()
                    .unwrap_or(0),
            ),
        }
    };
    let mut keyed: Vec<([u128; 3], u32)> = members
        .iter()
        .map(|&b| {
            let mut v = [0u128; 3];
            for (slot, &k) in v.iter_mut().zip(keys) {
                *slot = value(k, b as usize);
            }
            (v, b)
        })
        .collect();
    keyed.sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    keyed.into_iter().map(|(_, b)| b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Buffer, Lifetime, PlacementProblem};

    #[test]
    fn keys_compare_in_turn_and_the_index_breaks_ties() {
        let buf = |s, e, size| Buffer {
            lifetime: Lifetime::new(s, e),
            size,
            alignment: 1,
        };
        let p = PlacementProblem::new(vec![buf(0, 2, 5), buf(0, 4, 1), buf(1, 3, 9), buf(2, 4, 9)]);
        let inst = Instance::new(&p, &[], u64::MAX);
        // Widths 2, 4, 2, 2; areas 10, 4, 18, 18; sizes 5, 1, 9, 9.
        let wat = [Key::Width, Key::Area, Key::Total];
        assert_eq!(ranks(&inst, &wat), vec![3, 0, 1, 2]);
        assert_eq!(ranks(&inst, &STRATEGIES[0].keys), vec![2, 3, 0, 1]);
        assert_eq!(ranks(&inst, &[]), vec![0, 1, 2, 3]);
    }
}
