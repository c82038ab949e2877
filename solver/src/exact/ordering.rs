//! Dynamic ordering: the order in which the search tries the buffers that may go next.
//!
//! Idea (Moffitt, "MiniMalloc", ASPLOS 2023, §5.1): at every node the candidates are the
//! unplaced buffers at their lowest offsets; trying them by *increasing lowest offset* first
//! (the branching point follows the lowest free level of the partial placement, so it is chosen
//! adaptively) and, among equal offsets, by a static *preorder* rank that puts the buffers
//! hardest to place first. A preorder compares, key by key and all descending, `W` (lifetime
//! width), `A` (area: width × size) and `T` (the largest section total the buffer lives in),
//! ties by index. The search restarts with a doubling node limit over a rotation of preorders
//! (WAT, TAW, TWA), which tames the heavy tail of a single ordering.
//!
//! Complexity: a rank is `O(n log n)` to compute; sorting `k` candidates is `O(k log k)`.

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

/// The rotation of preorders used by restarts (the first alone without restarts).
pub(crate) const PREORDERS: [[Key; 3]; 3] = [
    [Key::Width, Key::Area, Key::Total],
    [Key::Total, Key::Area, Key::Width],
    [Key::Total, Key::Width, Key::Area],
];

/// Rank of each local buffer (0 = first) under `keys`, or by index when `keys` is empty.
pub(crate) fn ranks(inst: &Instance, keys: &[Key]) -> Vec<u32> {
    let m = inst.len();
    let width: Vec<u64> = inst.bufs.iter().map(|b| b.lifetime.len()).collect();
    let peak_total: Vec<u64> = (0..m)
        .map(|i| {
            (inst.lo[i]..inst.hi[i])
                .map(|s| inst.total.get(s as usize).copied().unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let value = |k: Key, i: usize| -> u128 {
        match k {
            Key::Width => u128::from(width[i]),
            Key::Area => u128::from(width[i]) * u128::from(inst.bufs[i].size),
            Key::Total => u128::from(peak_total[i]),
            Key::Size => u128::from(inst.bufs[i].size),
        }
    };
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| {
        keys.iter()
            .map(|&k| value(k, b).cmp(&value(k, a)))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    let mut rank = vec![0u32; m];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r as u32;
    }
    rank
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Buffer, Lifetime, PlacementProblem};

    #[test]
    fn width_first_then_area_then_index_breaks_ties() {
        let buf = |s, e, size| Buffer {
            lifetime: Lifetime::new(s, e),
            size,
            alignment: 1,
        };
        let p = PlacementProblem::new(vec![buf(0, 2, 5), buf(0, 4, 1), buf(1, 3, 9), buf(2, 4, 9)]);
        let inst = Instance::new(&p, &[]);
        // Widths 2, 4, 2, 2; areas 10, 4, 18, 18.
        assert_eq!(ranks(&inst, &PREORDERS[0]), vec![3, 0, 1, 2]);
        assert_eq!(ranks(&inst, &[]), vec![0, 1, 2, 3]);
    }
}
