//! Solver limits and stop reasons, in the style of egg's `Runner`: every solver takes its
//! [`Limits`] (a wall-clock limit, a node limit in the solver's documented unit, a stop flag;
//! each optional), tracks them with a [`LimitsClock`], and says why it stopped with a typed
//! [`SolveStatus`] in the [`SolveStats`] every solver returns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A shared stop flag: another thread (an HTTP `DELETE`, a Ctrl-C handler) raises it and every
/// solver holding a [`Limits`] with it stops at its next limit check, returning its best
/// answer so far as if its time had run out. Clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A new, unraised token.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Raises the flag (idempotent).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the flag is raised.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The underlying flag (for callbacks such as HiGHS' interrupt).
    pub fn flag(&self) -> &AtomicBool {
        &self.0
    }
}

impl PartialEq for CancelToken {
    /// Tokens are equal when they share one flag.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CancelToken {}

/// A wall-clock cap turned into a stop flag: [`Deadline::start`] returns a token that is raised
/// when the cap is reached or when the parent token (a user's cancel) is raised, whichever
/// comes first. Solvers run with this token and **no** time limit of their own, so they stop
/// at their deterministic work caps unless the cap binds; [`Deadline::hit`] then tells the
/// caller that the wall clock, not the work, decided where they stopped. The watcher thread
/// polls every millisecond and ends when the deadline is dropped.
#[derive(Debug)]
pub struct Deadline {
    token: CancelToken,
    hit: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

impl Deadline {
    /// Starts watching `cap` (none: only the parent) and `parent`.
    pub fn start(cap: Option<Duration>, parent: Option<CancelToken>) -> Deadline {
        let token = CancelToken::new();
        let hit = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        if cap.is_some_and(|c| c.is_zero()) {
            token.cancel();
            hit.store(true, Ordering::Relaxed);
        }
        let watcher = (cap.is_some() || parent.is_some()).then(|| {
            let (token, hit, done) = (token.clone(), hit.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) && !token.is_cancelled() {
                    if parent.as_ref().is_some_and(CancelToken::is_cancelled) {
                        token.cancel();
                        break;
                    }
                    if cap.is_some_and(|c| started.elapsed() >= c) {
                        hit.store(true, Ordering::Relaxed);
                        token.cancel();
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        });
        Deadline {
            token,
            hit,
            done,
            watcher,
        }
    }

    /// The stop flag to hand to solvers.
    pub fn token(&self) -> CancelToken {
        self.token.clone()
    }

    /// Whether the wall-clock cap was reached.
    pub fn hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

/// A callback for solver progress: called with the best objective found so far and the best
/// proven lower bound (both bytes) whenever a solver improves either. Clones share the
/// callback; it may be called from the solver's thread.
#[derive(Clone)]
pub struct ProgressFn(pub Arc<dyn Fn(u64, u64) + Send + Sync>);

impl ProgressFn {
    /// Wraps a callback `f(objective, lower_bound)`.
    pub fn new(f: impl Fn(u64, u64) + Send + Sync + 'static) -> Self {
        ProgressFn(Arc::new(f))
    }

    /// Reports one update.
    pub fn report(&self, objective: u64, lower_bound: u64) {
        (self.0)(objective, lower_bound)
    }
}

impl std::fmt::Debug for ProgressFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressFn(..)")
    }
}

impl PartialEq for ProgressFn {
    /// Callbacks are equal when they are one callback.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Limits a solver must respect. `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock limit.
    pub time: Option<Duration>,
    /// Limit on search nodes / iterations (solver-specific unit, documented by each solver).
    pub nodes: Option<u64>,
    /// Stop flag checked with the limits (a raised flag reads as a spent time limit).
    pub cancel: Option<CancelToken>,
}

impl Limits {
    /// No limits.
    pub const UNLIMITED: Limits = Limits {
        time: None,
        nodes: None,
        cancel: None,
    };

    /// Limits with a wall-clock limit only.
    pub fn with_time(time: Duration) -> Self {
        Limits {
            time: Some(time),
            ..Limits::UNLIMITED
        }
    }

    /// These limits with `time` replaced by what is left of it after `elapsed` (and the same
    /// node limit and stop flag).
    pub fn remaining_after(&self, elapsed: Duration) -> Self {
        Limits {
            time: self.time.map(|t| t.saturating_sub(elapsed)),
            ..self.clone()
        }
    }

    /// Whether the stop flag is raised.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    /// Starts a clock that answers whether a limit is reached.
    pub fn start(&self) -> LimitsClock {
        LimitsClock {
            started: Instant::now(),
            limits: self.clone(),
            nodes: 0,
        }
    }

    /// Starts a clock that reads the time limit and the stop flag only: the node limit is
    /// left to the caller (a work cap of its own, or its members' own).
    pub fn start_time_and_flag(&self) -> LimitsClock {
        Limits {
            nodes: None,
            ..self.clone()
        }
        .start()
    }
}

/// Running limits: counts nodes and compares elapsed time against the limit.
#[derive(Debug, Clone)]
pub struct LimitsClock {
    started: Instant,
    limits: Limits,
    nodes: u64,
}

impl LimitsClock {
    /// Time since [`Limits::start`].
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Counts one search node / iteration; returns the reason to stop if a limit is reached.
    pub fn tick(&mut self) -> Option<SolveStatus> {
        self.nodes += 1;
        self.exhausted()
    }

    /// Nodes counted so far.
    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    /// The reason to stop, if any limit is reached now.
    pub fn exhausted(&self) -> Option<SolveStatus> {
        if let Some(n) = self.limits.nodes {
            if self.nodes >= n {
                return Some(SolveStatus::NodeLimit);
            }
        }
        if let Some(t) = self.limits.time {
            if self.started.elapsed() >= t {
                return Some(SolveStatus::TimeLimit);
            }
        }
        if self.limits.is_cancelled() {
            return Some(SolveStatus::TimeLimit);
        }
        None
    }
}

/// Why a solver stopped / how good its answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SolveStatus {
    /// Proven optimal (objective equals the lower bound).
    Optimal,
    /// A heuristic answer; no optimality claim beyond the reported gap.
    Heuristic,
    /// Stopped by the time limit with the best answer found.
    TimeLimit,
    /// Stopped by the node limit with the best answer found.
    NodeLimit,
    /// Proven infeasible (e.g. cannot fit a capacity).
    Infeasible,
}

impl SolveStatus {
    /// Stable lower-case name used in JSON and CLI output.
    pub fn as_str(self) -> &'static str {
        match self {
            SolveStatus::Optimal => "optimal",
            SolveStatus::Heuristic => "heuristic",
            SolveStatus::TimeLimit => "time_limit",
            SolveStatus::NodeLimit => "node_limit",
            SolveStatus::Infeasible => "infeasible",
        }
    }
}

impl std::fmt::Display for SolveStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Statistics every solver returns with its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SolveStats {
    /// Outcome kind.
    pub status: SolveStatus,
    /// Wall-clock time spent.
    pub elapsed: Duration,
    /// Objective of the returned answer (bytes, e.g. a peak).
    pub objective: u64,
    /// Best proven lower bound on the objective (bytes).
    pub lower_bound: u64,
}

impl SolveStats {
    /// Relative gap `(objective - lower_bound) / objective`, 0 when the objective is 0.
    pub fn gap(&self) -> f64 {
        if self.objective == 0 {
            0.0
        } else {
            self.objective.saturating_sub(self.lower_bound) as f64 / self.objective as f64
        }
    }

    /// Stats of a heuristic answer; reported as optimal when it meets the bound.
    pub fn heuristic(objective: u64, lower_bound: u64, elapsed: Duration) -> Self {
        SolveStats {
            status: if objective <= lower_bound {
                SolveStatus::Optimal
            } else {
                SolveStatus::Heuristic
            },
            elapsed,
            objective,
            lower_bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_budget_stops_after_the_given_number_of_ticks() {
        let mut c = Limits {
            time: None,
            nodes: Some(3),
            ..Limits::UNLIMITED
        }
        .start();
        assert_eq!(c.tick(), None);
        assert_eq!(c.tick(), None);
        assert_eq!(c.tick(), Some(SolveStatus::NodeLimit));
    }

    #[test]
    fn a_raised_cancel_token_spends_the_budget_of_every_clone() {
        let token = CancelToken::new();
        let limits = Limits {
            cancel: Some(token.clone()),
            ..Limits::UNLIMITED
        };
        let mut clock = limits.clone().start();
        assert_eq!(clock.tick(), None);
        token.cancel();
        assert_eq!(clock.tick(), Some(SolveStatus::TimeLimit));
        assert!(limits.is_cancelled());
    }

    #[test]
    fn a_deadline_raises_its_token_at_the_cap_and_says_so() {
        let d = Deadline::start(Some(Duration::from_millis(20)), None);
        assert!(!d.token().is_cancelled());
        let t0 = Instant::now();
        while !d.token().is_cancelled() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(d.token().is_cancelled() && d.hit());
    }

    #[test]
    fn a_deadline_follows_its_parent_without_reporting_the_cap() {
        let parent = CancelToken::new();
        let d = Deadline::start(Some(Duration::from_secs(60)), Some(parent.clone()));
        parent.cancel();
        let t0 = Instant::now();
        while !d.token().is_cancelled() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(d.token().is_cancelled());
        assert!(!d.hit());
    }

    #[test]
    fn gap_is_relative_to_the_objective() {
        let s = SolveStats::heuristic(200, 150, Duration::ZERO);
        assert_eq!(s.status, SolveStatus::Heuristic);
        assert!((s.gap() - 0.25).abs() < 1e-12);
        assert_eq!(
            SolveStats::heuristic(150, 150, Duration::ZERO).status,
            SolveStatus::Optimal
        );
    }
}
