//! Turning request bodies into checked inputs: the JSON envelope, the graph (parsed by the
//! library, with JSON error positions translated to the request body), the options with their
//! defaults and caps, the size limits, and the content hash that keys stored plans.
//!
//! The hash is SHA-256 over a canonical JSON text (object keys sorted at every level, no
//! whitespace) of the graph, the options that change the result, and the planner version, so
//! whitespace, key order and `1` vs `1.0` in a time limit do not defeat the cache.

use crate::config::Config;
use crate::error::ApiError;
use crate::model::{PlanOptionsBody, ResolvedOptions};
use memplan::{Graph, GraphError, OrderMode, PlanOptions, Strategy};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::time::Duration;

/// Which cap applies to the time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `POST /v1/plan`, `POST /v1/place`: `sync_time_limit_cap`.
    Sync,
    /// `POST /v1/jobs`: `max_time_limit`.
    Job,
}

/// A checked plan request.
#[derive(Debug)]
pub struct PreparedPlan {
    /// The parsed graph.
    pub graph: Graph,
    /// Canonical JSON of the graph (stored with a job).
    pub graph_json: String,
    /// Options with defaults filled in.
    pub options: ResolvedOptions,
    /// Content hash of graph + options (hex).
    pub key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlanRequest<'a> {
    #[serde(borrow)]
    graph: &'a RawValue,
    #[serde(default)]
    options: Option<PlanOptionsBody>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckRequest<'a> {
    #[serde(borrow)]
    graph: &'a RawValue,
    #[serde(borrow)]
    plan: &'a RawValue,
    #[serde(default)]
    budget: Option<u64>,
}

/// The body as UTF-8 text.
pub fn text(body: &[u8]) -> Result<&str, ApiError> {
    std::str::from_utf8(body).map_err(|e| {
        ApiError::BadRequest(format!(
            "request body is not UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })
}

/// Parses a JSON request body: syntax errors are 400, structure errors (unknown or missing
/// fields, wrong types) 422, both with line and column.
pub fn json<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, ApiError> {
    serde_json::from_str(text).map_err(|e| {
        let msg = format!(
            "request JSON error at line {}, column {}: {}",
            e.line(),
            e.column(),
            strip_position(&e.to_string())
        );
        match e.classify() {
            serde_json::error::Category::Data => ApiError::request(msg),
            _ => ApiError::BadRequest(msg),
        }
    })
}

/// serde_json appends " at line L column C" to its messages; the position is given once.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// Line and column (1-based) of byte `offset` in `text`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// Byte offset of `inner` (a sub-slice) within `outer`.
fn offset_in(outer: &str, inner: &str) -> usize {
    (inner.as_ptr() as usize).saturating_sub(outer.as_ptr() as usize)
}

/// Moves a position relative to a sub-document to the whole body.
fn shift(body: &str, sub: &str, line: usize, column: usize) -> (usize, usize) {
    let (l0, c0) = position(body, offset_in(body, sub));
    if line <= 1 {
        (l0, c0 + column.saturating_sub(1))
    } else {
        (l0 + line - 1, column)
    }
}

/// Parses the graph sub-document `raw` of `body`.
pub fn graph(body: &str, raw: &RawValue, config: &Config) -> Result<Graph, ApiError> {
    let g = Graph::parse(raw.get()).map_err(|e| match e {
        GraphError::Json {
            line,
            column,
            message,
        } => {
            let (line, column) = shift(body, raw.get(), line, column);
            ApiError::graph(
                GraphError::Json {
                    line,
                    column,
                    message,
                }
                .to_string(),
            )
        }
        e => ApiError::graph(e.to_string()),
    })?;
    check_size(&g, config)?;
    Ok(g)
}

/// The graph size limits.
pub fn check_size(g: &Graph, config: &Config) -> Result<(), ApiError> {
    if g.ops.len() > config.max_ops {
        return Err(ApiError::LimitExceeded {
            limit: "max_ops",
            detail: format!(
                "graph {:?} has {} ops, over the limit of {} ops (max_ops)",
                g.name,
                g.ops.len(),
                config.max_ops
            ),
        });
    }
    if g.tensors.len() > config.max_tensors {
        return Err(ApiError::LimitExceeded {
            limit: "max_tensors",
            detail: format!(
                "graph {:?} has {} tensors, over the limit of {} tensors (max_tensors)",
                g.name,
                g.tensors.len(),
                config.max_tensors
            ),
        });
    }
    Ok(())
}

/// A time limit in seconds, checked against the cap of `mode`.
pub fn time_limit(
    secs: Option<f64>,
    config: &Config,
    mode: Mode,
    field: &str,
) -> Result<Duration, ApiError> {
    let limit = match secs {
        None => config.default_time_limit,
        Some(s) => Duration::try_from_secs_f64(s).map_err(|_| {
            ApiError::options(format!(
                "{field} {s} is not a non-negative number of seconds"
            ))
        })?,
    };
    let (cap, name, hint) = match mode {
        Mode::Sync => (
            config.sync_time_limit_cap,
            "sync_time_limit_cap",
            "; submit longer work to POST /v1/jobs",
        ),
        Mode::Job => (config.max_time_limit, "max_time_limit", ""),
    };
    if limit > cap {
        return Err(ApiError::LimitExceeded {
            limit: name,
            detail: format!(
                "{field} {} s is over the limit of {} s ({name}){hint}",
                limit.as_secs_f64(),
                cap.as_secs_f64()
            ),
        });
    }
    Ok(limit)
}

/// Fills in defaults and checks every option.
pub fn resolve(
    opts: Option<PlanOptionsBody>,
    config: &Config,
    mode: Mode,
) -> Result<ResolvedOptions, ApiError> {
    let o = opts.unwrap_or_default();
    if o.budget == Some(0) {
        return Err(ApiError::options(
            "options.budget: the budget must be more than 0 bytes",
        ));
    }
    let strategy = match &o.strategy {
        None => Strategy::default(),
        Some(s) => Strategy::from_name(&s.0).ok_or_else(|| {
            ApiError::options(format!(
                "options.strategy: unknown strategy {:?} (known: {})",
                s.0,
                Strategy::ALL.map(Strategy::name).join(", ")
            ))
        })?,
    };
    let order = match &o.order {
        None => OrderMode::default(),
        Some(s) => OrderMode::from_name(&s.0).ok_or_else(|| {
            ApiError::options(format!(
                "options.order: unknown order {:?} (known: {})",
                s.0,
                OrderMode::ALL.map(OrderMode::name).join(", ")
            ))
        })?,
    };
    let limit = time_limit(o.time_limit_s, config, mode, "options.time_limit_s")?;
    Ok(ResolvedOptions {
        order: order.name().to_string(),
        strategy: strategy.name().to_string(),
        time_limit_s: limit.as_secs_f64(),
        inplace: o.inplace.unwrap_or(false),
        cache: o.cache.unwrap_or(true),
        budget: o.budget,
    })
}

/// Plans `graph` with `opts`, under `budget` (bytes) when one is given: the library's
/// [`memplan::plan`] or [`memplan::budget::plan_under_budget`]. An unreachable budget is an
/// options error (422) naming the smallest peak reached.
pub fn run_plan(
    graph: &memplan::Graph,
    opts: &PlanOptions,
    budget: Option<u64>,
) -> Result<memplan::Plan, ApiError> {
    use memplan::budget::{BudgetError, BudgetOptions, BudgetSpec};
    match budget {
        None => memplan::plan(graph, opts).map_err(|e| match e {
            memplan::PlanError::Graph(g) => ApiError::graph(g.to_string()),
            other => ApiError::Internal(other.to_string()),
        }),
        Some(b) => {
            let r = memplan::budget::plan_under_budget(
                graph,
                BudgetSpec::Bytes(b),
                opts,
                &BudgetOptions::default(),
            );
            r.map_err(|e| match e {
                e @ (BudgetError::Infeasible { .. } | BudgetError::Zero) => {
                    ApiError::options(format!("options.budget: {e}"))
                }
                BudgetError::Plan(memplan::PlanError::Graph(g)) => ApiError::graph(g.to_string()),
                other => ApiError::Internal(other.to_string()),
            })
        }
    }
}

/// The library options of resolved options (names are checked again: stored jobs may come
/// from another version).
pub fn plan_options(o: &ResolvedOptions) -> Result<PlanOptions, String> {
    Ok(PlanOptions {
        order: OrderMode::from_name(&o.order)
            .ok_or_else(|| format!("unknown order {:?}", o.order))?,
        strategy: Strategy::from_name(&o.strategy)
            .ok_or_else(|| format!("unknown strategy {:?}", o.strategy))?,
        time_limit: Some(
            Duration::try_from_secs_f64(o.time_limit_s)
                .map_err(|_| format!("bad time limit {}", o.time_limit_s))?,
        ),
        inplace: o.inplace,
        ..PlanOptions::default()
    })
}

/// Writes `v` as canonical JSON (keys sorted, no whitespace).
pub fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Content hash of a canonical graph and resolved options.
pub fn cache_key(graph_json: &str, o: &ResolvedOptions) -> String {
    let mut h = Sha256::new();
    // Everything that changes the result, and the planner that computed it.
    let mut opts = format!(
        "memplan {}\norder={}\nstrategy={}\ntime_limit_s={}\ninplace={}\n",
        env!("CARGO_PKG_VERSION"),
        o.order,
        o.strategy,
        o.time_limit_s,
        o.inplace
    );
    // Only when set, so keys of plans without a budget stay what they were.
    if let Some(b) = o.budget {
        let _ = writeln!(opts, "budget={b}");
    }
    h.update(opts.as_bytes());
    h.update(graph_json.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in h.finalize() {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// Checks a `POST /v1/plan` or `POST /v1/jobs` body.
pub fn prepare_plan(body: &[u8], config: &Config, mode: Mode) -> Result<PreparedPlan, ApiError> {
    let text = text(body)?;
    let req: RawPlanRequest<'_> = json(text)?;
    let options = resolve(req.options, config, mode)?;
    let graph = graph(text, req.graph, config)?;
    let value: Value = serde_json::from_str(req.graph.get())
        .map_err(|e| ApiError::graph(format!("graph JSON error: {e}")))?;
    let mut graph_json = String::with_capacity(req.graph.get().len());
    canonical(&value, &mut graph_json);
    let key = cache_key(&graph_json, &options);
    Ok(PreparedPlan {
        graph,
        graph_json,
        options,
        key,
    })
}

/// Checks a `POST /v1/check` body: (graph, plan, budget).
pub fn prepare_check(
    body: &[u8],
    config: &Config,
) -> Result<(Graph, memplan::Plan, Option<u64>), ApiError> {
    let text = text(body)?;
    let req: RawCheckRequest<'_> = json(text)?;
    let graph = graph(text, req.graph, config)?;
    let plan = memplan::Plan::parse(req.plan.get()).map_err(|e| {
        let (line, column) = shift(text, req.plan.get(), e.line, e.column);
        ApiError::plan(
            memplan::plan::PlanParseError {
                line,
                column,
                message: strip_position(&e.message),
            }
            .to_string(),
        )
    })?;
    Ok((graph, plan, req.budget))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let v: Value = serde_json::from_str(r#"{"b": [ {"d":1, "c":2} ], "a": "x"}"#).unwrap();
        let mut s = String::new();
        canonical(&v, &mut s);
        assert_eq!(s, r#"{"a":"x","b":[{"c":2,"d":1}]}"#);
    }

    #[test]
    fn positions_in_a_sub_document_are_moved_to_the_body() {
        let body = "{\n  \"graph\": {\"a\":\n 1}}";
        let sub = &body[body.find("{\"a\"").unwrap()..body.len() - 1];
        assert_eq!(shift(body, sub, 1, 2), (2, 13));
        assert_eq!(shift(body, sub, 2, 3), (3, 3));
    }

    #[test]
    fn the_same_graph_and_options_written_differently_share_a_key() {
        let c = Config::default();
        let a = prepare_plan(
            br#"{"graph": {"format":"memplan-graph/1","name":"g","tensors":[{"name":"x","size":8,"kind":"input"},{"name":"y","size":8,"kind":"output"}],"ops":[{"name":"f","inputs":["x"],"outputs":["y"]}]}, "options": {"time_limit_s": 1}}"#,
            &c,
            Mode::Sync,
        )
        .unwrap();
        let b = prepare_plan(
            br#"{"options": {"time_limit_s": 1.0, "cache": false},
                 "graph": {"ops":[{"outputs":["y"],"inputs":["x"],"name":"f"}],"name":"g","format":"memplan-graph/1",
                           "tensors":[{"kind":"input","name":"x","size":8},{"name":"y","kind":"output","size":8}]}}"#,
            &c,
            Mode::Sync,
        )
        .unwrap();
        assert_eq!(a.key, b.key);
        let other = resolve(
            Some(PlanOptionsBody {
                strategy: Some(crate::model::StrategyName("heuristic".into())),
                ..PlanOptionsBody::default()
            }),
            &c,
            Mode::Sync,
        )
        .unwrap();
        assert_ne!(cache_key(&a.graph_json, &other), a.key);
    }
}
