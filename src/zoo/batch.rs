//! The batch: plan every graph of a model zoo three ways through [`pipeline::run`], validate
//! each plan against the graph as given, save it, and record the figures in `results.json` /
//! `results.csv`. The ways are [`PipelineOptions`] values derived from the batch's base
//! options ([`ZooOptions::pipeline`]):
//! - **listed**: the base options with `order given`, `strategy heuristic`;
//! - **heuristic**: the base options with `order auto`, `strategy heuristic`;
//! - **full**: the base options as they are (by default the full pipeline: order auto,
//!   strategy auto, effort in deterministic work units, the time limit as a cap);
//! - with `budgets`: the base options with `budget = Percent(p)` (a percentage of the
//!   unconstrained plan's peak, i.e. of the full plan's) for every spill strategy.
//!
//! When the base options ask for graph rewrites, each saved plan carries the graph it refers
//! to (`rewritten_graph`) and is checked against the original graph through
//! [`pipeline::graph_for_plan`], as `memplan check ORIGINAL PLAN` does.
//!
//! Resumable: a result is keyed by the graph file's content hash (FNV-1a 64) and the options
//! key ([`ZooOptions::key`], which holds the base options as every front end echoes them,
//! [`PipelineOptions::echoed`]); when
//! `results.json` in the output folder already holds a result with both, and its plan files
//! still say what it records (each read back, checked against the graph as a new plan is, its
//! peak and status the recorded ones), the graph is skipped; otherwise it is planned again.
//! `results.json` is rewritten (atomically) after every graph, so an interrupted run loses at
//! most the graphs in flight. Graphs run on `jobs` worker threads; the results keep the input
//! order.
//!
//! A folder accumulates the graphs of one set of options: the earlier results of graphs this
//! run does not name are kept (after this run's, in their order) when they were made with the
//! same options, their graph file still holds the same content, their plan files pass the same
//! read-back and this run writes no plan file of the same name; the others are dropped and
//! named in [`ZooSummary::dropped`]. A run on a subset of a zoo thus adds to its results
//! instead of replacing them.

use super::profile::profile;
use super::pytorch::simulate_reserved;
use super::{report, ZooError};
use crate::budget::{BudgetError, BudgetSpec};
use crate::graph::Graph;
use crate::pipeline::{self, Control, PipelineError, PipelineOptions, PipelineResult};
use crate::plan::{Plan, PlanStatus};
use crate::planner::{self, OrderMode, ProgressSink, Strategy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;
use std::time::Instant;

/// The format string of `results.json` (`/2`: the ways are pipeline options, the full way's
/// figures are `full_*` and its status a [`PlanStatus`]).
pub const RESULTS_FORMAT: &str = "memplan-zoo/2";

/// Batch options.
#[derive(Debug, Clone, PartialEq)]
pub struct ZooOptions {
    /// The base pipeline options: the full way as they are; the listed and heuristic ways and
    /// the budget rows derive from them (module doc). Rewrites, effort, the time cap, tiers,
    /// the device profile… all reach the batch through them.
    pub pipeline: PipelineOptions,
    /// Graphs planned at once (at least 1).
    pub jobs: usize,
    /// Budgets in percent (0, 100] of the unconstrained plan's peak, each planned with every
    /// spill strategy ([`PipelineOptions::budget`] = [`BudgetSpec::Percent`]).
    pub budgets: Vec<f64>,
}

impl Default for ZooOptions {
    fn default() -> Self {
        ZooOptions {
            pipeline: PipelineOptions::default(),
            jobs: 1,
            budgets: Vec::new(),
        }
    }
}

/// The spill strategies each budget is planned with: every one of the registry and the
/// joint program (`best` is their minimum and not a row of its own).
pub fn spill_strategies() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = crate::budget::registry().iter().map(|s| s.name()).collect();
    v.push(crate::budget::JOINT);
    v
}

impl ZooOptions {
    /// The listed way: the listed order, heuristic placement.
    pub fn listed(&self) -> PipelineOptions {
        PipelineOptions {
            order: OrderMode::Given,
            strategy: Strategy::Heuristic,
            ..self.pipeline.clone()
        }
    }

    /// The heuristic way: the order heuristics and heuristic placement.
    pub fn heuristic(&self) -> PipelineOptions {
        PipelineOptions {
            order: OrderMode::Auto,
            strategy: Strategy::Heuristic,
            ..self.pipeline.clone()
        }
    }

    /// The full way: the base options as they are.
    pub fn full(&self) -> PipelineOptions {
        self.pipeline.clone()
    }

    /// A budget row's options: the base options under `percent` % of the unconstrained
    /// plan's peak with the spill `strategy`.
    pub fn budgeted(&self, percent: f64, strategy: &str) -> PipelineOptions {
        PipelineOptions {
            budget: Some(BudgetSpec::Percent(percent)),
            spill_strategy: strategy.to_string(),
            ..self.pipeline.clone()
        }
    }

    /// Checks every option and every way's pipeline options (the pipeline's own error when
    /// they cannot be combined), before anything is planned.
    pub fn check(&self) -> Result<(), ZooError> {
        if self.jobs == 0 {
            return Err(ZooError::Options("--jobs must be at least 1".into()));
        }
        for &p in &self.budgets {
            crate::budget::check_percent(p).map_err(|e| ZooError::Options(e.to_string()))?;
        }
        let mut ways = vec![self.listed(), self.heuristic(), self.full()];
        if let Some(&p) = self.budgets.first() {
            ways.extend(spill_strategies().into_iter().map(|s| self.budgeted(p, s)));
        }
        for w in &ways {
            w.check().map_err(|e| ZooError::Options(e.to_string()))?;
        }
        Ok(())
    }

    /// The options as they affect the results (the resume key; `jobs` does not): the base
    /// options as every front end echoes them ([`PipelineOptions::echoed`], so that the
    /// `full` JSON, sent to the HTTP service, Python or the C API, plans the
    /// full way again), the derived ways, and the budgets.
    pub fn key(&self) -> String {
        let full = serde_json::to_string(&self.pipeline.echoed()).unwrap_or_default();
        let mut k = format!("zoo/2 listed=given/heuristic heuristic=auto/heuristic full={full}");
        if !self.budgets.is_empty() {
            let b: Vec<String> = self.budgets.iter().map(|b| format!("{b}")).collect();
            k.push_str(&format!(
                " budgets={}% spill={}",
                b.join(","),
                spill_strategies().join(",")
            ));
        }
        k
    }
}

/// The plan files of one graph, relative to the output folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanFiles {
    /// The listed way ([`ZooOptions::listed`]).
    pub listed: String,
    /// The heuristic way ([`ZooOptions::heuristic`]).
    pub heuristic: String,
    /// The full way ([`ZooOptions::full`]).
    pub full: String,
}

impl PlanFiles {
    /// The three files.
    pub fn all(&self) -> [&String; 3] {
        [&self.listed, &self.heuristic, &self.full]
    }
}

/// One graph's figures (bytes are arena bytes; weights live in their own region).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphResult {
    /// Graph name.
    pub graph: String,
    /// The file it came from, as given.
    pub file: String,
    /// FNV-1a 64 of the file's bytes (hex).
    pub hash: String,
    /// [`ZooOptions::key`] of the run that produced it.
    pub options: String,
    /// Number of ops (of the graph as given).
    pub ops: usize,
    /// Number of tensors.
    pub tensors: usize,
    /// Every arena buffer of the listed order without reuse.
    pub naive_bytes: u64,
    /// LOAD (most bytes live at once) of the listed order of the graph the listed plan
    /// refers to (the rewritten graph when a rewrite changed it): no placement of that plan
    /// is below it.
    pub listed_load_bytes: u64,
    /// Peak of the listed way (listed order placed by the heuristics).
    pub listed_peak_bytes: u64,
    /// Peak of the heuristic way (`--strategy heuristic --order auto`).
    pub heuristic_peak_bytes: u64,
    /// Its planning time.
    pub heuristic_seconds: f64,
    /// Peak of the full way (the base pipeline options).
    pub full_peak_bytes: u64,
    /// Its status: `optimal` when the peak meets the proven bound, `feasible` when the work
    /// limit was reached with a gap, `time_limit` when the wall-clock cap bound,
    /// `heuristic_only`, `cancelled`.
    pub full_status: PlanStatus,
    /// Its planning time.
    pub full_seconds: f64,
    /// Proven lower bound on the peak of any order (at most the full peak).
    pub lower_bound_bytes: u64,
    /// `(full − bound) / full`.
    pub gap: f64,
    /// `1 − full / naive`.
    pub savings_vs_naive: f64,
    /// `1 − full / listed peak`.
    pub savings_vs_listed: f64,
    /// Fragmentation rate of the full plan (see
    /// [`super::profile::PlanProfile::fragmentation`]).
    pub fragmentation: f64,
    /// `1 − LOAD / peak` of the full plan's order.
    pub waste: f64,
    /// Whether graph rewrites changed the graph the full plan refers to (the plan then
    /// carries it as `rewritten_graph`).
    #[serde(default)]
    pub rewritten: bool,
    /// Simulated PyTorch caching-allocator reserved peak for the listed order
    /// ([`super::pytorch`]).
    pub pytorch_reserved_bytes: u64,
    /// Plan files.
    pub plans: PlanFiles,
    /// One row per budget and spill strategy (empty without `--budgets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetRow>,
}

/// One budgeted plan of a graph: a budget (percent of the unconstrained plan's peak, which is
/// the full way's) and a spill strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetRow {
    /// Budget in percent of the unconstrained plan's peak.
    pub percent: f64,
    /// Budget in bytes.
    pub budget_bytes: u64,
    /// Spill strategy.
    pub strategy: String,
    /// Whether a plan fits the budget.
    pub fits: bool,
    /// Its peak (bytes), or the smallest peak reached when it does not fit (0 when the time
    /// cap stopped planning before any plan was built).
    pub peak_bytes: u64,
    /// Bytes spilled to the host.
    pub spilled_bytes: u64,
    /// Recomputed ops.
    pub recomputed_ops: usize,
    /// Modelled overhead in percent of the unconstrained step time.
    pub overhead_pct: f64,
    /// Planning time.
    pub seconds: f64,
    /// The plan's status when one fits; `time_limit` when the wall-clock cap stopped planning
    /// before any plan fitted; absent when no plan can fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PlanStatus>,
}

/// The `results.json` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZooResults {
    /// Must be [`RESULTS_FORMAT`].
    pub format: String,
    /// One result per graph, in input order.
    pub results: Vec<GraphResult>,
}

/// What the batch tells its observer (a progress bar).
#[derive(Debug, Clone, PartialEq)]
pub enum ZooEvent {
    /// The batch knows its work: `total` graphs, `skipped` of them already done.
    Begin {
        /// Graphs in the batch.
        total: usize,
        /// Graphs already in `results.json`.
        skipped: usize,
    },
    /// A graph's planning started.
    Started {
        /// Graph name.
        graph: String,
    },
    /// A planner stage finished.
    Progress {
        /// Graph name.
        graph: String,
        /// Which of `listed`, `heuristic`, `full`, `budgeted` runs.
        phase: &'static str,
        /// Best peak so far (bytes).
        best_peak: u64,
        /// Best bound so far (bytes).
        lower_bound: u64,
    },
    /// A graph is done.
    Finished {
        /// Graph name.
        graph: String,
        /// Its full way's peak.
        peak: u64,
    },
}

/// What a batch did.
#[derive(Debug, Clone, PartialEq)]
pub struct ZooSummary {
    /// Every result `results.json` now holds: this run's graphs in input order, then the
    /// earlier results kept (module doc).
    pub results: Vec<GraphResult>,
    /// Graphs planned in this run.
    pub planned: usize,
    /// Graphs skipped because `results.json` had them.
    pub skipped: usize,
    /// Earlier results of graphs this run does not name, kept in `results.json`.
    pub kept: usize,
    /// Earlier results not kept, and earlier results of this run's graphs planned again
    /// because their plan files no longer say what they record: one line each, naming the
    /// graph file and why.
    pub dropped: Vec<String>,
    /// Wall time of the run.
    pub seconds: f64,
}

/// One input graph.
struct Input {
    path: PathBuf,
    graph: Graph,
    hash: String,
    /// File-name stem for the plan files (unique in the batch).
    stem: String,
}

/// Expands folders (their `*.json` files, sorted) and keeps files as given.
pub fn collect_inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ZooError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|e| ZooError::io(p, e))?;
            let mut found: Vec<PathBuf> = Vec::new();
            for entry in rd {
                let path = entry.map_err(|e| ZooError::io(p, e))?.path();
                if path.is_file() && path.extension().is_some_and(|x| x == "json") {
                    found.push(path);
                }
            }
            if found.is_empty() {
                return Err(ZooError::NoGraphs(p.display().to_string()));
            }
            found.sort();
            files.extend(found);
        } else if p.is_file() {
            files.push(p.clone());
        } else {
            return Err(ZooError::Missing(p.display().to_string()));
        }
    }
    if files.is_empty() {
        return Err(ZooError::NoGraphs("(no inputs)".into()));
    }
    Ok(files)
}

/// FNV-1a 64 of `bytes`, as 16 hex digits (a content key, not a cryptographic hash).
pub fn content_hash(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Writes `text` to `path` through a temporary file beside it (`NAME.tmp~`) and a rename
/// (never half a file); when the write or the rename fails, the temporary file is removed.
pub(crate) fn write_atomic(path: &Path, text: &str) -> Result<(), ZooError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp~");
    let tmp = path.with_file_name(name);
    let written = std::fs::write(&tmp, text)
        .map_err(|e| ZooError::io(&tmp, e))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| ZooError::io(path, e)));
    if written.is_err() {
        // Best effort: the error that matters is the one returned.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The name of the lock file of an output folder (see [`run_zoo`]).
pub const LOCK_FILE: &str = ".memplan-zoo.lock";

/// Takes `out`'s lock ([`LOCK_FILE`]), held until the returned file is dropped;
/// [`ZooError::Busy`] when another run holds it.
fn lock_folder(out: &Path) -> Result<std::fs::File, ZooError> {
    let path = out.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| ZooError::io(&path, e))?;
    match try_lock(&file) {
        Ok(true) => Ok(file),
        Ok(false) => Err(ZooError::Busy(out.display().to_string())),
        Err(e) => Err(ZooError::io(&path, e)),
    }
}

/// Takes an exclusive advisory lock on `file` without waiting: `Ok(false)` when another open
/// file description holds it. The lock goes with the file (closed, or its process gone).
#[cfg(unix)]
fn try_lock(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock(2) on a descriptor `file` owns and keeps open for the call; it touches no
    // memory.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Without flock(2), no lock: runs on one folder are the user's to keep apart.
#[cfg(not(unix))]
fn try_lock(_file: &std::fs::File) -> std::io::Result<bool> {
    Ok(true)
}

/// Reads the previous `results.json` of `out`, if any.
pub fn read_results(out: &Path) -> Result<Option<ZooResults>, ZooError> {
    let path = out.join("results.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| ZooError::io(&path, e))?;
    let doc: ZooResults = serde_json::from_str(&text).map_err(|e| ZooError::Results {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    if doc.format != RESULTS_FORMAT {
        return Err(ZooError::Results {
            path: path.display().to_string(),
            message: format!("format is {:?}, expected {RESULTS_FORMAT:?}", doc.format),
        });
    }
    Ok(Some(doc))
}

/// Plans every graph of `inputs` (files or folders) into `out` and writes the results and the
/// reports; `observer` sees the progress (on the calling thread, while workers plan).
pub fn run_zoo(
    inputs: &[PathBuf],
    out: &Path,
    opts: &ZooOptions,
    observer: &mut dyn FnMut(ZooEvent),
) -> Result<ZooSummary, ZooError> {
    let started = Instant::now();
    opts.check()?;
    // Read and check every graph before planning any: bad files stop the batch at once, all
    // of them named.
    let mut graphs = Vec::new();
    let mut stems = BTreeSet::new();
    let mut bad: Vec<ZooError> = Vec::new();
    for path in collect_inputs(inputs)? {
        let (text, graph) = match read_graph(&path) {
            Ok(read) => read,
            Err(e) => {
                bad.push(e);
                continue;
            }
        };
        let base = path
            .file_stem()
            .map(|s| {
                s.to_string_lossy().replace(
                    |c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '-' && c != '_',
                    "_",
                )
            })
            .unwrap_or_else(|| "graph".into());
        let mut stem = base.clone();
        let mut n = 2;
        while !stems.insert(stem.clone()) {
            stem = format!("{base}-{n}");
            n += 1;
        }
        graphs.push(Input {
            hash: content_hash(text.as_bytes()),
            path,
            graph,
            stem,
        });
    }
    if bad.len() == 1 {
        return Err(bad.remove(0));
    }
    if !bad.is_empty() {
        return Err(ZooError::Graphs(
            bad.iter().map(|e| e.to_string()).collect(),
        ));
    }
    let plans_dir = out.join("plans");
    std::fs::create_dir_all(&plans_dir).map_err(|e| ZooError::io(&plans_dir, e))?;
    // One run per output folder: two at once would interleave their plan files and
    // `results.json`. The lock goes with the process (also when it dies); its file stays.
    let _lock = lock_folder(out)?;
    let key = opts.key();
    let previous = read_results(out)?.map(|d| d.results).unwrap_or_default();
    let mut dropped = Vec::new();
    let done: Vec<Option<GraphResult>> = graphs
        .iter()
        .map(|g| {
            let r = previous
                .iter()
                .find(|r| r.hash == g.hash && r.options == key)?;
            if let Err(why) = read_back(r, &g.graph, out) {
                dropped.push(format!("{}: planned again: {why}", g.path.display()));
                return None;
            }
            Some(GraphResult {
                // Same content, maybe moved: report where it is now.
                file: g.path.display().to_string(),
                ..r.clone()
            })
        })
        .collect();
    let kept = keep_earlier(&previous, &graphs, &key, out, &mut dropped);
    let skipped = done.iter().filter(|d| d.is_some()).count();
    observer(ZooEvent::Begin {
        total: graphs.len(),
        skipped,
    });
    let todo: Vec<usize> = (0..graphs.len()).filter(|&i| done[i].is_none()).collect();
    let slots = Mutex::new(done);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<ZooError>> = Mutex::new(None);
    let save = |slots: &[Option<GraphResult>]| -> Result<(), ZooError> {
        let doc = ZooResults {
            format: RESULTS_FORMAT.into(),
            results: slots
                .iter()
                .flatten()
                .chain(kept.iter().map(|(_, r)| r))
                .cloned()
                .collect(),
        };
        write_atomic(&out.join("results.json"), &to_json(&doc))
    };
    let (tx, rx) = channel::<ZooEvent>();
    std::thread::scope(|scope| {
        for _ in 0..opts.jobs.min(todo.len().max(1)) {
            let tx = tx.clone();
            let (graphs, todo, slots, next, failed, first_error, save, key) = (
                &graphs,
                &todo,
                &slots,
                &next,
                &failed,
                &first_error,
                &save,
                &key,
            );
            scope.spawn(move || loop {
                if failed.load(Ordering::SeqCst) {
                    return;
                }
                let k = next.fetch_add(1, Ordering::SeqCst);
                let Some(&i) = todo.get(k) else { return };
                let outcome = plan_one(&graphs[i], out, key, opts, &tx).and_then(|r| {
                    let mut s = slots.lock().unwrap_or_else(|p| p.into_inner());
                    s[i] = Some(r);
                    save(&s)
                });
                if let Err(e) = outcome {
                    failed.store(true, Ordering::SeqCst);
                    let mut fe = first_error.lock().unwrap_or_else(|p| p.into_inner());
                    fe.get_or_insert(e);
                    return;
                }
            });
        }
        drop(tx);
        // Events reach the observer here, on the calling thread, until every worker is done.
        for ev in rx {
            observer(ev);
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mine: Vec<GraphResult> = slots
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .flatten()
        .collect();
    if mine.len() != graphs.len() {
        return Err(ZooError::Internal("a graph has no result".into()));
    }
    save(&mine.iter().cloned().map(Some).collect::<Vec<_>>())?;
    let pairs: Vec<(&Graph, &GraphResult)> = graphs
        .iter()
        .map(|g| &g.graph)
        .zip(mine.iter())
        .chain(kept.iter().map(|(g, r)| (g, r)))
        .collect();
    let results: Vec<GraphResult> = pairs.iter().map(|(_, r)| (*r).clone()).collect();
    write_atomic(&out.join("results.csv"), &to_csv(&results))?;
    report::write_reports(out, &pairs)?;
    Ok(ZooSummary {
        planned: todo.len(),
        skipped,
        kept: kept.len(),
        dropped,
        results,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Reads a graph file: its text and the graph (a [`ZooError::Graph`] naming the file).
fn read_graph(path: &Path) -> Result<(String, Graph), ZooError> {
    let bytes = std::fs::read(path).map_err(|e| ZooError::io(path, e))?;
    let text = String::from_utf8(bytes).map_err(|_| ZooError::Graph {
        path: path.display().to_string(),
        message: "not UTF-8 text".into(),
    })?;
    let graph = Graph::parse(&text).map_err(|e| ZooError::Graph {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    Ok((text, graph))
}

/// Whether `r`'s plan files still say what it records: each is read back and checked
/// against `graph` as a new plan is ([`check_against_original`]), and the three peaks and the
/// full plan's status are the recorded ones. `Err` says what differs.
fn read_back(r: &GraphResult, graph: &Graph, out: &Path) -> Result<(), String> {
    let files = [
        (&r.plans.listed, r.listed_peak_bytes),
        (&r.plans.heuristic, r.heuristic_peak_bytes),
        (&r.plans.full, r.full_peak_bytes),
    ];
    for (file, peak) in files {
        let path = out.join(file);
        let text = crate::text_file::read(&path).map_err(|e| e.to_string())?;
        let plan = Plan::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        check_against_original(graph, &plan, None)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if plan.stats.peak_bytes != peak {
            return Err(format!(
                "{}: its peak is {} B, results.json records {peak} B",
                path.display(),
                plan.stats.peak_bytes
            ));
        }
        if file == &r.plans.full && plan.stats.status != Some(r.full_status) {
            return Err(format!(
                "{}: its status is not the recorded {}",
                path.display(),
                r.full_status.as_str()
            ));
        }
    }
    Ok(())
}

/// The earlier results to keep beside this run's `graphs` (module doc), with their graphs;
/// every other earlier result of a graph this run does not name gets a line in `dropped`.
fn keep_earlier(
    previous: &[GraphResult],
    graphs: &[Input],
    key: &str,
    out: &Path,
    dropped: &mut Vec<String>,
) -> Vec<(Graph, GraphResult)> {
    let ours: BTreeSet<&str> = graphs.iter().map(|g| g.hash.as_str()).collect();
    let names: BTreeSet<String> = graphs
        .iter()
        .flat_map(|g| {
            ["listed", "heuristic", "full"].map(|w| format!("plans/{}.{w}.plan.json", g.stem))
        })
        .collect();
    let mut kept = Vec::new();
    for r in previous.iter().filter(|r| !ours.contains(r.hash.as_str())) {
        let why = if r.options != key {
            Err("made with other options".to_string())
        } else if r.plans.all().iter().any(|f| names.contains(f.as_str())) {
            Err("this run writes plan files of the same name".to_string())
        } else {
            read_graph(Path::new(&r.file))
                .map_err(|e| e.to_string())
                .and_then(|(text, graph)| {
                    if content_hash(text.as_bytes()) != r.hash {
                        return Err("its graph file has changed".to_string());
                    }
                    read_back(r, &graph, out).map(|()| graph)
                })
        };
        match why {
            Ok(graph) => kept.push((graph, r.clone())),
            Err(why) => dropped.push(format!("{}: earlier result dropped: {why}", r.file)),
        }
    }
    kept
}

fn to_json<T: Serialize>(v: &T) -> String {
    // Plain data: serialising cannot fail.
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Checks `plan` against the graph as given, as `memplan check ORIGINAL PLAN` does: the graph
/// it refers to comes from [`pipeline::graph_for_plan`] (the carried rewritten graph, proven
/// to be derived from `original`), then the validator replays it (with `budget` as the
/// arena's capacity when given).
pub fn check_against_original(
    original: &Graph,
    plan: &Plan,
    budget: Option<u64>,
) -> Result<(), String> {
    let replay = pipeline::graph_for_plan(original.clone(), plan).map_err(|e| e.to_string())?;
    crate::validate(&replay, plan, budget)
        .map(|_| ())
        .map_err(|v| v.to_string())
}

/// Plans one graph three ways (and under each budget), validates and saves the plans, and
/// computes its figures.
fn plan_one(
    input: &Input,
    out: &Path,
    key: &str,
    opts: &ZooOptions,
    tx: &Sender<ZooEvent>,
) -> Result<GraphResult, ZooError> {
    let g = &input.graph;
    // A closed channel only means nobody watches: ignore send errors.
    let _ = tx.send(ZooEvent::Started {
        graph: g.name.clone(),
    });
    let stats = planner::graph_stats(g).map_err(|e| ZooError::plan(&input.path, e))?;
    let invalid = |phase: &'static str, message: String| ZooError::Invalid {
        path: input.path.display().to_string(),
        phase,
        message,
    };
    let run = |phase: &'static str,
               options: &PipelineOptions|
     -> Result<(PipelineResult, f64), ZooError> {
        let name = g.name.clone();
        let tx = tx.clone();
        let sink = ProgressSink::new(move |p| {
            let _ = tx.send(ZooEvent::Progress {
                graph: name.clone(),
                phase,
                best_peak: p.best_peak,
                lower_bound: p.lower_bound,
            });
        });
        let control = Control {
            cancel: None,
            progress: Some(sink),
        };
        let t = Instant::now();
        let r = pipeline::run(g, options, &control).map_err(|e| ZooError::plan(&input.path, e))?;
        let secs = t.elapsed().as_secs_f64();
        check_against_original(g, &r.plan, None).map_err(|m| invalid(phase, m))?;
        Ok((r, secs))
    };
    let (listed, _) = run("listed", &opts.listed())?;
    let (heuristic, heuristic_seconds) = run("heuristic", &opts.heuristic())?;
    let (full, full_seconds) = run("full", &opts.full())?;
    let files = PlanFiles {
        listed: format!("plans/{}.listed.plan.json", input.stem),
        heuristic: format!("plans/{}.heuristic.plan.json", input.stem),
        full: format!("plans/{}.full.plan.json", input.stem),
    };
    for (r, f) in [
        (&listed, &files.listed),
        (&heuristic, &files.heuristic),
        (&full, &files.full),
    ] {
        let mut text = r.plan.to_json();
        text.push('\n');
        write_atomic(&out.join(f), &text)?;
    }
    let o = full.plan.stats.peak_bytes;
    let mut budgets = Vec::new();
    for &percent in &opts.budgets {
        for strategy in spill_strategies() {
            let t = Instant::now();
            let r = pipeline::run(g, &opts.budgeted(percent, strategy), &Control::default());
            let seconds = t.elapsed().as_secs_f64();
            let row = match r {
                Ok(r) => {
                    let b = r.plan.stats.budget.clone();
                    let budget_bytes = b
                        .as_ref()
                        .map_or_else(|| BudgetSpec::Percent(percent).bytes(o), |b| b.budget_bytes);
                    check_against_original(g, &r.plan, Some(budget_bytes))
                        .map_err(|m| invalid("budgeted", m))?;
                    BudgetRow {
                        percent,
                        budget_bytes,
                        strategy: strategy.to_string(),
                        fits: true,
                        peak_bytes: r.plan.stats.peak_bytes,
                        spilled_bytes: b.as_ref().map_or(0, |b| b.spilled_out_bytes),
                        recomputed_ops: b.as_ref().map_or(0, |b| b.recomputed_ops),
                        overhead_pct: b.as_ref().map_or(0.0, |b| b.overhead_pct),
                        seconds,
                        status: r.plan.stats.status,
                    }
                }
                Err(PipelineError::Budget(BudgetError::Infeasible {
                    budget, reached, ..
                })) => BudgetRow {
                    percent,
                    budget_bytes: budget,
                    strategy: strategy.to_string(),
                    fits: false,
                    peak_bytes: reached,
                    spilled_bytes: 0,
                    recomputed_ops: 0,
                    overhead_pct: 0.0,
                    seconds,
                    status: None,
                },
                // The wall-clock cap (the batch has no other stop) bound before any plan fitted.
                Err(PipelineError::Budget(BudgetError::Cancelled { budget, reached })) => {
                    BudgetRow {
                        percent,
                        budget_bytes: budget,
                        strategy: strategy.to_string(),
                        fits: false,
                        peak_bytes: reached.unwrap_or(0),
                        spilled_bytes: 0,
                        recomputed_ops: 0,
                        overhead_pct: 0.0,
                        seconds,
                        status: Some(PlanStatus::TimeLimit),
                    }
                }
                Err(e) => {
                    return Err(ZooError::Plan {
                        path: input.path.display().to_string(),
                        message: format!("budget {percent}% with {strategy}: {e}"),
                    })
                }
            };
            budgets.push(row);
        }
    }
    let prof = profile(&full.graph, &full.plan).map_err(|e| ZooError::Internal(e.to_string()))?;
    let listed_prof =
        profile(&listed.graph, &listed.plan).map_err(|e| ZooError::Internal(e.to_string()))?;
    let lb = full.plan.stats.lower_bound_bytes.min(o);
    let result = GraphResult {
        graph: g.name.clone(),
        file: input.path.display().to_string(),
        hash: input.hash.clone(),
        options: key.to_string(),
        ops: stats.ops,
        tensors: stats.tensors,
        naive_bytes: stats.naive_bytes,
        // Of the graph the listed plan refers to, so that no placement of it is below.
        listed_load_bytes: if listed.rewritten {
            planner::listed_load(&listed.graph).map_err(|e| ZooError::plan(&input.path, e))?
        } else {
            stats.listed_load
        },
        listed_peak_bytes: listed.plan.stats.peak_bytes,
        heuristic_peak_bytes: heuristic.plan.stats.peak_bytes,
        heuristic_seconds,
        full_peak_bytes: o,
        // The pipeline always sets the status; `feasible` is what an unset one would mean.
        full_status: full.plan.stats.status.unwrap_or(PlanStatus::Feasible),
        full_seconds,
        lower_bound_bytes: lb,
        gap: 1.0 - ratio(lb, o),
        savings_vs_naive: 1.0 - ratio(o, stats.naive_bytes),
        savings_vs_listed: 1.0 - ratio(o, listed.plan.stats.peak_bytes),
        fragmentation: prof.fragmentation,
        waste: prof.waste(),
        rewritten: full.rewritten,
        pytorch_reserved_bytes: simulate_reserved(&listed_prof),
        plans: files,
        budgets,
    };
    let _ = tx.send(ZooEvent::Finished {
        graph: g.name.clone(),
        peak: o,
    });
    Ok(result)
}

/// The CSV header of `results.csv`.
pub const CSV_HEADER: &str = "graph,file,hash,ops,tensors,naive_bytes,listed_load_bytes,listed_peak_bytes,heuristic_peak_bytes,heuristic_seconds,full_peak_bytes,full_status,full_seconds,lower_bound_bytes,gap,savings_vs_naive,savings_vs_listed,fragmentation,waste,pytorch_reserved_bytes,rewritten";

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `results.csv`: one row per graph, the columns of [`CSV_HEADER`].
pub fn to_csv(results: &[GraphResult]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for r in results {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{:.3},{},{},{:.3},{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{}\n",
            csv_field(&r.graph),
            csv_field(&r.file),
            r.hash,
            r.ops,
            r.tensors,
            r.naive_bytes,
            r.listed_load_bytes,
            r.listed_peak_bytes,
            r.heuristic_peak_bytes,
            r.heuristic_seconds,
            r.full_peak_bytes,
            r.full_status,
            r.full_seconds,
            r.lower_bound_bytes,
            r.gap,
            r.savings_vs_naive,
            r.savings_vs_listed,
            r.fragmentation,
            r.waste,
            r.pytorch_reserved_bytes,
            r.rewritten,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_content_hash_is_fnv1a_64() {
        assert_eq!(content_hash(b""), "cbf29ce484222325");
        assert_eq!(content_hash(b"a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn an_atomic_write_that_fails_leaves_no_temporary_file_and_one_that_works_replaces() {
        let dir = tempfile::tempdir().unwrap();
        // A rename onto a folder that holds a file fails.
        let blocked = dir.path().join("results.json");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("keep"), "x").unwrap();
        assert!(write_atomic(&blocked, "{}").is_err());
        let file = dir.path().join("report.md");
        std::fs::write(&file, "old").unwrap();
        write_atomic(&file, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["report.md", "results.json"]);
        assert!(blocked.join("keep").exists());
    }

    #[test]
    fn a_folder_another_run_holds_is_refused_as_busy_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock_folder(dir.path()).unwrap();
        let e = lock_folder(dir.path()).unwrap_err();
        assert!(matches!(e, ZooError::Busy(_)), "{e}");
        assert!(e.to_string().contains("another memplan zoo run"), "{e}");
        drop(held);
        lock_folder(dir.path()).unwrap();
    }

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\","), "\"say \"\"x\"\",\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
