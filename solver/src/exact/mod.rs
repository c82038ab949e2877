//! Exact placement by a MiniMalloc-class depth-first search over canonical placements
//! (Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
//! Learning", ASPLOS 2023).
//!
//! - [`solve`]: the *fit* problem: place every buffer under a capacity, optionally around
//!   buffers with fixed offsets; answers with a placement ([`ExactStatus::Optimal`]), a proof
//!   that none exists ([`ExactStatus::Infeasible`]) or [`ExactStatus::Timeout`].
//! - [`minimise`]: lowers the peak of a valid placement by solving fit problems at decreasing
//!   capacities towards LOAD; returns the best placement (never worse than the start) and the
//!   best proven lower bound.
//!
//! The search ([`search`]) places buffers one at a time, bottom-up, at their lowest offsets in
//! a canonical order, with an explicit stack (no recursion; instances reach 28k buffers). Its
//! techniques are switches of [`ExactOptions`], all on by default: section inference
//! ([`sections`]), dominance ([`search`]), dynamic ordering with restarts ([`ordering`]),
//! time reversal (half of the restart rotation searches the time-reversed instance; with two
//! threads, each side's runs and each learning member's form lanes the threads share),
//! temporal decomposition ([`decompose`]), a failed-state memo (one per orientation), two
//! learning members that join the rotation once its runs are long (the fit as a constraint
//! program under lazy clause generation, which learns a nogood from every failure, one member
//! branching on activity and one bottom-left: `learning`) and, above LOAD, limited discrepancy
//! passes before the
//! rotation (Harvey and Ginsberg, "Limited Discrepancy Search", IJCAI 1995: with slack a
//! wrong early choice shows only near the top, which depth-first backtracking reaches last;
//! the passes find placements and prove nothing). Before the rotation's long runs, a search
//! under a limit gives a share of it to *blocks* (`blocks`: buffers of one lifetime stacked,
//! equal-size buffers chained across time), a restriction that finds placements and proves
//! nothing. [`minimise`] also builds
//! upper bounds by canonical dives (the search's first path, `O(n log n)`) and, above a few
//! thousand buffers, repairs windows of a placement with the rest fixed. Results are
//! deterministic under a node budget, on one thread or two; a time budget stops wherever the
//! clock says.
//!
//! ```
//! use memplan_solver::exact::{self, ExactOptions, ExactStatus};
//! use memplan_solver::{Buffer, Lifetime, PlacementProblem};
//!
//! let buf = |start, end, size| Buffer { lifetime: Lifetime::new(start, end), size, alignment: 1 };
//! // Three buffers are alive at step 2, so nothing fits in 2 bytes; 3 bytes suffice.
//! let p = PlacementProblem::new(vec![buf(0, 2, 1), buf(1, 3, 1), buf(0, 3, 1), buf(2, 3, 1)]);
//! assert_eq!(exact::solve(&p, 3, &[], &ExactOptions::default()).status, ExactStatus::Optimal);
//! assert_eq!(exact::solve(&p, 2, &[], &ExactOptions::default()).status, ExactStatus::Infeasible);
//! ```

mod blocks;
pub mod decompose;
mod dive;
mod learning;
mod memo;
mod minimise;
pub mod ordering;
pub mod search;
pub mod sections;
#[cfg(test)]
mod tests;
mod window;

pub use minimise::{minimise, minimise_more, MinimiseOutcome, Unanswered};

use crate::limits::{Limits, LimitsClock};
use crate::problem::{Placement, PlacementProblem};
use learning::{Branching, Learning};
use memo::Memo;
use ordering::{ranks, Pivot, STRATEGIES};
use search::{Config, RunEnd, Search};
use sections::Instance;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Options of the exact search: the budget and one switch per technique (all on by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactOptions {
    /// Time and node limits; a node is one partial placement entered by the search. With
    /// restarts the node limit bounds the sum of the runs' *limits* (each run's limit counted
    /// whole, however early it ends), so that the answer does not depend on the threads: a
    /// budget buys only the schedule's first runs (above LOAD the first are the discrepancy
    /// passes, `max(n, 64) ×` [`DISCREPANCY_NODES`] each for n buffers).
    pub limits: Limits,
    /// Section inference: prune when, in some section, the floor (or the current level) plus
    /// the bytes still to place there (plus fixed bytes above the floor) exceeds the capacity.
    pub section_inference: bool,
    /// Dominance: raise section floors over gaps no unplaced buffer can use, fail branches
    /// where an excluded buffer would fit entirely below the level (an equivalent sibling
    /// holds it), place identical buffers in index order, and place a buffer that meets no
    /// unplaced one at once.
    pub dominance: bool,
    /// Dynamic ordering: branch on the candidates covering the most constrained section of
    /// the lowest level (pivot), tried by flushness then by a preorder rank (size, area,
    /// width…); off: all candidates of the lowest level by input index.
    pub dynamic_ordering: bool,
    /// Restarts: with dynamic ordering, rotate four strategies (pivot rule × preorder) under
    /// a node limit per run that doubles every round.
    pub restarts: bool,
    /// Temporal decomposition: solve pieces separated by boundaries no unplaced buffer
    /// crosses one after the other.
    pub decomposition: bool,
    /// Failed-state memo: remember (128-bit fingerprints of) exhausted search states and fail
    /// on meeting one again, across restarts too.
    pub memo: bool,
    /// Run only this member of the restart rotation ([`strategy_count`] of them: the pivot
    /// rule and preorder of each search strategy are in [`ordering`], the last two are the
    /// learning members, activity branching then bottom-left, which then run from the start),
    /// with no restarts: how the benchmark measures
    /// each member's own success rate. `None` (the default): as `restarts` says. Ignored
    /// without dynamic ordering.
    pub only_strategy: Option<usize>,
    /// Time reversal: the strategies marked so in the rotation ([`ordering`]) search the
    /// time-reversed instance (with fixed buffers they search the instance itself).
    pub time_reversal: bool,
    /// Discrepancy passes: when the capacity is above LOAD, the restart schedule opens with
    /// limited discrepancy searches (Harvey and Ginsberg, IJCAI 1995) of every member with
    /// 0, 1, … [`DISCREPANCY_PASSES`] − 1 discrepancies: with slack, a wrong early choice
    /// shows only near the top, where chronological backtracking never reaches it.
    pub discrepancy_passes: bool,
    /// Learning members: once the rotation's runs reach [`LEARNING_FROM_NODES`] nodes each,
    /// two members join it, each the fit problem as a constraint program solved by lazy clause
    /// generation (nogood learning; see the `learning` module) with a solver of its own that
    /// keeps its nogoods from run to run: one branches on activity (VSIDS), one bottom-left
    /// (the buffer with the lowest possible offset goes there). They place different
    /// instances. One step of either (a decision or a conflict) counts as
    /// [`LEARNING_STEP_NODES`] nodes. Not with fixed buffers, nor above
    /// [`LEARNING_MAX_BUFFERS`] buffers.
    pub learning: bool,
    /// Blocks: without fixed buffers, with the whole rotation and under a node or time
    /// limit, a search that does not settle the buffers within
    /// [`BLOCKS_AFTER_NODES_PER_BUFFER`] nodes per buffer turns to *blocks* for
    /// [`BLOCKS_SHARE`] of what is left of the budget: buffers of one lifetime stacked, and a
    /// buffer chained to the only one of its size that starts where it ends (the pieces of a
    /// cut rectangle glued back; see the `blocks` module). A placement of the blocks is one of
    /// the buffers; a failure proves nothing, and the search then returns to the buffers with
    /// the rest of the budget.
    pub blocks: bool,
    /// Backjumping: in the restart rotation, the search members' runs of every second round
    /// (rounds 1, 3, 5, … after the discrepancy passes) jump back over the nodes whose choice
    /// has nothing to do with a failure, as conflict-directed backjumping does (see the
    /// `search` module): a failure is located in the sections it involves, and a node whose
    /// placed or blocked candidates live in none of them is skipped. The location is an
    /// approximation, so a run that skipped a node proves nothing; the runs of the other
    /// rounds stay complete and give the proofs.
    pub backjumping: bool,
    /// Located failures in the backjumping runs: a node whose subtree failed in a window of
    /// sections records the state local to that window (in the lane's memo, kept from run to
    /// run), and a later node that agrees with it there fails at once, whatever lies
    /// elsewhere in time (see the `search` and `memo` modules). Only in runs of at least
    /// [`LOCATED_FROM_NODES`] nodes; nothing without [`ExactOptions::backjumping`].
    pub located_failures: bool,
    /// Work limit: on top of the node limit (not instead of it), the most work
    /// ([`SearchTrace::work`]) the canonical-search runs may do, so that a cap bounds the
    /// search's time on instances whose nodes are dear (the planner's effort; `None`, the
    /// default: no limit). Each search lane of the rotation (the forward and the
    /// time-reversed side, which two threads run side by side) gets an equal share; a run
    /// gets what its lane has left and ends as at its node limit once it is used (checked as
    /// each node is entered, so a run overshoots by what it did since its last node), and a
    /// lane that has used its share runs no more. Deterministic: a lane's work depends only
    /// on its own runs, and the only runs a thread's timing can cut short come after the
    /// answering one, which are discarded (as is their work: [`SearchTrace::work`] counts the
    /// runs up to the answer). The phases of a fit (the first look, the blocks, the buffers
    /// again) draw on the one limit in turn (the node budget decides their split, the limit
    /// caps them together); [`minimise`] gives each question half of the work left, as it
    /// does with nodes. With a limit, the learning members sit out where their model has
    /// more than [`LEARNING_WORK_MAX_ENTRIES`] task entries (their work cannot be counted;
    /// so a limit no search reaches still changes the rotation there); elsewhere their steps
    /// count against the node limit only. The window repair of instances over 4,096 buffers
    /// has its node caps per window only.
    pub work_limit: Option<u64>,
    /// Threads for the restart rotation: 1, or 2 to share its runs after the first round
    /// between two threads (each side's search runs and each learning member's runs form
    /// four lanes; a free thread takes the lane whose next run comes first). The answer and
    /// the node count do not depend on it, only the wall time; the default is 2 where the
    /// machine has two cores, else 1.
    pub threads: usize,
}

/// Number of members of the restart rotation (valid [`ExactOptions::only_strategy`] values
/// are `0..strategy_count()`): the canonical-search strategies of [`ordering`], then the two
/// learning members (see [`ExactOptions::learning`]).
pub fn strategy_count() -> usize {
    STRATEGIES.len() + LEARNERS.len()
}

/// Whether the learning members join the rotation on `inst` (see [`ExactOptions::learning`]
/// and [`ExactOptions::work_limit`]).
fn learners_join(inst: &Instance, opts: &ExactOptions) -> bool {
    opts.learning
        && opts.restarts
        && Learning::applies(inst)
        && (opts.work_limit.is_none() || Learning::entries(inst) <= LEARNING_WORK_MAX_ENTRIES)
}

/// The learning members, in rotation order after the search strategies.
const LEARNERS: [Branching; 2] = [Branching::Activity, Branching::BottomLeft];

/// The learning members join the rotation in the first round whose runs have at least this
/// many nodes each (instances the canonical search settles in a few hundred thousand nodes
/// never build their models).
pub const LEARNING_FROM_NODES: u64 = 1 << 15;

/// Backjumping runs keep located failures (see [`ExactOptions::located_failures`]) once
/// their node limit reaches this: recording windows and keeping their fingerprints costs
/// node rate that the short runs settling easy instances do not win back (from the first
/// round on, E of the six took 0.051 s instead of 0.036 s; measurements: README, *Located
/// failures*).
pub const LOCATED_FROM_NODES: u64 = 1 << 15;

/// Nodes one step of a learning member counts as (see [`ExactOptions::learning`]).
pub const LEARNING_STEP_NODES: u64 = learning::STEP_NODES;

/// With a work limit ([`ExactOptions::work_limit`]), the learning members sit out where
/// their model has more task entries than this (the cliques' sizes summed). Pumpkin's work
/// cannot be counted from outside, and a step's cost grows with the model and the nogoods
/// learned: 0.07–0.5 ms on the generated instances (at most 13,846 entries at 1,000
/// buffers) and on a 300-op random graph's (6,751), but 0.27–11 ms on a 500-op graph's
/// whose ops read any of the last 400 tensors (47,153 entries; 1,848 steps took 20.8 s,
/// where the node limit counts them as 46,200 nodes).
pub const LEARNING_WORK_MAX_ENTRIES: usize = 16_384;

/// Most free buffers a learning member models.
pub const LEARNING_MAX_BUFFERS: usize = learning::MAX_BUFFERS;

impl Default for ExactOptions {
    fn default() -> Self {
        ExactOptions {
            limits: Limits::UNLIMITED,
            section_inference: true,
            dominance: true,
            dynamic_ordering: true,
            restarts: true,
            decomposition: true,
            memo: true,
            only_strategy: None,
            time_reversal: true,
            discrepancy_passes: true,
            learning: true,
            blocks: true,
            backjumping: true,
            located_failures: true,
            work_limit: None,
            threads: default_threads(),
        }
    }
}

/// Two threads where the machine offers two cores, else one.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

impl ExactOptions {
    /// The default options with `budget`.
    pub fn with_limits(limits: Limits) -> Self {
        ExactOptions {
            limits,
            ..ExactOptions::default()
        }
    }

    fn config(&self) -> Config {
        Config {
            section_inference: self.section_inference,
            dominance: self.dominance,
            dynamic_ordering: self.dynamic_ordering,
            decomposition: self.decomposition,
            memo: self.memo,
            discrepancies: u32::MAX,
            backjump: false,
            located: self.located_failures,
        }
    }
}

/// What an exact search established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExactStatus {
    /// [`solve`]: a placement under the capacity was found; [`minimise`]: its peak is proven
    /// minimal (equals the lower bound).
    Optimal,
    /// [`minimise`]: a placement was found without proof of minimality.
    Feasible,
    /// No placement fits the capacity (proven by exhausting the canonical placements; with
    /// the memo on, up to 128-bit fingerprint collisions, see its module).
    Infeasible,
    /// The budget ran out first.
    Timeout,
}

impl ExactStatus {
    /// Stable lower-case name used in JSON and CLI output.
    pub fn as_str(self) -> &'static str {
        match self {
            ExactStatus::Optimal => "optimal",
            ExactStatus::Feasible => "feasible",
            ExactStatus::Infeasible => "infeasible",
            ExactStatus::Timeout => "timeout",
        }
    }
}

/// The answer of [`solve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactOutcome {
    /// What was established.
    pub status: ExactStatus,
    /// The placement (checked, under the capacity) when one was found.
    pub placement: Option<Placement>,
    /// Search nodes entered (over all restarts).
    pub nodes: u64,
    /// Wall-clock time spent.
    pub elapsed: Duration,
    /// How far the canonical search got on the buffers and where it failed.
    pub trace: SearchTrace,
}

/// What the canonical-search runs behind an answer went through, for the study of the
/// instances they do not settle (the benchmark lists it for each unsolved one). Runs on
/// blocks and learning members' runs leave no trace; like the node count, only the runs up
/// to the one that settles the question count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchTrace {
    /// Most buffers placed at once by any run: the buffer count when a run placed them all,
    /// well below it when every run backtracks near the bottom.
    pub deepest: usize,
    /// Failures of the section check (section inference) over all runs.
    pub check_failures: u64,
    /// Of those, the failures in each run's most failing section, summed over the runs.
    /// Close to [`SearchTrace::check_failures`]: the runs *thrash*, failing again and again
    /// on one spot while they enumerate combinations of choices made elsewhere.
    pub hottest_failures: u64,
    /// Work of the canonical-search runs counted, in units of what a run visits (each
    /// unplaced buffer a node scans, each section checked or raised, each section and
    /// overlapping buffer a placement or its undo updates, each buffer of a run's root):
    /// about 1.5–3.5 ns a unit on two cores on every instance measured, where a node costs 2
    /// to over 100 µs with the instance's width. [`ExactOptions::work_limit`] caps it. Unlike
    /// the other fields it includes runs on blocks.
    pub work: u64,
}

impl SearchTrace {
    /// Adds the trace of another run (or set of runs).
    fn absorb(&mut self, other: SearchTrace) {
        self.deepest = self.deepest.max(other.deepest);
        self.check_failures = self.check_failures.saturating_add(other.check_failures);
        self.hottest_failures = self.hottest_failures.saturating_add(other.hottest_failures);
        self.work = self.work.saturating_add(other.work);
    }
}

/// Places every buffer of `problem` under `capacity` (`problem.capacity` is ignored). A
/// capacity below the aligned LOAD ([`PlacementProblem::aligned_load`]) is answered
/// [`ExactStatus::Infeasible`] at once, without a search node.
///
/// `fixed` is empty or has one entry per buffer: `Some(offset)` pins a buffer, which the others
/// then avoid (a list of `None`s asks the same question as an empty one). An invalid problem
/// (zero size, bad alignment, empty lifetime), a `fixed` of the wrong length, or pinned buffers
/// that are misaligned, overlap or exceed the capacity have no placement:
/// [`ExactStatus::Infeasible`]. A returned placement always passes
/// [`PlacementProblem::check`] under `capacity` and keeps the pinned offsets.
pub fn solve(
    problem: &PlacementProblem,
    capacity: u64,
    fixed: &[Option<u64>],
    opts: &ExactOptions,
) -> ExactOutcome {
    let clock = opts.limits.start();
    let mut nodes = 0u64;
    let mut trace = SearchTrace::default();
    let status = solve_with_clock(
        problem, capacity, fixed, opts, &clock, &mut nodes, &mut trace,
    );
    let (status, placement) = match status {
        Ok(placement) => (ExactStatus::Optimal, Some(placement)),
        Err(s) => (s, None),
    };
    ExactOutcome {
        status,
        placement,
        nodes,
        elapsed: clock.elapsed(),
        trace,
    }
}

/// [`solve`] under a running clock, adding the nodes entered to `*nodes` and the runs on the
/// buffers to `*trace`; `Err` carries [`ExactStatus::Infeasible`] or [`ExactStatus::Timeout`].
pub(crate) fn solve_with_clock(
    problem: &PlacementProblem,
    capacity: u64,
    fixed: &[Option<u64>],
    opts: &ExactOptions,
    clock: &LimitsClock,
    nodes: &mut u64,
    trace: &mut SearchTrace,
) -> Result<Placement, ExactStatus> {
    let n = problem.buffers.len();
    if problem.validate().is_err()
        || !(fixed.is_empty() || fixed.len() == n)
        || capacity < problem.aligned_load()
    {
        return Err(ExactStatus::Infeasible);
    }
    let capped = PlacementProblem {
        buffers: problem.buffers.clone(),
        capacity: Some(capacity),
    };
    if !fixed.is_empty() {
        let (bufs, offsets): (Vec<_>, Vec<_>) = problem
            .buffers
            .iter()
            .zip(fixed)
            .filter_map(|(b, f)| f.map(|o| (*b, o)))
            .unzip();
        let pinned = PlacementProblem {
            buffers: bufs,
            capacity: Some(capacity),
        };
        if pinned.check(&Placement { offsets }).is_err() {
            return Err(ExactStatus::Infeasible);
        }
    }
    // Building the sections costs up to the number of overlapping pairs: under the clock.
    let Some(inst) = Instance::within(problem, fixed, capacity, clock) else {
        return Err(ExactStatus::Timeout);
    };
    let end = match blocks_of(problem, fixed, opts) {
        None => fit(&inst, capacity, opts, clock, nodes, trace),
        Some(blocks) => {
            // A short look at the buffers themselves (the instances the canonical search
            // settles at once), then the blocks for a share of what is left, then the
            // buffers again (from scratch) with the rest.
            let budget = opts.limits.nodes;
            let look = BLOCKS_AFTER_NODES_PER_BUFFER.saturating_mul(n.max(64) as u64);
            // The work limit bounds the phases together: what one used is gone.
            let work_from = trace.work;
            let work_left = |trace: &SearchTrace| {
                opts.work_limit
                    .map(|w| w.saturating_sub(trace.work.saturating_sub(work_from)))
            };
            let with_nodes = |limit: Option<u64>, work_limit: Option<u64>| ExactOptions {
                limits: Limits {
                    nodes: limit,
                    ..opts.limits.clone()
                },
                work_limit,
                ..opts.clone()
            };
            let mut used = 0u64;
            let first = fit(
                &inst,
                capacity,
                &with_nodes(Some(budget.map_or(look, |b| b.min(look))), opts.work_limit),
                clock,
                &mut used,
                trace,
            );
            let spent = |w: Option<u64>| w == Some(0);
            if !matches!(first, RunEnd::NodeLimit)
                || budget.is_some_and(|b| used >= b)
                || spent(work_left(trace))
            {
                *nodes = nodes.saturating_add(used);
                first
            } else {
                let sub = ExactOptions {
                    limits: minimise::share_of_what_is_left(
                        &opts.limits,
                        clock.elapsed(),
                        used,
                        BLOCKS_SHARE,
                    ),
                    blocks: false,
                    // The node budget splits the phases; the work limit bounds them all.
                    work_limit: work_left(trace),
                    ..opts.clone()
                };
                let sub_clock = sub.limits.start();
                // (The blocks' trace counts blocks, not buffers: only its work counts.)
                let mut blocks_trace = SearchTrace::default();
                let found = solve_with_clock(
                    &blocks.problem,
                    capacity,
                    &[],
                    &sub,
                    &sub_clock,
                    &mut used,
                    &mut blocks_trace,
                );
                trace.work = trace.work.saturating_add(blocks_trace.work);
                *nodes = nodes.saturating_add(used);
                if let Some(placement) = found.ok().and_then(|p| blocks.expand(&p)) {
                    if capped.check(&placement).is_ok() {
                        return Ok(placement);
                    }
                }
                let rest = budget.map(|b| b.saturating_sub(used));
                let work_rest = work_left(trace);
                if spent(work_rest) {
                    RunEnd::NodeLimit
                } else {
                    fit(
                        &inst,
                        capacity,
                        &with_nodes(rest, work_rest),
                        clock,
                        nodes,
                        trace,
                    )
                }
            }
        }
    };
    match end {
        RunEnd::Found(local) => {
            let mut offsets: Vec<u64> = (0..n)
                .map(|i| fixed.get(i).copied().flatten().unwrap_or(0))
                .collect();
            for (k, &g) in inst.global.iter().enumerate() {
                offsets[g] = local[k];
            }
            let placement = Placement { offsets };
            // Never hand out an unchecked placement.
            match capped.check(&placement) {
                Ok(_) => Ok(placement),
                Err(_) => Err(ExactStatus::Timeout),
            }
        }
        RunEnd::Infeasible => Err(ExactStatus::Infeasible),
        RunEnd::NodeLimit | RunEnd::TimeLimit => Err(ExactStatus::Timeout),
    }
}

/// Share of what is left of the budget (time and nodes) that the blocks get after the first
/// look at the buffers (see [`ExactOptions::blocks`]).
pub const BLOCKS_SHARE: f64 = 0.4;

/// Nodes per buffer (at least 64 buffers) of the first look at the buffers, before the
/// blocks (see [`ExactOptions::blocks`]): the rotation's first six rounds.
pub const BLOCKS_AFTER_NODES_PER_BUFFER: u64 = 256;

/// The blocks of `problem` where [`ExactOptions::blocks`] asks for them: no fixed buffers, the
/// whole rotation (not one member alone) and a node or time limit (the blocks' search need
/// not end, and without limits the buffers' own search is complete anyway).
fn blocks_of(
    problem: &PlacementProblem,
    fixed: &[Option<u64>],
    opts: &ExactOptions,
) -> Option<blocks::Blocks> {
    let bounded = opts.limits.nodes.is_some() || opts.limits.time.is_some();
    // A list of pins that pins nothing asks the same question as no list.
    let pinned = fixed.iter().any(Option::is_some);
    if !opts.blocks || pinned || opts.only_strategy.is_some() || !bounded {
        return None;
    }
    blocks::Blocks::of(problem)
}

/// Discrepancy limits the schedule opens with above LOAD (passes with 0, 1, … of them).
pub const DISCREPANCY_PASSES: u64 = 3;

/// Node limit of a discrepancy pass, per buffer (at least 64 buffers). The passes come before
/// the rotation, so they must stay cheap: at 1,024 their twelve runs took most of 10 s on
/// 450+ buffers (measurements: README, *With slack, and in minimisation*).
pub const DISCREPANCY_NODES: u64 = 64;

/// One member of the restart rotation, ready to run.
struct Member {
    /// Preorder keys (each piece of a decomposition is re-ranked by them when they use `T`).
    keys: Vec<ordering::Key>,
    pivot: Pivot,
    rank: Vec<u32>,
    /// 0: the instance; 1: its time reversal. Each side has its own memo and its own lane
    /// (see [`fit`]).
    side: usize,
    /// The learning member `LEARNERS[j]` (then `keys`, `pivot`, `rank` and `side` are unused).
    learning: Option<usize>,
}

/// Lane of the first learning member's runs (lanes 0 and 1: the search runs of each side;
/// learning member `j` has lane `LEARNING_LANE + j`).
const LEARNING_LANE: usize = 2;

/// Lanes: two search sides and one per learning member.
const LANES: usize = LEARNING_LANE + LEARNERS.len();

// Two threads run the lanes, each hosting one learning member's solver (see [`fit`]): a
// third learner would need a thread of its own.
const _: () = assert!(LEARNERS.len() == 2, "one learning member per thread");

/// The runs of the schedule past its first round as four lanes (the forward side's search
/// runs, the time-reversed side's, each learning member's), each with its memo, shared by two
/// threads (see [`fit`]). A lane runs in schedule order, on one thread at a time.
struct Lanes {
    state: std::sync::Mutex<LaneState>,
    wake: std::sync::Condvar,
}

/// What the threads share: per lane its runs `(index, node limit)`, the next one, whether a
/// thread runs it now, its memo while no thread does, and the work it has left.
struct LaneState {
    runs: [Vec<(u64, u64)>; LANES],
    /// Per lane, the work left of its share ([`ExactOptions::work_limit`]): a lane with
    /// none runs no more.
    work_left: [u64; LANES],
    next: [usize; LANES],
    busy: [bool; LANES],
    memos: [Option<Memo>; LANES],
    /// The clock ran out: no more runs.
    halted: bool,
}

impl Lanes {
    fn new(runs: [Vec<(u64, u64)>; LANES], memos: [Memo; LANES], work_left: [u64; LANES]) -> Lanes {
        Lanes {
            state: std::sync::Mutex::new(LaneState {
                runs,
                work_left,
                next: [0; LANES],
                busy: [false; LANES],
                memos: memos.map(Some),
                halted: false,
            }),
            wake: std::sync::Condvar::new(),
        }
    }

    /// Runs lanes on this thread until none is left for it: each time the free lane whose
    /// next run comes first in the schedule, skipping runs after the `answer` so far; of the
    /// learning lanes only `learner`, whose solver lives on this thread; a lane with no work
    /// left is done. `run(index, limit, work left, memo)` runs one.
    fn work(
        &self,
        learner: usize,
        answer: &AtomicU64,
        mut run: impl FnMut(u64, u64, u64, &mut Memo) -> RunReport,
    ) -> Vec<RunReport> {
        let mut reports = Vec::new();
        // A poisoned lock means the other thread panicked: its runs are missing, which can
        // only turn an answer into a timeout.
        let Ok(mut st) = self.state.lock() else {
            return reports;
        };
        loop {
            if st.halted {
                return reports;
            }
            let settled = answer.load(Ordering::Relaxed);
            let mut pick: Option<(u64, usize)> = None;
            for lane in 0..LANES {
                if st.busy[lane]
                    || (lane >= LEARNING_LANE && lane != learner)
                    || st.work_left[lane] == 0
                {
                    continue;
                }
                let Some(&(r, _)) = st.runs[lane].get(st.next[lane]) else {
                    continue;
                };
                if r <= settled && pick.is_none_or(|(first, _)| r < first) {
                    pick = Some((r, lane));
                }
            }
            let Some((r, lane)) = pick else {
                // Nothing for this thread now: wait while the other thread runs a lane (it
                // may free one), stop once it runs none.
                if !st.busy.iter().any(|&b| b) {
                    return reports;
                }
                st = match self.wake.wait(st) {
                    Ok(st) => st,
                    Err(_) => return reports,
                };
                continue;
            };
            let limit = st.runs[lane][st.next[lane]].1;
            let work_left = st.work_left[lane];
            st.busy[lane] = true;
            let mut memo = st.memos[lane].take().unwrap_or_default();
            drop(st);
            // A panic in a run is a bug: the lanes halt (the other thread must not wait for
            // this lane forever) and the runs left are missing, which can only turn an answer
            // into a timeout.
            let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run(r, limit, work_left, &mut memo)
            }));
            st = match self.state.lock() {
                Ok(st) => st,
                Err(_) => return reports,
            };
            st.busy[lane] = false;
            let Ok(report) = report else {
                st.halted = true;
                self.wake.notify_all();
                return reports;
            };
            st.memos[lane] = Some(memo);
            st.next[lane] += 1;
            st.work_left[lane] = st.work_left[lane].saturating_sub(report.trace.work);
            if matches!(report.end, RunEnd::TimeLimit) {
                st.halted = true;
            }
            reports.push(report);
            self.wake.notify_all();
        }
    }
}

/// How one run of the schedule ended.
struct RunReport {
    index: u64,
    end: RunEnd,
    nodes: u64,
    /// A search run's trace (empty for a learning member's).
    trace: SearchTrace,
    /// States in its side's memo when it started (`None` for a learning member); read by
    /// the tests only (`RUN_MEMOS`).
    #[cfg_attr(not(test), allow(dead_code))]
    memo: Option<usize>,
}

#[cfg(test)]
thread_local! {
    /// `(index, memo)` of every search run of the last [`fit`] on this thread up to the
    /// answering one, in schedule order: the tests compare them between one and two threads.
    pub(crate) static RUN_MEMOS: std::cell::RefCell<Vec<(u64, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs the search on `inst` under `capacity` with the strategies of `opts`, at most
/// `opts.limits.nodes` more nodes and until `clock` runs out; adds the nodes to `*nodes`.
///
/// With restarts, runs follow a fixed *schedule*: run `r` is member `r mod k` of the rotation
/// with a node limit of `max(n, 64) · 2^(r div k)`, cut so that the limits of the runs so far
/// never exceed the node budget. Above LOAD (with [`ExactOptions::discrepancy_passes`]) the
/// schedule opens with `DISCREPANCY_PASSES · k` runs: run `r` is member `r mod k` with at most
/// `r div k` discrepancies and `max(n, 64) · DISCREPANCY_NODES` nodes; such a run finds
/// placements but proves nothing, and the rotation follows it. The learning members (last in
/// the rotation, with [`ExactOptions::learning`]) have no runs in the first round, nor in the
/// discrepancy passes, nor while the limit is below [`LEARNING_FROM_NODES`]; each one's runs
/// continue one solver, on one thread, under `limit / LEARNING_STEP_NODES` steps, and count
/// `LEARNING_STEP_NODES` nodes per step. With [`ExactOptions::work_limit`], a search lane that
/// has used its share runs no more, and a run ends early once its lane's share is used (so a
/// run may count fewer nodes than its limit). Members of the time-reversed
/// side share one memo, the others another, so a run's course depends only on the runs of its
/// side before it. The answer is
/// that of the first run in schedule order that ends with a placement or a proof, whether the
/// schedule runs on one thread or on [`ExactOptions::threads`] = 2: after the first round
/// (on the calling thread) the runs form four *lanes*, the forward side's search runs, the
/// time-reversed side's and each learning member's, each run in schedule order with its own
/// memo or solver, and a free thread takes the free lane whose next run comes first (each
/// learning lane only on its own thread, where its solver lives: the activity member's on the
/// spawned thread, the bottom-left member's on the calling one), so both threads stay
/// busy while every run sees exactly what it sees on one thread: the threads change the wall
/// time, never the answer or the node count (the limits of the runs before the answering one
/// plus its own nodes). Only a time limit can end runs at machine-dependent points, as it
/// does on one thread.
pub(crate) fn fit(
    inst: &Instance,
    capacity: u64,
    opts: &ExactOptions,
    clock: &LimitsClock,
    nodes: &mut u64,
    trace: &mut SearchTrace,
) -> RunEnd {
    let budget = opts.limits.nodes.unwrap_or(u64::MAX);
    let cfg = opts.config();
    // A buffer larger than the capacity fits nowhere, whichever member looks.
    if inst.bufs.iter().any(|b| b.size > capacity) {
        return RunEnd::Infeasible;
    }
    // A learning member alone: its model, the whole budget in steps.
    let alone = opts
        .only_strategy
        .and_then(|k| LEARNERS.get(k.checked_sub(STRATEGIES.len())?));
    if let (true, Some(&branching)) = (opts.dynamic_ordering, alone) {
        let Some(mut model) = Learning::new(inst, capacity, branching) else {
            return RunEnd::NodeLimit;
        };
        let (end, steps) = model.run(inst, capacity, budget / LEARNING_STEP_NODES, clock, None);
        *nodes = nodes.saturating_add(steps.saturating_mul(LEARNING_STEP_NODES));
        return end;
    }
    let chosen: Vec<ordering::Strategy> = if !opts.dynamic_ordering {
        Vec::new()
    } else if let Some(k) = opts.only_strategy {
        vec![STRATEGIES[k % STRATEGIES.len()]]
    } else {
        let count = if opts.restarts { STRATEGIES.len() } else { 1 };
        STRATEGIES[..count].to_vec()
    };
    // Backjumping rounds only in a rotation of several search members (see
    // `ExactOptions::backjumping`).
    let backjumping = opts.backjumping && chosen.len() > 1;
    let reversed = (opts.time_reversal && !inst.has_fixed && chosen.iter().any(|s| s.reversed))
        .then(|| inst.reversed());
    let sides: [&Instance; 2] = [inst, reversed.as_ref().unwrap_or(inst)];
    let mut members: Vec<Member> = if chosen.is_empty() {
        vec![Member {
            keys: Vec::new(),
            pivot: Pivot::Fewest,
            rank: ranks(inst, &[]),
            side: 0,
            learning: None,
        }]
    } else {
        chosen
            .iter()
            .map(|s| {
                let side = usize::from(opts.time_reversal && s.reversed);
                Member {
                    keys: s.keys.to_vec(),
                    pivot: s.pivot,
                    rank: ranks(sides[side], &s.keys),
                    side,
                    learning: None,
                }
            })
            .collect()
    };
    let work_budget = opts.work_limit.unwrap_or(u64::MAX);
    if let [m] = members.as_slice() {
        let mut memo = Memo::default();
        let mut used = 0;
        let mut search = Search::new(
            sides[m.side],
            capacity,
            cfg,
            (m.pivot, m.rank.clone()),
            &mut memo,
        )
        .rerank_by(&m.keys)
        .with_work_limit(work_budget);
        let end = search.run(budget, clock, &mut used);
        trace.work = trace.work.saturating_add(search.trace().work);
        *nodes = nodes.saturating_add(used);
        return end;
    }
    // The learning members model `inst` itself (the sides share local indices, so their
    // placements hold for both) and have a lane each: their `side` is unused.
    if learners_join(inst, opts) {
        for j in 0..LEARNERS.len() {
            members.push(Member {
                keys: Vec::new(),
                pivot: Pivot::Fewest,
                rank: Vec::new(),
                side: 0,
                learning: Some(j),
            });
        }
    }
    let k = members.len() as u64;
    let base = (inst.len() as u64).max(64);
    // Above LOAD, the schedule opens with discrepancy passes: entries `0..lds` run member
    // `r mod k` with at most `r / k` discrepancies; the rotation follows.
    let load = inst.total.iter().copied().max().unwrap_or(0);
    let lds = if opts.discrepancy_passes && !inst.has_fixed && capacity > load {
        DISCREPANCY_PASSES * k
    } else {
        0
    };
    // Member and discrepancy limit of run `r`.
    let entry = |r: u64| -> (usize, u32) {
        let m = (r % k) as usize;
        if r < lds {
            (m, u32::try_from(r / k).unwrap_or(u32::MAX))
        } else {
            (m, u32::MAX)
        }
    };
    // Node limit of run `r` given the limits of the runs before it; `None` for an entry of
    // a learning member before it joins (no run, no budget): never in the first round,
    // which runs on this thread (its solver cannot move to another one).
    let limit_of = |r: u64, before: u64| -> Option<u64> {
        let per_run = if r < lds {
            base.saturating_mul(DISCREPANCY_NODES)
        } else {
            base.saturating_mul(1u64 << ((r - lds) / k).min(62))
        };
        let learning = members[(r % k) as usize].learning.is_some();
        if learning && (r < lds + k || per_run < LEARNING_FROM_NODES) {
            return None;
        }
        Some(per_run.min(budget.saturating_sub(before)))
    };
    let answer = AtomicU64::new(u64::MAX);
    // One run: member `mi` as run `r` with `run_limit` nodes, on its side's memo (learning
    // member `j` on `models[j]`, built when it first runs: `Some(None)` means it sits out).
    let run_one = |r: u64,
                   run_limit: u64,
                   work_left: u64,
                   memo: &mut Memo,
                   models: &mut [Option<Option<Learning>>; LEARNERS.len()]|
     -> RunReport {
        let (mi, discrepancies) = entry(r);
        let m = &members[mi];
        if clock.exhausted().is_some() {
            return RunReport {
                index: r,
                end: RunEnd::TimeLimit,
                nodes: 0,
                trace: SearchTrace::default(),
                memo: None,
            };
        }
        let mut used = 0;
        let mut run_trace = SearchTrace::default();
        let states = m.learning.is_none().then(|| memo.len());
        let end = if let Some(j) = m.learning {
            match models[j].get_or_insert_with(|| Learning::new(inst, capacity, LEARNERS[j])) {
                Some(model) => {
                    let steps = run_limit / LEARNING_STEP_NODES;
                    let (end, taken) = model.run(inst, capacity, steps, clock, Some((&answer, r)));
                    used = taken.saturating_mul(LEARNING_STEP_NODES);
                    end
                }
                None => RunEnd::NodeLimit,
            }
        } else {
            let mut search = Search::new(
                sides[m.side],
                capacity,
                Config {
                    discrepancies,
                    backjump: backjumping && r >= lds && ((r - lds) / k) % 2 == 1,
                    located: cfg.located && run_limit >= LOCATED_FROM_NODES,
                    ..cfg
                },
                (m.pivot, m.rank.clone()),
                memo,
            )
            .rerank_by(&m.keys)
            .stop_when(&answer, r)
            .with_work_limit(work_left);
            let end = search.run(run_limit, clock, &mut used);
            run_trace = search.trace();
            end
        };
        if matches!(end, RunEnd::Found(_) | RunEnd::Infeasible) {
            answer.fetch_min(r, Ordering::Relaxed);
        }
        RunReport {
            index: r,
            end,
            nodes: used,
            trace: run_trace,
            memo: states,
        }
    };
    // Lane of member `mi`: its side's search runs share the side's memo and run in schedule
    // order; a learning member's runs continue its solver. A state's fingerprint means
    // something only on its own side.
    let lane_of = |mi: usize| -> usize {
        if let Some(j) = members[mi].learning {
            LEARNING_LANE + j
        } else {
            members[mi].side
        }
    };
    // The runs from `from` on, in schedule order, with their node limits, up to the budget.
    // The limits double every round, so their sum saturates (and the budget ends) within 64
    // rounds even without a node budget; 70 rounds only bound the loop.
    let plan = |from: u64| -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut before = 0u64;
        for r in 0..lds.saturating_add(70 * k) {
            let Some(run_limit) = limit_of(r, before) else {
                continue;
            };
            before = before.saturating_add(run_limit);
            if run_limit == 0 {
                break;
            }
            if r >= from {
                runs.push((r, run_limit));
            }
        }
        runs
    };
    // Runs `runs` in schedule order on this thread; `true` once one of them settles the
    // question (on one thread no other run can) or the clock runs out.
    let in_order = |runs: Vec<(u64, u64)>,
                    memos: &mut [Memo; LANES],
                    work_left: &mut [u64; LANES],
                    models: &mut [Option<Option<Learning>>; LEARNERS.len()],
                    reports: &mut Vec<RunReport>| {
        for (r, run_limit) in runs {
            let lane = lane_of(entry(r).0);
            if work_left[lane] == 0 {
                // The lane has used its share of the work: it runs no more.
                continue;
            }
            let report = run_one(r, run_limit, work_left[lane], &mut memos[lane], models);
            work_left[lane] = work_left[lane].saturating_sub(report.trace.work);
            let last = !matches!(report.end, RunEnd::NodeLimit);
            reports.push(report);
            if last {
                return true;
            }
        }
        false
    };
    // The first round on this thread (most searches end there). One memo per lane (the
    // learning lanes' stay empty), one model per learning member (built at its first run).
    let mut memos: [Memo; LANES] = Default::default();
    let mut models: [Option<Option<Learning>>; LEARNERS.len()] = Default::default();
    let mut reports = Vec::new();
    let mut used_lanes = [false; LANES];
    for mi in 0..members.len() {
        used_lanes[lane_of(mi)] = true;
    }
    let lanes_in_use = used_lanes.iter().filter(|&&used| used).count();
    // The work limit, in equal shares for the search lanes in use (the learning lanes have
    // none: their steps count against the node limit).
    let search_lanes = used_lanes[..LEARNING_LANE]
        .iter()
        .filter(|&&used| used)
        .count()
        .max(1) as u64;
    let share = work_budget / search_lanes;
    let mut work_left: [u64; LANES] =
        std::array::from_fn(|l| if l < LEARNING_LANE { share } else { u64::MAX });
    let first = plan(0)
        .into_iter()
        .take_while(|&(r, _)| r < lds + k)
        .collect();
    let stopped = in_order(first, &mut memos, &mut work_left, &mut models, &mut reports);
    if !stopped && opts.threads >= 2 && lanes_in_use >= 2 {
        // The rest as lanes on two threads: each thread takes, among the lanes free to it, the
        // one whose next run comes first in the schedule (a learning lane only on the thread
        // where its solver lives), so both stay busy and every run still sees
        // its lane's memo exactly as on one thread.
        let mut lanes: [Vec<(u64, u64)>; LANES] = Default::default();
        for (r, run_limit) in plan(lds + k) {
            lanes[lane_of(entry(r).0)].push((r, run_limit));
        }
        let shared = Lanes::new(lanes, memos, work_left);
        let theirs = std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                let mut own: [Option<Option<Learning>>; LEARNERS.len()] = Default::default();
                shared.work(LEARNING_LANE, &answer, |r, l, w, memo| {
                    run_one(r, l, w, memo, &mut own)
                })
            });
            // This thread runs the second learning lane only (its solver lives here).
            let mine = shared.work(LEARNING_LANE + 1, &answer, |r, l, w, memo| {
                run_one(r, l, w, memo, &mut models)
            });
            reports.extend(mine);
            // A panic in the other thread is a bug; its runs are then simply missing, which
            // can only turn an answer into a timeout, never into a wrong answer.
            other.join().unwrap_or_default()
        });
        reports.extend(theirs);
    } else if !stopped {
        in_order(
            plan(lds + k),
            &mut memos,
            &mut work_left,
            &mut models,
            &mut reports,
        );
    }
    reports.sort_by_key(|rep| rep.index);
    let settled = answer.load(Ordering::Relaxed);
    #[cfg(test)]
    RUN_MEMOS.with(|runs| {
        *runs.borrow_mut() = reports
            .iter()
            .filter(|r| r.index <= settled)
            .filter_map(|r| Some((r.index, r.memo?)))
            .collect();
    });
    let mut spent = 0u64;
    let mut end = RunEnd::NodeLimit;
    for rep in reports {
        if rep.index > settled {
            break;
        }
        trace.absorb(rep.trace);
        if rep.index == settled {
            spent = spent.saturating_add(rep.nodes);
            end = rep.end;
            break;
        }
        spent = spent.saturating_add(rep.nodes);
        if matches!(rep.end, RunEnd::TimeLimit) && settled == u64::MAX {
            end = RunEnd::TimeLimit;
        }
    }
    *nodes = nodes.saturating_add(spent);
    end
}
