//! The depth-first search over canonical placements, with an explicit stack.
//!
//! Idea (Moffitt, "MiniMalloc", ASPLOS 2023, §3–§5): a placement is *canonical* when every
//! buffer sits at the lowest aligned offset above all buffers alive with it that lie below it,
//! between the fixed buffers. Every feasible placement drops (by gravity) to a canonical one
//! that is no higher, so searching canonical placements only is complete. The search builds
//! them bottom-up: every unplaced buffer `b` has a lowest offset `min_off[b]` (above the placed
//! buffers alive with it), and placements happen in non-decreasing offset order, always at the
//! current *level*: the lowest `min_off` of the unplaced buffers not excluded from it. A node
//! branches on candidates at the level, `c1, …, ck`: child `i` excludes (*blocks*) `c1..c(i-1)`
//! from the level and places `ci` there; the last child blocks them all. A blocked buffer
//! waits until a placement raises its `min_off`. This is MiniMalloc's canonical order with
//! the tie-break made explicit, so the branching point can be chosen per node. Each placement
//! raises the lowest offsets of the unplaced buffers alive with it (forward checking: a buffer
//! that no longer fits fails the node) and the floors of its sections. Then:
//!
//! - *section inference*: in every section of the piece, `max(floor, level) + bytes still to
//!   place + fixed bytes between the floor and the capacity` must fit under the capacity;
//! - *dominance*: (i) a section's floor rises to the lowest offset any of its unplaced
//!   buffers can take (a blocked one lands on a buffer placed at its level or higher);
//!   (ii) a blocked buffer that fits entirely below the level fails the node: dropping it
//!   back gives a placement of a sibling branch; (iii) identical buffers (same lifetime, size
//!   and alignment) are placed in index order, and blocking one blocks the later ones;
//!   (iv) a buffer no unplaced buffer meets is placed at once, as the only child (a blocked
//!   one can never rise: the node fails);
//! - *dynamic ordering* ([`super::ordering`]): the candidates of a node are those covering
//!   the pivot section of the level, tried by flushness then preorder rank; without it, all
//!   candidates at the level in index order;
//! - *decomposition*: independent pieces are solved one after the other
//!   ([`super::decompose`]); a strategy whose preorder uses `T` re-ranks each new piece with
//!   the section totals of the moment, as MiniMalloc's sub-solves re-sort theirs, so the
//!   most loaded part of what remains comes first;
//! - *memo*: a node whose state is known to fail fails at once (`super::memo`); the
//!   fingerprint of the state (the sum of its unplaced buffers' terms) is kept up to date
//!   by every change of a buffer, as the located failures' keys are, so a node reads it in
//!   `O(1)` instead of summing its piece's members;
//! - *discrepancy limit* (limited discrepancy search, Harvey and Ginsberg, IJCAI 1995): a
//!   child tried after a sibling that got past its checks is a discrepancy; a path may hold
//!   at most `Config::discrepancies` of them. A run that skipped a child for this limit
//!   proves nothing (it ends as at its node limit and stops filling the memo).
//! - *backjumping* (after Prosser's conflict-directed backjumping, Computational
//!   Intelligence 9, 1993, located by sections instead of variables): every failure records
//!   the sections it lies in: the failing section of a section check, the lifetime of a
//!   buffer that no longer fits or of a blocked buffer under the level, or every section (a
//!   memo hit, nothing left to place); a node fails where its children failed. A failure
//!   coming back to a node whose last child placed and blocked only buffers living outside
//!   those sections jumps over it (its other children are not tried): on the canonical
//!   search's thrashing, where one section fails again and again under choices made
//!   elsewhere in time, the search returns at once to the choices around that section. The
//!   location ignores the level and the supports of an offset, so a jump can skip a child
//!   that would have succeeded: a run that skipped one proves nothing (it ends as at its
//!   node limit), while a subtree searched in full still goes into the memo.
//! - *located failures* (with backjumping; nogoods on a window instead of the whole state,
//!   see `super::memo`): a node whose subtree failed in a window of sections records the
//!   state local to that window, and a later node fails at once when its state agrees with
//!   a recorded one on that window. Only the `HOT_WINDOWS` windows recorded last are
//!   looked at, and only those its parent's change touched (the others agree with what the
//!   parent saw). A node failed this way counts as a jump: the run proves nothing. The
//!   fingerprints of the hot windows are kept up to date as the state changes (every write
//!   of an offset, a lowest offset, a block or a floor adds its term's difference to the
//!   windows it lies in), so a look-up costs `O(1)` per window instead of a pass over the
//!   window's buffers.
//!
//! Every change is recorded on a trail and undone on backtrack. The stack holds `Node` frames
//! (a piece, its candidates, the next child, the trail mark) and `Split` frames (the pieces of
//! a decomposition, the next to solve, the trail mark): a solved piece keeps its placements and
//! the next piece starts; a failed piece undoes the whole split and fails its parent node.
//!
//! *Incremental checks.* The checks are monotone: blocking, placing and a higher level only
//! raise what they bound. So a node checks its whole piece only when its level rose above the
//! level its state last passed at, and a child checks only the sections its change touched.
//! Child `i` blocks one more candidate on top of child `i − 1`'s blocks (kept on the trail),
//! and when those blocks alone fail the check, every later child fails too: the node fails
//! at once instead of trying them one by one.
//!
//! *Unplaced members.* Each piece keeps its unplaced members first in its range of members
//! (a sparse set: a placement swaps the buffer behind them, its undo takes it back), so a
//! node visits only the buffers still to place, not the piece's placed ones. Their order
//! changes as buffers come and go, so every choice among them is by a total order (ties
//! to the lowest index, candidates sorted by rank): the same nodes as in index order.
//!
//! Complexity: exponential in the worst case (the problem is strongly NP-hard). Per node:
//! `O(u)` for the `u` unplaced members of the piece, `O(S_g)`
//! (`O(S_g log f)` with fixed buffers) for the section check of the piece's `S_g` sections
//! when the level rose, and per child one block, `O(span + overlaps)` for a placement and
//! `O(Σ live)` for the floors and the check of the touched sections; with located failures,
//! `O(HOT_WINDOWS)` more per changed buffer or floor, and `O(HOT_WINDOWS)` look-ups per node.
//! Memory `O(n + S + Σ overlaps + depth · k)`.

use super::decompose::{initial_cuts, split, Piece};
use super::memo::{add, sub, term, Memo, FLOOR_TAG, WINDOW_TAG};
use super::ordering::{preorder, Key, Pivot};
use super::sections::{Instance, NONE32};
use super::SearchTrace;
use crate::limits::LimitsClock;
use crate::problem::align_up;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which techniques are on (see [`super::ExactOptions`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    /// Section inference.
    pub section_inference: bool,
    /// Dominance (floor raising, gap dominance, twins, isolated buffers).
    pub dominance: bool,
    /// Branch on the most constrained section, candidates by rank (else all candidates at the
    /// level by rank, which is then the index).
    pub dynamic_ordering: bool,
    /// Temporal decomposition.
    pub decomposition: bool,
    /// Failed-state memo.
    pub memo: bool,
    /// Most discrepancies on a path (limited discrepancy search; `u32::MAX`: complete). A
    /// discrepancy is a child tried after a sibling that got past its checks. A run that
    /// skipped a child for this limit proves nothing: it ends as at its node limit, and no
    /// state it fails after the first skip goes into the memo.
    pub discrepancies: u32,
    /// Backjumping: a failure jumps over the nodes whose choice touches none of the
    /// sections the failure lies in (see the module documentation). A run that skipped a
    /// child this way proves nothing (it ends as at its node limit); a subtree searched in
    /// full still goes into the memo.
    pub backjump: bool,
    /// Located failures (with `backjump` only): a node failing in a window of sections
    /// records the state local to it, and a node agreeing with a recorded one there fails.
    pub located: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// Offsets of the local buffers, all under the capacity.
    Found(Vec<u64>),
    /// No placement exists (proof by exhaustion).
    Infeasible,
    /// The node limit of this run was reached.
    NodeLimit,
    /// The time limit of the budget was reached.
    TimeLimit,
}

#[cfg(test)]
thread_local! {
    /// Test hook: every check covers the whole piece and a node tries every child, as
    /// before the incremental checks (which must visit the same nodes).
    pub(crate) static FULL_CHECKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the [`FULL_CHECKS`] test hook is on (never outside tests).
fn full_checks() -> bool {
    #[cfg(test)]
    {
        FULL_CHECKS.with(std::cell::Cell::get)
    }
    #[cfg(not(test))]
    {
        false
    }
}

/// Windows a node compares with the located failures: the most recently recorded distinct
/// ones (2 and 32 measured worse than 8 on the 250-buffer fits, see the README).
const HOT_WINDOWS: usize = 8;

/// A window this narrow (in sections) fingerprints by its sections' members, a wider one by
/// a pass over every buffer.
const NARROW_WINDOW: u32 = 4;

/// Nodes between two looks at the clock.
const CLOCK_EVERY: u64 = 256;

const NONE: u64 = u64::MAX;

#[derive(Debug, Clone, Copy)]
enum Undo {
    /// Buffer placed, and the piece (group index) it was placed in.
    Place(u32, u32),
    Floor(u32, u64),
    MinOff(u32, u64),
    Block(u32, u64),
    Rank(u32, u32),
}

#[derive(Debug, Clone, Copy)]
struct Group {
    ms: usize,
    me: usize,
    s0: u32,
    s1: u32,
}

#[derive(Debug, Clone, Copy)]
enum Frame {
    Node {
        g: usize,
        cstart: usize,
        cend: usize,
        /// Next child: `0..k` place a candidate, `k` blocks them all.
        next: usize,
        mark: usize,
        level: u64,
        /// The single candidate is isolated: no blocking child.
        free: bool,
        /// Fingerprint of the node's state.
        key: u128,
        /// Discrepancies on the path to this node.
        disc: u32,
        /// A child got past its checks: the next child is a discrepancy.
        tried: bool,
        /// Trail length once the candidates before the last child tried are blocked: each
        /// child blocks one more candidate on top of it.
        bmark: usize,
        /// Sections the failures of the children tried so far involve (backjumping).
        win: (u32, u32),
        /// Nodes skipped by backjumps when this node was entered.
        skips: u64,
    },
    Split {
        /// The piece that split (`usize::MAX` at the root).
        parent: usize,
        gstart: usize,
        gend: usize,
        next: usize,
        mark: usize,
        member_mark: usize,
        /// Level at which the state at the split passed its section check.
        passed: u64,
    },
}

#[derive(Debug, Clone, Copy)]
enum Sig {
    Descend(usize),
    TryNext,
    StartGroup,
    Success,
    Fail,
}

/// What a node does.
enum Choice {
    /// The piece has no unplaced buffer.
    Done,
    /// The node fails.
    Fail,
    /// Branch on the candidates pushed at `cstart..cend` at `level`.
    Branch {
        cstart: usize,
        cend: usize,
        level: u64,
        free: bool,
        key: u128,
    },
}

/// The search state for one capacity and one rank order.
#[derive(Debug)]
pub(crate) struct Search<'a> {
    inst: &'a Instance,
    cap: u64,
    cfg: Config,
    pivot: Pivot,
    rank: Vec<u32>,
    off: Vec<u64>,
    min_off: Vec<u64>,
    /// Level a buffer is excluded from (it is blocked while `min_off` is not above it).
    blocked: Vec<u64>,
    floor: Vec<u64>,
    total: Vec<u64>,
    cuts: Vec<u32>,
    trail: Vec<Undo>,
    groups: Vec<Group>,
    group_members: Vec<u32>,
    cands: Vec<u32>,
    stack: Vec<Frame>,
    /// Sections whose floors may rise after the last change.
    affected: (u32, u32),
    /// Per section, an unplaced buffer of lowest offset seen last (a hint, not undone).
    witness: Vec<u32>,
    /// Per buffer, the number of unplaced buffers alive with it.
    open: Vec<u32>,
    /// Per section, candidates covering it (scratch, zero between nodes).
    count: Vec<u32>,
    touched: Vec<u32>,
    /// Fingerprints of failed states (shared by the runs of one capacity).
    memo: &'a mut Memo,
    /// Another thread's answer: the run stops (as at its node limit) once the index stored
    /// here is below this run's index.
    stop: Option<(&'a AtomicU64, u64)>,
    /// Discrepancies on the current path.
    disc: u32,
    /// A child was skipped for the discrepancy limit: failures are no longer proofs.
    pruned: bool,
    /// Preorder keys the members of each new piece are re-ranked by (empty: keep the ranks).
    rekeys: Vec<Key>,
    /// Per buffer, the last fingerprint terms computed and their inputs `(min_off, blocked)`:
    /// most buffers keep their state from node to node, so the term is mixed again only
    /// when it changed (a cache, always correct for its inputs, never undone).
    terms: Vec<TermCache>,
    /// Per section, the last fingerprint terms of its floor (located failures).
    floor_terms: Vec<TermCache>,
    /// Level at which the current state passed its last section check: sections the next
    /// change leaves alone pass again at any level up to it (the check is monotone in the
    /// level), so only the changed ones are checked.
    passed: u64,
    /// Buffers placed now, and the most placed at once so far.
    depth: usize,
    deepest: usize,
    /// Per section, section-check failures there (for [`Search::trace`]).
    fails: Vec<u64>,
    /// Sections the last failure involves (backjumping; `EMPTY` when none).
    pending: (u32, u32),
    /// Nodes left with children untried by a backjump or failed by a located failure.
    skips: u64,
    /// Windows of the located failures recorded last, the latest first (at most
    /// [`HOT_WINDOWS`], distinct), each with the fingerprint of the current state local to it
    /// (kept up to date by every change of a buffer or a floor, so comparing costs `O(1)`).
    hot: Vec<((u32, u32), u128)>,
    /// Sections whose floors or unplaced buffers the last placement changed.
    placed_changed: (u32, u32),
    /// Nodes failed by a located failure.
    located_hits: u64,
    /// Memo: the sum of the fingerprint terms of every unplaced buffer, kept up to date by
    /// every change of a buffer (so a node's key costs `O(1)` instead of a pass over its
    /// piece's members).
    live_key: u128,
    /// Memo: per piece (group index), the sum of the terms of the unplaced buffers outside
    /// it when it started: nothing outside a piece changes while it is searched, so its key
    /// is `live_key` minus this.
    outside: Vec<u128>,
    /// Memo: per buffer, its term in `live_key` (0 once placed).
    live_terms: Vec<u128>,
    /// Per piece (group index), how many of its members are unplaced: they come first in
    /// its range of `group_members` (a sparse set; a placement swaps the buffer to the end
    /// of that prefix, its undo lengthens the prefix again), so a node visits only them.
    unplaced_count: Vec<usize>,
    /// Per buffer, its position in `group_members` in the innermost piece holding it.
    member_pos: Vec<u32>,
    /// Work of this run so far: what it visited (each unplaced buffer a node scans, each
    /// section checked or raised, each section and overlapping buffer a placement or its
    /// undo updates, each candidate and section the pivot rule looks at, each buffer of the
    /// root), about 1.5–3.5 ns a unit on two cores, where a node's own cost ranges from 2 to
    /// over 100 µs with the instance's width.
    work: u64,
    /// The run ends as at its node limit once `work` reaches this (see [`Search::run`]).
    work_limit: u64,
}

/// The last two fingerprint terms computed for one thing and their inputs: a change and its
/// undo alternate between two states, and both stay cached.
#[derive(Debug, Clone, Copy)]
struct TermCache {
    last: ((u64, u64), u128),
    before: ((u64, u64), u128),
}

impl TermCache {
    fn new(inputs: (u64, u64), t: u128) -> Self {
        TermCache {
            last: (inputs, t),
            before: (inputs, t),
        }
    }

    /// The term for `inputs`: cached, or `mix()` computed and cached.
    fn get(&mut self, inputs: (u64, u64), mix: impl FnOnce() -> u128) -> u128 {
        if self.last.0 == inputs {
            return self.last.1;
        }
        if self.before.0 == inputs {
            std::mem::swap(&mut self.last, &mut self.before);
            return self.last.1;
        }
        self.before = self.last;
        self.last = (inputs, mix());
        self.last.1
    }
}

/// No sections (a window of sections `[lo, hi)`; backjumping).
const EMPTY: (u32, u32) = (u32::MAX, 0);

/// Every section: a failure whose cause is not located.
const WHOLE: (u32, u32) = (0, u32::MAX);

/// Where a failure lies: its window, or every section when nothing located it.
fn located(w: (u32, u32)) -> (u32, u32) {
    if w == EMPTY {
        WHOLE
    } else {
        w
    }
}

fn widen(a: (u32, u32), b: (u32, u32)) -> (u32, u32) {
    (a.0.min(b.0), a.1.max(b.1))
}

fn meets(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Whether a node with `k` candidates (`free`: an isolated one, no blocking child) has tried
/// every child once `next` is the next one.
fn exhausted(next: usize, k: usize, free: bool) -> bool {
    next > k || (free && next == k)
}

impl<'a> Search<'a> {
    /// A fresh search of `inst` under `cap` with pivot rule `pivot` and ranks `rank`.
    pub(crate) fn new(
        inst: &'a Instance,
        cap: u64,
        cfg: Config,
        (pivot, rank): (Pivot, Vec<u32>),
        memo: &'a mut Memo,
    ) -> Self {
        let m = inst.len();
        Search {
            inst,
            cap,
            cfg,
            pivot,
            rank,
            off: vec![NONE; m],
            min_off: vec![0; m],
            blocked: vec![NONE; m],
            floor: vec![0; inst.n_sec],
            total: inst.total.clone(),
            cuts: initial_cuts(inst),
            trail: Vec::new(),
            groups: Vec::new(),
            group_members: Vec::new(),
            cands: Vec::new(),
            stack: Vec::new(),
            affected: (0, 0),
            witness: vec![NONE32; inst.n_sec],
            open: (0..m).map(|i| inst.overlaps.row(i).len() as u32).collect(),
            count: vec![0; inst.n_sec],
            touched: Vec::new(),
            memo,
            stop: None,
            disc: 0,
            pruned: false,
            rekeys: Vec::new(),
            terms: (0..m as u32)
                .map(|b| TermCache::new((0, NONE), term(b, 0, NONE)))
                .collect(),
            floor_terms: (0..inst.n_sec as u32)
                .map(|s| TermCache::new((0, FLOOR_TAG), term(s, 0, FLOOR_TAG)))
                .collect(),
            passed: 0,
            depth: 0,
            deepest: 0,
            fails: vec![0; inst.n_sec],
            pending: EMPTY,
            skips: 0,
            hot: Vec::new(),
            placed_changed: EMPTY,
            located_hits: 0,
            live_key: 0,
            outside: Vec::new(),
            live_terms: vec![0; m],
            unplaced_count: Vec::new(),
            member_pos: vec![0; m],
            work: 0,
            work_limit: u64::MAX,
        }
    }

    /// Nodes this run failed by a located failure.
    #[cfg(test)]
    pub(crate) fn located_hits(&self) -> u64 {
        self.located_hits
    }

    /// The fingerprint of the state local to window `w` (sections): the window, the unplaced
    /// buffers alive in it (their fingerprint terms) and the floors of its sections.
    fn local_key(&mut self, w: (u32, u32)) -> u128 {
        let n_sec = self.inst.n_sec as u32;
        let (lo, hi) = (w.0.min(n_sec), w.1.min(n_sec));
        let mut key = term(lo, u64::from(hi), WINDOW_TAG);
        let inst = self.inst;
        if hi - lo <= NARROW_WINDOW {
            // Each buffer once: in the first section of the window it is alive in.
            for s in lo..hi {
                for &b in inst.members.row(s as usize) {
                    if self.unplaced(b) && inst.lo[b as usize].max(lo) == s {
                        key = add(key, self.term_of(b));
                    }
                }
            }
        } else {
            for b in 0..inst.len() as u32 {
                if self.unplaced(b) && meets(self.span(b), (lo, hi)) {
                    key = add(key, self.term_of(b));
                }
            }
        }
        for s in lo..hi {
            let t = self.floor_term(s, self.floor[s as usize]);
            key = add(key, t);
        }
        key
    }

    /// Records that the state local to `win` fails, and makes `win` the hottest window.
    fn record_located(&mut self, win: (u32, u32)) {
        // A hot window's key is kept up to date: no need to fingerprint it again.
        let key = match self.hot.iter().position(|&(h, _)| h == win) {
            Some(i) => self.hot.remove(i).1,
            None => self.local_key(win),
        };
        self.memo.insert_located(key);
        self.hot.insert(0, (win, key));
        self.hot.truncate(HOT_WINDOWS);
    }

    /// A hot window, among those meeting `changed`, on which the current state agrees with a
    /// located failure.
    fn located_failure(&mut self, changed: (u32, u32)) -> Option<(u32, u32)> {
        for i in 0..self.hot.len() {
            let (w, key) = self.hot[i];
            if meets(w, changed) {
                #[cfg(test)]
                assert_eq!(
                    key,
                    self.local_key(w),
                    "the kept key of window {w:?} is stale"
                );
                if self.memo.contains_located(key) {
                    return Some(w);
                }
            }
        }
        None
    }

    /// Whether some hot window meets sections `span` (its key follows a change there).
    fn watched(&self, span: (u32, u32)) -> bool {
        self.hot.iter().any(|&(w, _)| meets(w, span))
    }

    /// Adds `delta` to the keys of the hot windows meeting sections `span`.
    fn shift_keys(&mut self, span: (u32, u32), delta: u128) {
        for (w, k) in &mut self.hot {
            if meets(*w, span) {
                *k = add(*k, delta);
            }
        }
    }

    /// What buffer `b` adds to a local key: its term while unplaced, nothing once placed.
    fn local_term(&mut self, b: u32) -> u128 {
        if self.unplaced(b) {
            self.term_of(b)
        } else {
            0
        }
    }

    /// Changes the state of buffer `b` (its offset, lowest offset or block) by `write`, and
    /// the keys of the hot windows it is alive in with it.
    fn set_buffer(&mut self, b: u32, write: impl FnOnce(&mut Self)) {
        let span = self.span(b);
        let watched = self.watched(span);
        if !watched && !self.cfg.memo {
            write(self);
            return;
        }
        let bi = b as usize;
        let old = if self.cfg.memo {
            self.live_terms[bi]
        } else {
            self.local_term(b)
        };
        write(self);
        let new = self.local_term(b);
        if new != old {
            let delta = sub(new, old);
            if self.cfg.memo {
                self.live_terms[bi] = new;
                self.live_key = add(self.live_key, delta);
            }
            if watched {
                self.shift_keys(span, delta);
            }
        }
    }

    /// Records what lies outside piece `g` as it starts (see `outside`).
    fn start_key(&mut self, g: usize) {
        let grp = self.groups[g];
        let terms = &self.live_terms;
        let inside = self.group_members[grp.ms..grp.me]
            .iter()
            .fold(0, |k, &b| add(k, terms[b as usize]));
        if self.outside.len() <= g {
            self.outside.resize(g + 1, 0);
        }
        self.outside[g] = sub(self.live_key, inside);
    }

    /// Sets the floor of section `s` to `v` (bytes), and the keys of the hot windows holding
    /// it with it.
    fn set_floor(&mut self, s: u32, v: u64) {
        let si = s as usize;
        let span = (s, s + 1);
        if self.watched(span) {
            let old = self.floor_term(s, self.floor[si]);
            let new = self.floor_term(s, v);
            self.shift_keys(span, sub(new, old));
        }
        self.floor[si] = v;
    }

    fn span(&self, b: u32) -> (u32, u32) {
        (self.inst.lo[b as usize], self.inst.hi[b as usize])
    }

    /// How far this run got and where its section checks failed.
    pub(crate) fn trace(&self) -> SearchTrace {
        let check_failures = self.fails.iter().sum();
        SearchTrace {
            deepest: self.deepest,
            check_failures,
            hottest_failures: self.fails.iter().copied().max().unwrap_or(0),
            work: self.work,
        }
    }

    /// The fingerprint term of unplaced buffer `b` in its current state.
    fn term_of(&mut self, b: u32) -> u128 {
        let bi = b as usize;
        let blk = if self.is_blocked(bi) {
            self.blocked[bi]
        } else {
            NONE
        };
        let x = self.min_off[bi];
        self.terms[bi].get((x, blk), || term(b, x, blk))
    }

    /// The fingerprint term of section `s` with floor `v` (bytes).
    fn floor_term(&mut self, s: u32, v: u64) -> u128 {
        self.floor_terms[s as usize].get((v, FLOOR_TAG), || term(s, v, FLOOR_TAG))
    }

    /// Re-ranks the members of every piece a split creates by `keys`, with the section
    /// totals of the moment (the ranks given to [`Search::new`] hold until a split). Only a
    /// preorder using `T` changes: the other keys are static, so a piece keeps its order.
    pub(crate) fn rerank_by(mut self, keys: &[Key]) -> Self {
        if keys.contains(&Key::Total) {
            self.rekeys = keys.to_vec();
        }
        self
    }

    /// Gives the members of a new piece ranks `0..k` by the re-ranking keys, `T` from the
    /// current section totals; the old ranks go on the trail.
    fn rerank(&mut self, members: &[u32]) {
        if self.rekeys.is_empty() || members.len() < 2 {
            return;
        }
        let order = preorder(self.inst, &self.rekeys, members, &self.total);
        for (r, &b) in order.iter().enumerate() {
            let old = self.rank[b as usize];
            self.trail.push(Undo::Rank(b, old));
            self.rank[b as usize] = r as u32;
        }
    }

    /// Work of placing buffer `bi` or undoing it: its sections and the buffers it overlaps.
    fn placement_work(&self, bi: usize) -> u64 {
        u64::from(self.inst.hi[bi] - self.inst.lo[bi]) + self.inst.overlaps.row(bi).len() as u64
    }

    /// Makes the run end as at its node limit once its work reaches `limit` (units: see
    /// [`SearchTrace::work`]); checked as each node is entered, so a run overshoots by what it
    /// did since its last node (children that failed their checks, backtracking).
    pub(crate) fn with_work_limit(mut self, limit: u64) -> Self {
        self.work_limit = limit;
        self
    }

    /// Makes the run give up (ending as at its node limit) once `answer` holds an index below
    /// `index`: an earlier run of the schedule has settled the question.
    pub(crate) fn stop_when(mut self, answer: &'a AtomicU64, index: u64) -> Self {
        self.stop = Some((answer, index));
        self
    }

    fn unplaced(&self, b: u32) -> bool {
        self.off[b as usize] == NONE
    }

    fn is_blocked(&self, b: usize) -> bool {
        self.blocked[b] != NONE && self.min_off[b] <= self.blocked[b]
    }

    /// A lower bound of the offset of unplaced buffer `b`.
    fn lowest(&self, b: usize) -> u64 {
        if self.is_blocked(b) {
            // It will rest on a buffer alive with it, placed at the blocked level or above.
            let above = self.blocked[b].saturating_add(self.inst.min_overlap_size[b]);
            align_up(above, self.inst.bufs[b].alignment)
                .unwrap_or(NONE)
                .max(self.min_off[b])
        } else {
            self.min_off[b]
        }
    }

    /// Runs until a placement is found, infeasibility is proven, `*nodes` reaches `limit`, or
    /// the clock runs out, or (as at the node limit) its work reaches the limit of
    /// [`Search::with_work_limit`]. `*nodes` counts the nodes entered.
    pub(crate) fn run(&mut self, limit: u64, clock: &LimitsClock, nodes: &mut u64) -> RunEnd {
        let m = self.inst.len();
        self.work = self.work.saturating_add(m as u64);
        // Root: lowest offsets, forward check, floors, section check.
        for i in 0..m {
            let x = self.inst.fit(i, 0).unwrap_or(NONE);
            self.min_off[i] = x;
            if x.saturating_add(self.inst.bufs[i].size) > self.cap {
                return RunEnd::Infeasible;
            }
        }
        let n_sec = self.inst.n_sec as u32;
        self.affected = (0, n_sec);
        if !self.check(0, n_sec, 0) {
            return RunEnd::Infeasible;
        }
        if self.cfg.memo {
            self.live_key = 0;
            for b in 0..m as u32 {
                let t = self.local_term(b);
                self.live_terms[b as usize] = t;
                self.live_key = add(self.live_key, t);
            }
        }
        let pieces = if self.cfg.decomposition {
            split(self.inst, &self.cuts, 0..m as u32, 0, n_sec)
        } else {
            vec![Piece {
                members: (0..m as u32).collect(),
                s0: 0,
                s1: n_sec,
            }]
        };
        for p in pieces {
            self.push_group(&p.members, p.s0, p.s1);
        }
        self.stack.push(Frame::Split {
            parent: usize::MAX,
            gstart: 0,
            gend: self.groups.len(),
            next: 0,
            mark: 0,
            member_mark: 0,
            passed: 0,
        });
        let mut sig = Sig::StartGroup;
        loop {
            match sig {
                Sig::Descend(g) => {
                    if *nodes >= limit || self.work >= self.work_limit {
                        return RunEnd::NodeLimit;
                    }
                    *nodes = nodes.saturating_add(1);
                    if *nodes % CLOCK_EVERY == 0 {
                        if clock.exhausted().is_some() {
                            return RunEnd::TimeLimit;
                        }
                        if let Some((answer, index)) = self.stop {
                            if answer.load(Ordering::Relaxed) < index {
                                return RunEnd::NodeLimit;
                            }
                        }
                    }
                    sig = match self.choose(g) {
                        Choice::Done => Sig::Success,
                        Choice::Fail => Sig::Fail,
                        Choice::Branch {
                            cstart,
                            cend,
                            level,
                            free,
                            key,
                        } => {
                            self.stack.push(Frame::Node {
                                g,
                                cstart,
                                cend,
                                next: 0,
                                mark: self.trail.len(),
                                level,
                                free,
                                key,
                                disc: self.disc,
                                tried: false,
                                bmark: self.trail.len(),
                                win: EMPTY,
                                skips: self.skips,
                            });
                            Sig::TryNext
                        }
                    };
                }
                Sig::TryNext => {
                    let Some(Frame::Node {
                        g,
                        cstart,
                        cend,
                        next,
                        mark,
                        level,
                        free,
                        key,
                        disc,
                        tried,
                        bmark,
                        win,
                        skips,
                    }) = self.stack.last().copied()
                    else {
                        return RunEnd::Infeasible;
                    };
                    let k = cend - cstart;
                    // The last child's failure joins the node's window.
                    let mut win = win;
                    if self.cfg.backjump && self.pending != EMPTY {
                        win = widen(win, self.pending);
                        self.pending = EMPTY;
                        if let Some(Frame::Node { win: w, .. }) = self.stack.last_mut() {
                            *w = win;
                        }
                    }
                    let exhausted = exhausted(next, k, free);
                    if !exhausted && tried && disc >= self.cfg.discrepancies {
                        self.pruned = true;
                    }
                    if exhausted || (tried && disc >= self.cfg.discrepancies) {
                        self.undo_to(mark);
                        // Only a subtree searched in full proves its state fails.
                        if self.cfg.memo && !self.pruned && self.skips == skips {
                            self.memo.insert(key);
                        }
                        if self.cfg.backjump {
                            // The node fails where its children failed.
                            self.pending = located(win);
                            if self.cfg.located && win != EMPTY {
                                self.record_located(win);
                            }
                        }
                        self.stack.pop();
                        self.cands.truncate(cstart);
                        sig = Sig::Fail;
                        continue;
                    }
                    // Child `next` blocks `c1..c(next)`: the first `next − 1` are blocked
                    // on the trail below `bmark` already, and that state passed its checks
                    // at `level`.
                    self.undo_to(bmark);
                    let grp = self.groups[g];
                    if next > 0 {
                        let c = self.cands[cstart + next - 1];
                        self.block(c, level);
                        let ci = c as usize;
                        self.affected = (self.inst.lo[ci], self.inst.hi[ci]);
                        // (The full-check test hook tries the children instead.)
                        let tries_all = full_checks() && next < k;
                        if !(self.check_changed(grp, level) || tries_all) {
                            // Every later child blocks `c` too, and blocking, placing and
                            // the level only raise what the check bounds: none can pass.
                            if let Some(Frame::Node { next: n, .. }) = self.stack.last_mut() {
                                *n = k + 1;
                            }
                            continue;
                        }
                    }
                    let blocked_to = self.trail.len();
                    if let Some(Frame::Node {
                        next: n, bmark: bm, ..
                    }) = self.stack.last_mut()
                    {
                        *n += 1;
                        *bm = blocked_to;
                    }
                    self.disc = disc.saturating_add(u32::from(tried));
                    let placed = if next < k {
                        let b = self.cands[cstart + next];
                        let x = self.min_off[b as usize];
                        if !self.place(g, b, x) || !self.check_changed(grp, level) {
                            continue; // sig stays TryNext
                        }
                        Some(b)
                    } else {
                        None
                    };
                    self.passed = level;
                    if let Some(Frame::Node { tried: t, .. }) = self.stack.last_mut() {
                        *t = true;
                    }
                    sig = match placed {
                        Some(b) if self.cfg.decomposition && self.try_split(g, b) => {
                            Sig::StartGroup
                        }
                        _ => Sig::Descend(g),
                    };
                }
                Sig::StartGroup => {
                    let Some(Frame::Split {
                        gend,
                        next,
                        member_mark,
                        gstart,
                        passed,
                        ..
                    }) = self.stack.last().copied()
                    else {
                        return RunEnd::Infeasible;
                    };
                    if next == gend {
                        self.stack.pop();
                        self.groups.truncate(gstart);
                        self.group_members.truncate(member_mark);
                        sig = Sig::Success;
                    } else {
                        if let Some(Frame::Split { next: n, .. }) = self.stack.last_mut() {
                            *n += 1;
                        }
                        self.passed = passed;
                        if self.cfg.memo {
                            self.start_key(next);
                        }
                        sig = Sig::Descend(next);
                    }
                }
                Sig::Success => match self.stack.last().copied() {
                    None => return RunEnd::Found(self.off.clone()),
                    Some(Frame::Node { cstart, .. }) => {
                        self.stack.pop();
                        self.cands.truncate(cstart);
                    }
                    Some(Frame::Split { .. }) => sig = Sig::StartGroup,
                },
                Sig::Fail => match self.stack.last().copied() {
                    None if self.pruned || self.skips > 0 => return RunEnd::NodeLimit,
                    None => return RunEnd::Infeasible,
                    Some(Frame::Node {
                        cstart,
                        cend,
                        next,
                        mark,
                        free,
                        ..
                    }) => {
                        if self.cfg.backjump {
                            // The child tried last placed candidate `next − 1` (unless it
                            // blocked them all) and blocked the ones before it.
                            let w = located(self.pending);
                            let k = cend - cstart;
                            let touched = self.cands[cstart..cstart + next.min(k)]
                                .iter()
                                .any(|&c| meets(self.span(c), w));
                            if !touched {
                                // Its choice has nothing to do with the failure: jump over it.
                                if !exhausted(next, k, free) {
                                    self.skips += 1;
                                }
                                self.undo_to(mark);
                                self.stack.pop();
                                self.cands.truncate(cstart);
                                self.pending = w;
                                continue; // sig stays Fail
                            }
                            self.pending = w;
                        }
                        sig = Sig::TryNext
                    }
                    Some(Frame::Split {
                        parent,
                        gstart,
                        mark,
                        member_mark,
                        ..
                    }) => {
                        self.undo_to(mark);
                        self.stack.pop();
                        self.groups.truncate(gstart);
                        self.group_members.truncate(member_mark);
                        if parent != usize::MAX {
                            // The pieces took over the positions of the parent's members.
                            let ms = self.groups[parent].ms;
                            for p in ms..ms + self.unplaced_count[parent] {
                                self.member_pos[self.group_members[p] as usize] = p as u32;
                            }
                        }
                    }
                },
            }
        }
    }

    fn push_group(&mut self, members: &[u32], s0: u32, s1: u32) {
        let ms = self.group_members.len();
        self.group_members.extend_from_slice(members);
        for (i, &b) in members.iter().enumerate() {
            self.member_pos[b as usize] = (ms + i) as u32;
        }
        let g = self.groups.len();
        if self.unplaced_count.len() <= g {
            self.unplaced_count.resize(g + 1, 0);
        }
        self.unplaced_count[g] = members.len();
        self.groups.push(Group {
            ms,
            me: self.group_members.len(),
            s0,
            s1,
        });
    }

    /// Decides what node of piece `g` does; candidates go onto the candidate arena.
    fn choose(&mut self, g: usize) -> Choice {
        let grp = self.groups[g];
        let dominance = self.cfg.dominance;
        let mut level = NONE;
        let mut any = false;
        let mut isolated = NONE32;
        let mut blocked_height = NONE;
        // The lifetime of the blocked buffer of lowest top (where a failure under the level
        // lies, for backjumping).
        let mut lowest_blocked = EMPTY;
        let mut lowest_blocked_buf = NONE32;
        let active = grp.ms..grp.ms + self.unplaced_count[g];
        self.work += active.len() as u64;
        let key = if self.cfg.memo {
            sub(self.live_key, self.outside[g])
        } else {
            0
        };
        #[cfg(test)]
        if self.cfg.memo {
            let fresh =
                (grp.ms..grp.me).fold(0, |k, i| add(k, self.local_term(self.group_members[i])));
            assert_eq!(key, fresh, "the kept key of piece {g} is stale");
        }
        #[cfg(test)]
        {
            let unplaced = (grp.ms..grp.me)
                .filter(|&i| self.unplaced(self.group_members[i]))
                .count();
            assert_eq!(
                unplaced,
                active.len(),
                "piece {g} lost count of its members"
            );
            assert!(active.clone().all(|i| self.unplaced(self.group_members[i])));
        }
        // The members come in no fixed order: ties go to the lowest index.
        for k in active.clone() {
            let b = self.group_members[k];
            let bi = b as usize;
            any = true;
            if self.is_blocked(bi) {
                if dominance && self.open[bi] == 0 {
                    self.pending = WHOLE;
                    return Choice::Fail; // nothing can ever lift it
                }
                let h = self.min_off[bi].saturating_add(self.inst.bufs[bi].size);
                if h < blocked_height || (h == blocked_height && b < lowest_blocked_buf) {
                    lowest_blocked = self.span(b);
                    lowest_blocked_buf = b;
                }
                blocked_height = blocked_height.min(h);
                continue;
            }
            level = level.min(self.min_off[bi]);
            if dominance && self.open[bi] == 0 && b < isolated {
                isolated = b;
            }
        }
        if !any {
            return Choice::Done;
        }
        if self.cfg.memo && self.memo.contains(key) {
            self.pending = WHOLE;
            return Choice::Fail;
        }
        if self.cfg.backjump && self.cfg.located && !self.hot.is_empty() {
            // What changed since the parent node: the candidates its children blocked and
            // placed, and what the placement raised (elsewhere the state is the parent's).
            let changed = match self.stack.last().copied() {
                Some(Frame::Node {
                    cstart, cend, next, ..
                }) => self.cands[cstart..cstart + next.min(cend - cstart)]
                    .iter()
                    .fold(self.placed_changed, |w, &c| widen(w, self.span(c))),
                _ => WHOLE,
            };
            if let Some(w) = self.located_failure(changed) {
                // Like a jump: the location is an approximation, the run proves nothing.
                self.skips += 1;
                self.located_hits += 1;
                self.pending = w;
                return Choice::Fail;
            }
        }
        // The state fails outright: nothing to place, a blocked buffer below the level, or
        // the section check at a level above the one the state passed at.
        // Where the failure lies, for backjumping: the blocked buffer under the level, the
        // failing section (the check sets it), or anywhere.
        let under = level != NONE && dominance && blocked_height <= level;
        self.pending = if under { lowest_blocked } else { WHOLE };
        if level == NONE || under || !self.check_level(g, level) {
            if self.cfg.memo {
                self.memo.insert(key);
            }
            return Choice::Fail;
        }
        self.pending = EMPTY;
        let cstart = self.cands.len();
        if isolated != NONE32 {
            self.cands.push(isolated);
            return Choice::Branch {
                cstart,
                cend: cstart + 1,
                level,
                free: true,
                key,
            };
        }
        for k in active.clone() {
            let b = self.group_members[k];
            let bi = b as usize;
            if self.min_off[bi] != level || self.is_blocked(bi) {
                continue;
            }
            if dominance {
                let twin = self.inst.twin_prev[bi];
                if twin != NONE32 && self.unplaced(twin) {
                    continue;
                }
            }
            self.cands.push(b);
        }
        if self.cands.len() == cstart {
            // Cannot happen (the first unplaced twin at the level is a candidate), but never
            // loop: fall back to every unblocked buffer at the level.
            for k in active {
                let b = self.group_members[k];
                let bi = b as usize;
                if self.min_off[bi] == level && !self.is_blocked(bi) {
                    self.cands.push(b);
                }
            }
        }
        let pivot = self.pivot != Pivot::Preorder;
        if self.cfg.dynamic_ordering && pivot && self.cands.len() - cstart > 1 {
            self.narrow(cstart, level);
        }
        if self.cfg.dynamic_ordering && pivot {
            self.order_by_flushness(cstart, level);
        } else {
            let rank = &self.rank;
            self.cands[cstart..].sort_unstable_by_key(|&b| rank[b as usize]);
        }
        Choice::Branch {
            cstart,
            cend: self.cands.len(),
            level,
            free: false,
            key,
        }
    }

    /// Sorts the candidates by flushness (time neighbours whose floor equals the candidate's
    /// top at `level`: 0, 1 or 2, most first), then by rank.
    fn order_by_flushness(&mut self, cstart: usize, level: u64) {
        let (inst, floor, rank) = (self.inst, &self.floor, &self.rank);
        let n_sec = inst.n_sec as u32;
        self.cands[cstart..].sort_unstable_by_key(|&c| {
            let ci = c as usize;
            let top = level.saturating_add(inst.bufs[ci].size);
            let (lo, hi) = (inst.lo[ci], inst.hi[ci]);
            let left = lo > 0 && floor[(lo - 1) as usize] == top;
            let right = hi < n_sec && floor[hi as usize] == top;
            (2 - u32::from(left) - u32::from(right), rank[ci])
        });
    }

    /// Keeps the candidates covering the section with the fewest of them (ties: least slack,
    /// then lowest index): the most constrained point of the level.
    fn narrow(&mut self, cstart: usize, level: u64) {
        for j in cstart..self.cands.len() {
            let c = self.cands[j] as usize;
            for s in self.inst.lo[c]..self.inst.hi[c] {
                if self.count[s as usize] == 0 {
                    self.touched.push(s);
                }
                self.count[s as usize] += 1;
            }
        }
        let mut best: Option<(u64, u64, u32)> = None;
        for &s in &self.touched {
            let si = s as usize;
            let used = self.floor[si].max(level).saturating_add(self.total[si]);
            let slack = self.cap.saturating_sub(used);
            let key = match self.pivot {
                Pivot::Fewest => (u64::from(self.count[si]), slack, s),
                Pivot::Tightest | Pivot::Preorder => (slack, u64::from(self.count[si]), s),
            };
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        self.work += (self.touched.len() + self.cands.len() - cstart) as u64;
        for &s in &self.touched {
            self.count[s as usize] = 0;
        }
        self.touched.clear();
        if let Some((_, _, s)) = best {
            let (lo, hi) = (&self.inst.lo, &self.inst.hi);
            let mut keep = cstart;
            for j in cstart..self.cands.len() {
                let c = self.cands[j] as usize;
                if lo[c] <= s && s < hi[c] {
                    self.cands[keep] = self.cands[j];
                    keep += 1;
                }
            }
            self.cands.truncate(keep);
        }
    }

    /// Excludes `b` (and, under dominance, its later identical twins) from `level`.
    fn block(&mut self, b: u32, level: u64) {
        let mut c = b;
        loop {
            let ci = c as usize;
            if self.off[ci] == NONE && self.blocked[ci] != level {
                self.trail.push(Undo::Block(c, self.blocked[ci]));
                self.set_buffer(c, |me| me.blocked[ci] = level);
            }
            if !self.cfg.dominance {
                break;
            }
            c = self.inst.twin_next[ci];
            if c == NONE32 {
                break;
            }
        }
    }

    /// Places `b` at `x` and propagates; `false` when an unplaced buffer no longer fits.
    /// Sets `affected` to the sections whose floors may rise.
    fn place(&mut self, g: usize, b: u32, x: u64) -> bool {
        let bi = b as usize;
        // Out of the piece's unplaced prefix: swap with its last member.
        let last = self.groups[g].ms + self.unplaced_count[g] - 1;
        let at = self.member_pos[bi] as usize;
        let other = self.group_members[last];
        self.group_members.swap(at, last);
        self.member_pos[other as usize] = at as u32;
        self.member_pos[bi] = last as u32;
        self.unplaced_count[g] -= 1;
        let size = self.inst.bufs[bi].size;
        let h = x.saturating_add(size);
        let (lo, hi) = (self.inst.lo[bi], self.inst.hi[bi]);
        self.set_buffer(b, |me| me.off[bi] = x);
        self.depth += 1;
        self.deepest = self.deepest.max(self.depth);
        self.trail.push(Undo::Place(b, g as u32));
        for s in lo..hi {
            let si = s as usize;
            self.total[si] = self.total[si].saturating_sub(size);
            if self.floor[si] < h {
                self.trail.push(Undo::Floor(s, self.floor[si]));
                self.set_floor(s, h);
            }
        }
        for k in lo..hi.saturating_sub(1) {
            self.cuts[k as usize] = self.cuts[k as usize].saturating_sub(1);
        }
        let (mut a0, mut a1) = (lo, hi);
        let mut ok = true;
        self.work += self.placement_work(bi);
        for &o in self.inst.overlaps.row(bi) {
            let oi = o as usize;
            self.open[oi] = self.open[oi].saturating_sub(1);
            if !ok || self.off[oi] != NONE || self.min_off[oi] >= h {
                continue;
            }
            let nx = self.inst.fit(oi, h).unwrap_or(NONE);
            self.trail.push(Undo::MinOff(o, self.min_off[oi]));
            self.set_buffer(o, |me| me.min_off[oi] = nx);
            if nx.saturating_add(self.inst.bufs[oi].size) > self.cap {
                ok = false;
                if self.cfg.backjump {
                    self.pending = widen(self.span(o), (lo, hi));
                }
            }
            a0 = a0.min(self.inst.lo[oi]);
            a1 = a1.max(self.inst.hi[oi]);
        }
        self.affected = (a0, a1);
        self.placed_changed = (a0, a1);
        ok
    }

    /// Checks piece `g` at `level` when its state passed its last check at a lower level
    /// (the check is monotone in the level: a state passing at `passed` passes below it).
    fn check_level(&mut self, g: usize, level: u64) -> bool {
        if (level <= self.passed && !full_checks()) || !self.cfg.section_inference {
            return true;
        }
        let grp = self.groups[g];
        self.affected = (0, 0);
        if !self.check(grp.s0, grp.s1, level) {
            return false;
        }
        self.passed = level;
        true
    }

    /// After a change to a state that passed its checks at `level`: raises the floors of the
    /// affected sections and checks those of piece `grp` (the others did not change).
    fn check_changed(&mut self, grp: Group, level: u64) -> bool {
        if full_checks() {
            return self.check(grp.s0, grp.s1, level);
        }
        let (a0, a1) = self.affected;
        let c0 = grp.s0.max(a0);
        let c1 = grp.s1.min(a1).max(c0);
        self.check(c0, c1, level)
    }

    /// Raises the floors of the affected sections (dominance) and checks the sections
    /// `[s0, s1)` with all later offsets at least `level` (section inference).
    fn check(&mut self, s0: u32, s1: u32, level: u64) -> bool {
        if self.cfg.dominance {
            let (a0, a1) = self.affected;
            for s in a0..a1 {
                let si = s as usize;
                self.work += 1;
                if self.total[si] == 0 {
                    continue;
                }
                // Raising the floor to `level` or below changes nothing: all later offsets of
                // the piece are at least `level`. A witness at or below settles it in O(1).
                let at = self.floor[si].max(level);
                let w = self.witness[si];
                if w != NONE32 && self.off[w as usize] == NONE && self.lowest(w as usize) <= at {
                    continue;
                }
                let mut lowest = NONE;
                for &o in self.inst.members.row(si) {
                    self.work += 1;
                    let oi = o as usize;
                    if self.off[oi] != NONE {
                        continue;
                    }
                    let l = self.lowest(oi);
                    if l < lowest {
                        lowest = l;
                        self.witness[si] = o;
                        if lowest <= at {
                            break;
                        }
                    }
                }
                if lowest != NONE && lowest > self.floor[si] {
                    self.trail.push(Undo::Floor(s, self.floor[si]));
                    self.set_floor(s, lowest);
                }
            }
        }
        if self.cfg.section_inference {
            for s in s0..s1 {
                let si = s as usize;
                self.work += 1;
                let t = self.total[si];
                if t == 0 {
                    continue;
                }
                let base = self.floor[si].max(level);
                let fixed = self
                    .inst
                    .fixed_above(si, base)
                    .saturating_sub(self.inst.fixed_above(si, self.cap));
                let need = base.saturating_add(t).saturating_add(fixed);
                if need > self.cap {
                    self.fails[si] = self.fails[si].saturating_add(1);
                    if self.cfg.backjump {
                        self.pending = (s, s + 1);
                    }
                    return false;
                }
            }
        }
        true
    }

    /// After placing `b` in piece `g`: when a boundary of the piece lost its last crossing
    /// buffer and the piece falls apart, pushes a `Split` frame and returns `true`.
    fn try_split(&mut self, g: usize, b: u32) -> bool {
        let grp = self.groups[g];
        let bi = b as usize;
        let from = self.inst.lo[bi].max(grp.s0);
        let to = self.inst.hi[bi].min(grp.s1).saturating_sub(1);
        if !(from..to).any(|k| self.cuts[k as usize] == 0) {
            return false;
        }
        // The unplaced prefix, in index order (as the pieces were first built).
        let mut members: Vec<u32> =
            self.group_members[grp.ms..grp.ms + self.unplaced_count[g]].to_vec();
        members.sort_unstable();
        let pieces = split(self.inst, &self.cuts, members.into_iter(), grp.s0, grp.s1);
        if pieces.len() < 2 {
            return false;
        }
        let gstart = self.groups.len();
        let member_mark = self.group_members.len();
        for p in pieces {
            self.rerank(&p.members);
            self.push_group(&p.members, p.s0, p.s1);
        }
        self.stack.push(Frame::Split {
            parent: g,
            gstart,
            gend: self.groups.len(),
            next: gstart,
            mark: self.trail.len(),
            member_mark,
            passed: self.passed,
        });
        true
    }

    fn undo_to(&mut self, mark: usize) {
        while self.trail.len() > mark {
            let Some(u) = self.trail.pop() else { break };
            match u {
                Undo::Place(b, g) => {
                    let bi = b as usize;
                    self.work += self.placement_work(bi);
                    // Back into the unplaced prefix of its piece: it is the member right
                    // after it (placements are undone last first). The piece may be gone
                    // (a decomposition that succeeded, undone as a whole): its count is
                    // then set again when the slot is reused.
                    if let Some(c) = self.unplaced_count.get_mut(g as usize) {
                        *c += 1;
                    }
                    self.depth = self.depth.saturating_sub(1);
                    self.set_buffer(b, |me| me.off[bi] = NONE);
                    let size = self.inst.bufs[bi].size;
                    let (lo, hi) = (self.inst.lo[bi], self.inst.hi[bi]);
                    for s in lo..hi {
                        self.total[s as usize] = self.total[s as usize].saturating_add(size);
                    }
                    for k in lo..hi.saturating_sub(1) {
                        self.cuts[k as usize] += 1;
                    }
                    for &o in self.inst.overlaps.row(bi) {
                        self.open[o as usize] += 1;
                    }
                }
                Undo::Floor(s, v) => self.set_floor(s, v),
                Undo::MinOff(b, v) => self.set_buffer(b, |me| me.min_off[b as usize] = v),
                Undo::Block(b, v) => self.set_buffer(b, |me| me.blocked[b as usize] = v),
                Undo::Rank(b, v) => self.rank[b as usize] = v,
            }
        }
    }
}
