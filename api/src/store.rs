//! SQLite persistence of jobs and plans (one file, WAL journal, `synchronous=FULL`: a job is on
//! disk before its 202 is sent, so an accepted job survives any crash).
//!
//! Tables: `jobs` (request, status, progress, error, the plan it produced) and `plans`
//! (plan documents; `key` is the content hash of graph + options when the plan may answer an
//! identical request, NULL for a cancelled job's partial plan). A newer plan for a key
//! supersedes the older ones, which are deleted unless a job still points at them.

use crate::model::{JobStatus, Progress};
use memplan::PlanStatus;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use thiserror::Error;

/// Schema version stored in `PRAGMA user_version` (2: `jobs.plan_status`, the typed plan
/// status of a job's progress; 3: `jobs.client` and the stored size of every row,
/// `jobs.bytes` and `plans.bytes`, for retention by bytes; 4: `jobs.crashed_runs`, the starts
/// not ended by a graceful stop, apart from `jobs.attempts`, every start; older files are
/// upgraded in place).
const SCHEMA_VERSION: i64 = 4;

/// A database failure.
#[derive(Debug, Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The file was written by a newer version.
    #[error("database schema version {0} is newer than this service's ({SCHEMA_VERSION})")]
    TooNew(i64),
    /// A stored value is not what this version writes.
    #[error("database holds a corrupt value: {0}")]
    Corrupt(String),
    /// Another thread panicked while holding the connection.
    #[error("database connection poisoned by a panic")]
    Poisoned,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    /// Job id.
    pub id: String,
    /// Content hash of graph + options.
    pub key: String,
    /// Status.
    pub status: JobStatus,
    /// Graph name.
    pub graph_name: String,
    /// Resolved options (JSON).
    pub options: String,
    /// Answered from a stored plan.
    pub cached: bool,
    /// Times started (a graceful stop during a run included).
    pub attempts: u32,
    /// Starts not ended by a graceful stop, the run under way included: the runs a crash
    /// interrupted once the service starts again (what `MAX_ATTEMPTS` limits).
    pub crashed_runs: u32,
    /// Accepted at (Unix ms).
    pub created_ms: u64,
    /// Last started at.
    pub started_ms: Option<u64>,
    /// Finished at.
    pub finished_ms: Option<u64>,
    /// Final or last persisted progress.
    pub progress: Progress,
    /// Problem document (JSON) of a failed job.
    pub error: Option<String>,
    /// Whether a plan is attached.
    pub has_plan: bool,
    /// Who submitted it (token name or address; none for jobs from before version 3).
    pub client: Option<String>,
    /// Insertion order (the listing's cursor).
    pub seq: i64,
}

/// A new job to insert.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    /// Job id.
    pub id: &'a str,
    /// Content hash.
    pub key: &'a str,
    /// Initial status (`queued`, or `done` for a cache hit).
    pub status: JobStatus,
    /// Graph name.
    pub graph_name: &'a str,
    /// Canonical graph JSON.
    pub graph: &'a str,
    /// Resolved options JSON.
    pub options: &'a str,
    /// Accepted at.
    pub created_ms: u64,
    /// For a cache hit: the stored plan answering it, and its progress figures.
    pub cached_plan: Option<(i64, Progress)>,
    /// Who submitted it.
    pub client: &'a str,
}

/// What a retention sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Finished jobs deleted.
    pub jobs: u64,
    /// Plans deleted.
    pub plans: u64,
    /// Stored bytes freed.
    pub bytes: u64,
}

/// A page of the job listing.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<JobRow>,
    /// The `seq` to continue below, when more jobs match.
    pub next: Option<i64>,
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct Finish {
    /// Terminal status.
    pub status: JobStatus,
    /// Finished at.
    pub finished_ms: u64,
    /// Final progress.
    pub progress: Progress,
    /// Plan produced: (cache key or None, plan JSON).
    pub plan: Option<(Option<String>, String)>,
    /// Problem document (JSON) for a failure.
    pub error: Option<String>,
}

/// The database (one connection behind a mutex; callers run on blocking threads).
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: Option<i64>) -> Option<u64> {
    v.map(|v| u64::try_from(v).unwrap_or(0))
}

const JOB_COLUMNS: &str = "id, key, status, graph_name, options, cached, attempts, created_ms, \
     started_ms, finished_ms, stage, best_peak, lower_bound, elapsed_s, error, plan_id, plan_status, \
     client, seq, crashed_runs";

/// Byte length of a stored text, as counted for retention.
fn len_i64(s: &str) -> i64 {
    i64::try_from(s.len()).unwrap_or(i64::MAX)
}

/// The stored name of a plan status.
fn status_name(s: Option<PlanStatus>) -> Option<&'static str> {
    s.map(PlanStatus::as_str)
}

/// A stored plan status name (unknown names, from another version, read as none).
fn status_of(name: Option<String>) -> Option<PlanStatus> {
    let name = name?;
    PlanStatus::ALL.into_iter().find(|s| s.as_str() == name)
}

fn job_row(r: &Row<'_>) -> rusqlite::Result<(JobRow, String)> {
    let status: String = r.get(2)?;
    let best: Option<i64> = r.get(11)?;
    let lower: Option<i64> = r.get(12)?;
    let (best, lower) = (to_u64(best), to_u64(lower));
    let gap = match (best, lower) {
        (Some(b), Some(l)) if b > 0 => Some(b.saturating_sub(l) as f64 / b as f64),
        (Some(_), Some(_)) => Some(0.0),
        _ => None,
    };
    let plan_id: Option<i64> = r.get(15)?;
    Ok((
        JobRow {
            id: r.get(0)?,
            key: r.get(1)?,
            status: JobStatus::Queued,
            graph_name: r.get(3)?,
            options: r.get(4)?,
            cached: r.get::<_, i64>(5)? != 0,
            attempts: u32::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
            created_ms: to_u64(r.get(7)?).unwrap_or(0),
            started_ms: to_u64(r.get(8)?),
            finished_ms: to_u64(r.get(9)?),
            progress: Progress {
                stage: r.get(10)?,
                best_peak_bytes: best,
                lower_bound_bytes: lower,
                gap,
                elapsed_s: r.get::<_, Option<f64>>(13)?.unwrap_or(0.0),
                status: status_of(r.get(16)?),
            },
            error: r.get(14)?,
            has_plan: plan_id.is_some(),
            client: r.get(17)?,
            seq: r.get(18)?,
            crashed_runs: u32::try_from(r.get::<_, i64>(19)?).unwrap_or(0),
        },
        status,
    ))
}

fn with_status((mut row, status): (JobRow, String)) -> Result<JobRow, StoreError> {
    row.status = JobStatus::from_name(&status)
        .ok_or_else(|| StoreError::Corrupt(format!("job {} has status {status:?}", row.id)))?;
    Ok(row)
}

impl Store {
    /// Opens (creating when missing) the database at `path`; `None` opens a private in-memory
    /// database.
    pub fn open(path: Option<&Path>) -> Result<Store, StoreError> {
        let conn = match path {
            Some(p) => Connection::open(p)?,
            None => Connection::open_in_memory()?,
        };
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let tables: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))?;
        if tables == 0 {
            // A new file: freed pages go back to the file system (retention shrinks the file).
            // Set before anything is written, the journal mode included.
            conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        }
        // WAL: readers do not block the writer; FULL: a commit is on disk when it returns.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew(version));
        }
        if version < 1 {
            conn.execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS plans (
                     id INTEGER PRIMARY KEY AUTOINCREMENT,
                     key TEXT,
                     plan TEXT NOT NULL,
                     created_ms INTEGER NOT NULL
                 );
                 CREATE INDEX IF NOT EXISTS plans_key ON plans(key, id);
                 CREATE TABLE IF NOT EXISTS jobs (
                     seq INTEGER PRIMARY KEY AUTOINCREMENT,
                     id TEXT NOT NULL UNIQUE,
                     key TEXT NOT NULL,
                     status TEXT NOT NULL,
                     graph_name TEXT NOT NULL,
                     graph TEXT NOT NULL,
                     options TEXT NOT NULL,
                     cached INTEGER NOT NULL DEFAULT 0,
                     attempts INTEGER NOT NULL DEFAULT 0,
                     created_ms INTEGER NOT NULL,
                     started_ms INTEGER,
                     finished_ms INTEGER,
                     stage TEXT,
                     best_peak INTEGER,
                     lower_bound INTEGER,
                     elapsed_s REAL,
                     error TEXT,
                     plan_id INTEGER REFERENCES plans(id)
                 );
                 CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, seq);
                 PRAGMA user_version = 1;
                 COMMIT;",
            )?;
        }
        if version < 2 {
            conn.execute_batch(
                "BEGIN;
                 ALTER TABLE jobs ADD COLUMN plan_status TEXT;
                 PRAGMA user_version = 2;
                 COMMIT;",
            )?;
        }
        if version < 3 {
            conn.execute_batch(
                "BEGIN;
                 ALTER TABLE jobs ADD COLUMN client TEXT;
                 ALTER TABLE jobs ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
                 ALTER TABLE plans ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
                 UPDATE jobs SET bytes = LENGTH(CAST(graph AS BLOB)) + LENGTH(CAST(options AS BLOB))
                     + COALESCE(LENGTH(CAST(error AS BLOB)), 0);
                 UPDATE plans SET bytes = LENGTH(CAST(plan AS BLOB));
                 CREATE INDEX IF NOT EXISTS jobs_finished ON jobs(finished_ms, seq);
                 CREATE INDEX IF NOT EXISTS plans_created ON plans(created_ms, id);
                 CREATE INDEX IF NOT EXISTS jobs_plan ON jobs(plan_id);
                 PRAGMA user_version = 3;
                 COMMIT;",
            )?;
        }
        if version < 4 {
            // Until version 4 a graceful stop took its start back from `attempts`, which
            // counted exactly the starts not ended by one.
            conn.execute_batch(
                "BEGIN;
                 ALTER TABLE jobs ADD COLUMN crashed_runs INTEGER NOT NULL DEFAULT 0;
                 UPDATE jobs SET crashed_runs = attempts;
                 PRAGMA user_version = 4;
                 COMMIT;",
            )?;
        }
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        self.conn.lock().map_err(|_| StoreError::Poisoned)
    }

    /// Answers whether the database responds.
    pub fn ping(&self) -> Result<(), StoreError> {
        self.conn()?.query_row("SELECT 1", [], |_| Ok(()))?;
        Ok(())
    }

    /// Inserts a job (durably).
    pub fn insert_job(&self, job: &NewJob<'_>) -> Result<(), StoreError> {
        let conn = self.conn()?;
        insert_job_on(&conn, job)
    }

    /// Answers `job` from the newest plan stored for its key, if any: inserts it `done`,
    /// pointing at that plan (progress from `progress_of` the plan's text), and returns its
    /// row; `None` (nothing inserted) when no plan is stored. The lookup and the insertion
    /// hold the connection together, so a newer plan cannot prune the one found in between.
    pub fn insert_cached_job(
        &self,
        job: &NewJob<'_>,
        progress_of: impl FnOnce(&str) -> Progress,
    ) -> Result<Option<JobRow>, StoreError> {
        let conn = self.conn()?;
        let found: Option<(i64, String)> = conn
            .query_row(
                "SELECT id, plan FROM plans WHERE key = ?1 ORDER BY id DESC LIMIT 1",
                [job.key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((plan_id, text)) = found else {
            return Ok(None);
        };
        let job = NewJob {
            status: JobStatus::Done,
            cached_plan: Some((plan_id, progress_of(&text))),
            ..job.clone()
        };
        insert_job_on(&conn, &job)?;
        let row = conn
            .query_row(
                &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"),
                [job.id],
                job_row,
            )
            .optional()?;
        row.map(with_status).transpose()
    }

    /// Marks a queued job running (one more attempt, counted as a crashed run until a graceful
    /// stop says otherwise); false when it is no longer queued.
    pub fn mark_running(&self, id: &str, now_ms: u64) -> Result<bool, StoreError> {
        let n = self.conn()?.execute(
            "UPDATE jobs SET status = 'running', started_ms = ?2, attempts = attempts + 1,
                 crashed_runs = crashed_runs + 1
             WHERE id = ?1 AND status = 'queued'",
            params![id, to_i64(now_ms)],
        )?;
        Ok(n == 1)
    }

    /// Puts a running job back in the queue; `graceful` (a graceful stop, not the job's fault)
    /// takes the run back from the crashed runs. The start stays counted in `attempts`.
    pub fn requeue(&self, id: &str, graceful: bool) -> Result<(), StoreError> {
        self.conn()?.execute(
            "UPDATE jobs SET status = 'queued',
                 crashed_runs = CASE WHEN ?2 AND crashed_runs > 0 THEN crashed_runs - 1
                     ELSE crashed_runs END
             WHERE id = ?1 AND status = 'running'",
            params![id, graceful],
        )?;
        Ok(())
    }

    /// Records how a job ended (its plan first, in the same transaction).
    pub fn finish(&self, id: &str, f: &Finish) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let plan_id = match &f.plan {
            Some((key, text)) => Some(insert_plan(&tx, key.as_deref(), text, f.finished_ms)?),
            None => None,
        };
        tx.execute(
            "UPDATE jobs SET status = ?2, finished_ms = ?3, stage = ?4, best_peak = ?5,
                 lower_bound = ?6, elapsed_s = ?7, error = ?8,
                 plan_id = COALESCE(?9, plan_id), plan_status = ?10,
                 bytes = LENGTH(CAST(graph AS BLOB)) + LENGTH(CAST(options AS BLOB)) + ?11
             WHERE id = ?1",
            params![
                id,
                f.status.as_str(),
                to_i64(f.finished_ms),
                f.progress.stage,
                f.progress.best_peak_bytes.map(to_i64),
                f.progress.lower_bound_bytes.map(to_i64),
                f.progress.elapsed_s,
                f.error,
                plan_id,
                status_name(f.progress.status),
                f.error.as_deref().map_or(0, len_i64),
            ],
        )?;
        if let Some((Some(key), _)) = &f.plan {
            prune(&tx, key)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// A job by id.
    pub fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        let conn = self.conn()?;
        let row = conn
            .query_row(
                &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"),
                [id],
                job_row,
            )
            .optional()?;
        row.map(with_status).transpose()
    }

    /// The stored request of a job: (canonical graph JSON, options JSON).
    pub fn job_request(&self, id: &str) -> Result<Option<(String, String)>, StoreError> {
        Ok(self
            .conn()?
            .query_row("SELECT graph, options FROM jobs WHERE id = ?1", [id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?)
    }

    /// The plan attached to a job.
    pub fn job_plan(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT p.plan FROM jobs j JOIN plans p ON p.id = j.plan_id WHERE j.id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The newest plan stored for `key`: (plan id, plan JSON).
    pub fn cached_plan(&self, key: &str) -> Result<Option<(i64, String)>, StoreError> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT id, plan FROM plans WHERE key = ?1 ORDER BY id DESC LIMIT 1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    /// Stores the plan answering `key` (superseding older ones); returns its id.
    pub fn put_plan(&self, key: &str, plan: &str, now_ms: u64) -> Result<i64, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let id = insert_plan(&tx, Some(key), plan, now_ms)?;
        prune(&tx, key)?;
        tx.commit()?;
        Ok(id)
    }

    /// Jobs that were queued or running, oldest first.
    pub fn unfinished(&self) -> Result<Vec<JobRow>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE status IN ('queued', 'running') ORDER BY seq"
        ))?;
        let rows = stmt.query_map([], job_row)?;
        let mut out = Vec::new();
        for r in rows {
            out.push(with_status(r?)?);
        }
        Ok(out)
    }

    /// Number of jobs per status.
    pub fn status_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare("SELECT status, COUNT(*) FROM jobs GROUP BY status ORDER BY status")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        let mut out = Vec::new();
        for r in rows {
            let (s, n) = r?;
            out.push((s, u64::try_from(n).unwrap_or(0)));
        }
        Ok(out)
    }

    /// Stored bytes: graphs, options and errors of jobs, and plans.
    pub fn stored_bytes(&self) -> Result<u64, StoreError> {
        let n: i64 = self.conn()?.query_row(
            "SELECT (SELECT COALESCE(SUM(bytes), 0) FROM jobs)
                  + (SELECT COALESCE(SUM(bytes), 0) FROM plans)",
            [],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Deletes finished jobs and plans finished or made before `now_ms - max_age`, then, while
    /// more than `max_bytes` are stored, the oldest finished jobs and plans (a plan only once
    /// no job points at it). Queued and running jobs are never deleted. Returns what went.
    pub fn expire(
        &self,
        now_ms: u64,
        retention: &crate::config::Retention,
    ) -> Result<Expired, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let mut out = Expired::default();
        if let Some(age) = retention.max_age {
            let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
            let cutoff = to_i64(now_ms.saturating_sub(age_ms));
            let (bytes, jobs): (i64, i64) = tx.query_row(
                "SELECT COALESCE(SUM(bytes), 0), COUNT(*) FROM jobs
                 WHERE status IN ('done', 'failed', 'cancelled') AND finished_ms < ?1",
                [cutoff],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            tx.execute(
                "DELETE FROM jobs WHERE status IN ('done', 'failed', 'cancelled')
                     AND finished_ms < ?1",
                [cutoff],
            )?;
            let (pbytes, plans): (i64, i64) = tx.query_row(
                "SELECT COALESCE(SUM(bytes), 0), COUNT(*) FROM plans WHERE created_ms < ?1
                     AND id NOT IN (SELECT plan_id FROM jobs WHERE plan_id IS NOT NULL)",
                [cutoff],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            tx.execute(
                "DELETE FROM plans WHERE created_ms < ?1
                     AND id NOT IN (SELECT plan_id FROM jobs WHERE plan_id IS NOT NULL)",
                [cutoff],
            )?;
            out.jobs += u64::try_from(jobs).unwrap_or(0);
            out.plans += u64::try_from(plans).unwrap_or(0);
            out.bytes += u64::try_from(bytes + pbytes).unwrap_or(0);
        }
        if let Some(max) = retention.max_bytes {
            expire_bytes(&tx, to_i64(max), &mut out)?;
        }
        tx.commit()?;
        if out.jobs + out.plans > 0 {
            // Give the freed pages back to the file system (files made before version 3 keep
            // them for reuse instead).
            // (The pragma frees one page per step: step it to the end.)
            let mut stmt = conn.prepare("PRAGMA incremental_vacuum")?;
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {}
        }
        Ok(out)
    }

    /// Jobs with one of `statuses` (all when empty), newest first, at most `limit`, below
    /// `before` (a `seq` from the previous page's `next`).
    pub fn list_jobs(
        &self,
        statuses: &[JobStatus],
        limit: usize,
        before: Option<i64>,
    ) -> Result<JobPage, StoreError> {
        let conn = self.conn()?;
        let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        let filter = if names.is_empty() {
            String::new()
        } else {
            // The names are this crate's own constants, never the client's text.
            let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
            format!("AND status IN ({})", quoted.join(", "))
        };
        let mut stmt = conn.prepare(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE seq < ?1 {filter} ORDER BY seq DESC LIMIT ?2"
        ))?;
        let take = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![before.unwrap_or(i64::MAX), take], job_row)?;
        let mut jobs = Vec::new();
        for r in rows {
            jobs.push(with_status(r?)?);
        }
        let next = if jobs.len() > limit {
            jobs.truncate(limit);
            jobs.last().map(|j| j.seq)
        } else {
            None
        };
        Ok(JobPage { jobs, next })
    }

    /// SQLite's own consistency check: `ok`, or the problems it found.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare("PRAGMA integrity_check")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        let mut lines = Vec::new();
        for r in rows {
            lines.push(r?);
        }
        Ok(lines.join("\n"))
    }
}

/// A candidate of retention by bytes: a finished job or a plan, in age order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Item {
    /// (finished_ms, seq): jobs go before the plans of the same instant (their own).
    Job(i64, i64),
    /// (created_ms, id).
    Plan(i64, i64),
}

impl Item {
    fn key(self) -> (i64, u8, i64) {
        match self {
            Item::Job(t, seq) => (t, 0, seq),
            Item::Plan(t, id) => (t, 1, id),
        }
    }
}

/// Deletes the oldest finished jobs and unreferenced plans while more than `max` bytes are
/// stored.
fn expire_bytes(
    tx: &rusqlite::Transaction<'_>,
    max: i64,
    out: &mut Expired,
) -> Result<(), StoreError> {
    let mut total: i64 = tx.query_row(
        "SELECT (SELECT COALESCE(SUM(bytes), 0) FROM jobs)
              + (SELECT COALESCE(SUM(bytes), 0) FROM plans)",
        [],
        |r| r.get(0),
    )?;
    if total <= max {
        return Ok(());
    }
    let mut items: Vec<(Item, i64, Option<i64>)> = Vec::new();
    {
        let mut stmt = tx.prepare(
            "SELECT finished_ms, seq, bytes, plan_id FROM jobs
             WHERE status IN ('done', 'failed', 'cancelled')",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                Item::Job(r.get::<_, Option<i64>>(0)?.unwrap_or(0), r.get(1)?),
                r.get(2)?,
                r.get(3)?,
            ))
        })?;
        for r in rows {
            items.push(r?);
        }
        let mut stmt = tx.prepare("SELECT created_ms, id, bytes FROM plans")?;
        let rows = stmt.query_map([], |r| {
            Ok((Item::Plan(r.get(0)?, r.get(1)?), r.get(2)?, None))
        })?;
        for r in rows {
            items.push(r?);
        }
    }
    items.sort_by_key(|(item, _, _)| item.key());
    // References to each plan from any job, unfinished ones included.
    let mut refs: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
    {
        let mut stmt = tx.prepare(
            "SELECT plan_id, COUNT(*) FROM jobs WHERE plan_id IS NOT NULL GROUP BY plan_id",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
        for r in rows {
            let (id, n) = r?;
            refs.insert(id, n);
        }
    }
    let plan_bytes: std::collections::HashMap<i64, i64> = items
        .iter()
        .filter_map(|(item, bytes, _)| match item {
            Item::Plan(_, id) => Some((*id, *bytes)),
            Item::Job(..) => None,
        })
        .collect();
    let mut skipped: std::collections::HashSet<i64> = std::collections::HashSet::new();
    let delete_plan = |id: i64, total: &mut i64, out: &mut Expired| -> Result<(), StoreError> {
        tx.execute("DELETE FROM plans WHERE id = ?1", [id])?;
        *total -= plan_bytes.get(&id).copied().unwrap_or(0);
        out.plans += 1;
        out.bytes += u64::try_from(plan_bytes.get(&id).copied().unwrap_or(0)).unwrap_or(0);
        Ok(())
    };
    for (item, bytes, plan_id) in items {
        if total <= max {
            break;
        }
        match item {
            Item::Job(_, seq) => {
                tx.execute("DELETE FROM jobs WHERE seq = ?1", [seq])?;
                total -= bytes;
                out.jobs += 1;
                out.bytes += u64::try_from(bytes).unwrap_or(0);
                if let Some(pid) = plan_id {
                    let n = refs.entry(pid).or_insert(1);
                    *n -= 1;
                    // An older plan passed over while this job held it goes now.
                    if *n <= 0 && skipped.remove(&pid) {
                        delete_plan(pid, &mut total, out)?;
                    }
                }
            }
            Item::Plan(_, id) => {
                if refs.get(&id).copied().unwrap_or(0) > 0 {
                    skipped.insert(id);
                } else {
                    delete_plan(id, &mut total, out)?;
                }
            }
        }
    }
    Ok(())
}

/// Inserts a job on `conn` (see [`Store::insert_job`]).
fn insert_job_on(conn: &Connection, job: &NewJob<'_>) -> Result<(), StoreError> {
    let (plan_id, progress) = match &job.cached_plan {
        Some((id, p)) => (Some(*id), p.clone()),
        None => (None, Progress::default()),
    };
    let finished = job.status.is_terminal().then_some(to_i64(job.created_ms));
    conn.execute(
        "INSERT INTO jobs (id, key, status, graph_name, graph, options, cached, created_ms,
                           finished_ms, stage, best_peak, lower_bound, elapsed_s, plan_id,
                           plan_status, client, bytes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        params![
            job.id,
            job.key,
            job.status.as_str(),
            job.graph_name,
            job.graph,
            job.options,
            job.cached_plan.is_some() as i64,
            to_i64(job.created_ms),
            finished,
            progress.stage,
            progress.best_peak_bytes.map(to_i64),
            progress.lower_bound_bytes.map(to_i64),
            progress.elapsed_s,
            plan_id,
            status_name(progress.status),
            job.client,
            len_i64(job.graph) + len_i64(job.options),
        ],
    )?;
    Ok(())
}

fn insert_plan(
    tx: &rusqlite::Transaction<'_>,
    key: Option<&str>,
    plan: &str,
    now_ms: u64,
) -> Result<i64, StoreError> {
    tx.execute(
        "INSERT INTO plans (key, plan, created_ms, bytes) VALUES (?1, ?2, ?3, ?4)",
        params![key, plan, to_i64(now_ms), len_i64(plan)],
    )?;
    Ok(tx.last_insert_rowid())
}

/// Deletes the superseded plans of `key` that no job points at.
fn prune(tx: &rusqlite::Transaction<'_>, key: &str) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM plans WHERE key = ?1
             AND id < (SELECT MAX(id) FROM plans WHERE key = ?1)
             AND id NOT IN (SELECT plan_id FROM jobs WHERE plan_id IS NOT NULL)",
        [key],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job<'a>(id: &'a str, key: &'a str) -> NewJob<'a> {
        NewJob {
            id,
            key,
            status: JobStatus::Queued,
            graph_name: "g",
            graph: "{}",
            options: "{}",
            created_ms: 1,
            cached_plan: None,
            client: "c",
        }
    }

    #[test]
    fn a_job_goes_from_queued_to_done_with_its_plan_and_the_plan_answers_its_key() {
        let s = Store::open(None).unwrap();
        s.insert_job(&job("a", "k")).unwrap();
        assert!(s.mark_running("a", 2).unwrap());
        assert!(!s.mark_running("a", 3).unwrap(), "only a queued job starts");
        s.finish(
            "a",
            &Finish {
                status: JobStatus::Done,
                finished_ms: 4,
                progress: Progress {
                    best_peak_bytes: Some(10),
                    lower_bound_bytes: Some(5),
                    ..Progress::default()
                },
                plan: Some((Some("k".into()), "PLAN".into())),
                error: None,
            },
        )
        .unwrap();
        let row = s.job("a").unwrap().unwrap();
        assert_eq!(row.status, JobStatus::Done);
        assert_eq!(row.attempts, 1);
        assert_eq!(row.progress.gap, Some(0.5));
        assert_eq!(s.job_plan("a").unwrap().as_deref(), Some("PLAN"));
        assert_eq!(
            s.cached_plan("k").unwrap().map(|p| p.1).as_deref(),
            Some("PLAN")
        );
        assert!(s.unfinished().unwrap().is_empty());
    }

    #[test]
    fn a_newer_plan_supersedes_an_older_one_but_a_job_keeps_its_own() {
        let s = Store::open(None).unwrap();
        s.insert_job(&job("a", "k")).unwrap();
        s.mark_running("a", 1).unwrap();
        s.finish(
            "a",
            &Finish {
                status: JobStatus::Done,
                finished_ms: 2,
                progress: Progress::default(),
                plan: Some((Some("k".into()), "OLD".into())),
                error: None,
            },
        )
        .unwrap();
        s.put_plan("k", "NEWER", 3).unwrap();
        s.put_plan("k", "NEWEST", 4).unwrap();
        assert_eq!(s.cached_plan("k").unwrap().unwrap().1, "NEWEST");
        assert_eq!(s.job_plan("a").unwrap().as_deref(), Some("OLD"));
        let n: i64 = s
            .conn()
            .unwrap()
            .query_row("SELECT COUNT(*) FROM plans", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2, "NEWER is pruned, OLD is kept for job a");
    }

    #[test]
    fn a_graceful_requeue_keeps_the_attempt_but_does_not_count_it_as_a_crash() {
        let s = Store::open(None).unwrap();
        s.insert_job(&job("a", "k")).unwrap();
        for start in 1..=3 {
            s.mark_running("a", start).unwrap();
            s.requeue("a", true).unwrap();
            let row = s.job("a").unwrap().unwrap();
            assert_eq!(
                (row.status, row.attempts, row.crashed_runs),
                (JobStatus::Queued, start as u32, 0)
            );
        }
        assert_eq!(s.unfinished().unwrap().len(), 1);
        // A crash (no requeue before the next start) counts the run.
        s.mark_running("a", 4).unwrap();
        s.requeue("a", false).unwrap();
        s.mark_running("a", 5).unwrap();
        let row = s.job("a").unwrap().unwrap();
        assert_eq!((row.attempts, row.crashed_runs), (5, 2));
    }

    #[test]
    fn a_version_3_database_keeps_its_jobs_crashed_runs_in_the_upgrade() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        {
            let s = Store::open(Some(&path)).unwrap();
            s.insert_job(&job("a", "k")).unwrap();
            s.mark_running("a", 1).unwrap();
            s.requeue("a", false).unwrap();
            s.mark_running("a", 2).unwrap();
            // What version 3 left: no crashed_runs column, attempts counting the crashes.
            let conn = s.conn().unwrap();
            conn.execute_batch(
                "ALTER TABLE jobs DROP COLUMN crashed_runs; PRAGMA user_version = 3;",
            )
            .unwrap();
        }
        let s = Store::open(Some(&path)).unwrap();
        let row = s.job("a").unwrap().unwrap();
        assert_eq!(
            (row.status, row.attempts, row.crashed_runs),
            (JobStatus::Running, 2, 2)
        );
        let version: i64 = s
            .conn()
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[test]
    fn a_version_1_database_is_upgraded_and_its_jobs_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE plans (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT,
                     plan TEXT NOT NULL, created_ms INTEGER NOT NULL);
                 CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
                     key TEXT NOT NULL, status TEXT NOT NULL, graph_name TEXT NOT NULL,
                     graph TEXT NOT NULL, options TEXT NOT NULL, cached INTEGER NOT NULL DEFAULT 0,
                     attempts INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL,
                     started_ms INTEGER, finished_ms INTEGER, stage TEXT, best_peak INTEGER,
                     lower_bound INTEGER, elapsed_s REAL, error TEXT,
                     plan_id INTEGER REFERENCES plans(id));
                 INSERT INTO jobs (id, key, status, graph_name, graph, options, created_ms)
                     VALUES ('old', 'k', 'queued', 'g', '{}', '{}', 1);
                 PRAGMA user_version = 1;",
            )
            .unwrap();
        }
        let s = Store::open(Some(&path)).unwrap();
        let row = s.job("old").unwrap().unwrap();
        assert_eq!(row.progress.status, None);
        s.mark_running("old", 2).unwrap();
        s.finish(
            "old",
            &Finish {
                status: JobStatus::Cancelled,
                finished_ms: 3,
                progress: Progress {
                    status: Some(PlanStatus::Cancelled),
                    ..Progress::default()
                },
                plan: None,
                error: None,
            },
        )
        .unwrap();
        let row = s.job("old").unwrap().unwrap();
        assert_eq!(row.progress.status, Some(PlanStatus::Cancelled));
    }

    #[test]
    fn a_database_from_a_newer_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        drop(Store::open(Some(&path)).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        assert!(matches!(
            Store::open(Some(&path)),
            Err(StoreError::TooNew(99))
        ));
    }

    fn done(s: &Store, id: &str, key: Option<&str>, at: u64, plan: &str) {
        s.mark_running(id, at).unwrap();
        s.finish(
            id,
            &Finish {
                status: JobStatus::Done,
                finished_ms: at,
                progress: Progress::default(),
                plan: Some((key.map(str::to_string), plan.to_string())),
                error: None,
            },
        )
        .unwrap();
    }

    fn ids(s: &Store) -> Vec<String> {
        let mut v: Vec<String> = s
            .list_jobs(&[], 100, None)
            .unwrap()
            .jobs
            .into_iter()
            .map(|j| j.id)
            .collect();
        v.sort();
        v
    }

    fn plan_count(s: &Store) -> i64 {
        s.conn()
            .unwrap()
            .query_row("SELECT COUNT(*) FROM plans", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn retention_by_age_deletes_old_finished_jobs_and_their_plans_but_no_unfinished_job() {
        let s = Store::open(None).unwrap();
        for (id, at) in [("old", 1_000), ("new", 9_000)] {
            s.insert_job(&job(id, id)).unwrap();
            done(&s, id, Some(id), at, "PLAN");
        }
        s.insert_job(&job("queued", "q")).unwrap();
        let r = crate::config::Retention {
            max_age: Some(std::time::Duration::from_secs(5)),
            max_bytes: None,
        };
        let e = s.expire(10_000, &r).unwrap();
        assert_eq!((e.jobs, e.plans), (1, 1));
        assert_eq!(ids(&s), ["new", "queued"]);
        assert!(s.cached_plan("old").unwrap().is_none());
        assert!(s.cached_plan("new").unwrap().is_some());
        // Much later, the queued job is still there.
        s.expire(1_000_000, &r).unwrap();
        assert_eq!(ids(&s), ["queued"]);
        assert_eq!(plan_count(&s), 0);
    }

    #[test]
    fn retention_by_bytes_deletes_oldest_first_until_under_the_limit() {
        let s = Store::open(None).unwrap();
        let big = "P".repeat(10_000);
        for (i, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
            s.insert_job(&job(id, id)).unwrap();
            done(&s, id, Some(id), 1_000 * (i as u64 + 1), &big);
        }
        let before = s.stored_bytes().unwrap();
        assert!(before > 40_000, "{before}");
        let r = crate::config::Retention {
            max_age: None,
            max_bytes: Some(25_000),
        };
        let e = s.expire(5_000, &r).unwrap();
        assert_eq!(ids(&s), ["c", "d"], "a and b, the oldest, went");
        assert_eq!((e.jobs, e.plans), (2, 2));
        assert_eq!(before - s.stored_bytes().unwrap(), e.bytes);
        assert!(s.stored_bytes().unwrap() <= 25_000);
    }

    #[test]
    fn a_plan_still_answering_a_newer_job_is_kept_until_that_job_goes() {
        let s = Store::open(None).unwrap();
        s.insert_job(&job("first", "k")).unwrap();
        done(&s, "first", Some("k"), 1_000, &"P".repeat(5_000));
        // A cache hit much later points at the same plan.
        let (plan_id, _) = s.cached_plan("k").unwrap().unwrap();
        s.insert_job(&NewJob {
            status: JobStatus::Done,
            created_ms: 8_000,
            cached_plan: Some((plan_id, Progress::default())),
            ..job("hit", "k")
        })
        .unwrap();
        let r = crate::config::Retention {
            max_age: Some(std::time::Duration::from_secs(5)),
            max_bytes: None,
        };
        s.expire(9_000, &r).unwrap();
        assert_eq!(ids(&s), ["hit"]);
        assert_eq!(s.job_plan("hit").unwrap().map(|p| p.len()), Some(5_000));
        // By bytes: the hit job goes first, then its (older) plan at once.
        let r = crate::config::Retention {
            max_age: None,
            max_bytes: Some(1),
        };
        let e = s.expire(9_000, &r).unwrap();
        assert_eq!((e.jobs, e.plans), (1, 1));
        assert_eq!(plan_count(&s), 0);
    }

    #[test]
    fn retention_gives_freed_pages_back_to_the_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let s = Store::open(Some(&path)).unwrap();
        let big = "P".repeat(200_000);
        for i in 0..20 {
            let id = format!("j{i}");
            s.insert_job(&job(&id, &id)).unwrap();
            done(&s, &id, Some(&id), 1_000, &big);
        }
        let checkpoint = |s: &Store| {
            s.conn()
                .unwrap()
                .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap()
        };
        checkpoint(&s);
        let full = std::fs::metadata(&path).unwrap().len();
        let r = crate::config::Retention {
            max_age: Some(std::time::Duration::from_secs(1)),
            max_bytes: None,
        };
        s.expire(10_000, &r).unwrap();
        checkpoint(&s);
        let after = std::fs::metadata(&path).unwrap().len();
        assert!(full > 3_000_000, "{full}");
        assert!(after * 10 < full, "the file kept {after} of {full} bytes");
        assert_eq!(s.integrity_check().unwrap(), "ok");
    }

    #[test]
    fn the_listing_pages_newest_first_and_filters_by_status() {
        let s = Store::open(None).unwrap();
        for i in 0..5 {
            let id = format!("j{i}");
            s.insert_job(&job(&id, "k")).unwrap();
            if i % 2 == 0 {
                done(&s, &id, None, 10, "P");
            }
        }
        let p1 = s.list_jobs(&[JobStatus::Done], 2, None).unwrap();
        let names: Vec<&str> = p1.jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(names, ["j4", "j2"]);
        let p2 = s.list_jobs(&[JobStatus::Done], 2, p1.next).unwrap();
        let names: Vec<&str> = p2.jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(names, ["j0"]);
        assert_eq!(p2.next, None);
        let queued = s.list_jobs(&[JobStatus::Queued], 10, None).unwrap();
        assert_eq!(queued.jobs.len(), 2);
        assert_eq!(queued.jobs[0].client.as_deref(), Some("c"));
    }

    #[test]
    fn a_cached_job_points_at_the_newest_plan_even_while_newer_plans_prune_older_ones() {
        let s = std::sync::Arc::new(Store::open(None).unwrap());
        assert!(s
            .insert_cached_job(&job("miss", "k"), |_| Progress::default())
            .unwrap()
            .is_none());
        assert!(s.job("miss").unwrap().is_none(), "a miss inserts nothing");
        s.put_plan("k", "P0", 1).unwrap();
        let writer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    s.put_plan("k", &format!("P{i}"), 2 + i).unwrap();
                }
            })
        };
        for i in 0..300 {
            let id = format!("hit{i}");
            let row = s
                .insert_cached_job(&job(&id, "k"), |text| Progress {
                    stage: Some(text.to_string()),
                    ..Progress::default()
                })
                .unwrap()
                .unwrap();
            assert_eq!(row.status, JobStatus::Done);
            assert!(row.cached && row.has_plan);
            assert_eq!(s.job_plan(&id).unwrap(), row.progress.stage);
        }
        writer.join().unwrap();
    }
}
