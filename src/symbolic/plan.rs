//! One plan for the whole range of the symbols: the max-corner plan's instruction order and a
//! **stacking order** (which buffer lies below which), from which the offsets of any binding
//! follow in one pass.
//!
//! # The rule
//!
//! [`plan_symbolic`] plans the graph instantiated at the max corner σ (every symbol at its
//! max) with [`crate::pipeline::run`] and walks that plan's instructions. A *buffer* is one
//! `alloc` (reserved until its `free`, or to the end) or one exec's workspace (reserved for that
//! exec only); lifetimes are half-open instruction intervals `[start, end)`. For every pair of
//! buffers whose lifetimes overlap, the one at the lower max-corner offset lies **below** the
//! other (their max-corner ranges are disjoint, so the offsets differ). Edges implied by a
//! two-edge path are dropped (transitive reduction; longest paths are unchanged because every
//! size is ≥ 0). Buffers are stored in increasing max-corner offset, a topological order of
//! that DAG, each with its list of `below` predecessors.
//!
//! For a binding β, with `s_β(b)` the buffer's size (a polynomial, [`super::expr`]) and `a(b)`
//! its alignment:
//!
//! ```text
//! o_β(t) = max over u below t of align_up(o_β(u) + s_β(u), a(t))      (0 when nothing is below)
//! arena_bytes = stats.peak_bytes = max over b of o_β(b) + s_β(b)
//! ```
//!
//! one pass in the stored order, O(buffers + edges). The weights region is stacked the same
//! way, in the max-corner plan's order (one region, every weight valid all run). The
//! instruction sequence is the max-corner plan's, with the new offsets.
//!
//! # Why it is valid at every binding in range
//!
//! 1. *Aligned:* `o_β(t)` is 0 or an `align_up` to `a(t)`.
//! 2. *No overlap:* let `u`, `t` be reserved at the same time. Their lifetimes overlap, so one
//!    (say `u`) lies below the other in the full stacking relation, and after the reduction
//!    there is still a path `u = w0 → w1 → … → wk = t`. Along each edge
//!    `o_β(w_{i+1}) ≥ o_β(w_i) + s_β(w_i) ≥ o_β(w_i)`, so `o_β(t) ≥ o_β(u) + s_β(u)`: the ranges
//!    `[o_β(u), o_β(u)+s_β(u))` and `[o_β(t), o_β(t)+s_β(t))` are disjoint. This holds for any
//!    non-negative sizes: the stacking is fixed by the order, not by the sizes.
//! 3. *Everything else* the replay checks (each op runs once, inputs valid, outputs reserved at
//!    the end, workspaces present iff > 0) depends only on the instruction sequence, which is the
//!    max-corner plan's, and on which sizes are > 0: every size expression is a non-zero
//!    polynomial with non-negative coefficients, hence ≥ 1 at every binding with symbols ≥ 1
//!    (a workspace expression is either the zero polynomial or > 0 everywhere).
//! 4. *Monotone:* sizes are polynomials with non-negative coefficients, so `β ≤ β'`
//!    (componentwise) gives `s_β ≤ s_β'`, and by induction in the stored order `o_β ≤ o_β'`:
//!    the instantiated peak is non-decreasing in every symbol and no binding in range overflows
//!    when the max corner does not. At σ, `o_σ(t) ≤` the planner's offset (the planner's
//!    offsets satisfy every stacking inequality), so the instantiated max-corner peak is at most
//!    the max-corner plan's peak.
//!
//! `tests/symbolic.rs` checks every instantiation with the independent validator
//! ([`crate::validate()`]).
//!
//! # Format `memplan-symbolic-plan/1` (JSON)
//!
//! ```json
//! {"format": "memplan-symbolic-plan/1", "graph": "mlp",
//!  "symbols": {"B": {"min": 1, "max": 64}},
//!  "max_corner_peak_bytes": 123456,
//!  "weights": [{"tensor": "w", "size": "4096", "alignment": 256}],
//!  "buffers": [
//!    {"tensor": "x", "size": "3072*B", "alignment": 256, "below": []},
//!    {"workspace_of": "mm", "size": "1024 + 4*B", "alignment": 256, "below": [0]}],
//!  "instructions": [
//!    {"op": "alloc", "tensor": "x", "buffer": 0, "mem_id": 0},
//!    {"op": "exec", "node": "mm", "workspace_buffer": 1},
//!    {"op": "free", "tensor": "x", "buffer": 0}]}
//! ```
//!
//! - `symbols`: the symbolic graph's declarations (a binding must give each a value in range).
//! - `weights`: the weights region in stacking order; `size` is an expression
//!   ([`super::expr`], canonical form), `alignment` a power of two.
//! - `buffers`: in a topological order of the stacking DAG; a tensor's buffer names its
//!   `tensor`, a workspace names its op (`workspace_of`); `below` lists indices of earlier
//!   buffers only.
//! - `instructions`: the max-corner plan's stream with buffer indices in place of offsets
//!   (`alloc`/`free` name the tensor and its buffer; `exec` its workspace buffer, if any, and
//!   the plan's `algo` extension when set).
//! - `max_corner_peak_bytes`: the max-corner plan's peak (informative).
//!
//! - `split` (optional): `{"symbol": "B", "pieces": [{"range": {"min": 1, "max": 1},
//!   "max_corner_peak_bytes": …, "weights": […], "buffers": […], "instructions": […]}, …]}`.
//!   Each piece is a full template (fields as above) planned at the max corner of its
//!   sub-range of the split symbol. The pieces' ranges are sorted and contiguous from the
//!   symbol's `min`, and the last ends below its `max`; the top-level template serves the
//!   values above the last piece up to `max`, so pieces plus top level cover the declared range
//!   exactly once. A document without `split` is a one-piece plan (the format before pieces);
//!   a reader that ignores `split` still gets a valid plan for the whole range (the top level
//!   is planned at the global max corner), only a looser one at small bindings.
//!
//! # Pieces
//!
//! One stacking order fixed at the max corner can be loose at small bindings (densenet121
//! training, B 1..16: 1.148 × the per-binding plan at B = 1). [`plan_symbolic_with`] splits
//! the range of the symbol with the widest range (largest max/min): starting from the whole
//! range, it takes the piece with the worst ratio (instantiated peak ÷ the per-binding plan's
//! peak, the worst of three probes: the piece's min, geometric middle and arithmetic middle
//! of the split symbol, other symbols at their min, or every value with
//! [`SymbolicOptions::exhaustive`]; per-binding peaks are cached) above [`SymbolicOptions::max_ratio`], cuts it at
//! the geometric middle `⌊√(lo·hi)⌋` into `[lo, mid]` (planned afresh at its own max corner)
//! and `[mid+1, hi]` (keeps the parent's plan), and repeats until every piece is within the
//! target, holds a single value, or there are [`SymbolicOptions::max_pieces`] pieces. Each
//! piece is valid on its sub-range by the argument above (its sub-range's max corner plays
//! σ); [`SymbolicPlan::instantiate`] picks the piece holding the binding's value of the split
//! symbol. A single-value piece is the per-binding plan's order and stacking at that value,
//! so its ratio is at most 1.
//!
//! [`SymbolicPlan::parse`] checks the structure (indices in range, `below` pointing backwards,
//! symbols declared); the validity of the layout follows from how [`plan_symbolic`] derives
//! it, and [`crate::validate()`] checks any instantiation.

use super::expr::Poly;
use super::graph::SymbolicGraph;
use super::{Binding, SymbolRange, SymbolicError, Symbols};
use crate::graph::{Graph, TensorId};
use crate::pipeline::{self, Control, PipelineOptions};
use crate::plan::{Instruction, Plan, PlanStats, PlanStatus, WeightSlot, PLAN_FORMAT};
use memplan_solver::align_up;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The format string of a symbolic plan document.
pub const SYMBOLIC_PLAN_FORMAT: &str = crate::json_path::SYMBOLIC_PLAN;

/// The `stats.method` of an instantiated plan.
pub const METHOD: &str = "symbolic-stacking";

/// A weight of the weights region (stacked in this order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightTemplate {
    /// The weight tensor.
    pub tensor: String,
    /// Its size in bytes.
    pub size: Poly,
    /// Its alignment in bytes (power of two).
    pub alignment: u64,
}

/// One arena buffer of the stacking DAG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferTemplate {
    /// The tensor it holds (one `alloc`), when it is not a workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// The op whose workspace it is, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_of: Option<String>,
    /// Its size in bytes.
    pub size: Poly,
    /// Its alignment in bytes (power of two).
    pub alignment: u64,
    /// Indices of the buffers directly below it (all smaller than its own index).
    pub below: Vec<u32>,
}

/// One instruction of the template: a memplan-plan/1 instruction with buffer indices in place
/// of offsets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Step {
    /// Reserve the buffer's range for the tensor.
    Alloc {
        /// Tensor name.
        tensor: String,
        /// Buffer index.
        buffer: u32,
        /// The max-corner plan's `mem_id`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mem_id: Option<u64>,
    },
    /// Run an op.
    Exec {
        /// Op name.
        node: String,
        /// Buffer index of its workspace, if it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace_buffer: Option<u32>,
        /// The plan's `algo` extension, when set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        algo: Option<String>,
    },
    /// Release the tensor's buffer.
    Free {
        /// Tensor name.
        tensor: String,
        /// Buffer index.
        buffer: u32,
    },
}

/// The memplan-symbolic-plan/1 document (module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolicPlanDoc {
    /// Must be [`SYMBOLIC_PLAN_FORMAT`].
    pub format: String,
    /// The graph's name.
    pub graph: String,
    /// The declared symbols and their ranges.
    pub symbols: Symbols,
    /// The max-corner plan's peak (bytes).
    pub max_corner_peak_bytes: u64,
    /// The weights region, in stacking order.
    pub weights: Vec<WeightTemplate>,
    /// Arena buffers in topological order of the stacking DAG.
    pub buffers: Vec<BufferTemplate>,
    /// The instruction template.
    pub instructions: Vec<Step>,
    /// Sub-range pieces of one symbol (module doc, "Pieces"); absent for a one-piece plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitDoc>,
}

/// The pieces of a split plan: finer templates for the low sub-ranges of one symbol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitDoc {
    /// The symbol whose range is split.
    pub symbol: String,
    /// Sorted, contiguous sub-ranges from the symbol's `min`; the top-level template covers
    /// the values above the last piece up to the symbol's `max`.
    pub pieces: Vec<PieceDoc>,
}

/// One piece: a template planned at the max corner of its sub-range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceDoc {
    /// The split symbol's sub-range this template serves.
    pub range: SymbolRange,
    /// The peak of the plan at the sub-range's max corner (bytes).
    pub max_corner_peak_bytes: u64,
    /// The weights region, in stacking order.
    pub weights: Vec<WeightTemplate>,
    /// Arena buffers in topological order of the stacking DAG.
    pub buffers: Vec<BufferTemplate>,
    /// The instruction template.
    pub instructions: Vec<Step>,
}

/// A polynomial with symbol indices, for evaluation without lookups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Compiled(Vec<(u64, Vec<(usize, u32)>)>);

impl Compiled {
    fn new(p: &Poly, symbols: &Symbols) -> Result<Compiled, String> {
        let index = |s: &str| symbols.keys().position(|k| k == s);
        p.terms()
            .map(|(m, c)| {
                let vars = m
                    .iter()
                    .map(|(s, e)| {
                        index(s)
                            .map(|i| (i, *e))
                            .ok_or_else(|| format!("symbol {s:?} is not declared"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((c, vars))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(Compiled)
    }

    /// The value at `vals` (by symbol index), `None` on overflow.
    #[inline]
    fn eval(&self, vals: &[u64]) -> Option<u64> {
        let mut sum = 0u64;
        for (c, vars) in &self.0 {
            let mut t = *c;
            for &(i, e) in vars {
                t = t.checked_mul(vals[i].checked_pow(e)?)?;
            }
            sum = sum.checked_add(t)?;
        }
        Some(sum)
    }
}

/// A plan for every binding of the symbols in range (module doc): serialises as the
/// memplan-symbolic-plan/1 document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolicPlan {
    doc: SymbolicPlanDoc,
    /// The top-level template's compiled sizes.
    top: CompiledTemplate,
    /// Each piece's compiled sizes (same order as `doc.split.pieces`).
    pieces: Vec<CompiledTemplate>,
    /// Index of the split symbol among the declared symbols.
    split_index: usize,
}

/// The compiled sizes of one template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct CompiledTemplate {
    buffer_sizes: Vec<Compiled>,
    weight_sizes: Vec<Compiled>,
}

/// A template's parts, borrowed from the top level or from a piece.
#[derive(Clone, Copy)]
struct TemplateRef<'a> {
    weights: &'a [WeightTemplate],
    buffers: &'a [BufferTemplate],
    instructions: &'a [Step],
    compiled: &'a CompiledTemplate,
}

impl Serialize for SymbolicPlan {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.doc.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SymbolicPlan {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SymbolicPlan, D::Error> {
        let doc = SymbolicPlanDoc::deserialize(d)?;
        SymbolicPlan::from_doc(doc).map_err(serde::de::Error::custom)
    }
}

/// One binding of a [`PeakProfile`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakPoint {
    /// The binding.
    pub binding: Binding,
    /// The instantiated plan's peak (bytes).
    pub peak_bytes: u64,
    /// The peak of a plan made for this binding alone by [`crate::pipeline::run`] (bytes).
    pub per_binding_bytes: u64,
    /// `peak_bytes / per_binding_bytes`.
    pub ratio: f64,
    /// LOAD of the symbolic plan's order at this binding (bytes, the most bytes reserved at
    /// once; a lower bound for that order).
    pub load_bytes: u64,
}

/// The instantiated peak as a function of the symbols, next to the per-binding plans'.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakProfile {
    /// One entry per binding asked.
    pub points: Vec<PeakPoint>,
    /// The largest ratio (1 when there are no points).
    pub worst_ratio: f64,
}

fn options_error(options: &PipelineOptions) -> Option<String> {
    if !options.rewrite.is_empty() {
        Some(
            "graph rewrites (rewrite) are not supported: they change the graph per binding \
             while a symbolic plan keeps one graph; plan with rewrite empty"
                .into(),
        )
    } else if options.budget.is_some() {
        Some(
            "a budget is not supported: its spills and recomputes are chosen for one size; \
             plan without budget"
                .into(),
        )
    } else if options.inplace {
        Some(
            "in-place sharing (inplace) is not supported: a taker must fit its donor's bytes \
             at every binding; plan with inplace off"
                .into(),
        )
    } else if options.tiers {
        Some("tiers are not supported: plan with tiers off".into())
    } else if options.streams > 1 {
        Some(
            "several streams (streams) are not supported: a symbolic plan keeps one order of \
             its ops; plan with streams 1"
                .into(),
        )
    } else {
        None
    }
}

/// Plans `graph` for every binding in range (module doc): the max-corner graph planned by
/// [`crate::pipeline::run`] with `options`, then its stacking order. Rewrites, a budget,
/// in-place sharing, tiers and several streams are refused with [`SymbolicError::Options`].
pub fn plan_symbolic(
    graph: &SymbolicGraph,
    options: &PipelineOptions,
) -> Result<SymbolicPlan, SymbolicError> {
    plan_whole(graph, options, &Control::default())
}

/// [`plan_symbolic`] under `control`.
fn plan_whole(
    graph: &SymbolicGraph,
    options: &PipelineOptions,
    control: &Control,
) -> Result<SymbolicPlan, SymbolicError> {
    if let Some(m) = options_error(options) {
        return Err(SymbolicError::Options(m));
    }
    let (concrete, plan) = plan_at_with(graph, &graph.max_corner(), options, control)?;
    SymbolicPlan::from_max_corner_plan(graph, &concrete, &plan)
}

/// The graph instantiated at `binding` and the pipeline's plan of it (with `options`).
fn plan_at(
    graph: &SymbolicGraph,
    binding: &Binding,
    options: &PipelineOptions,
) -> Result<(Graph, Plan), SymbolicError> {
    plan_at_with(graph, binding, options, &Control::default())
}

/// [`plan_at`] under `control` (its cancel token stops the pipeline with its best plan).
fn plan_at_with(
    graph: &SymbolicGraph,
    binding: &Binding,
    options: &PipelineOptions,
    control: &Control,
) -> Result<(Graph, Plan), SymbolicError> {
    let g = graph.instantiate(binding)?;
    let res = pipeline::run(&g, options, control).map_err(|e| SymbolicError::Pipeline {
        binding: binding.to_string(),
        source: Box::new(e),
    })?;
    Ok((g, res.plan))
}

/// How [`plan_symbolic_with`] splits the range of one symbol into pieces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SymbolicOptions {
    /// Split a piece while its instantiated peak at its sub-range's min corner exceeds this
    /// many times the per-binding plan's peak there (default 1.05).
    pub max_ratio: f64,
    /// At most this many pieces, the top-level template included (default 16; 1 = no split).
    pub max_pieces: usize,
    /// Probe every value of a piece's sub-range instead of three (one per-binding plan per
    /// value of the split symbol): then, unless the cap stops the split, the target holds at
    /// every value (other symbols at their min). Default false.
    pub exhaustive: bool,
}

impl Default for SymbolicOptions {
    fn default() -> SymbolicOptions {
        SymbolicOptions {
            max_ratio: 1.05,
            max_pieces: 16,
            exhaustive: false,
        }
    }
}

impl SymbolicOptions {
    /// The split switches' names, as the C ABI and Python take them ([`Self::take_from`]).
    pub const SWITCHES: [&'static str; 2] = ["max_ratio", "max_pieces"];

    /// What the C ABI and Python say of a split switch ([`Self::SWITCHES`]) given with a graph
    /// without symbols, rather than letting it read as an unknown option.
    pub fn concrete_refusal(switch: &str) -> String {
        format!("{switch} applies to symbolic graphs (with \"symbols\") only")
    }

    /// Takes the split switches `max_ratio` and `max_pieces` out of a JSON options object, the
    /// form the C ABI and Python take them in next to the pipeline options (the rest stays in
    /// `options`); absent ones keep their defaults. A value of the wrong type is an error
    /// naming it; the ranges are checked by [`plan_symbolic_with`].
    pub fn take_from(
        options: &mut serde_json::Map<String, serde_json::Value>,
    ) -> Result<SymbolicOptions, SymbolicError> {
        let mut split = SymbolicOptions::default();
        if let Some(v) = options.remove("max_ratio") {
            split.max_ratio = v.as_f64().ok_or_else(|| {
                SymbolicError::Options(format!("max_ratio: expected a number, got {v}"))
            })?;
        }
        if let Some(v) = options.remove("max_pieces") {
            split.max_pieces = v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    SymbolicError::Options(format!("max_pieces: expected an integer >= 1, got {v}"))
                })?;
        }
        Ok(split)
    }
}

/// One piece while [`plan_symbolic_with`] splits.
struct Work {
    lo: u64,
    hi: u64,
    plan: SymbolicPlan,
    ratio: f64,
}

/// [`plan_symbolic`], then split (module doc, "Pieces"): the symbol with the widest range
/// (largest max/min) is cut geometrically while a piece's ratio (the worst at its min corner
/// and its geometric and arithmetic middles, other symbols at their min) is above
/// `split.max_ratio`, the piece holds more than one value and there are fewer than
/// `split.max_pieces` pieces. Each split piece is planned at its own max corner; the upper
/// half keeps its parent's plan.
pub fn plan_symbolic_with(
    graph: &SymbolicGraph,
    options: &PipelineOptions,
    split: &SymbolicOptions,
) -> Result<SymbolicPlan, SymbolicError> {
    plan_symbolic_with_control(graph, options, split, &Control::default())
}

/// [`plan_symbolic_with`] under `control`: its cancel token stops each pipeline run with its
/// best plan so far and stops splitting (the pieces made so far are kept), so that a caller
/// with a deadline (the HTTP service) bounds the whole call.
pub fn plan_symbolic_with_control(
    graph: &SymbolicGraph,
    options: &PipelineOptions,
    split: &SymbolicOptions,
    control: &Control,
) -> Result<SymbolicPlan, SymbolicError> {
    if !(split.max_ratio.is_finite() && split.max_ratio >= 1.0) || split.max_pieces == 0 {
        return Err(SymbolicError::Options(format!(
            "max_ratio must be a finite number >= 1 (got {}) and max_pieces >= 1 (got {})",
            split.max_ratio, split.max_pieces
        )));
    }
    let whole = plan_whole(graph, options, control)?;
    let Some((symbol, range)) = graph
        .symbols
        .iter()
        .max_by(|(_, a), (_, b)| {
            (a.max as f64 / a.min as f64).total_cmp(&(b.max as f64 / b.min as f64))
        })
        .map(|(s, r)| (s.clone(), *r))
    else {
        return Ok(whole);
    };
    if split.max_pieces < 2 || range.min == range.max {
        return Ok(whole);
    }
    let at = |base: Binding, v: u64| base.with(&symbol, v);
    let mut per_binding: HashMap<u64, u64> = HashMap::new();
    let mut measure_at = |plan: &SymbolicPlan, lo: u64| -> Result<f64, SymbolicError> {
        let b = at(graph.min_corner(), lo);
        let peak = plan.peak_at(&b)?;
        let per = match per_binding.get(&lo) {
            Some(&p) => p,
            None => {
                let own = plan_at_with(graph, &b, options, control)?
                    .1
                    .stats
                    .peak_bytes;
                per_binding.insert(lo, own);
                own
            }
        };
        Ok(if per == 0 {
            1.0
        } else {
            peak as f64 / per as f64
        })
    };
    // A piece's ratio: the worst at its min, its geometric and its arithmetic middle.
    let mut measure = |plan: &SymbolicPlan, lo: u64, hi: u64| -> Result<f64, SymbolicError> {
        let geo = (((lo as f64) * (hi as f64)).sqrt().floor() as u64).clamp(lo, hi);
        let mut worst = measure_at(plan, lo)?;
        let probes: Vec<u64> = if split.exhaustive {
            (lo + 1..hi).collect()
        } else {
            vec![geo, lo + (hi - lo) / 2]
        };
        for v in probes {
            if v != lo && v != hi {
                worst = worst.max(measure_at(plan, v)?);
            }
        }
        Ok(worst)
    };
    let ratio = measure(&whole, range.min, range.max)?;
    let mut pieces = vec![Work {
        lo: range.min,
        hi: range.max,
        plan: whole,
        ratio,
    }];
    let cancelled = || control.cancel.as_ref().is_some_and(|c| c.is_cancelled());
    while pieces.len() < split.max_pieces && !cancelled() {
        let Some(k) = pieces
            .iter()
            .enumerate()
            .filter(|(_, w)| w.ratio > split.max_ratio && w.lo < w.hi)
            .max_by(|(_, a), (_, b)| a.ratio.total_cmp(&b.ratio))
            .map(|(k, _)| k)
        else {
            break;
        };
        let (lo, hi) = (pieces[k].lo, pieces[k].hi);
        // Geometric middle, lo <= mid < hi.
        let mid = (((lo as f64) * (hi as f64)).sqrt().floor() as u64).clamp(lo, hi - 1);
        let (concrete, plan) = plan_at_with(graph, &at(graph.max_corner(), mid), options, control)?;
        let low = SymbolicPlan::from_max_corner_plan(graph, &concrete, &plan)?;
        let low_ratio = measure(&low, lo, mid)?;
        let up_ratio = measure(&pieces[k].plan, mid + 1, hi)?;
        pieces[k].lo = mid + 1;
        pieces[k].ratio = up_ratio;
        pieces.insert(
            k,
            Work {
                lo,
                hi: mid,
                plan: low,
                ratio: low_ratio,
            },
        );
    }
    let Some(top) = pieces.pop() else {
        return Err(SymbolicError::Unsupported("no pieces".into()));
    };
    if pieces.is_empty() {
        return Ok(top.plan);
    }
    let mut doc = top.plan.doc;
    doc.split = Some(SplitDoc {
        symbol,
        pieces: pieces
            .into_iter()
            .map(|w| PieceDoc {
                range: SymbolRange {
                    min: w.lo,
                    max: w.hi,
                },
                max_corner_peak_bytes: w.plan.doc.max_corner_peak_bytes,
                weights: w.plan.doc.weights,
                buffers: w.plan.doc.buffers,
                instructions: w.plan.doc.instructions,
            })
            .collect(),
    });
    SymbolicPlan::from_doc(doc)
}

/// A buffer while the stacking is derived.
struct Raw {
    tensor: Option<TensorId>,
    workspace_of: Option<usize>,
    offset: u64,
    size: u64,
    start: usize,
    end: usize,
}

impl SymbolicPlan {
    /// The symbolic plan whose order and stacking are those of `plan`, a valid plan of
    /// `concrete`, the graph instantiated at the max corner (module doc). Spills, in-place
    /// sharing and rewritten graphs are refused ([`SymbolicError::Unsupported`]).
    pub fn from_max_corner_plan(
        graph: &SymbolicGraph,
        concrete: &Graph,
        plan: &Plan,
    ) -> Result<SymbolicPlan, SymbolicError> {
        let unsupported = |m: String| SymbolicError::Unsupported(m);
        if plan.rewritten_graph.is_some() {
            return Err(unsupported(
                "the plan carries a rewritten graph; plan the graph as given".into(),
            ));
        }
        let tensor_ids = concrete.tensor_ids();
        let op_ids = concrete.op_indices();
        let mut raws: Vec<Raw> = Vec::new();
        let mut live: Vec<usize> = Vec::new();
        let mut current: HashMap<TensorId, usize> = HashMap::new();
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        let mut steps = Vec::with_capacity(plan.instructions.len());
        let end_of_run = plan.instructions.len() + 1;
        for (pos, ins) in plan.instructions.iter().enumerate() {
            match ins {
                Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. } => {
                    return Err(unsupported(
                        "the plan runs on several streams (events); plan with streams 1".into(),
                    ));
                }
                Instruction::Alloc {
                    tensor,
                    offset,
                    mem_id,
                    inplace_of,
                } => {
                    if inplace_of.is_some() {
                        return Err(unsupported(format!(
                            "alloc of {tensor:?} shares bytes in place; plan with inplace off"
                        )));
                    }
                    let t = *tensor_ids
                        .get(tensor.as_str())
                        .ok_or_else(|| unsupported(format!("unknown tensor {tensor:?}")))?;
                    let b = raws.len();
                    raws.push(Raw {
                        tensor: Some(t),
                        workspace_of: None,
                        offset: *offset,
                        size: concrete.tensor(t).size,
                        start: pos,
                        end: end_of_run,
                    });
                    pairs.extend(live.iter().map(|&u| (u, b)));
                    live.push(b);
                    current.insert(t, b);
                    steps.push(Step::Alloc {
                        tensor: tensor.clone(),
                        buffer: b as u32,
                        mem_id: *mem_id,
                    });
                }
                Instruction::Exec {
                    node,
                    workspace_offset,
                    algo,
                    ..
                } => {
                    let k = *op_ids
                        .get(node.as_str())
                        .ok_or_else(|| unsupported(format!("unknown op {node:?}")))?;
                    let workspace_buffer = match workspace_offset {
                        Some(w) => {
                            let b = raws.len();
                            raws.push(Raw {
                                tensor: None,
                                workspace_of: Some(k),
                                offset: *w,
                                size: concrete.ops[k].workspace,
                                start: pos,
                                end: pos + 1,
                            });
                            pairs.extend(live.iter().map(|&u| (u, b)));
                            Some(b as u32)
                        }
                        None => None,
                    };
                    steps.push(Step::Exec {
                        node: node.clone(),
                        workspace_buffer,
                        algo: algo.clone(),
                    });
                }
                Instruction::Free { tensor, .. } => {
                    let b = tensor_ids
                        .get(tensor.as_str())
                        .and_then(|t| current.remove(t))
                        .ok_or_else(|| {
                            unsupported(format!("free of {tensor:?}, which is not reserved"))
                        })?;
                    raws[b].end = pos;
                    live.retain(|&u| u != b);
                    steps.push(Step::Free {
                        tensor: tensor.clone(),
                        buffer: b as u32,
                    });
                }
                Instruction::SpillOut { tensor, .. } | Instruction::SpillIn { tensor, .. } => {
                    return Err(unsupported(format!(
                        "the plan spills {tensor:?}; symbolic plans have no spills"
                    )));
                }
            }
        }
        // The full stacking relation: for each buffer, the overlapping buffers below it.
        let mut below: Vec<Vec<usize>> = vec![Vec::new(); raws.len()];
        for &(u, t) in &pairs {
            let (lo, hi) = if raws[u].offset < raws[t].offset {
                (u, t)
            } else {
                (t, u)
            };
            let (l, h) = (&raws[lo], &raws[hi]);
            if l.offset.saturating_add(l.size) > h.offset {
                return Err(unsupported(format!(
                    "the plan is invalid: {} and {} overlap at the max corner",
                    describe(concrete, l),
                    describe(concrete, h)
                )));
            }
            below[hi].push(lo);
        }
        // Transitive reduction by two-edge paths: u below t is implied when some w below t
        // lies above u (higher offset, overlapping lifetime).
        let overlap = |a: &Raw, b: &Raw| a.start < b.end && b.start < a.end;
        for list in &mut below {
            list.sort_unstable_by_key(|&u| std::cmp::Reverse(raws[u].offset));
            if list.len() > 4096 {
                continue;
            }
            let mut kept = Vec::new();
            for (i, &u) in list.iter().enumerate() {
                let implied = list[..i]
                    .iter()
                    .any(|&w| raws[w].offset > raws[u].offset && overlap(&raws[w], &raws[u]));
                if !implied {
                    kept.push(u);
                }
            }
            *list = kept;
        }
        // Topological order: increasing max-corner offset (edges go strictly upwards).
        let mut order: Vec<usize> = (0..raws.len()).collect();
        order.sort_by_key(|&b| (raws[b].offset, b));
        let mut rank = vec![0u32; raws.len()];
        for (r, &b) in order.iter().enumerate() {
            rank[b] = r as u32;
        }
        let buffers = order
            .iter()
            .map(|&b| {
                let r = &raws[b];
                let (size, alignment) = match (r.tensor, r.workspace_of) {
                    (Some(t), _) => (
                        poly(&graph.sizes, t.index(), "tensor")?,
                        concrete.tensor(t).alignment,
                    ),
                    (None, Some(k)) => (poly(&graph.workspaces, k, "op")?, concrete.alignment),
                    (None, None) => (Poly::constant(r.size), concrete.alignment),
                };
                let mut below: Vec<u32> = below[b].iter().map(|&u| rank[u]).collect();
                below.sort_unstable();
                Ok(BufferTemplate {
                    tensor: r.tensor.map(|t| concrete.tensor(t).name.clone()),
                    workspace_of: r.workspace_of.map(|k| concrete.ops[k].name.clone()),
                    size,
                    alignment,
                    below,
                })
            })
            .collect::<Result<Vec<_>, SymbolicError>>()?;
        for s in &mut steps {
            match s {
                Step::Alloc { buffer, .. } | Step::Free { buffer, .. } => {
                    *buffer = rank[*buffer as usize]
                }
                Step::Exec {
                    workspace_buffer: Some(buffer),
                    ..
                } => *buffer = rank[*buffer as usize],
                Step::Exec { .. } => {}
            }
        }
        let mut slots = plan.weights.clone();
        slots.sort_by_key(|w| w.offset);
        let weights = slots
            .iter()
            .map(|w| {
                let t = *tensor_ids
                    .get(w.tensor.as_str())
                    .ok_or_else(|| unsupported(format!("unknown weight {:?}", w.tensor)))?;
                Ok(WeightTemplate {
                    tensor: w.tensor.clone(),
                    size: poly(&graph.sizes, t.index(), "tensor")?,
                    alignment: concrete.tensor(t).alignment,
                })
            })
            .collect::<Result<Vec<_>, SymbolicError>>()?;
        SymbolicPlan::from_doc(SymbolicPlanDoc {
            format: SYMBOLIC_PLAN_FORMAT.to_string(),
            graph: concrete.name.clone(),
            symbols: graph.symbols.clone(),
            max_corner_peak_bytes: plan.stats.peak_bytes,
            weights,
            buffers,
            instructions: steps,
            split: None,
        })
    }

    /// Checks a document's structure (module doc) and prepares its polynomials.
    pub fn from_doc(doc: SymbolicPlanDoc) -> Result<SymbolicPlan, SymbolicError> {
        let bad = |m: String| SymbolicError::Document(m);
        if doc.format != SYMBOLIC_PLAN_FORMAT {
            return Err(bad(format!(
                "format is {:?}, expected \"{SYMBOLIC_PLAN_FORMAT}\"",
                doc.format
            )));
        }
        for (name, r) in &doc.symbols {
            if !super::expr::is_symbol_name(name) || r.min < 1 || r.min > r.max {
                return Err(bad(format!(
                    "symbol {name:?} has a bad name or range {}..={}",
                    r.min, r.max
                )));
            }
        }
        let top = check_template(
            &doc.symbols,
            "",
            &doc.weights,
            &doc.buffers,
            &doc.instructions,
        )?;
        let mut pieces = Vec::new();
        let mut split_index = 0;
        if let Some(split) = &doc.split {
            let (index, range) = doc
                .symbols
                .iter()
                .enumerate()
                .find(|(_, (name, _))| **name == split.symbol)
                .map(|(i, (_, r))| (i, *r))
                .ok_or_else(|| {
                    bad(format!(
                        "split symbol {:?} is not declared in \"symbols\"",
                        split.symbol
                    ))
                })?;
            split_index = index;
            if split.pieces.is_empty() {
                return Err(bad("split has no pieces; omit \"split\" instead".into()));
            }
            let mut next = range.min;
            for (k, p) in split.pieces.iter().enumerate() {
                if p.range.min != next || p.range.max < p.range.min || p.range.max >= range.max {
                    return Err(bad(format!(
                        "piece {k} has range {}..={} of {:?}; pieces must be sorted and \
                         contiguous from {} (this one starting at {next}) and end below the \
                         max {}, which the top-level template serves",
                        p.range.min, p.range.max, split.symbol, range.min, range.max
                    )));
                }
                next = p.range.max + 1;
                pieces.push(check_template(
                    &doc.symbols,
                    &format!("piece {k}: "),
                    &p.weights,
                    &p.buffers,
                    &p.instructions,
                )?);
            }
        }
        Ok(SymbolicPlan {
            doc,
            top,
            pieces,
            split_index,
        })
    }

    /// The template serving the resolved binding `vals`: the first piece whose sub-range holds
    /// the split symbol's value, else the top level.
    fn template(&self, vals: &[u64]) -> TemplateRef<'_> {
        if let Some(split) = &self.doc.split {
            let v = vals.get(self.split_index).copied().unwrap_or(0);
            for (p, c) in split.pieces.iter().zip(&self.pieces) {
                if v <= p.range.max {
                    return TemplateRef {
                        weights: &p.weights,
                        buffers: &p.buffers,
                        instructions: &p.instructions,
                        compiled: c,
                    };
                }
            }
        }
        TemplateRef {
            weights: &self.doc.weights,
            buffers: &self.doc.buffers,
            instructions: &self.doc.instructions,
            compiled: &self.top,
        }
    }

    /// The split symbol and its pieces' sub-ranges followed by the top-level template's
    /// sub-range; `None` for a one-piece plan.
    pub fn pieces(&self) -> Option<(&str, Vec<SymbolRange>)> {
        let split = self.doc.split.as_ref()?;
        let full = self.doc.symbols.get(&split.symbol)?;
        let mut ranges: Vec<SymbolRange> = split.pieces.iter().map(|p| p.range).collect();
        let lo = ranges.last().map_or(full.min, |r| r.max + 1);
        ranges.push(SymbolRange {
            min: lo,
            max: full.max,
        });
        Some((split.symbol.as_str(), ranges))
    }

    /// The document.
    pub fn doc(&self) -> &SymbolicPlanDoc {
        &self.doc
    }

    /// The declared symbols.
    pub fn symbols(&self) -> &Symbols {
        &self.doc.symbols
    }

    /// Number of stacking edges (after the reduction).
    pub fn edges(&self) -> usize {
        self.doc.buffers.iter().map(|b| b.below.len()).sum()
    }

    /// Parses a memplan-symbolic-plan/1 document and checks its structure.
    pub fn parse(text: &str) -> Result<SymbolicPlan, SymbolicError> {
        let doc: SymbolicPlanDoc =
            crate::json_path::from_str(text).map_err(
                |e| match crate::json_path::declared_format(text)
                    .filter(|f| f != SYMBOLIC_PLAN_FORMAT)
                {
                    Some(found) => SymbolicError::Document(format!(
                        "format is {found:?}, expected \"{SYMBOLIC_PLAN_FORMAT}\"{}",
                        crate::json_path::kind_hint(&found)
                    )),
                    None => SymbolicError::Document(format!(
                        "JSON error at line {}, column {}: {}",
                        e.line, e.column, e.message
                    )),
                },
            )?;
        SymbolicPlan::from_doc(doc)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising these plain types cannot fail.
        serde_json::to_string_pretty(&self.doc).unwrap_or_default()
    }

    /// The ordinary memplan-plan/1 plan at `binding`, in one pass over the buffers and one
    /// over the instructions (module doc). A missing, unknown or out-of-range symbol value is
    /// an error naming the symbol and its range.
    pub fn instantiate(&self, binding: &Binding) -> Result<Plan, SymbolicError> {
        let vals = binding.resolve(&self.doc.symbols)?;
        let t = self.template(&vals);
        let overflow = |what: String| SymbolicError::Overflow {
            what,
            binding: binding.to_string(),
        };
        let (size, off, peak) = stack(t, &vals, binding)?;
        let mut weights = Vec::with_capacity(t.weights.len());
        let mut weights_bytes = 0u64;
        for (w, c) in t.weights.iter().zip(&t.compiled.weight_sizes) {
            let what = || overflow(format!("weight {:?}", w.tensor));
            let s = c.eval(&vals).ok_or_else(what)?;
            let o = align_up(weights_bytes, w.alignment).ok_or_else(what)?;
            weights_bytes = o.checked_add(s).ok_or_else(what)?;
            weights.push(WeightSlot {
                tensor: w.tensor.clone(),
                offset: o,
            });
        }
        let mut instructions = Vec::with_capacity(t.instructions.len());
        let (mut live, mut load) = (0u64, 0u64);
        for s in t.instructions {
            instructions.push(match s {
                Step::Alloc {
                    tensor,
                    buffer,
                    mem_id,
                } => {
                    let b = *buffer as usize;
                    live = live.saturating_add(size[b]);
                    load = load.max(live);
                    Instruction::Alloc {
                        tensor: tensor.clone(),
                        offset: off[b],
                        mem_id: *mem_id,
                        inplace_of: None,
                    }
                }
                Step::Exec {
                    node,
                    workspace_buffer,
                    algo,
                } => {
                    let ws = workspace_buffer.map(|b| b as usize);
                    load = load.max(live.saturating_add(ws.map_or(0, |b| size[b])));
                    Instruction::Exec {
                        stream: None,
                        node: node.clone(),
                        workspace_offset: ws.map(|b| off[b]),
                        algo: algo.clone(),
                    }
                }
                Step::Free { tensor, buffer } => {
                    live = live.saturating_sub(size[*buffer as usize]);
                    Instruction::Free {
                        stream: None,
                        tensor: tensor.clone(),
                    }
                }
            });
        }
        let status = if peak <= load {
            PlanStatus::Optimal
        } else {
            PlanStatus::Feasible
        };
        Ok(Plan {
            format: PLAN_FORMAT.to_string(),
            graph: self.doc.graph.clone(),
            arena_bytes: peak,
            weights_bytes,
            host_bytes: 0,
            weights,
            instructions,
            stats: PlanStats {
                peak_bytes: peak,
                lower_bound_bytes: load,
                method: METHOD.to_string(),
                status: Some(status),
                gap: (peak > 0).then(|| PlanStats::gap_of(peak, load)),
                load_bytes: Some(load),
                ..PlanStats::default()
            },
            rewritten_graph: None,
            rewrites: Vec::new(),
        })
    }

    /// The instantiated peak (arena bytes) at `binding`, without building the plan: one pass
    /// over the buffers.
    pub fn peak_at(&self, binding: &Binding) -> Result<u64, SymbolicError> {
        let vals = binding.resolve(&self.doc.symbols)?;
        Ok(stack(self.template(&vals), &vals, binding)?.2)
    }

    /// A few bindings to profile: the min corner, every symbol at 1/4, 1/2 and 3/4 of its
    /// range (rounded down), and the max corner, without repeats.
    pub fn profile_points(&self) -> Vec<Binding> {
        let mut out: Vec<Binding> = Vec::new();
        for (num, den) in [(0u64, 4u64), (1, 4), (2, 4), (3, 4), (4, 4)] {
            let b = Binding(
                self.doc
                    .symbols
                    .iter()
                    .map(|(s, r)| {
                        let span = (r.max - r.min) as u128;
                        (s.clone(), r.min + (span * num as u128 / den as u128) as u64)
                    })
                    .collect(),
            );
            if !out.contains(&b) {
                out.push(b);
            }
        }
        out
    }

    /// The instantiated peak at each of `points` next to the peak of a plan made for that
    /// binding alone (a fresh [`crate::pipeline::run`] on `graph` instantiated there, with
    /// `options`).
    pub fn peak_profile(
        &self,
        graph: &SymbolicGraph,
        points: &[Binding],
        options: &PipelineOptions,
    ) -> Result<PeakProfile, SymbolicError> {
        let mut out = Vec::with_capacity(points.len());
        for b in points {
            let plan = self.instantiate(b)?;
            let per = plan_at(graph, b, options)?.1.stats.peak_bytes;
            out.push(PeakPoint {
                binding: b.clone(),
                peak_bytes: plan.stats.peak_bytes,
                per_binding_bytes: per,
                ratio: if per == 0 {
                    1.0
                } else {
                    plan.stats.peak_bytes as f64 / per as f64
                },
                load_bytes: plan.stats.load_bytes.unwrap_or(0),
            });
        }
        let worst_ratio = out.iter().map(|p| p.ratio).reduce(f64::max).unwrap_or(1.0);
        Ok(PeakProfile {
            points: out,
            worst_ratio,
        })
    }
}

/// The offsets of a template's buffers at `vals` (module doc): sizes, offsets and the peak.
fn stack(
    t: TemplateRef<'_>,
    vals: &[u64],
    binding: &Binding,
) -> Result<(Vec<u64>, Vec<u64>, u64), SymbolicError> {
    let overflow = |what: String| SymbolicError::Overflow {
        what,
        binding: binding.to_string(),
    };
    let n = t.buffers.len();
    let mut size = vec![0u64; n];
    let mut off = vec![0u64; n];
    let mut peak = 0u64;
    for (i, (b, c)) in t.buffers.iter().zip(&t.compiled.buffer_sizes).enumerate() {
        let name = || {
            b.tensor.as_ref().map_or_else(
                || format!("op {:?} workspace", b.workspace_of.as_deref().unwrap_or("")),
                |t| format!("tensor {t:?}"),
            )
        };
        let s = c
            .eval(vals)
            .ok_or_else(|| overflow(format!("{} size", name())))?;
        let mut o = 0u64;
        for &u in &b.below {
            let u = u as usize;
            let top = off[u]
                .checked_add(size[u])
                .and_then(|e| align_up(e, b.alignment))
                .ok_or_else(|| overflow(format!("{} offset", name())))?;
            o = o.max(top);
        }
        let end = o
            .checked_add(s)
            .ok_or_else(|| overflow(format!("{} end", name())))?;
        size[i] = s;
        off[i] = o;
        peak = peak.max(end);
    }
    Ok((size, off, peak))
}

/// Checks one template's structure (module doc) and compiles its sizes; `label` prefixes
/// messages (`"piece 2: "`).
fn check_template(
    symbols: &Symbols,
    label: &str,
    weights: &[WeightTemplate],
    buffers: &[BufferTemplate],
    instructions: &[Step],
) -> Result<CompiledTemplate, SymbolicError> {
    let bad = |m: String| SymbolicError::Document(format!("{label}{m}"));
    let n = buffers.len();
    let mut buffer_sizes = Vec::with_capacity(n);
    for (i, b) in buffers.iter().enumerate() {
        let what = || {
            b.tensor
                .as_deref()
                .or(b.workspace_of.as_deref())
                .unwrap_or("?")
                .to_string()
        };
        if b.tensor.is_some() == b.workspace_of.is_some() {
            return Err(bad(format!(
                "buffer {i} must name exactly one of tensor and workspace_of"
            )));
        }
        if !b.alignment.is_power_of_two() {
            return Err(bad(format!(
                "buffer {i} ({}) alignment {} is not a power of two",
                what(),
                b.alignment
            )));
        }
        if let Some(&u) = b.below.iter().find(|&&u| u as usize >= i) {
            return Err(bad(format!(
                "buffer {i} ({}) lists buffer {u} below it; below lists name earlier buffers only",
                what()
            )));
        }
        buffer_sizes.push(
            Compiled::new(&b.size, symbols)
                .map_err(|m| bad(format!("buffer {i} ({}) size: {m}", what())))?,
        );
    }
    let mut weight_sizes = Vec::with_capacity(weights.len());
    for w in weights {
        if !w.alignment.is_power_of_two() {
            return Err(bad(format!(
                "weight {:?} alignment {} is not a power of two",
                w.tensor, w.alignment
            )));
        }
        weight_sizes.push(
            Compiled::new(&w.size, symbols)
                .map_err(|m| bad(format!("weight {:?} size: {m}", w.tensor)))?,
        );
    }
    for (pos, s) in instructions.iter().enumerate() {
        let b = match s {
            Step::Alloc { buffer, .. } | Step::Free { buffer, .. } => Some(*buffer),
            Step::Exec {
                workspace_buffer, ..
            } => *workspace_buffer,
        };
        if let Some(b) = b {
            if b as usize >= n {
                return Err(bad(format!(
                    "instruction {pos} names buffer {b} of {n} buffers"
                )));
            }
        }
    }
    Ok(CompiledTemplate {
        buffer_sizes,
        weight_sizes,
    })
}

/// Entry `i` of a symbolic graph's size list: an error when the symbolic graph is not the one
/// the concrete graph was instantiated from.
fn poly(list: &[Poly], i: usize, what: &str) -> Result<Poly, SymbolicError> {
    list.get(i).cloned().ok_or_else(|| {
        SymbolicError::Unsupported(format!(
            "{what} #{i} is not in the symbolic graph (the plan is for another graph)"
        ))
    })
}

fn describe(g: &Graph, r: &Raw) -> String {
    match (r.tensor, r.workspace_of) {
        (Some(t), _) => format!("tensor {:?}", g.tensor(t).name),
        (None, Some(k)) => format!("op {:?}'s workspace", g.ops[k].name),
        (None, None) => "a buffer".into(),
    }
}
