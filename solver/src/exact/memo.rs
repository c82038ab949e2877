//! Failed-state memo: fingerprints of search states proven to have no completion.
//!
//! Idea: the fate of a node of the canonical search depends only on its *state*: the unplaced
//! buffers of its piece, their lowest offsets and the levels they are blocked from (placed
//! buffers matter only through those offsets). Different paths often reach the same state
//! (a blocked buffer forgets its block once lifted, and different placements can leave the same
//! profile for the buffers still to place), so the search records every state it exhausts and
//! fails a node whose state is recorded. This is the transposition table of game-tree search
//! (Zobrist, 1970) applied to the nogoods of a DFS; the memo is shared by the restarts of one
//! capacity, which turns independent restarts into cumulative ones.
//!
//! *Located failures.* A backjumping run (see `super::search`) knows where a failure lies: a
//! window of sections. Its node's subtree failed on what lies in that window, so the memo
//! also keeps the fingerprint of the state *local* to the window (the window itself, the
//! unplaced buffers alive in it with their lowest offsets and blocks, and the floors of its
//! sections), and a later node whose state agrees on that window fails at once, whatever
//! lies elsewhere in time: different choices elsewhere lead back to the same failing spot,
//! which the whole-state fingerprint never recognises. Like the location it rests on, this
//! ignores the level, so only backjumping runs (which prove nothing) use it.
//!
//! A state is identified by a 128-bit fingerprint: a sum over its unplaced buffers of two
//! independently mixed 64-bit words (so the order of buffers does not matter). Two different
//! states share a fingerprint with probability about `2^-128` per pair; at the memo's size
//! limit that stays below `2^-80` for a whole run, the price of `O(1)` memory per state.
//!
//! Complexity: `O(k)` to fingerprint a state of `k` unplaced buffers (a local state: those
//! alive in the window, plus its sections; the search computes it so only when it records
//! a window, then keeps it up to date change by change, [`sub`] undoing a term's old value),
//! `O(1)` expected per look-up and insertion;
//! memory 16 bytes per state, at most [`MEMO_STATES`] states and [`LOCATED_STATES`] located
//! failures.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// At most this many located failures are remembered per memo (about 25 MB).
pub(crate) const LOCATED_STATES: usize = 1 << 20;

/// The `blocked` argument of [`term`] for a section floor (no level is this high).
pub(crate) const FLOOR_TAG: u64 = u64::MAX - 1;

/// The `blocked` argument of [`term`] for a window (no level is this high).
pub(crate) const WINDOW_TAG: u64 = u64::MAX - 2;

/// At most this many states are remembered per memo (about 50 MB with the table's overhead;
/// a fit search keeps one memo per orientation, see [`super::fit`]).
pub(crate) const MEMO_STATES: usize = 1 << 21;

/// The 64-bit finaliser of SplitMix64 (Steele, Lea, Flood 2014): a bijective mixer.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The fingerprint contribution of one unplaced buffer.
pub(crate) fn term(buffer: u32, min_off: u64, blocked: u64) -> u128 {
    let lane = |seed: u64| mix(mix(mix(seed ^ u64::from(buffer)) ^ min_off) ^ blocked);
    (u128::from(lane(0x5851_F42D_4C95_7F2D)) << 64) | u128::from(lane(0x1405_7B7E_F767_814F))
}

/// Applies `op` to the two 64-bit lanes of `a` and `b`.
fn lanewise(a: u128, b: u128, op: fn(u64, u64) -> u64) -> u128 {
    let hi = op((a >> 64) as u64, (b >> 64) as u64);
    let lo = op(a as u64, b as u64);
    (u128::from(hi) << 64) | u128::from(lo)
}

/// Adds two fingerprints lane by lane.
pub(crate) fn add(a: u128, b: u128) -> u128 {
    lanewise(a, b, u64::wrapping_add)
}

/// Subtracts fingerprint `b` from `a` lane by lane (the inverse of [`add`]).
pub(crate) fn sub(a: u128, b: u128) -> u128 {
    lanewise(a, b, u64::wrapping_sub)
}

/// A hasher for keys that are already uniformly mixed: keeps the low 64 bits.
#[derive(Debug, Default, Clone, Copy)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, i: u128) {
        self.0 = i as u64;
    }
}

/// The fingerprints of failed states.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    set: HashSet<u128, BuildHasherDefault<PassThrough>>,
    /// Fingerprints of located failures (a window and the state local to it).
    located: HashSet<u128, BuildHasherDefault<PassThrough>>,
}

impl Memo {
    /// Records a failed state (ignored once the memo is full).
    pub(crate) fn insert(&mut self, key: u128) {
        if self.set.len() < MEMO_STATES {
            self.set.insert(key);
        }
    }

    /// Whether a state is known to fail.
    pub(crate) fn contains(&self, key: u128) -> bool {
        self.set.contains(&key)
    }

    /// Number of states remembered.
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    /// Records a located failure (ignored once full).
    pub(crate) fn insert_located(&mut self, key: u128) {
        if self.located.len() < LOCATED_STATES {
            self.located.insert(key);
        }
    }

    /// Whether a local state is known to fail.
    pub(crate) fn contains_located(&self, key: u128) -> bool {
        self.located.contains(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_ignore_order_and_tell_states_apart() {
        let a = add(term(1, 10, u64::MAX), term(2, 20, u64::MAX));
        let b = add(term(2, 20, u64::MAX), term(1, 10, u64::MAX));
        assert_eq!(a, b);
        assert_ne!(a, add(term(1, 10, u64::MAX), term(2, 21, u64::MAX)));
        assert_ne!(term(1, 10, u64::MAX), term(1, 10, 10));
        let mut m = Memo::default();
        m.insert(a);
        assert!(m.contains(b));
        assert_eq!(m.len(), 1);
        assert!(!m.contains_located(b), "the two kinds are kept apart");
        m.insert_located(a);
        assert!(m.contains_located(b));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn subtracting_a_term_undoes_adding_it_even_across_the_wrap() {
        let terms: Vec<u128> = (0..64u32)
            .map(|b| term(b, u64::from(b) * 977, u64::MAX))
            .collect();
        let all = terms.iter().fold(0u128, |k, &t| add(k, t));
        // Replacing one term by another: the key of the changed set, whatever the order.
        let changed = add(sub(all, terms[7]), term(7, 1, u64::MAX));
        let direct = terms
            .iter()
            .enumerate()
            .map(|(i, &t)| if i == 7 { term(7, 1, u64::MAX) } else { t })
            .fold(0u128, add);
        assert_eq!(changed, direct);
        assert_eq!(sub(add(u128::MAX, 5), 5), u128::MAX);
        assert_eq!(terms.iter().fold(all, |k, &t| sub(k, t)), 0);
    }
}
