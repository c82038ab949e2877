//! `memplan._memplan`: the native half of the `memplan` Python package (PyO3, abi3).
//!
//! Idea: a thin layer over the same planning pipeline as the CLI, the HTTP service and the zoo
//! batch ([`memplan::pipeline::run`]). Options are the pipeline's own
//! [`PipelineOptions`] fields with their names and defaults (the JSON of the HTTP body's
//! `options`), graphs and plans travel as JSON, and every error becomes a Python exception
//! carrying the message the CLI prints for the same input. Planning, checking and placing
//! release the GIL; planning and placing also heed Ctrl-C (`interruptible`). The Python
//! package (`python/memplan/__init__.py`) re-exports this module.

#![deny(missing_docs)]

use memplan::graph::{Graph, SAMPLE_JSON};
use memplan::pipeline::{self, PipelineOptions};
use memplan::plan::Plan as PlanDoc;
use memplan_solver::placement::step::{self as place_step, PlaceOptions};
use memplan_solver::{csv, CancelToken, Limits};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyString};
use serde::Deserialize;
use std::time::{Duration, Instant};

create_exception!(
    _memplan,
    MemplanError,
    PyException,
    "Base class of every memplan error."
);
create_exception!(
    _memplan,
    BadInputError,
    MemplanError,
    "Bad input: a graph, plan, buffer list or option that cannot be used (the CLI's exit code 2)."
);
create_exception!(
    _memplan,
    InvalidPlanError,
    MemplanError,
    "The validator rejected a plan (the CLI's `invalid: ...`, exit code 1)."
);
create_exception!(
    _memplan,
    PlanningError,
    MemplanError,
    "The pipeline could not produce a plan for valid input (for example an internal solver failure)."
);

/// A bad-input exception with `msg`.
fn bad(msg: impl Into<String>) -> PyErr {
    BadInputError::new_err(msg.into())
}

/// `text` parsed by Python's `json.loads`.
fn json_loads(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

/// `obj` written by Python's `json.dumps` (a `TypeError` there names what cannot be written).
fn json_dumps(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    obj.py()
        .import("json")?
        .call_method1("dumps", (obj,))?
        .extract()
}

/// JSON text of a graph or plan argument and the label the CLI would put in front of an error
/// about it: a dict (or any JSON-serialisable object) is written as JSON; a `str` that starts
/// with `{` or `[` (after a byte order mark and whitespace) is JSON text; `"sample"` is the bundled sample graph (only when `sample_ok`); any
/// other `str` or `os.PathLike` is a path to a file.
fn document_text(
    obj: &Bound<'_, PyAny>,
    what: &str,
    sample_ok: bool,
) -> PyResult<(String, String)> {
    let py = obj.py();
    if obj.is_instance_of::<PyString>() {
        let s: String = obj.extract()?;
        let s = s.as_str();
        let body = s.strip_prefix('\u{feff}').unwrap_or(s);
        if body.trim_start().starts_with(['{', '[']) {
            return Ok((s.to_string(), what.to_string()));
        }
        if sample_ok && s == "sample" {
            return Ok((SAMPLE_JSON.to_string(), "bundled sample".to_string()));
        }
        return read_path(s);
    }
    if let Ok(b) = obj.extract::<Vec<u8>>() {
        if obj.is_instance_of::<pyo3::types::PyBytes>() {
            let text = String::from_utf8(b)
                .map_err(|e| bad(format!("{what}: the bytes are not UTF-8: {e}")))?;
            return Ok((text, what.to_string()));
        }
    }
    let os = py.import("os")?;
    if obj.is_instance(&os.getattr("PathLike")?)? {
        let path: String = os.call_method1("fspath", (obj,))?.extract()?;
        return read_path(&path);
    }
    if let Ok(to_json) = obj.getattr("to_json") {
        if to_json.is_callable() {
            return Ok((to_json.call0()?.extract()?, what.to_string()));
        }
    }
    let text = json_dumps(obj).map_err(|e| {
        bad(format!(
            "{what}: expected a dict, JSON text or a path, got a value json.dumps refuses: {e}"
        ))
    })?;
    Ok((text, what.to_string()))
}

/// The text of the file at `path`, labelled with the path (as the CLI reads it:
/// `memplan::text_file::read`).
fn read_path(path: &str) -> PyResult<(String, String)> {
    memplan::text_file::read(std::path::Path::new(path))
        .map(|t| (t, path.to_string()))
        .map_err(|e| bad(e.to_string()))
}

/// The graph an argument denotes (see [`document_text`]).
fn load_graph(obj: &Bound<'_, PyAny>) -> PyResult<Graph> {
    let (text, label) = document_text(obj, "graph", true)?;
    Graph::parse(&text).map_err(|e| bad(format!("{label}: {e}")))
}

/// The plan an argument denotes: a [`Plan`] object, or a document (see [`document_text`]).
fn load_plan(obj: &Bound<'_, PyAny>) -> PyResult<PlanDoc> {
    if let Ok(p) = obj.cast::<Plan>() {
        return Ok(p.borrow().plan.clone());
    }
    let (text, label) = document_text(obj, "plan", false)?;
    PlanDoc::parse(&text).map_err(|e| bad(format!("{label}: {e}")))
}

/// The pipeline options of keyword arguments: the [`PipelineOptions`] field names and JSON
/// values; `rewrite` may also be the CLI's comma list (`"fuse,tile"`, `"all"`, `"none"`).
fn pipeline_options(options: Option<&Bound<'_, PyDict>>) -> PyResult<PipelineOptions> {
    let Some(options) = options else {
        return Ok(PipelineOptions::default());
    };
    pipeline_options_from(options_value(options)?)
}

/// Refuses a float that is NaN or infinite in `obj` (a dict's values, one level of nested
/// dicts included, as `device_profile`), naming its key: `json.dumps` would write it as
/// `NaN`, which no JSON reader takes, and the error would point into text the caller never
/// wrote.
fn refuse_non_finite(obj: &Bound<'_, PyDict>, prefix: &str) -> PyResult<()> {
    for (k, v) in obj.iter() {
        let name = format!("{prefix}{k}");
        if v.is_instance_of::<PyFloat>() {
            let f: f64 = v.extract()?;
            if !f.is_finite() {
                return Err(bad(format!("options: {name} {f} is not a finite number")));
            }
        } else if let Ok(d) = v.cast::<PyDict>() {
            if prefix.is_empty() {
                refuse_non_finite(d, &format!("{name}."))?;
            }
        }
    }
    Ok(())
}

/// The keyword options as JSON.
fn options_value(options: &Bound<'_, PyDict>) -> PyResult<serde_json::Value> {
    refuse_non_finite(options, "")?;
    let text = json_dumps(options.as_any())
        .map_err(|e| bad(format!("options: a value json.dumps refuses: {e}")))?;
    serde_json::from_str(&text).map_err(|e| bad(format!("options: {e}")))
}

/// Pipeline options from their JSON, read as every library front end reads them
/// ([`PipelineOptions::from_json`]), checked.
fn pipeline_options_from(value: serde_json::Value) -> PyResult<PipelineOptions> {
    let opts = PipelineOptions::from_json(value).map_err(|e| bad(format!("options: {e}")))?;
    opts.check().map_err(|e| bad(format!("options: {e}")))?;
    Ok(opts)
}

/// A memory plan (memplan-plan/1): the instruction stream, the arena and host pool sizes,
/// and the planner's statistics, with the graph it refers to.
#[pyclass(module = "memplan", frozen)]
struct Plan {
    plan: PlanDoc,
    /// memplan-graph/1 JSON of the graph the plan refers to, when known (plans made here).
    graph_json: Option<String>,
}

#[pymethods]
impl Plan {
    /// A plan from memplan-plan/1 JSON text, a dict or a path.
    #[staticmethod]
    fn load(plan: &Bound<'_, PyAny>) -> PyResult<Plan> {
        Ok(Plan {
            plan: load_plan(plan)?,
            graph_json: None,
        })
    }

    /// The plan as memplan-plan/1 JSON text (what `memplan plan` writes).
    fn to_json(&self) -> String {
        self.plan.to_json()
    }

    /// The plan as a dict (`json.loads(plan.to_json())`).
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        json_loads(py, &self.plan.to_json())
    }

    /// The planner's statistics (`stats` of the plan document) as a dict.
    #[getter]
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let text = serde_json::to_string(&self.plan.stats)
            .map_err(|e| PlanningError::new_err(e.to_string()))?;
        json_loads(py, &text)
    }

    /// The instruction stream as a list of dicts (`op` is alloc / exec / free / spill_out /
    /// spill_in; offsets and sizes in bytes).
    #[getter]
    fn instructions(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let text = serde_json::to_string(&self.plan.instructions)
            .map_err(|e| PlanningError::new_err(e.to_string()))?;
        json_loads(py, &text)
    }

    /// Largest `offset + size` the plan reserves in the arena (bytes).
    #[getter]
    fn peak_bytes(&self) -> u64 {
        self.plan.stats.peak_bytes
    }

    /// Arena size the plan needs (bytes).
    #[getter]
    fn arena_bytes(&self) -> u64 {
        self.plan.arena_bytes
    }

    /// Host pool size for spills (bytes).
    #[getter]
    fn host_bytes(&self) -> u64 {
        self.plan.host_bytes
    }

    /// The plan's status (`optimal`, `feasible`, `time_limit`, `cancelled` or
    /// `heuristic_only`), or None.
    #[getter]
    fn status(&self) -> Option<&'static str> {
        self.plan.stats.status.map(|s| s.as_str())
    }

    /// The graph the plan refers to as a dict (the input graph, or the rewritten one when a
    /// rewrite changed it); None for a plan loaded from JSON without its graph.
    #[getter]
    fn graph(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.graph_json
            .as_deref()
            .map(|g| json_loads(py, g))
            .transpose()
    }

    /// Validates the plan against `graph` (the input graph; a rewritten plan is checked
    /// against the graph it carries). Returns the replay's figures with the field names of
    /// `POST /v1/check` (`valid`, `peak_bytes`, `max_live_bytes`, `host_peak_bytes`, `execs`,
    /// `spills`); raises `InvalidPlanError` naming the first violation.
    #[pyo3(signature = (graph, budget=None))]
    fn check(
        &self,
        py: Python<'_>,
        graph: &Bound<'_, PyAny>,
        budget: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let budget = integer_arg("budget", budget)?;
        let g = load_graph(graph)?;
        check_plan(py, g, &self.plan, budget)
    }

    fn __repr__(&self) -> String {
        format!(
            "<memplan.Plan graph={:?} peak_bytes={} instructions={} status={}>",
            self.plan.graph,
            self.plan.stats.peak_bytes,
            self.plan.instructions.len(),
            self.plan.stats.status.map_or("-", |s| s.as_str())
        )
    }
}

/// The non-negative integer argument `name` (`None` stays `None`): anything else, a negative
/// or too large int, a float or a string, is a `BadInputError` naming the argument (pyo3's own
/// conversion would raise `OverflowError` or `TypeError` without the name).
fn integer_arg(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(bad(format!(
            "{name}: expected a non-negative integer, not a bool"
        )));
    }
    v.extract::<u64>().map(Some).map_err(|_| {
        let shown = v.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
        bad(format!(
            "{name} {shown} is not a non-negative integer below 2**64"
        ))
    })
}

/// How often [`interruptible`] looks at Python's signal handlers.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// Stack of [`interruptible`]'s thread, bytes: a main thread's on Linux (a spawned thread gets
/// 2 MiB), as the work ran on the calling thread before.
const WORK_STACK: usize = 8 << 20;

/// Runs `work` on a thread of its own with the GIL released and, every [`SIGNAL_POLL`], runs
/// Python's signal handlers on the calling thread: when one raises (Ctrl-C's
/// `KeyboardInterrupt`), the token `work` was given is raised, the work stops at its next
/// check (the pipeline's stages and the exact search poll it; a HiGHS solve is let go within
/// its grace), and the handler's exception is raised here once the thread has ended. Without
/// this, Ctrl-C waited for the whole plan (up to its time limit). A panic in `work` goes on
/// unwinding here (pyo3 turns it into a `PanicException`).
fn interruptible<T: Send>(
    py: Python<'_>,
    work: impl FnOnce(CancelToken) -> T + Send,
) -> PyResult<T> {
    let token = CancelToken::new();
    let theirs = token.clone();
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("memplan-work".into())
            .stack_size(WORK_STACK)
            .spawn_scoped(scope, move || work(theirs))
            .map_err(|e| {
                PlanningError::new_err(format!("cannot start a thread to plan on: {e}"))
            })?;
        while !handle.is_finished() {
            py.detach(|| {
                let until = Instant::now() + SIGNAL_POLL;
                while !handle.is_finished() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            if handle.is_finished() {
                break;
            }
            if let Err(e) = py.check_signals() {
                token.cancel();
                // What the stopped work returns is dropped: the exception is the answer.
                let _ = py.detach(|| handle.join());
                return Err(e);
            }
        }
        handle
            .join()
            .map_err(|panic| std::panic::resume_unwind(panic))
    })
}

/// Validates `plan` against `graph` with the GIL released (see [`Plan::check`]).
fn check_plan(
    py: Python<'_>,
    graph: Graph,
    plan: &PlanDoc,
    budget: Option<u64>,
) -> PyResult<Py<PyAny>> {
    let outcome = py.detach(|| {
        let g = match pipeline::graph_for_plan(graph, plan) {
            Ok(g) => g,
            Err(e) if e.makes_plan_invalid() => {
                return Err(InvalidPlanError::new_err(e.to_string()))
            }
            Err(e) => return Err(bad(format!("plan: {e}"))),
        };
        memplan::validate(&g, plan, budget).map_err(|v| InvalidPlanError::new_err(v.to_string()))
    })?;
    // The fields of `POST /v1/check`'s answer (and of the C ABI's `memplan_check`).
    let report = serde_json::json!({
        "valid": true,
        "peak_bytes": outcome.peak,
        "max_live_bytes": outcome.max_live,
        "host_peak_bytes": outcome.host_peak,
        "execs": outcome.execs,
        "spills": outcome.spills,
    });
    json_loads(py, &report.to_string())
}

/// Plans `graph` (a dict, JSON text, a path, or `"sample"`) with the pipeline options given
/// as keyword arguments (their names and defaults are those of the HTTP body's `options`:
/// `effort`, `time_limit_s`, `budget`, `rewrite`, `order`, `strategy`, `inplace`,
/// `spill_strategy`, `tiers`, ...). The GIL is released while planning. A symbolic graph
/// (one that declares `symbols`) gets a `SymbolicPlan` for its whole range, as `memplan plan`
/// does; `max_ratio` and `max_pieces` then shape its pieces.
#[pyfunction]
#[pyo3(signature = (graph, **options))]
fn plan(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let (text, label) = document_text(graph, "graph", true)?;
    if memplan::symbolic::declares_symbols(&text) {
        return Ok(Py::new(py, plan_symbolic(py, &text, &label, options)?)?.into_any());
    }
    if let Some(o) = options {
        use memplan::symbolic::SymbolicOptions;
        for k in SymbolicOptions::SWITCHES {
            if o.contains(k)? {
                let refusal = SymbolicOptions::concrete_refusal(k);
                return Err(bad(format!("options: {refusal}")));
            }
        }
    }
    let original = Graph::parse(&text).map_err(|e| bad(format!("{label}: {e}")))?;
    let opts = pipeline_options(options)?;
    // The error leaves the GIL-free closure as (bad input?, message): what the exception needs.
    let result = interruptible(py, |cancel| {
        let control = pipeline::Control {
            cancel: Some(cancel),
            progress: None,
        };
        pipeline::run(&original, &opts, &control)
            .map(|r| (r.plan, r.graph.to_json()))
            .map_err(|e| (e.is_bad_input(), e.to_string()))
    })?;
    match result {
        Ok((plan, graph_json)) => Ok(Py::new(
            py,
            Plan {
                plan,
                graph_json: Some(graph_json),
            },
        )?
        .into_any()),
        Err((true, e)) => Err(bad(format!("{}: {e}", original.name))),
        Err((false, e)) => Err(PlanningError::new_err(e)),
    }
}

/// `plan` on a symbolic graph: `max_ratio` and `max_pieces` taken out of the options (the
/// split switches of `memplan plan`), the rest are the pipeline options.
fn plan_symbolic(
    py: Python<'_>,
    text: &str,
    label: &str,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<SymbolicPlan> {
    use memplan::symbolic::{
        plan_symbolic_with_control, SymbolicError, SymbolicGraph, SymbolicOptions,
    };
    let graph = SymbolicGraph::parse(text).map_err(|e| bad(format!("{label}: {e}")))?;
    let mut map = match options {
        None => serde_json::Map::new(),
        Some(o) => match options_value(o)? {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        },
    };
    let split = SymbolicOptions::take_from(&mut map).map_err(|e| bad(format!("options: {e}")))?;
    let opts = pipeline_options_from(serde_json::Value::Object(map))?;
    let result = interruptible(py, |cancel| {
        let control = pipeline::Control {
            cancel: Some(cancel),
            progress: None,
        };
        plan_symbolic_with_control(&graph, &opts, &split, &control).map_err(|e| match &e {
            SymbolicError::Pipeline { source, .. } if !source.is_bad_input() => {
                (false, e.to_string())
            }
            _ => (true, e.to_string()),
        })
    })?;
    match result {
        Ok(plan) => Ok(SymbolicPlan {
            plan,
            graph: Some(graph),
        }),
        Err((true, e)) => Err(bad(format!("{}: {e}", graph.name))),
        Err((false, e)) => Err(PlanningError::new_err(e)),
    }
}

/// The P99 reservation of a symbolic plan for a distribution of bindings, as `memplan reserve`
/// (`-o`'s JSON as a dict): `plan` is a `SymbolicPlan` or a memplan-symbolic-plan/1 document;
/// `distribution` a dict (`{"B": {"1": 120, "8": 40}}` or `{"B": [3, 1, 8]}`), JSON or CSV text
/// (`"B,S,weight\n8,512,40\n..."`) or a path. `split` names the batch symbol (splits above the
/// quantile; needed by `batching`, the dynamic batcher's simulation with `window`, `requests`
/// and `seed`). With `graph` (the symbolic graph), the budgeted fallback of every binding above
/// the quantile is planned (`fallback_plans`). The GIL is released meanwhile.
#[pyfunction]
#[pyo3(signature = (plan, distribution, quantile=0.99, split=None, batching=false, window=None, requests=None, seed=None, graph=None))]
#[allow(clippy::too_many_arguments)]
fn reserve(
    py: Python<'_>,
    plan: &Bound<'_, PyAny>,
    distribution: &Bound<'_, PyAny>,
    quantile: f64,
    split: Option<String>,
    batching: bool,
    window: Option<&Bound<'_, PyAny>>,
    requests: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    graph: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    use memplan::symbolic::{parse_histogram, reserve_report, BatchingOptions, SymbolicGraph};
    // Integers checked here (a negative one named, not pyo3's OverflowError); None or
    // absent: the defaults the stub shows.
    let count = |name: &str, v: Option<&Bound<'_, PyAny>>, default: u64| -> PyResult<u64> {
        Ok(integer_arg(name, v)?.unwrap_or(default))
    };
    let as_usize = |name: &str, n: u64| {
        usize::try_from(n).map_err(|_| bad(format!("{name} {n} is too large")))
    };
    let window = as_usize("window", count("window", window, 16)?)?;
    let requests = as_usize("requests", count("requests", requests, 10_000)?)?;
    let seed = count("seed", seed, 0)?;
    let sp = match plan.cast::<SymbolicPlan>() {
        Ok(p) => p.borrow().plan.clone(),
        Err(_) => {
            let (text, label) = document_text(plan, "plan", false)?;
            memplan::symbolic::SymbolicPlan::parse(&text)
                .map_err(|e| bad(format!("{label}: {e}")))?
        }
    };
    let (text, label) = match distribution.extract::<String>() {
        Ok(t) if t.contains('\n') || t.trim_start().starts_with(['{', '[']) => {
            (t, "distribution".to_string())
        }
        _ => document_text(distribution, "distribution", false)?,
    };
    let samples = parse_histogram(&text).map_err(|e| bad(format!("{label}: {e}")))?;
    let graph = match graph {
        None => None,
        Some(g) => {
            let (text, label) = document_text(g, "graph", false)?;
            let g = SymbolicGraph::parse(&text).map_err(|e| bad(format!("{label}: {e}")))?;
            // The graph's own mistake, named as the graph (not the distribution).
            memplan::symbolic::check_plan_graph(&sp, &g)
                .map_err(|e| bad(format!("{label}: {e}")))?;
            Some(g)
        }
    };
    let options = batching.then_some(BatchingOptions {
        window,
        requests,
        seed,
    });
    let result = py.detach(|| {
        reserve_report(
            &sp,
            &samples,
            quantile,
            split.as_deref(),
            options.as_ref(),
            graph.as_ref(),
            &PipelineOptions::default(),
        )
        .map(|(report, _)| serde_json::to_string(&report))
        .map_err(|e| {
            let planning = matches!(e, memplan::symbolic::SymbolicError::Pipeline { .. });
            (planning, e.to_string())
        })
    });
    match result {
        Ok(Ok(json)) => json_loads(py, &json),
        Ok(Err(e)) => Err(PlanningError::new_err(e.to_string())),
        Err((true, e)) => Err(PlanningError::new_err(e)),
        Err((false, e)) => Err(bad(format!("{label}: {e}"))),
    }
}

/// A binding from keyword arguments (`B=17, S=128`).
fn binding_of(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<memplan::symbolic::Binding> {
    let mut b = memplan::symbolic::Binding::new();
    if let Some(kw) = kwargs {
        for (k, v) in kw.iter() {
            let name: String = k.extract()?;
            let value: u64 = v.extract().map_err(|_| {
                bad(format!(
                    "binding: {name}={v}: expected a non-negative integer"
                ))
            })?;
            b = b.with(&name, value);
        }
    }
    Ok(b)
}

/// One plan for every binding of a symbolic graph's symbols (memplan-symbolic-plan/1, what
/// `memplan plan` writes for a graph with `symbols`): `instantiate(B=17)` gives the ordinary
/// `Plan` at a binding.
#[pyclass(module = "memplan", frozen)]
struct SymbolicPlan {
    plan: memplan::symbolic::SymbolicPlan,
    /// The symbolic graph, when the plan was made here (for `Plan.graph` after instantiating).
    graph: Option<memplan::symbolic::SymbolicGraph>,
}

#[pymethods]
impl SymbolicPlan {
    /// A symbolic plan from JSON text, a dict or a path.
    #[staticmethod]
    fn load(plan: &Bound<'_, PyAny>) -> PyResult<SymbolicPlan> {
        let (text, label) = document_text(plan, "plan", false)?;
        let plan = memplan::symbolic::SymbolicPlan::parse(&text)
            .map_err(|e| bad(format!("{label}: {e}")))?;
        Ok(SymbolicPlan { plan, graph: None })
    }

    /// The plan as memplan-symbolic-plan/1 JSON text (what `memplan plan` writes).
    fn to_json(&self) -> String {
        self.plan.to_json()
    }

    /// The plan as a dict.
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        json_loads(py, &self.plan.to_json())
    }

    /// The declared symbols: {name: (min, max)}.
    #[getter]
    fn symbols(&self) -> std::collections::BTreeMap<String, (u64, u64)> {
        self.plan
            .symbols()
            .iter()
            .map(|(k, r)| (k.clone(), (r.min, r.max)))
            .collect()
    }

    /// The pieces of the split symbol's range as (symbol, min, max), in order; empty for a
    /// one-piece plan.
    #[getter]
    fn pieces(&self) -> Vec<(String, u64, u64)> {
        self.plan
            .pieces()
            .map(|(s, r)| r.iter().map(|r| (s.to_string(), r.min, r.max)).collect())
            .unwrap_or_default()
    }

    /// The instantiated peak at the corners and a few points between, each against a plan made
    /// for that binding alone (what `memplan plan` prints and `POST /v1/plan/symbolic` answers):
    /// a list of dicts {binding, peak_bytes, per_binding_bytes, ratio}. Plans the bindings with
    /// the default options (the GIL released); needs the graph, so only for a plan made here.
    fn profile(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let Some(graph) = &self.graph else {
            return Err(bad(
                "profile: this plan was loaded without its graph; plan the graph with memplan.plan",
            ));
        };
        let plan = &self.plan;
        let result = py.detach(|| {
            plan.peak_profile(graph, &plan.profile_points(), &PipelineOptions::default())
                .map_err(|e| e.to_string())
        });
        let profile = result.map_err(PlanningError::new_err)?;
        let rows: Vec<serde_json::Value> = profile
            .points
            .iter()
            .map(|p| {
                serde_json::json!({"binding": p.binding.0, "peak_bytes": p.peak_bytes,
                    "per_binding_bytes": p.per_binding_bytes, "ratio": p.ratio})
            })
            .collect();
        json_loads(py, &serde_json::Value::Array(rows).to_string())
    }

    /// The instantiated peak at a binding, e.g. `peak_at(B=17)` (bytes).
    #[pyo3(signature = (**binding))]
    fn peak_at(&self, binding: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
        let b = binding_of(binding)?;
        self.plan
            .peak_at(&b)
            .map_err(|e| bad(format!("binding: {e}")))
    }

    /// The ordinary plan at a binding, e.g. `instantiate(B=17)`: offsets computed in one pass
    /// over the stacking order. Its `graph` is the symbolic graph at that binding when the plan
    /// was made here.
    #[pyo3(signature = (**binding))]
    fn instantiate(&self, binding: Option<&Bound<'_, PyDict>>) -> PyResult<Plan> {
        let b = binding_of(binding)?;
        let plan = self
            .plan
            .instantiate(&b)
            .map_err(|e| bad(format!("binding: {e}")))?;
        let graph_json = match &self.graph {
            Some(g) => Some(
                g.instantiate(&b)
                    .map_err(|e| bad(format!("binding: {e}")))?
                    .to_json(),
            ),
            None => None,
        };
        Ok(Plan { plan, graph_json })
    }

    fn __repr__(&self) -> String {
        format!(
            "<memplan.SymbolicPlan graph={:?} symbols={} pieces={}>",
            self.plan.doc().graph,
            self.plan
                .symbols()
                .iter()
                .map(|(k, r)| format!("{k}:{}..{}", r.min, r.max))
                .collect::<Vec<_>>()
                .join(","),
            self.plan.pieces().map_or(1, |(_, r)| r.len())
        )
    }
}

/// Validates `plan` (a `Plan`, dict, JSON text or path) against `graph`; see `Plan.check`.
#[pyfunction]
#[pyo3(signature = (graph, plan, budget=None))]
fn check(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    plan: &Bound<'_, PyAny>,
    budget: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let budget = integer_arg("budget", budget)?;
    let g = load_graph(graph)?;
    let p = load_plan(plan)?;
    check_plan(py, g, &p, budget)
}

/// One buffer of [`place`]: the JSON shape of `POST /v1/place`'s buffers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BufferArg {
    id: serde_json::Value,
    lower: u64,
    upper: u64,
    size: u64,
    #[serde(default)]
    alignment: Option<u64>,
}

/// The id of a buffer as text (a string or a non-negative integer).
fn buffer_id(i: usize, id: &serde_json::Value) -> PyResult<String> {
    match id {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Number(n) if n.is_u64() => Ok(n.to_string()),
        other => Err(bad(format!(
            "buffers[{i}]: id {other} is neither a string nor a non-negative integer"
        ))),
    }
}

/// Places buffers in one arena with the solver portfolio and the exact search (the same step
/// as `memplan place` and `POST /v1/place`). `buffers` is a list of dicts
/// `{"id", "lower", "upper", "size", "alignment"?}` (lifetime `[lower, upper)`, bytes) or a
/// minimalloc CSV (text or a path). Without `capacity` the peak is minimised. Returns a dict
/// with `fits`, `peak_bytes`, `lower_bound_bytes`, `gap`, `load_bytes`, `status`, `method`,
/// `elapsed_ms` and `buffers` (`{"id", "offset"}` in input order): the body of the
/// `POST /v1/place` answer.
#[pyfunction]
#[pyo3(signature = (buffers, capacity=None, time_limit_s=1.0, alignment=1, heuristic=false))]
fn place(
    py: Python<'_>,
    buffers: &Bound<'_, PyAny>,
    capacity: Option<u64>,
    time_limit_s: f64,
    alignment: u64,
    heuristic: bool,
) -> PyResult<Py<PyAny>> {
    if !alignment.is_power_of_two() {
        return Err(bad(format!("alignment {alignment} is not a power of two")));
    }
    let time = Duration::try_from_secs_f64(time_limit_s).map_err(|_| {
        bad(format!(
            "time_limit_s {time_limit_s} is not a finite non-negative number of seconds"
        ))
    })?;
    let (ids, mut problem) = if buffers.is_instance_of::<PyString>() {
        let s: String = buffers.extract()?;
        let s = s.as_str();
        let (text, label) = if s.contains('\n') || s.contains(',') {
            (s.to_string(), "buffers".to_string())
        } else {
            read_path(s)?
        };
        let parsed = csv::parse(&text, alignment).map_err(|e| bad(format!("{label}: {e}")))?;
        (parsed.ids, parsed.problem)
    } else {
        let text = json_dumps(buffers)
            .map_err(|e| bad(format!("buffers: a value json.dumps refuses: {e}")))?;
        let list: Vec<serde_json::Value> = serde_json::from_str(&text)
            .map_err(|_| bad("buffers: expected a list of dicts or a minimalloc CSV"))?;
        let mut rows = Vec::with_capacity(list.len());
        for (i, v) in list.into_iter().enumerate() {
            let b = BufferArg::deserialize(v).map_err(|e| bad(format!("buffers[{i}]: {e}")))?;
            rows.push((buffer_id(i, &b.id)?, b.lower, b.upper, b.size, b.alignment));
        }
        csv::from_rows(rows, alignment).map_err(bad)?
    };
    problem.capacity = capacity;
    let started = Instant::now();
    let (r, problem) = interruptible(py, |cancel| {
        let opts = PlaceOptions {
            limits: Limits {
                cancel: Some(cancel),
                ..Limits::with_time(time)
            },
            exact: !heuristic,
        };
        match place_step::place(&problem, &opts) {
            Ok(r) => Ok((r, problem)),
            Err(e) => Err(format!(
                "buffers: {}",
                csv::placement_error(&e, &ids, &problem)
            )),
        }
    })?
    .map_err(bad)?;
    let placed: Vec<serde_json::Value> = ids
        .iter()
        .zip(&r.placement.offsets)
        .map(|(id, &o)| serde_json::json!({"id": id, "offset": o}))
        .collect();
    let report = serde_json::json!({
        "fits": r.fits,
        "peak_bytes": r.stats.objective,
        "lower_bound_bytes": r.stats.lower_bound,
        "gap": r.stats.gap(),
        "load_bytes": problem.load(),
        "status": r.stats.status.as_str(),
        "method": r.method,
        "elapsed_ms": started.elapsed().as_secs_f64() * 1e3,
        "buffers": placed,
    });
    json_loads(py, &report.to_string())
}

/// The native module: functions, the `Plan` class and the exception hierarchy.
#[pymodule]
fn _memplan(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(place, m)?)?;
    m.add_function(wrap_pyfunction!(reserve, m)?)?;
    m.add_class::<Plan>()?;
    m.add_class::<SymbolicPlan>()?;
    m.add("MemplanError", py.get_type::<MemplanError>())?;
    m.add("BadInputError", py.get_type::<BadInputError>())?;
    m.add("InvalidPlanError", py.get_type::<InvalidPlanError>())?;
    m.add("PlanningError", py.get_type::<PlanningError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("PLAN_FORMAT", memplan::plan::PLAN_FORMAT)?;
    Ok(())
}
