//! Dynamic shapes: graphs whose tensor sizes are expressions over named symbols (batch size,
//! sequence length), and **one plan for the whole range** of those symbols (issue 17, points 1
//! and 2).
//!
//! - [`expr`]: size expressions (`"4*B*64*112*112"`, `"a + b*B"`, `"B*S*768*4"`) parsed by a
//!   hand-written recursive-descent parser into a canonical polynomial with non-negative
//!   integer coefficients ([`Poly`]). Such a polynomial is monotone non-decreasing in every
//!   symbol; the layout rule below relies on it.
//! - [`graph`]: the symbolic graph document, memplan-graph/1 plus
//!   `"symbols": {"B": {"min": 1, "max": 64}}` and string sizes ([`SymbolicGraph`]);
//!   [`SymbolicGraph::instantiate`] gives an ordinary [`crate::Graph`] for a [`Binding`].
//! - [`plan`](mod@plan): [`plan_symbolic`] plans the graph at the max corner with
//!   [`crate::pipeline::run`], keeps that plan's instruction order and derives a **stacking
//!   order** (which buffer lies below which, for every pair whose lifetimes overlap), as in
//!   TFLite's arena planner and the symbolic / dynamic-shape planners of TVM and XLA-like
//!   compilers; [`SymbolicPlan::instantiate`] computes the offsets for a binding as the longest
//!   path in that stacking DAG in one pass, O(buffers + stacking edges), and writes an ordinary
//!   memplan-plan/1 [`crate::Plan`]. [`plan_symbolic_with`] splits the widest symbol's range
//!   into pieces ([`SymbolicOptions`]: a target ratio to the per-binding plans, a cap on the
//!   pieces), each planned at its own sub-range's max corner. The module doc of
//!   [`plan`](mod@plan) proves the layout valid at every binding in range and documents the
//!   `memplan-symbolic-plan/1` format, pieces included.
//!
//! - [`reserve`](mod@reserve): the P99 reservation (issue 17, point 3): the arena to reserve so
//!   that the bindings up to a quantile of a weighted distribution fit, the utilisation at each
//!   binding and the fallback above it (split the batch, or a budgeted plan at the reserved
//!   size).
//! - [`batching`]: dynamic batching into that reservation: a seeded stream of requests from
//!   the distribution merged along the batch symbol up to the reservation's capacity, and the
//!   utilisation per run.
//!
//! - [`check`](mod@check): the validator over the range (corners, quartiles, piece ends and
//!   seeded samples), for `memplan check` on a symbolic pair, with [`prove`](mod@prove): the
//!   proof, from the plan document alone, that the layout is valid at every binding.
//!
//! All byte arithmetic is checked `u64`; errors are typed ([`ExprError`], [`SymbolicError`])
//! and name the tensor, op or symbol concerned.

pub mod batching;
pub mod check;
pub mod expr;
pub mod graph;
pub mod plan;
pub mod prove;
pub mod reserve;

pub use batching::{simulate_batching, BatchingOptions, BatchingReport};
pub use check::{check_points, check_symbolic, SymbolicCheck, SymbolicCheckError};
pub use expr::{ExprError, Poly};
pub use graph::SymbolicGraph;
pub use plan::{
    plan_symbolic, plan_symbolic_with, plan_symbolic_with_control, PeakPoint, PeakProfile,
    SymbolicOptions, SymbolicPlan, SYMBOLIC_PLAN_FORMAT,
};
pub use prove::{prove_layout, Proof};
pub use reserve::{
    check_plan_graph, parse_histogram, plan_fallbacks, reserve, reserve_report, BatchSplit,
    Fallback, FallbackPlan, Reservation, ReserveReport, ReservedBinding,
};

/// Whether a graph document declares `symbols` (a symbolic graph, planned with
/// [`plan_symbolic_with`]; [`crate::Graph::parse`] refuses it): what every front end asks
/// before choosing the concrete or the symbolic planner. Cheap for documents that do not
/// mention `"symbols"`.
pub fn declares_symbols(text: &str) -> bool {
    text.contains("\"symbols\"")
        && serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .is_some_and(|v| v.get("symbols").is_some())
}

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// The declared range of a symbol: every binding takes a value in `[min, max]` (inclusive),
/// with `1 <= min <= max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SymbolRange {
    /// Smallest value (≥ 1).
    pub min: u64,
    /// Largest value (≥ `min`).
    pub max: u64,
}

/// The declared symbols by name (sorted).
pub type Symbols = BTreeMap<String, SymbolRange>;

/// A value for each symbol, e.g. `B=17, S=128`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Binding(pub BTreeMap<String, u64>);

impl Binding {
    /// The empty binding (for graphs without symbols).
    pub fn new() -> Binding {
        Binding::default()
    }

    /// This binding with `symbol` set to `value`.
    pub fn with(mut self, symbol: &str, value: u64) -> Binding {
        self.0.insert(symbol.to_string(), value);
        self
    }

    /// Parses `B=17,S=128` (pairs separated by commas or spaces).
    pub fn parse(text: &str) -> Result<Binding, SymbolicError> {
        let mut out = Binding::new();
        for item in text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
        {
            let bad = || SymbolicError::BadBinding(item.to_string());
            let (name, value) = item.split_once('=').ok_or_else(bad)?;
            let name = name.trim();
            if !expr::is_symbol_name(name) {
                return Err(bad());
            }
            let value: u64 = value.trim().parse().map_err(|_| bad())?;
            out.0.insert(name.to_string(), value);
        }
        Ok(out)
    }

    /// The binding with every symbol at its `min` (the min corner).
    pub fn min_corner(symbols: &Symbols) -> Binding {
        Binding(symbols.iter().map(|(s, r)| (s.clone(), r.min)).collect())
    }

    /// The binding with every symbol at its `max` (the max corner).
    pub fn max_corner(symbols: &Symbols) -> Binding {
        Binding(symbols.iter().map(|(s, r)| (s.clone(), r.max)).collect())
    }

    /// The values in the order of `symbols`, after checking that the binding gives every
    /// declared symbol a value in its range and names no other symbol.
    pub fn resolve(&self, symbols: &Symbols) -> Result<Vec<u64>, SymbolicError> {
        if let Some(name) = self.0.keys().find(|k| !symbols.contains_key(*k)) {
            return Err(SymbolicError::UnknownSymbol {
                symbol: name.clone(),
                declared: symbols.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
        symbols
            .iter()
            .map(|(name, r)| match self.0.get(name) {
                None => Err(SymbolicError::MissingSymbol {
                    symbol: name.clone(),
                    min: r.min,
                    max: r.max,
                }),
                Some(&v) if v < r.min || v > r.max => Err(SymbolicError::OutOfRange {
                    symbol: name.clone(),
                    value: v,
                    min: r.min,
                    max: r.max,
                }),
                Some(&v) => Ok(v),
            })
            .collect()
    }
}

impl std::fmt::Display for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// Why a symbolic graph, binding or symbolic plan is refused.
#[derive(Debug, Error)]
pub enum SymbolicError {
    /// The document is not valid JSON or lacks the expected structure.
    #[error("symbolic graph JSON error at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A symbol declaration is malformed (not an object of integers, bad name, `min < 1`,
    /// `min > max`).
    #[error("symbol {symbol:?}: {message}")]
    BadSymbol {
        /// The symbol.
        symbol: String,
        /// What is wrong.
        message: String,
    },
    /// A size (or shape entry, or workspace) expression does not parse.
    #[error("{what}: expression {text:?}: {source}")]
    Expr {
        /// Where: `tensor "x" size`, `tensor "x" shape[1]`, `op "conv" workspace`.
        what: String,
        /// The expression.
        text: String,
        /// The parse error, with its column.
        source: ExprError,
    },
    /// An expression names a symbol that `symbols` does not declare.
    #[error("{what}: symbol {symbol:?} is not declared in \"symbols\" (declared: {declared})")]
    Undeclared {
        /// Where.
        what: String,
        /// The symbol.
        symbol: String,
        /// The declared symbols, comma-separated.
        declared: String,
    },
    /// A size expression is 0 at some binding in range (with every symbol ≥ 1 and
    /// non-negative coefficients this happens only for the zero polynomial).
    #[error("{what}: expression {text:?} is 0 (sizes must be > 0 at every binding in range)")]
    ZeroSize {
        /// Where.
        what: String,
        /// The expression.
        text: String,
    },
    /// Byte arithmetic overflowed u64 at a binding.
    #[error("{what} overflows u64 at binding {binding}")]
    Overflow {
        /// What overflowed (names the tensor or op).
        what: String,
        /// The binding.
        binding: String,
    },
    /// The document with its sizes substituted breaks a rule of memplan-graph/1.
    #[error("at binding {binding}: {source}")]
    Graph {
        /// The binding (the max corner when parsing).
        binding: String,
        /// The rule broken.
        source: crate::graph::GraphError,
    },
    /// A binding leaves a declared symbol without a value.
    #[error("symbol {symbol:?} has no value (its range is {min}..={max})")]
    MissingSymbol {
        /// The symbol.
        symbol: String,
        /// Its smallest value.
        min: u64,
        /// Its largest value.
        max: u64,
    },
    /// A binding gives a symbol a value outside its range.
    #[error("symbol {symbol:?} = {value} is out of its range {min}..={max}")]
    OutOfRange {
        /// The symbol.
        symbol: String,
        /// The value given.
        value: u64,
        /// Its smallest value.
        min: u64,
        /// Its largest value.
        max: u64,
    },
    /// A binding names a symbol the graph does not declare.
    #[error("symbol {symbol:?} is not declared (declared: {declared})")]
    UnknownSymbol {
        /// The symbol.
        symbol: String,
        /// The declared symbols, comma-separated.
        declared: String,
    },
    /// A binding's text is not `NAME=VALUE[,NAME=VALUE...]`.
    #[error("binding item {0:?} is not NAME=VALUE with a non-negative integer value")]
    BadBinding(String),
    /// Pipeline options that a symbolic plan cannot honour.
    #[error("symbolic plan: {0}")]
    Options(String),
    /// Planning the max-corner (or a per-binding) graph failed.
    #[error("planning at binding {binding}: {source}")]
    Pipeline {
        /// The binding planned.
        binding: String,
        /// The pipeline's error.
        source: Box<crate::pipeline::PipelineError>,
    },
    /// The max-corner plan has an instruction a symbolic plan cannot carry (spills, in-place
    /// sharing) or refers to an unknown tensor.
    #[error("symbolic plan: {0}")]
    Unsupported(String),
    /// A histogram of bindings (for [`reserve()`]) is malformed.
    #[error("histogram: {0}")]
    Histogram(String),
    /// [`reserve()`]'s inputs cannot give a reservation (no samples, bad quantile, bad weight).
    #[error("reserve: {0}")]
    Reserve(String),
    /// A memplan-symbolic-plan/1 document is malformed.
    #[error("symbolic plan document: {0}")]
    Document(String),
}
