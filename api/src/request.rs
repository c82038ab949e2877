//! Turning requests into checked inputs: the JSON envelope or the bare graph, the graph
//! (parsed by the library, with JSON error positions translated to the request body), the
//! options (the body's `options` object or the query string, both read as
//! [`memplan::PipelineOptions`] with the service's time-limit default and caps), the size
//! limits, and the content hash that keys stored plans.
//!
//! Options from the query string become a JSON object first ([`query_object`]: numbers,
//! booleans, comma lists and JSON-encoded values by field), so both forms share one reader
//! ([`resolve`]) and give the same errors and the same cache key.
//!
//! The hash is SHA-256 over the planner version, the options' canonical JSON
//! ([`memplan::PipelineOptions::canonical_json`]) and a canonical JSON text of the graph
//! (object keys sorted at every level, no whitespace), so whitespace, key order, `1` vs `1.0`
//! and query vs body options do not defeat the cache.

use crate::config::Config;
use crate::error::ApiError;
use crate::model::ResolvedOptions;
use memplan::json_path::{position, strip_position, UniqueMap};
use memplan::pipeline::PipelineError;
use memplan::{Graph, GraphError, PipelineOptions, Rewrite};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::time::Duration;

/// Which cap applies to the time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `POST /v1/plan`, `POST /plan`, `POST /v1/place`: `sync_time_limit_cap`.
    Sync,
    /// `POST /v1/jobs`, `POST /jobs`: `max_time_limit`.
    Job,
}

/// A plan request as received.
#[derive(Debug, Clone)]
pub enum PlanInput {
    /// `POST /v1/plan`, `POST /v1/jobs`: `{graph, options}` JSON.
    Wrapped(axum::body::Bytes),
    /// `POST /plan`, `POST /jobs`: the bare graph JSON, options in the query string.
    Bare {
        /// The raw query string (without `?`), if any.
        query: Option<String>,
        /// The graph JSON.
        body: axum::body::Bytes,
    },
}

/// Where options come from (for messages naming the field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The body's `options` object.
    Body,
    /// The query string.
    Query,
}

impl Source {
    /// How a field is named in messages.
    pub fn field(self, key: &str) -> String {
        match self {
            Source::Body => format!("options.{key}"),
            Source::Query => format!("query parameter {key}"),
        }
    }
}

/// How a query parameter's text becomes a JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryKind {
    /// Kept as a string.
    Text,
    /// A number when it reads as one (else kept as a string, which the options refuse
    /// naming the field).
    Number,
    /// `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`; the bare name (`?inplace`) is true.
    Bool,
    /// A comma-separated list; repeated parameters are joined.
    List,
    /// A JSON-encoded value.
    Json,
}

/// Every option field a request may give: the pipeline's
/// ([`memplan::PipelineOptions`]), then the service's `cache`, with how each reads from a query
/// string. A test checks that it names every field of `PipelineOptions`.
pub const OPTION_FIELDS: [(&str, QueryKind); 18] = [
    ("rewrite", QueryKind::List),
    ("conv_algos", QueryKind::Text),
    ("tile", QueryKind::Text),
    ("tile_overhead_pct", QueryKind::Number),
    ("order", QueryKind::Text),
    ("strategy", QueryKind::Text),
    ("effort", QueryKind::Number),
    ("time_limit_s", QueryKind::Number),
    ("inplace", QueryKind::Bool),
    ("budget", QueryKind::Text),
    ("spill_strategy", QueryKind::Text),
    ("tiers", QueryKind::Bool),
    ("tier_alignment", QueryKind::Text),
    ("device_profile", QueryKind::Json),
    ("link_gbps", QueryKind::Number),
    ("streams", QueryKind::Number),
    ("stream_peak_ratio", QueryKind::Number),
    ("cache", QueryKind::Bool),
];

/// The service's own option (not a pipeline option).
pub const CACHE_FIELD: &str = "cache";

fn option_kind(key: &str) -> Option<QueryKind> {
    OPTION_FIELDS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, kind)| *kind)
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
    options: Option<UniqueMap>,
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

/// The body as UTF-8 text, without a leading byte order mark (which RFC 8259 lets a parser
/// ignore, as the CLI and the library do: positions count from after it, as an editor that
/// hides it shows them).
pub fn text(body: &[u8]) -> Result<&str, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::BadRequest(format!(
            "request body is not UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Parses a JSON request body: syntax errors are 400, structure errors (unknown or missing
/// fields, wrong types) 422, both with line and column.
pub fn json<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, ApiError> {
    // Every request body is an object: serde would read an array field by field in the
    // order of the type's declaration.
    if let Some(at) = text.find(|c: char| !matches!(c, ' ' | '\t' | '\n' | '\r')) {
        // (A malformed array is a syntax error, answered below as every other.)
        let well_formed = || serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
        if text[at..].starts_with('[') && well_formed() {
            let (line, column) = position(text, at);
            return Err(ApiError::request(format!(
                "request JSON error at line {line}, column {column}: the request body is an \
                 array; it must be a JSON object ({{...}})"
            )));
        }
    }
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
    graph_text(body, raw.get(), config)
}

/// Parses the graph text `sub` (a sub-slice of `body`, or `body` itself), with JSON error
/// positions given in `body`, and checks the size limits. Text that is not well-formed JSON
/// (a bare graph's body) is a 400, as a wrapped body's; well-formed JSON that is no graph a
/// 422.
pub fn graph_text(body: &str, sub: &str, config: &Config) -> Result<Graph, ApiError> {
    let g = Graph::parse(sub).map_err(|e| match e {
        GraphError::Json {
            line,
            column,
            message,
        } => {
            let (line, column) = shift(body, sub, line, column);
            let msg = GraphError::Json {
                line,
                column,
                message,
            }
            .to_string();
            // Only on failure: a second pass tells a syntax error from a wrong document.
            match serde_json::from_str::<serde::de::IgnoredAny>(sub) {
                Err(e) if e.classify() != serde_json::error::Category::Data => {
                    ApiError::BadRequest(msg)
                }
                _ => ApiError::graph(msg),
            }
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

/// The wall-clock cap of a plan whose request gives none: the pipeline's default (the same
/// as the CLI's, so both front ends give the same plan), lowered to the service's cap of
/// `mode` when that is smaller.
pub fn plan_time_limit(config: &Config, mode: Mode) -> Duration {
    let cap = match mode {
        Mode::Sync => config.sync_time_limit_cap,
        Mode::Job => config.max_time_limit,
    };
    Duration::from_secs_f64(memplan::pipeline::DEFAULT_TIME_LIMIT_S).min(cap)
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
        // Past what a `Duration` holds: over any cap, and said so below.
        Some(s) if s.is_finite() && s >= 0.0 => {
            Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
        }
        Some(s) => {
            return Err(ApiError::options(format!(
                "{field} {s} is not a finite non-negative number of seconds"
            )))
        }
    };
    let (cap, name, hint) = match mode {
        Mode::Sync => (
            config.sync_time_limit_cap,
            "sync_time_limit_cap",
            "; submit longer work to POST /v1/jobs (or POST /jobs)",
        ),
        Mode::Job => (config.max_time_limit, "max_time_limit", ""),
    };
    if limit > cap {
        return Err(ApiError::LimitExceeded {
            limit: name,
            detail: format!(
                "{field} {} s is over the limit of {} s ({name}){hint}",
                secs.unwrap_or(limit.as_secs_f64()),
                cap.as_secs_f64()
            ),
        });
    }
    Ok(limit)
}

/// Reads a query string as `T` (`serde_urlencoded`), every route's one way: first a 400
/// when its percent-escapes decode to bytes that are not UTF-8 (a lone `%` stays literal,
/// as form decoding has it), then `invalid` for what `serde_urlencoded` refuses.
pub fn parse_query<T: serde::de::DeserializeOwned>(
    query: Option<&str>,
    invalid: impl FnOnce(serde_urlencoded::de::Error) -> ApiError,
) -> Result<T, ApiError> {
    let query = query.unwrap_or("");
    check_query_encoding(query)?;
    serde_urlencoded::from_str(query).map_err(invalid)
}

/// Refuses a query string whose percent-escapes decode to bytes that are not UTF-8 (400
/// naming the parameter): `serde_urlencoded` would replace them by U+FFFD and the request
/// would be answered about a value the client never sent. A `%` not followed by two hex
/// digits stays a literal `%`, as form decoding does (WHATWG URL standard), so
/// `budget=60%` reads as `60%`.
fn check_query_encoding(query: &str) -> Result<(), ApiError> {
    for part in query.split('&') {
        let bytes = part.as_bytes();
        let mut decoded = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if let (b'%', Some(&[hi, lo])) = (bytes[i], bytes.get(i + 1..i + 3)) {
                if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() {
                    decoded.push(hex_digit(hi) << 4 | hex_digit(lo));
                    i += 3;
                    continue;
                }
            }
            decoded.push(bytes[i]);
            i += 1;
        }
        if std::str::from_utf8(&decoded).is_err() {
            return Err(ApiError::BadRequest(format!(
                "query string: `{part}` decodes to bytes that are not UTF-8"
            )));
        }
    }
    Ok(())
}

/// The value of an ASCII hex digit (`0-9a-fA-F`; 0 for anything else).
fn hex_digit(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

/// Reads a query string into an options object ([`OPTION_FIELDS`] says how each parameter
/// reads). Unknown parameters are refused (422) naming every one of them.
pub fn query_object(query: Option<&str>) -> Result<Map<String, Value>, ApiError> {
    let pairs: Vec<(String, String)> = parse_query(query, |e| {
        ApiError::BadRequest(format!("query string: {e}"))
    })?;
    let mut obj = Map::new();
    let mut unknown: Vec<String> = Vec::new();
    for (key, text) in pairs {
        let Some(kind) = option_kind(&key) else {
            if !unknown.contains(&key) {
                unknown.push(key);
            }
            continue;
        };
        let field = Source::Query.field(&key);
        if let Some(prev) = obj.get_mut(&key) {
            match (kind, prev) {
                (QueryKind::List, Value::String(list)) => {
                    list.push(',');
                    list.push_str(&text);
                    continue;
                }
                _ => return Err(ApiError::options(format!("{field} is given twice"))),
            }
        }
        let value = match kind {
            QueryKind::Text | QueryKind::List => Value::String(text),
            QueryKind::Number => number(&text).unwrap_or(Value::String(text)),
            QueryKind::Bool => match text.as_str() {
                "" | "true" | "1" | "yes" | "on" => Value::Bool(true),
                "false" | "0" | "no" | "off" => Value::Bool(false),
                other => {
                    return Err(ApiError::options(format!(
                        "{field}: {other:?} is not a boolean (true or false)"
                    )))
                }
            },
            QueryKind::Json => memplan::json_path::unique_from_str(&text).map_err(|e| {
                ApiError::options(format!("{field}: not a JSON-encoded value: {e}"))
            })?,
        };
        obj.insert(key, value);
    }
    if !unknown.is_empty() {
        let names: Vec<String> = unknown.iter().map(|k| format!("`{k}`")).collect();
        return Err(ApiError::options(format!(
            "unknown query parameter{} {} (known: {})",
            if unknown.len() > 1 { "s" } else { "" },
            names.join(", "),
            OPTION_FIELDS.map(|(k, _)| k).join(", ")
        )));
    }
    Ok(obj)
}

/// `text` as a JSON number: an integer when it reads as one, else a finite float.
fn number(text: &str) -> Option<Value> {
    let t = text.trim();
    if let Ok(n) = t.parse::<u64>() {
        return Some(Value::from(n));
    }
    if let Ok(n) = t.parse::<i64>() {
        return Some(Value::from(n));
    }
    t.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(Value::Number)
}

/// The error of reading `obj` as pipeline options, naming the first field at fault (serde's
/// messages do not name it for a wrong value).
fn field_error(obj: &Map<String, Value>, whole: &serde_json::Error, source: Source) -> ApiError {
    for (key, value) in obj {
        if option_kind(key).is_none() {
            // The pipeline's list of fields lacks the service's `cache`: name them all.
            let known: Vec<String> = OPTION_FIELDS
                .iter()
                .map(|(k, _)| format!("`{k}`"))
                .collect();
            return ApiError::options(format!(
                "{}: unknown field `{key}`, expected one of {}",
                source.field(key),
                known.join(", ")
            ));
        }
        let one = Value::Object(Map::from_iter([(key.clone(), value.clone())]));
        if let Err(msg) = memplan::json_path::from_value::<PipelineOptions>(&one) {
            // The message starts with the path inside the option where there is one
            // (`device_profile.h2d_bytes_per_s: ...`), or with the option's name where its
            // type names it (`budget: ...`).
            let field = source.field(key);
            let msg = match msg.strip_prefix(key.as_str()) {
                Some(rest) if rest.starts_with(['.', '[', ':']) => format!("{field}{rest}"),
                _ => format!("{field}: {msg}"),
            };
            return ApiError::options(msg);
        }
    }
    let what = match source {
        Source::Body => "options",
        Source::Query => "query parameters",
    };
    ApiError::options(format!("{what}: {whole}"))
}

/// The rules of single options that the OpenAPI document states as patterns and bounds
/// ([`crate::model::rules`]), checked before the pipeline reads them so that the service
/// accepts exactly what the document allows; `rewrite` becomes a list of names and a numeric
/// `tile` its text.
fn check_documented_rules(obj: &mut Map<String, Value>, source: Source) -> Result<(), ApiError> {
    use crate::model::rules;
    let bad = |key: &str, msg: String| ApiError::options(format!("{}: {msg}", source.field(key)));
    // The library's grammars and messages, the same in every front end (the option's name
    // is the field's, not repeated).
    let own = |key: &str, msg: String| {
        let msg = msg
            .strip_prefix(&format!("{key} "))
            .or_else(|| msg.strip_prefix(&format!("{key}: ")))
            .map(str::to_string)
            .unwrap_or(msg);
        bad(key, msg)
    };
    if let Some(v) = obj.get_mut("rewrite") {
        // A comma list or a list of names, read by the library.
        let rewrites = Rewrite::from_json(v).map_err(|e| own("rewrite", e.to_string()))?;
        *v = Value::Array(
            rewrites
                .into_iter()
                .map(|r| Value::String(r.name().to_string()))
                .collect(),
        );
    }
    if let Some(v) = obj.get_mut("tile") {
        let text = match v {
            Value::Number(n) => n.as_u64().map(|k| k.to_string()),
            Value::String(s) => Some(s.clone()),
            _ => None,
        }
        .filter(|t| memplan::passes::tile::TileSpec::parse(t).is_ok());
        match text {
            Some(t) => *v = Value::String(t),
            None if v.is_f64() => {
                let f = v.as_f64().unwrap_or(f64::NAN);
                return Err(bad(
                    "tile",
                    format!(
                        "invalid type: {}, expected u64 (a strip count from 2 to {})",
                        serde::de::Unexpected::Float(f),
                        rules::MAX_TILE_STRIPS
                    ),
                ));
            }
            None => {
                return Err(bad(
                    "tile",
                    format!(
                        "expected auto, off or a strip count from 2 to {}, got {v}",
                        rules::MAX_TILE_STRIPS
                    ),
                ))
            }
        }
    }
    if let Some(Value::String(s)) = obj.get("tier_alignment") {
        if let Err(e) = memplan::tiers::TierAlignment::parse(s) {
            return Err(own("tier_alignment", e.to_string()));
        }
    }
    if let Some(Value::String(s)) = obj.get("budget") {
        if let Err(e) = memplan::budget::BudgetSpec::parse(s) {
            return Err(own("budget", e.to_string()));
        }
    }
    if let Some(g) = obj.get("link_gbps").and_then(Value::as_f64) {
        memplan::pipeline::check_link_gbps(g).map_err(|e| own("link_gbps", e.to_string()))?;
    }
    Ok(())
}

/// Reads an options object (the body's `options` or [`query_object`]) as pipeline options:
/// the service's `cache` taken out, `rewrite` read as names or a comma list (`all`, `none`),
/// a numeric `tile` taken as its text, nulls as absent, the service's default time limit
/// when none is given, a given `conv_algos` or `tile` adding its rewrite (`off` taking it out,
/// as the CLI's flags: [`memplan::PipelineOptions::apply_given_modes`]); then every option
/// checked by
/// [`memplan::PipelineOptions::check`] (its message as is) and the time limit against the
/// cap of `mode`. Errors are 422 naming the field.
pub fn resolve(
    mut obj: Map<String, Value>,
    source: Source,
    config: &Config,
    mode: Mode,
) -> Result<ResolvedOptions, ApiError> {
    obj.retain(|_, v| !v.is_null());
    let cache = match obj.remove(CACHE_FIELD) {
        None => true,
        Some(Value::Bool(b)) => b,
        Some(other) => {
            return Err(ApiError::options(format!(
                "{}: expected true or false, not {other}",
                source.field(CACHE_FIELD)
            )))
        }
    };
    check_documented_rules(&mut obj, source)?;
    if !obj.contains_key("time_limit_s") {
        obj.insert(
            "time_limit_s".into(),
            Value::from(plan_time_limit(config, mode).as_secs_f64()),
        );
    }
    let given = (obj.contains_key("conv_algos"), obj.contains_key("tile"));
    let value = Value::Object(obj);
    let mut pipeline: PipelineOptions = match serde_json::from_value(value.clone()) {
        Ok(p) => p,
        Err(e) => {
            let obj = match value {
                Value::Object(o) => o,
                _ => Map::new(),
            };
            return Err(field_error(&obj, &e, source));
        }
    };
    // A mode adds its rewrite and `off` takes it out, as the CLI's flags do.
    pipeline.apply_given_modes(given.0, given.1);
    pipeline
        .check()
        .map_err(|e| ApiError::options(e.to_string()))?;
    time_limit(
        Some(pipeline.time_limit_s),
        config,
        mode,
        &source.field("time_limit_s"),
    )?;
    Ok(ResolvedOptions {
        pipeline: pipeline.normalised(),
        cache,
    })
}

/// The service error of a pipeline error: bad input (the options, the graph, an unreachable
/// budget) is 422 with the pipeline's message, anything else 500.
pub fn pipeline_error(e: PipelineError) -> ApiError {
    use memplan::budget::BudgetError;
    use memplan::PlanError;
    if !e.is_bad_input() {
        return ApiError::Internal(e.to_string());
    }
    match &e {
        PipelineError::Graph(_)
        | PipelineError::Plan(PlanError::Graph(_))
        | PipelineError::Budget(BudgetError::Plan(PlanError::Graph(_))) => {
            ApiError::graph(e.to_string())
        }
        PipelineError::Pass(_) => ApiError::Unsupported(e.to_string()),
        // Most budget messages name the budget already; the others get the field's name.
        PipelineError::Budget(b) => ApiError::options(match b {
            BudgetError::UnknownStrategy(..) => format!("spill_strategy: {b}"),
            BudgetError::Zero
            | BudgetError::Infeasible { .. }
            | BudgetError::Parse(_)
            | BudgetError::Percent(_)
            | BudgetError::Cancelled { .. } => b.to_string(),
            _ => format!("budget: {b}"),
        }),
        _ => ApiError::options(e.to_string()),
    }
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

/// Content hash of a canonical graph and pipeline options: SHA-256 over the planner version,
/// [`memplan::PipelineOptions::canonical_json`] and the graph's canonical JSON. The service's
/// `cache` flag is not part of it.
pub fn cache_key(graph_json: &str, o: &PipelineOptions) -> String {
    let mut h = Sha256::new();
    h.update(format!("memplan {}\n", env!("CARGO_PKG_VERSION")).as_bytes());
    h.update(o.canonical_json().as_bytes());
    h.update(b"\n");
    h.update(graph_json.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in h.finalize() {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// Canonical JSON of a graph text (already parsed as a graph, so it is valid JSON).
fn canonical_graph(text: &str) -> Result<String, ApiError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::graph(format!("graph JSON error: {e}")))?;
    let mut out = String::with_capacity(text.len());
    canonical(&value, &mut out);
    Ok(out)
}

/// Checks a plan request: `POST /v1/plan` and `POST /v1/jobs` (wrapped) or `POST /plan` and
/// `POST /jobs` (bare graph, options in the query string).
pub fn prepare(input: &PlanInput, config: &Config, mode: Mode) -> Result<PreparedPlan, ApiError> {
    match input {
        PlanInput::Wrapped(body) => prepare_plan(body, config, mode),
        PlanInput::Bare { query, body } => prepare_bare(query.as_deref(), body, config, mode),
    }
}

/// Checks a `POST /v1/plan` or `POST /v1/jobs` body.
pub fn prepare_plan(body: &[u8], config: &Config, mode: Mode) -> Result<PreparedPlan, ApiError> {
    let text = text(body)?;
    let req: RawPlanRequest<'_> = json(text).map_err(|e| with_bare_hint(e, text))?;
    let options = resolve(
        req.options.unwrap_or_default().0,
        Source::Body,
        config,
        mode,
    )?;
    let graph = graph(text, req.graph, config)?;
    let graph_json = canonical_graph(req.graph.get())?;
    let key = cache_key(&graph_json, &options.pipeline);
    Ok(PreparedPlan {
        graph,
        graph_json,
        options,
        key,
    })
}

/// Checks a `POST /plan` or `POST /jobs` request: the bare graph as the body, the options in
/// the query string.
pub fn prepare_bare(
    query: Option<&str>,
    body: &[u8],
    config: &Config,
    mode: Mode,
) -> Result<PreparedPlan, ApiError> {
    let options = resolve(query_object(query)?, Source::Query, config, mode)?;
    let text = text(body)?;
    let graph = graph_text(text, text, config).map_err(|e| with_wrapped_hint(e, text))?;
    let graph_json = canonical_graph(text)?;
    let key = cache_key(&graph_json, &options.pipeline);
    Ok(PreparedPlan {
        graph,
        graph_json,
        options,
        key,
    })
}

/// The top-level keys of a JSON object text (none when it is not one).
fn top_keys(text: &str) -> Vec<String> {
    match serde_json::from_str::<Map<String, Value>>(text) {
        Ok(m) => m.keys().cloned().collect(),
        Err(_) => Vec::new(),
    }
}

/// A wrapped request body that failed: hints at `POST /plan` when it is a bare graph.
fn with_bare_hint(e: ApiError, text: &str) -> ApiError {
    match e {
        ApiError::Invalid {
            slug,
            title,
            detail,
        } if top_keys(text).iter().any(|k| k == "format") => ApiError::Invalid {
            slug,
            title,
            detail: format!(
                "{detail}; this body looks like a bare graph: send it to POST /plan (or \
                     POST /jobs) with the options as query parameters, or wrap it as \
                     {{\"graph\": ..., \"options\": {{...}}}}"
            ),
        },
        e => e,
    }
}

/// A bare graph body that failed: hints at `POST /v1/plan` when it is a wrapped request.
fn with_wrapped_hint(e: ApiError, text: &str) -> ApiError {
    match e {
        ApiError::Invalid {
            slug,
            title,
            detail,
        } if top_keys(text).iter().any(|k| k == "graph") => ApiError::Invalid {
            slug,
            title,
            detail: format!(
                "{detail}; this body looks like a wrapped request {{graph, options}}: send \
                     it to POST /v1/plan (or POST /v1/jobs), or send the bare graph here"
            ),
        },
        e => e,
    }
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
                message: e.message,
            }
            .to_string(),
        )
    })?;
    // A plan of another format is the validator's verdict (`format is ...`), as in the CLI's
    // `check` and Python's: not a document this request could not read.
    Ok((graph, plan, req.budget))
}

/// The graph to replay `plan` against, given the request's graph
/// ([`memplan::pipeline::graph_for_plan`]): `Ok(Err(reason))` when the plan is at fault
/// ([`memplan::pipeline::PlanGraphError::makes_plan_invalid`]: a carried graph not derived
/// from it, unknown or
/// inapplicable conv algorithms), `Err` when the carried graph cannot be read (422).
pub fn graph_for_check(
    graph: Graph,
    plan: &memplan::Plan,
    config: &Config,
) -> Result<Result<Graph, String>, ApiError> {
    match memplan::pipeline::graph_for_plan(graph, plan) {
        Ok(g) => {
            check_size(&g, config)?;
            Ok(Ok(g))
        }
        Err(e) if e.makes_plan_invalid() => Ok(Err(e.to_string())),
        Err(e) => Err(ApiError::plan(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_that_cannot_rewrite_the_graph_is_answered_unsupported() {
        let e = pipeline_error(PipelineError::Pass(
            memplan::passes::PassError::Unsupported {
                pass: "tile",
                message: "op `fc` has no tiling".into(),
            },
        ));
        assert!(matches!(e, ApiError::Unsupported(_)), "{e:?}");
        let p = e.problem();
        assert_eq!(p.status, 422);
        assert_eq!(p.kind, "urn:memplan:problem:unsupported");
        assert_eq!(p.detail, "pass tile: op `fc` has no tiling");
    }

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

    const GRAPH: &str = r#"{"format":"memplan-graph/1","name":"g","tensors":[{"name":"x","size":8,"kind":"input"},{"name":"y","size":8,"kind":"output"}],"ops":[{"name":"f","inputs":["x"],"outputs":["y"]}]}"#;

    fn body(options: &str) -> Vec<u8> {
        format!(r#"{{"graph": {GRAPH}, "options": {options}}}"#).into_bytes()
    }

    fn detail(e: ApiError) -> String {
        e.problem().detail
    }

    #[test]
    fn the_same_graph_and_options_written_differently_share_a_key() {
        let c = Config::default();
        let a = prepare_plan(&body(r#"{"time_limit_s": 1}"#), &c, Mode::Sync).unwrap();
        let b = prepare_plan(
            br#"{"options": {"time_limit_s": 1.0, "cache": false},
                 "graph": {"ops":[{"outputs":["y"],"inputs":["x"],"name":"f"}],"name":"g","format":"memplan-graph/1",
                           "tensors":[{"kind":"input","name":"x","size":8},{"name":"y","kind":"output","size":8}]}}"#,
            &c,
            Mode::Sync,
        )
        .unwrap();
        assert_eq!(a.key, b.key);
        // No time limit: the pipeline's default cap, the same key as giving it.
        let d = prepare_plan(&body("{}"), &c, Mode::Sync).unwrap();
        assert_eq!(
            d.options.pipeline.time_limit_s,
            memplan::pipeline::DEFAULT_TIME_LIMIT_S
        );
        let e = prepare_plan(&body(r#"{"time_limit_s": 60}"#), &c, Mode::Sync).unwrap();
        assert_eq!(d.key, e.key);
        assert_ne!(d.key, a.key);
        let other = prepare_plan(&body(r#"{"strategy": "heuristic"}"#), &c, Mode::Sync).unwrap();
        assert_ne!(other.key, a.key);
    }

    #[test]
    fn an_option_error_names_the_field_inside_the_option() {
        let c = Config::default();
        let e = prepare_plan(
            &body(r#"{"device_profile": {"name": "slow", "h2d_bytes_per_s": "fast"}}"#),
            &c,
            Mode::Sync,
        )
        .unwrap_err();
        assert!(
            detail(e).starts_with("options.device_profile.h2d_bytes_per_s: invalid type: string"),
        );
        let q = prepare_bare(
            Some("device_profile=%7B%22d2h_bytes_per_s%22%3Atrue%7D"),
            GRAPH.as_bytes(),
            &c,
            Mode::Sync,
        )
        .unwrap_err();
        let d = detail(q);
        assert!(
            d.starts_with("query parameter device_profile.d2h_bytes_per_s: invalid type: boolean"),
            "{d}"
        );
        // A top-level option's own message keeps one name.
        let e = prepare_plan(&body(r#"{"effort": "max"}"#), &c, Mode::Sync).unwrap_err();
        let d = detail(e);
        assert!(d.starts_with("options.effort: invalid type"), "{d}");
    }

    #[test]
    fn query_parameters_and_body_options_resolve_alike() {
        let c = Config::default();
        let q = prepare_bare(
            Some("budget=60%25&strategy=heuristic&rewrite=fuse,conv-algos&time_limit_s=2&inplace=false&effort=3&cache=0"),
            GRAPH.as_bytes(),
            &c,
            Mode::Sync,
        )
        .unwrap();
        let b = prepare_plan(
            &body(
                r#"{"budget": "60%", "strategy": "heuristic", "rewrite": ["conv-algos", "fuse"],
                    "time_limit_s": 2.0, "effort": 3, "cache": false}"#,
            ),
            &c,
            Mode::Sync,
        )
        .unwrap();
        assert_eq!(q.options, b.options);
        assert_eq!(q.key, b.key);
        assert!(!q.options.cache);
        assert_eq!(
            q.options.pipeline.budget,
            Some(memplan::budget::BudgetSpec::Percent(60.0))
        );
        // Repeated list parameters join; `all` expands.
        let r = query_object(Some("rewrite=fuse&rewrite=tile")).unwrap();
        assert_eq!(r["rewrite"], "fuse,tile");
        let all = resolve(
            query_object(Some("rewrite=all")).unwrap(),
            Source::Query,
            &c,
            Mode::Sync,
        )
        .unwrap();
        assert_eq!(all.pipeline.rewrite, Rewrite::ALL.to_vec());
        // A JSON-encoded device profile, a bare boolean.
        let o = query_object(Some(
            "device_profile=%7B%22h2d_bytes_per_s%22%3A2.5e10%7D&tiers&tier_alignment=512",
        ))
        .unwrap();
        let r = resolve(o, Source::Query, &c, Mode::Sync).unwrap();
        assert!(r.pipeline.tiers);
        assert_eq!(
            r.pipeline
                .device_profile
                .as_ref()
                .map(|p| p.h2d_bytes_per_s),
            Some(2.5e10)
        );
    }

    #[test]
    fn every_pipeline_option_is_a_known_field() {
        let mut expected: Vec<String> =
            match serde_json::to_value(PipelineOptions::default()).unwrap() {
                Value::Object(m) => m.keys().cloned().collect(),
                _ => panic!("options are an object"),
            };
        expected.push(CACHE_FIELD.to_string());
        expected.sort();
        let mut known: Vec<String> = OPTION_FIELDS.iter().map(|(k, _)| k.to_string()).collect();
        known.sort();
        assert_eq!(known, expected);
    }

    #[test]
    fn bad_options_name_the_field_and_keep_the_pipelines_message() {
        let c = Config::default();
        let e = query_object(Some("speed=11&fuse=1&strategy=auto")).unwrap_err();
        assert_eq!(e.status().as_u16(), 422);
        assert!(
            detail(e.clone()).contains("unknown query parameters `speed`, `fuse`"),
            "{e}"
        );
        let e = prepare_plan(&body(r#"{"strategy": "fastest"}"#), &c, Mode::Sync).unwrap_err();
        assert!(
            detail(e.clone()).starts_with("options.strategy: unknown variant `fastest`"),
            "{e}"
        );
        let e = prepare_plan(&body(r#"{"fuse": true}"#), &c, Mode::Sync).unwrap_err();
        assert!(detail(e.clone()).contains("unknown field `fuse`"), "{e}");
        let e =
            prepare_bare(Some("time_limit_s=soon"), GRAPH.as_bytes(), &c, Mode::Sync).unwrap_err();
        assert!(
            detail(e.clone()).starts_with("query parameter time_limit_s: invalid type"),
            "{e}"
        );
        let e = prepare_bare(Some("rewrite=fusion"), GRAPH.as_bytes(), &c, Mode::Sync).unwrap_err();
        assert!(
            detail(e.clone()).starts_with("query parameter rewrite: unknown rewrite"),
            "{e}"
        );
        let e = prepare_plan(&body(r#"{"budget": 0}"#), &c, Mode::Sync).unwrap_err();
        assert_eq!(
            detail(e),
            "options.budget: the budget must be more than 0 bytes"
        );
        // Combinations: the pipeline's own message, unchanged.
        let combined = PipelineOptions {
            tiers: true,
            budget: Some(memplan::budget::BudgetSpec::Percent(60.0)),
            ..PipelineOptions::default()
        };
        let expected = combined.check().unwrap_err().to_string();
        let e =
            prepare_plan(&body(r#"{"tiers": true, "budget": "60%"}"#), &c, Mode::Sync).unwrap_err();
        assert_eq!(detail(e), expected);
        let e = prepare_bare(
            Some("tiers=true&budget=60%25"),
            GRAPH.as_bytes(),
            &c,
            Mode::Job,
        )
        .unwrap_err();
        assert_eq!(detail(e), expected);
    }

    #[test]
    fn an_unknown_body_option_is_refused_naming_every_known_option_cache_included() {
        let c = Config::default();
        let e = prepare_plan(&body(r#"{"fuse": true}"#), &c, Mode::Job).unwrap_err();
        assert_eq!(e.status().as_u16(), 422);
        // The pipeline's own list, then the service's `cache`.
        let pipeline =
            memplan::json_path::from_value::<PipelineOptions>(&serde_json::json!({"fuse": true}))
                .unwrap_err();
        assert!(
            pipeline.starts_with("fuse: unknown field `fuse`, expected one of `rewrite`"),
            "{pipeline}"
        );
        assert_eq!(detail(e), format!("options.{pipeline}, `cache`"));
    }
}
