//! The mix of the mixed mode: the kinds of operation, the seeded schedule, the graphs with
//! their reference plans and request bodies, the check of a plan, and the tally of what the
//! clients saw.

use crate::stats::SplitMix64;
use hyper::body::Bytes;
use memplan::{Graph, Plan};
use std::time::Duration;

/// The kinds of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `POST /v1/plan`, default caching.
    Plan,
    /// `POST /v1/plan` with `cache: false` (always solved).
    PlanFresh,
    /// `POST /v1/jobs`, default caching, followed to the end, then its plan.
    Job,
    /// `POST /v1/jobs` with `cache: false`.
    JobFresh,
    /// `POST /v1/check` of the reference plan.
    Check,
}

impl Kind {
    /// Every kind, in table order.
    pub const ALL: [Kind; 5] = [
        Kind::Plan,
        Kind::PlanFresh,
        Kind::Job,
        Kind::JobFresh,
        Kind::Check,
    ];

    /// Its row label.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Plan => "sync plan",
            Kind::PlanFresh => "sync plan, `cache: false`",
            Kind::Job => "job",
            Kind::JobFresh => "job, `cache: false`",
            Kind::Check => "check",
        }
    }

    /// Its position in [`Kind::ALL`] and in the tally's arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One operation of a client.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    /// What.
    pub kind: Kind,
    /// On which graph (index into `Ctx::graphs`).
    pub graph: usize,
    /// Jobs: follow the event stream (else poll).
    pub events: bool,
}

/// The operations of `clients` clients × `rounds`, drawn from `seed`: 20 % sync plans, 20 %
/// sync plans with `cache: false`, 15 % jobs, 15 % jobs with `cache: false`, 30 % checks;
/// graphs uniform; half the jobs followed by events.
pub fn schedule(seed: u64, clients: usize, rounds: usize, graphs: usize) -> Vec<Vec<Op>> {
    (0..clients)
        .map(|c| {
            let mut rng = SplitMix64::new(seed ^ (c as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
            (0..rounds)
                .map(|_| {
                    let kind = match rng.below(100) {
                        0..=19 => Kind::Plan,
                        20..=39 => Kind::PlanFresh,
                        40..=54 => Kind::Job,
                        55..=69 => Kind::JobFresh,
                        _ => Kind::Check,
                    };
                    Op {
                        kind,
                        graph: rng.below(graphs as u64) as usize,
                        events: rng.below(2) == 0,
                    }
                })
                .collect()
        })
        .collect()
}

/// A graph of the mix with its reference plan and request bodies.
pub struct Case {
    /// Graph name.
    pub name: String,
    /// The graph.
    pub graph: Graph,
    /// The library's plan with the same options.
    pub reference: Plan,
    /// Its peak, as `memplan::validate` replays it.
    pub peak: u64,
    /// `{graph, options}`, default caching.
    pub body_cached: Bytes,
    /// `{graph, options}` with `cache: false`.
    pub body_fresh: Bytes,
    /// `{graph, plan}` with the reference plan.
    pub check_body: Bytes,
}

/// Is `text` a plan of `case` with the reference peak? `Ok(true)` when its instructions are
/// the reference's too.
pub fn verify_plan(case: &Case, text: &[u8]) -> Result<bool, String> {
    let text = std::str::from_utf8(text).map_err(|e| format!("plan is not UTF-8: {e}"))?;
    let plan = Plan::parse(text).map_err(|e| format!("plan of {} unreadable: {e}", case.name))?;
    let replay = memplan::validate(&case.graph, &plan, None)
        .map_err(|v| format!("plan of {} does not validate: {v}", case.name))?;
    if replay.peak != case.peak {
        return Err(format!(
            "plan of {}: peak {} bytes, the reference's {} (status {:?})",
            case.name, replay.peak, case.peak, plan.stats.status
        ));
    }
    Ok(plan.arena_bytes == case.reference.arena_bytes
        && plan.weights == case.reference.weights
        && plan.instructions == case.reference.instructions)
}

/// What a client saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Operations by kind.
    pub ops: [usize; 5],
    /// Operations answered correctly, by kind.
    pub ok: [usize; 5],
    /// 503 answers, by kind.
    pub n503: [usize; 5],
    /// Latency of the successful operations (503 waits included), by kind.
    pub latencies: [Vec<Duration>; 5],
    /// Requests sent again after a 503.
    pub retries: usize,
    /// Most 503s one request got before its answer.
    pub most_503s: usize,
    /// Sum and largest of the Retry-After values (seconds).
    pub retry_after: (u64, u64),
    /// 503s without an integer Retry-After or a problem document.
    pub bad_503: usize,
    /// Jobs answered 202.
    pub jobs_accepted: usize,
    /// Jobs that ended `done` with a valid plan.
    pub jobs_completed: usize,
    /// Jobs done at once (from a stored plan).
    pub jobs_done_at_once: usize,
    /// Jobs followed by their event stream / by polling.
    pub followed: [usize; 2],
    /// Events read.
    pub events: usize,
    /// `GET /v1/jobs/{id}` polls.
    pub polls: usize,
    /// Plans replayed.
    pub plans_checked: usize,
    /// Plans identical to the reference (instructions, offsets).
    pub plans_identical: usize,
    /// Sync plans with default caching answered from the cache / solved.
    pub cache: [usize; 2],
    /// Connections opened.
    pub opened: usize,
    /// Responses received.
    pub answered: usize,
    /// What went wrong, one line each.
    pub failures: Vec<String>,
}

impl Tally {
    /// Adds `o` to this.
    pub fn merge(&mut self, o: Tally) {
        for i in 0..5 {
            self.ops[i] += o.ops[i];
            self.ok[i] += o.ok[i];
            self.n503[i] += o.n503[i];
        }
        for (mine, theirs) in self.latencies.iter_mut().zip(o.latencies) {
            mine.extend(theirs);
        }
        self.retries += o.retries;
        self.most_503s = self.most_503s.max(o.most_503s);
        self.retry_after.0 += o.retry_after.0;
        self.retry_after.1 = self.retry_after.1.max(o.retry_after.1);
        self.bad_503 += o.bad_503;
        self.jobs_accepted += o.jobs_accepted;
        self.jobs_completed += o.jobs_completed;
        self.jobs_done_at_once += o.jobs_done_at_once;
        self.followed[0] += o.followed[0];
        self.followed[1] += o.followed[1];
        self.events += o.events;
        self.polls += o.polls;
        self.plans_checked += o.plans_checked;
        self.plans_identical += o.plans_identical;
        self.cache[0] += o.cache[0];
        self.cache[1] += o.cache[1];
        self.opened += o.opened;
        self.answered += o.answered;
        self.failures.extend(o.failures);
    }
}
