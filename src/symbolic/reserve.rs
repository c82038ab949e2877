//! The P99 reservation (issue 17, point 3): given a symbolic plan and a weighted distribution
//! of bindings, the arena bytes to reserve so that the bindings up to a quantile fit, the
//! utilisation at each binding, and what happens above the quantile.
//!
//! # The rule
//!
//! Samples are merged by binding and sorted by their instantiated peak
//! ([`SymbolicPlan::peak_at`]; ties by the symbols' values). The *quantile binding* is the
//! first one at which the cumulative weight reaches `quantile × total`, and the reserved bytes
//! are its peak: the smallest arena that holds at least that share of the weight. For one
//! symbol and a one-piece plan, peaks grow with the value, so this is the usual quantile of the
//! values; with pieces ([`super::plan_symbolic_with`]) or several symbols (batch × sequence) it
//! still is the smallest sufficient arena, where ordering by values would not be.
//!
//! Per binding: its peak, `utilisation = peak / reserved` (above 1 when it does not fit) and
//! whether it fits. A binding that does not fit gets a [`Fallback`]: the budget of a budgeted
//! plan with spills at the reserved size (reported, not run), and, when a split symbol is
//! named, the batch split: the largest value `b'` below the binding's value whose binding fits,
//! and `⌈b / b'⌉` chunks of it (the last one smaller when `b'` does not divide `b`).
//! [`Reservation::average_utilisation`] is the weighted mean utilisation over the fitting
//! bindings. [`plan_fallbacks`] makes the budgeted fallback plans themselves, given the
//! symbolic graph.
//!
//! # Distribution formats
//!
//! [`parse_histogram`] reads a distribution in any of three forms:
//!
//! - a JSON histogram, each value (a decimal integer as the key) with its weight (a finite
//!   number ≥ 0, e.g. a count of requests):
//!   `{"B": {"1": 120, "2": 60, "4": 30, "8": 15, "16": 4, "32": 1}}`;
//! - a JSON listed sample, one entry per observation (weight 1 each; repeats add up):
//!   `{"B": [3, 1, 1, 8, 2, 1]}`;
//! - CSV or plain text (anything not starting with `{`): a header line naming the symbols,
//!   optionally followed by `weight`, then one binding (and weight) per line; blank lines and
//!   lines starting with `#` are skipped. `B` then `3`, `1`, `8`, … is a listed sample;
//!   `B,weight` then `1,120`, `2,60`, … a histogram; `B,S,weight` then `8,512,40`, … a joint
//!   distribution of batch and sequence length (the only form for several symbols).

use super::plan::SymbolicPlan;
use super::{Binding, SymbolicError};
use serde::Serialize;
use std::fmt;

/// The batch split of a binding that does not fit: `chunks` runs at `symbol = chunk` (the last
/// at `symbol = last_chunk`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchSplit {
    /// The split symbol.
    pub symbol: String,
    /// The binding's value of the symbol.
    pub value: u64,
    /// The largest value below `value` whose binding fits the reservation.
    pub chunk: u64,
    /// How many chunks cover `value`: `⌈value / chunk⌉`.
    pub chunks: u64,
    /// The last chunk's value (`value - (chunks - 1) × chunk`; equals `chunk` when it divides).
    pub last_chunk: u64,
}

impl fmt::Display for BatchSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.symbol;
        write!(
            f,
            "{s}={} → {} × {s}={}",
            self.value, self.chunks, self.chunk
        )?;
        if self.last_chunk != self.chunk {
            write!(f, " (last {s}={})", self.last_chunk)?;
        }
        Ok(())
    }
}

/// What to do with a binding whose peak exceeds the reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fallback {
    /// Split the batch ([`BatchSplit`]); `None` without a split symbol or when no smaller value
    /// fits.
    pub split: Option<BatchSplit>,
    /// The other fallback: a budgeted plan (spills, recomputes) with this budget, the reserved
    /// bytes. Reported, not planned.
    pub budget_bytes: u64,
}

/// One binding of a [`Reservation`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservedBinding {
    /// The binding.
    pub binding: Binding,
    /// Its weight in the distribution (merged over repeats).
    pub weight: f64,
    /// The instantiated peak (bytes).
    pub peak_bytes: u64,
    /// `peak_bytes / reserved_bytes` (above 1 when it does not fit).
    pub utilisation: f64,
    /// Whether `peak_bytes <= reserved_bytes`.
    pub fits: bool,
    /// The fallback, for a binding that does not fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
}

/// The arena to reserve for a quantile of a distribution of bindings (module doc).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reservation {
    /// The quantile asked, in (0, 1].
    pub quantile: f64,
    /// The binding at that quantile.
    pub quantile_binding: Binding,
    /// The reserved arena bytes.
    pub reserved_bytes: u64,
    /// Weighted mean of `utilisation` over the bindings that fit.
    pub average_utilisation: f64,
    /// Fraction of the total weight that fits (≥ `quantile`).
    pub fitting_weight: f64,
    /// Every binding, sorted.
    pub bindings: Vec<ReservedBinding>,
}

/// The reservation for `quantile` of `samples` (binding, weight) under `plan` (module doc).
/// `split_symbol` names the batch symbol to split above the reservation. Errors: no samples,
/// a total weight of 0 or not finite, a weight that is negative or not finite, a quantile
/// outside (0, 1], an undeclared split symbol, or a binding the plan refuses.
pub fn reserve(
    plan: &SymbolicPlan,
    samples: &[(Binding, f64)],
    quantile: f64,
    split_symbol: Option<&str>,
) -> Result<Reservation, SymbolicError> {
    let err = |m: String| SymbolicError::Reserve(m);
    if !(quantile > 0.0 && quantile <= 1.0) {
        return Err(err(format!("quantile {quantile} is not in (0, 1]")));
    }
    let split_range = match split_symbol {
        Some(s) => Some(*plan.symbols().get(s).ok_or_else(|| {
            err(format!(
                "split symbol {s:?} is not declared (declared: {})",
                plan.symbols()
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?),
        None => None,
    };
    let mut merged: Vec<(Vec<u64>, Binding, f64)> = Vec::new();
    for (b, w) in samples {
        if !(w.is_finite() && *w >= 0.0) {
            return Err(err(format!(
                "binding {b} has weight {w}; weights are finite and >= 0"
            )));
        }
        let vals = b.resolve(plan.symbols())?;
        match merged.iter_mut().find(|(v, _, _)| *v == vals) {
            Some(m) => m.2 += w,
            None => merged.push((vals, b.clone(), *w)),
        }
    }
    let total: f64 = merged.iter().map(|m| m.2).sum();
    if merged.is_empty() || total <= 0.0 {
        return Err(err(
            "no samples with a positive weight; give at least one binding".into(),
        ));
    }
    if !total.is_finite() {
        return Err(err(format!(
            "the weights' total is {total}, not a finite number; scale the weights down"
        )));
    }
    let mut with_peaks = merged
        .into_iter()
        .map(|m| plan.peak_at(&m.1).map(|p| (p, m)))
        .collect::<Result<Vec<_>, _>>()?;
    with_peaks.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1 .0.cmp(&b.1 .0)));
    let (peaks, merged): (Vec<u64>, Vec<_>) = with_peaks.into_iter().unzip();
    let target = quantile * total * (1.0 - 1e-12);
    let mut cumulative = 0.0;
    let mut q = merged.len() - 1;
    for (i, m) in merged.iter().enumerate() {
        cumulative += m.2;
        if cumulative >= target {
            q = i;
            break;
        }
    }
    let reserved = peaks[q];
    let ratio = |p: u64| {
        if reserved == 0 {
            if p == 0 {
                1.0
            } else {
                f64::INFINITY
            }
        } else {
            p as f64 / reserved as f64
        }
    };
    let mut bindings = Vec::with_capacity(merged.len());
    let (mut fit_w, mut fit_u) = (0.0, 0.0);
    for ((_, b, w), &peak) in merged.iter().zip(&peaks) {
        let fits = peak <= reserved;
        let utilisation = ratio(peak);
        let fallback = if fits {
            fit_w += w;
            fit_u += w * utilisation;
            None
        } else {
            let split = match (split_symbol, split_range) {
                (Some(s), Some(r)) => split_batch(plan, b, s, r.min, reserved)?,
                _ => None,
            };
            Some(Fallback {
                split,
                budget_bytes: reserved,
            })
        };
        bindings.push(ReservedBinding {
            binding: b.clone(),
            weight: *w,
            peak_bytes: peak,
            utilisation,
            fits,
            fallback,
        });
    }
    Ok(Reservation {
        quantile,
        quantile_binding: merged[q].1.clone(),
        reserved_bytes: reserved,
        average_utilisation: if fit_w > 0.0 { fit_u / fit_w } else { 0.0 },
        fitting_weight: fit_w / total,
        bindings,
    })
}

/// The budgeted fallback of a binding above the reservation, planned ([`plan_fallbacks`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FallbackPlan {
    /// The binding.
    pub binding: Binding,
    /// Whether the pipeline found a plan within the reserved bytes.
    pub fits: bool,
    /// The plan's peak (bytes), when it fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// Bytes spilled to host memory.
    pub spilled_out_bytes: u64,
    /// Ops run again.
    pub recomputed_ops: usize,
    /// Modelled time overhead of the spills and recomputes (% of the step).
    pub overhead_pct: f64,
    /// Why no plan fits, when none does (the pipeline's message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A concrete graph and its plan.
pub type ConcretePair = (crate::Graph, crate::Plan);

/// A fallback report with the concrete graph and plan when one fits.
pub type PlannedFallback = (FallbackPlan, Option<ConcretePair>);

/// Plans the budgeted fallback of every binding of `reservation` that does not fit: `graph`
/// instantiated there, planned by [`crate::pipeline::run`] with `options` and the reserved bytes
/// as the budget (spills and recomputes). Returns each report, with the concrete graph and plan
/// when one fits (to write or run). A budget no plan meets is reported (`fits: false` and the
/// reason), not an error; other pipeline failures are.
pub fn plan_fallbacks(
    graph: &super::SymbolicGraph,
    reservation: &Reservation,
    options: &crate::pipeline::PipelineOptions,
) -> Result<Vec<PlannedFallback>, SymbolicError> {
    use crate::budget::BudgetSpec;
    use crate::pipeline::{self, Control, PipelineOptions};
    let opts = PipelineOptions {
        budget: Some(BudgetSpec::Bytes(reservation.reserved_bytes)),
        ..options.clone()
    };
    let mut out = Vec::new();
    for b in reservation.bindings.iter().filter(|b| !b.fits) {
        let g = graph.instantiate(&b.binding)?;
        match pipeline::run(&g, &opts, &Control::default()) {
            Ok(r) => {
                let stat = r.plan.stats.budget.as_ref();
                let report = FallbackPlan {
                    binding: b.binding.clone(),
                    fits: r.plan.stats.peak_bytes <= reservation.reserved_bytes,
                    peak_bytes: Some(r.plan.stats.peak_bytes),
                    spilled_out_bytes: stat.map_or(0, |s| s.spilled_out_bytes),
                    recomputed_ops: stat.map_or(0, |s| s.recomputed_ops),
                    overhead_pct: stat.map_or(0.0, |s| s.overhead_pct),
                    reason: None,
                };
                out.push((report, Some((r.graph, r.plan))));
            }
            Err(e) if e.is_bad_input() => out.push((
                FallbackPlan {
                    binding: b.binding.clone(),
                    fits: false,
                    peak_bytes: None,
                    spilled_out_bytes: 0,
                    recomputed_ops: 0,
                    overhead_pct: 0.0,
                    reason: Some(e.to_string()),
                },
                None,
            )),
            Err(e) => {
                return Err(SymbolicError::Pipeline {
                    binding: b.binding.to_string(),
                    source: Box::new(e),
                })
            }
        }
    }
    Ok(out)
}

/// Everything `memplan reserve` reports (and Python's `memplan.reserve` returns): the
/// reservation, with the dynamic batcher's report and the planned fallbacks when asked. Its
/// JSON is the reservation's fields plus `batching` and `fallback_plans`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReserveReport {
    /// The reservation.
    #[serde(flatten)]
    pub reservation: Reservation,
    /// The dynamic batcher's report ([`super::simulate_batching`]), when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batching: Option<super::BatchingReport>,
    /// The planned fallbacks above the quantile ([`plan_fallbacks`]), when a graph was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_plans: Option<Vec<FallbackPlan>>,
}

/// Checks that `graph` is the symbolic graph `plan` was made for: the same name and the same
/// symbols with the same ranges (the fallback plans are planned from it).
pub fn check_plan_graph(
    plan: &SymbolicPlan,
    graph: &super::SymbolicGraph,
) -> Result<(), SymbolicError> {
    let doc = plan.doc();
    if graph.name != doc.graph {
        return Err(SymbolicError::Reserve(format!(
            "the plan is for graph {:?}, not {:?}: give the symbolic graph the plan was made for",
            doc.graph, graph.name
        )));
    }
    if graph.symbols != doc.symbols {
        return Err(SymbolicError::Reserve(format!(
            "graph {:?} declares other symbols or ranges than the plan: give the symbolic graph \
             the plan was made for",
            graph.name
        )));
    }
    Ok(())
}

/// [`reserve`], then [`super::simulate_batching`] along `split_symbol` when `batching` is given
/// and [`plan_fallbacks`] when `graph` is: the one call behind every front end's reservation.
/// Returns the report and, per planned fallback, its concrete graph and plan when it fits.
pub fn reserve_report(
    plan: &SymbolicPlan,
    samples: &[(Binding, f64)],
    quantile: f64,
    split_symbol: Option<&str>,
    batching: Option<&super::BatchingOptions>,
    graph: Option<&super::SymbolicGraph>,
    options: &crate::pipeline::PipelineOptions,
) -> Result<(ReserveReport, Vec<Option<ConcretePair>>), SymbolicError> {
    if let Some(g) = graph {
        check_plan_graph(plan, g)?;
    }
    let reservation = reserve(plan, samples, quantile, split_symbol)?;
    let batching =
        match (batching, split_symbol) {
            (None, _) => None,
            (Some(o), Some(symbol)) => Some(super::simulate_batching(
                plan,
                samples,
                &reservation,
                symbol,
                o,
            )?),
            (Some(_), None) => return Err(SymbolicError::Reserve(
                "batching merges requests along the split symbol: name it (--split B, split=\"B\")"
                    .into(),
            )),
        };
    let (fallback_plans, pairs) = match graph {
        None => (None, Vec::new()),
        Some(g) => {
            let planned = plan_fallbacks(g, &reservation, options)?;
            let (reports, pairs) = planned.into_iter().unzip();
            (Some(reports), pairs)
        }
    };
    Ok((
        ReserveReport {
            reservation,
            batching,
            fallback_plans,
        },
        pairs,
    ))
}

/// The largest value of `symbol` below the binding's whose binding fits `reserved`, and the
/// chunks of it that cover the binding's value.
fn split_batch(
    plan: &SymbolicPlan,
    b: &Binding,
    symbol: &str,
    min: u64,
    reserved: u64,
) -> Result<Option<BatchSplit>, SymbolicError> {
    let Some(&value) = b.0.get(symbol) else {
        return Ok(None);
    };
    let mut chunk = value;
    while chunk > min {
        chunk -= 1;
        if plan.peak_at(&b.clone().with(symbol, chunk))? <= reserved {
            let chunks = value.div_ceil(chunk);
            return Ok(Some(BatchSplit {
                symbol: symbol.to_string(),
                value,
                chunk,
                chunks,
                last_chunk: value - (chunks - 1) * chunk,
            }));
        }
    }
    Ok(None)
}

/// Parses a distribution of one symbol (module doc: a JSON histogram or listed sample, or
/// CSV/text) into weighted bindings, with errors naming the offending entry or line.
pub fn parse_histogram(text: &str) -> Result<Vec<(Binding, f64)>, SymbolicError> {
    let samples = if text.trim_start().starts_with('{') {
        parse_json_distribution(text)?
    } else {
        parse_csv_distribution(text)?
    };
    // Every weight is finite and >= 0; their total must be finite too, or the shares
    // (weight / total) are NaN.
    let mut total = 0.0f64;
    for (b, w) in &samples {
        total += w;
        if !total.is_finite() {
            return Err(SymbolicError::Histogram(format!(
                "at {b} (weight {w:e}) the weights' total is no longer a finite number; scale \
                 the weights down"
            )));
        }
    }
    Ok(samples)
}

/// The CSV/text form (module doc).
fn parse_csv_distribution(text: &str) -> Result<Vec<(Binding, f64)>, SymbolicError> {
    let err = |m: String| SymbolicError::Histogram(m);
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let Some((hn, header)) = lines.next() else {
        return Err(err(
            "the distribution is empty: expected a header line naming the symbol (e.g. `B` or \
             `B,weight`), then one value per line"
                .into(),
        ));
    };
    let mut symbols: Vec<&str> = header.split(',').map(str::trim).collect();
    let weighted = symbols
        .last()
        .is_some_and(|w| w.eq_ignore_ascii_case("weight"));
    if weighted {
        symbols.pop();
    }
    if symbols.is_empty() {
        return Err(err(format!(
            "line {hn}: header {header:?}: expected the symbols' names, optionally followed by \
             `weight` (e.g. `B`, `B,weight` or `B,S,weight`)"
        )));
    }
    for (i, sym) in symbols.iter().enumerate() {
        if !super::expr::is_symbol_name(sym) {
            return Err(err(format!(
                "line {hn}: header {header:?}: {sym:?} is not a symbol name (expected the \
                 symbols' names, optionally followed by `weight`, e.g. `B`, `B,weight` or \
                 `B,S,weight`)"
            )));
        }
        if symbols[..i].contains(sym) {
            return Err(err(format!("line {hn}: symbol {sym:?} is given twice")));
        }
    }
    let width = symbols.len() + usize::from(weighted);
    let mut out = Vec::new();
    for (n, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != width {
            return Err(err(format!(
                "line {n}: {line:?}: expected {} comma-separated field(s) ({})",
                width, header
            )));
        }
        let mut b = Binding::new();
        for (sym, value) in symbols.iter().zip(&fields) {
            let v: u64 = value.parse().map_err(|_| {
                err(format!(
                    "line {n}: value {value:?} of {sym:?} is not a non-negative integer"
                ))
            })?;
            b = b.with(sym, v);
        }
        let weight = if weighted {
            let w = fields[width - 1];
            w.parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .ok_or_else(|| err(format!("line {n}: weight {w:?} is not a number >= 0")))?
        } else {
            1.0
        };
        out.push((b, weight));
    }
    if out.is_empty() {
        return Err(err(format!(
            "the distribution of {} lists no values",
            symbols.join(", ")
        )));
    }
    Ok(out)
}

/// The JSON forms (module doc).
fn parse_json_distribution(text: &str) -> Result<Vec<(Binding, f64)>, SymbolicError> {
    let err = |m: String| SymbolicError::Histogram(m);
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        err(format!(
            "JSON error at line {}, column {}: {e}",
            e.line(),
            e.column()
        ))
    })?;
    let top = v
        .as_object()
        .ok_or_else(|| err("expected an object {\"SYMBOL\": {\"VALUE\": WEIGHT, ...}}".into()))?;
    if top.len() != 1 {
        return Err(err(format!(
            "expected exactly one symbol, found {} ({})",
            top.len(),
            top.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    let mut out = Vec::new();
    for (symbol, values) in top {
        if !super::expr::is_symbol_name(symbol) {
            return Err(err(format!("{symbol:?} is not a symbol name")));
        }
        if let Some(list) = values.as_array() {
            for (i, v) in list.iter().enumerate() {
                let n = v.as_u64().ok_or_else(|| {
                    err(format!(
                        "symbol {symbol:?}: entry {i} ({v}) is not a non-negative integer"
                    ))
                })?;
                out.push((Binding::new().with(symbol, n), 1.0));
            }
            continue;
        }
        let values = values.as_object().ok_or_else(|| {
            err(format!(
                "symbol {symbol:?}: expected an object {{\"VALUE\": WEIGHT, ...}} or a list of \
                 observed values [VALUE, ...]"
            ))
        })?;
        for (value, weight) in values {
            let n: u64 = value.trim().parse().map_err(|_| {
                err(format!(
                    "symbol {symbol:?}: key {value:?} is not a non-negative integer"
                ))
            })?;
            let w = weight
                .as_f64()
                .filter(|w| w.is_finite() && *w >= 0.0)
                .ok_or_else(|| {
                    err(format!(
                        "symbol {symbol:?} value {n}: weight {weight} is not a number >= 0"
                    ))
                })?;
            out.push((Binding::new().with(symbol, n), w));
        }
    }
    if out.is_empty() {
        return Err(err("the histogram lists no values".into()));
    }
    Ok(out)
}
