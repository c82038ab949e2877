//! Convolution algorithms: the workspace and modelled time of each implementation of a
//! conv2d op, and the per-conv choice (`memplan plan --conv-algos auto|fastest|min-memory`).
//!
//! **Workspace** (f32 elements, 4 B each; `cg = C/groups`, `P = N·⌈Ho/m⌉·⌈Wo/m⌉`):
//! - `direct`: 0 (the loops read the input in place).
//! - `im2col`: `cg·Kh·Kw × N·Ho·Wo`, one group's column matrix at a time (groups run one
//!   after another and reuse it). A pointwise conv (1×1, stride 1, no padding) needs none:
//!   its input already is the column matrix (what cuDNN's GEMM paths and our CPU executor
//!   do).
//! - `winograd_f2` / `winograd_f4`, F(m×m, 3×3) with m = 2 / 4, only for 3×3 convs with
//!   stride 1, dilation 1 and one group: tile size `α = m + r − 1` (r = 3), transformed input
//!   `α²·C·P`, transformed filter `α²·C·K`, transformed output `α²·K·P` (Lavin & Gray,
//!   "Fast Algorithms for Convolutional Neural Networks", CVPR 2016, §4–5).
//!
//! - Chunked im2col / Winograd (`im2col/4`, `winograd_f4/2`, …, 2–32 chunks): the columns
//!   (`N·Ho·Wo`) or tiles (`P`) are processed one chunk after another in a workspace of one
//!   chunk: im2col `cg·Kh·Kw × ⌈N·Ho·Wo/chunks⌉`, Winograd the whole transformed filter plus
//!   `α²·(C + K)·⌈P/chunks⌉` (what workspace-limited cuDNN algorithm selection does). They
//!   give the budget a fine-grained trade of workspace for time.
//!
//! FFT is not modelled (cuDNN's FFT paths need workspaces of the padded spectra and win only
//! for large kernels, which the zoo's nets do not have).
//!
//! **Speed model** (µs, from the op's flops `F` — the graph's, else `2·N·K·Ho·Wo·cg·Kh·Kw` —
//! and the [`DeviceProfile`]; `peak` = fp32 or 16-bit throughput as in [`DeviceProfile::op_us`],
//! `bw` = memory bandwidth, `io` = input and output bytes):
//! - `direct`: `max(F / (DIRECT_EFFICIENCY·peak), io/bw)`;
//! - `im2col`: `max(F / (GEMM_EFFICIENCY·peak), io/bw) + 2·workspace/bw` (the column matrix is
//!   written once and read once by the GEMM);
//! - Winograd: `max(F / (reduction·GEMM_EFFICIENCY·peak), io/bw) + 2·workspace/bw`, the
//!   multiply reduction being `m²r²/α²` = 2.25 (F2) and 4 (F4) (Lavin & Gray, Table 1); the
//!   transforms are memory-bound and modelled as the traffic of the transformed tensors;
//! - chunked: the same, plus [`CHUNK_US`] per extra chunk.
//!
//! Only options on the Pareto front (less workspace ⇒ more time) are offered.
//!
//! Figures: [`GEMM_EFFICIENCY`] = 0.75 — large SGEMMs reach 70–80 % of a GPU's fp32 peak
//! (cuBLAS on V100/A100/H100 in NVIDIA's published sgemm results); [`DIRECT_EFFICIENCY`] =
//! 0.40 — an assumption: workspace-free (direct / implicit-GEMM) convolution reuses operands
//! less than a blocked GEMM, and Chetlur et al. ("cuDNN", 2014, §4) report their
//! workspace-free implicit GEMM slower than the explicit im2col path on most layers. These
//! are modelling assumptions, not measurements: with a measured `time_us` the op's time is
//! taken as that of its fastest algorithm and the others are scaled by the model's ratio.
//!
//! A graph's explicit `workspace` > 0 on a conv without an `algo` attribute overrides the
//! model (the op keeps it; algorithm "given"). The choice is written into the graph: each
//! modelled conv gets `attrs.algo` and its `workspace`; plans record the algorithm on exec
//! instructions (`"algo"`), and the executor's conv kernel runs the named algorithm.
//!
//! **auto**: plan the min-memory choice, then upgrade each conv to its fastest algorithm
//! whose workspace fits in a free range of that plan's arena at the conv's exec (below the
//! plan's peak), in order of modelled time saved. A workspace lives only during its own exec,
//! so the upgrades never interact: the greedy is optimal for that placement and the peak
//! stays the min-memory plan's. One plan plus O(instructions · live tensors) work.

pub use crate::cost::{algo_us, chosen_us, CHUNK_US, DIRECT_EFFICIENCY, GEMM_EFFICIENCY};
pub use crate::ops::{
    algo_of, applies, choice_of, chunk_units, modelled_conv, option_name, parse_option_name,
    winograd_parts, workspace_bytes, workspace_elems, workspace_elems_chunked, ConvAlgo, ALGO_ATTR,
    CHUNKS,
};

use crate::cost::DeviceProfile;
use crate::graph::{Graph, Op, TensorKind};
use crate::ops::{conv_workspace, is_conv_type, is_conv_type_name, ELEM};
use crate::plan::{Instruction, Plan};
use crate::planner::{PlanError, PlanOptions};
use std::collections::BTreeMap;
use thiserror::Error;

/// How convs pick their algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConvAlgoMode {
    /// The fastest per conv that keeps the planned peak at the min-memory plan's.
    Auto,
    /// The fastest per conv.
    Fastest,
    /// The least workspace per conv.
    MinMemory,
    /// No choice: convs keep the graph's own workspace and the executor's default kernel
    /// (runs reproduce the unrewritten graph's arithmetic bit for bit).
    Off,
}

impl ConvAlgoMode {
    /// Every mode.
    pub const ALL: [ConvAlgoMode; 4] = [
        ConvAlgoMode::Auto,
        ConvAlgoMode::Fastest,
        ConvAlgoMode::MinMemory,
        ConvAlgoMode::Off,
    ];

    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgoMode::Auto => "auto",
            ConvAlgoMode::Fastest => "fastest",
            ConvAlgoMode::MinMemory => "min-memory",
            ConvAlgoMode::Off => "off",
        }
    }

    /// The mode of a CLI name.
    pub fn from_name(name: &str) -> Option<ConvAlgoMode> {
        ConvAlgoMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Why an algorithm choice cannot be applied.
#[derive(Debug, Error)]
pub enum ConvAlgoError {
    /// A plan names an algorithm that does not exist.
    #[error("exec of {node:?} names unknown conv algorithm {algo:?} (known: direct, im2col, winograd_f2, winograd_f4)")]
    Unknown {
        /// The op.
        node: String,
        /// The name given.
        algo: String,
    },
    /// A plan names an algorithm for an op it does not apply to.
    #[error("exec of {node:?} names conv algorithm {algo:?}, which does not apply to that op")]
    NotApplicable {
        /// The op.
        node: String,
        /// The algorithm.
        algo: String,
    },
    /// Two execs of one op name different algorithms.
    #[error("execs of {node:?} name different conv algorithms: {first:?}, then {then:?}")]
    Inconsistent {
        /// The op.
        node: String,
        /// The algorithm its first exec names.
        first: String,
        /// The other algorithm a later exec names.
        then: String,
    },
    /// Planning failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// One implementation of one conv: its workspace and modelled time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlgoOption {
    /// The algorithm.
    pub algo: ConvAlgo,
    /// Chunks the columns (im2col) or tiles (Winograd) are processed in, one after another
    /// in a workspace of one chunk (1: unchunked).
    pub chunks: u32,
    /// Workspace bytes.
    pub workspace: u64,
    /// Modelled time (µs).
    pub us: f64,
}

impl AlgoOption {
    /// The option's name: the algorithm's, with `/chunks` when chunked (`im2col/4`).
    pub fn name(&self) -> String {
        option_name(self.algo, self.chunks)
    }
}

/// Every algorithm of a modelled conv that is not dominated (another with no more workspace
/// and less time, or equal time and less workspace), by workspace ascending (so by time
/// descending). Empty for ops the model does not cover.
pub fn options(profile: &DeviceProfile, graph: &Graph, op: &Op) -> Vec<AlgoOption> {
    let Some(c) = modelled_conv(graph, op) else {
        return Vec::new();
    };
    let mut all: Vec<AlgoOption> = ConvAlgo::ALL
        .into_iter()
        .flat_map(|algo| CHUNKS.into_iter().map(move |chunks| (algo, chunks)))
        .filter_map(|(algo, chunks)| {
            Some(AlgoOption {
                algo,
                chunks,
                workspace: workspace_elems_chunked(&c, algo, chunks)? * ELEM,
                us: algo_us(profile, graph, op, &c, algo, chunks),
            })
        })
        .collect();
    all.sort_by(|a, b| {
        a.workspace
            .cmp(&b.workspace)
            .then(a.us.total_cmp(&b.us))
            .then(a.algo.cmp(&b.algo))
            .then(a.chunks.cmp(&b.chunks))
    });
    let mut front: Vec<AlgoOption> = Vec::new();
    for o in all {
        if front.last().is_none_or(|l| o.us < l.us) {
            front.push(o);
        }
    }
    front
}

/// The per-op choice of a fixed mode (`Fastest`: the last Pareto option; otherwise the
/// first, the least workspace), keyed by op index.
pub fn pick(profile: &DeviceProfile, graph: &Graph, fastest: bool) -> BTreeMap<usize, AlgoOption> {
    let mut out = BTreeMap::new();
    for (k, op) in graph.ops.iter().enumerate() {
        let opts = options(profile, graph, op);
        let o = if fastest { opts.last() } else { opts.first() };
        if let Some(&o) = o {
            out.insert(k, o);
        }
    }
    out
}

/// The per-op choice when workspaces get their own region (`memplan plan --tiers`), where
/// the temporaries region is the largest workspace: `Fastest` and `MinMemory` as in [`pick`];
/// `Auto` takes each conv's fastest option whose workspace fits the region the min-memory
/// choice needs (the largest workspace of any op under it), so the region does not grow.
pub fn pick_for_tiers(
    profile: &DeviceProfile,
    graph: &Graph,
    mode: ConvAlgoMode,
) -> BTreeMap<usize, AlgoOption> {
    match mode {
        ConvAlgoMode::Off => BTreeMap::new(),
        ConvAlgoMode::Fastest => pick(profile, graph, true),
        ConvAlgoMode::MinMemory => pick(profile, graph, false),
        ConvAlgoMode::Auto => {
            let least = pick(profile, graph, false);
            let region = graph
                .ops
                .iter()
                .enumerate()
                .map(|(k, op)| least.get(&k).map_or(op.workspace, |o| o.workspace))
                .max()
                .unwrap_or(0);
            let mut out = BTreeMap::new();
            for (k, op) in graph.ops.iter().enumerate() {
                // Options are by workspace ascending, time descending: the last that fits.
                let fitting = options(profile, graph, op)
                    .into_iter()
                    .take_while(|o| o.workspace <= region)
                    .last();
                if let Some(o) = fitting {
                    out.insert(k, o);
                }
            }
            out
        }
    }
}

/// `graph` with `algo` (unchunked) on every modelled conv it applies to, e.g. im2col
/// everywhere to give a graph exported without workspaces realistic ones.
pub fn with_algo(profile: &DeviceProfile, graph: &Graph, algo: ConvAlgo) -> Graph {
    let mut choice = BTreeMap::new();
    for (k, op) in graph.ops.iter().enumerate() {
        let Some(c) = modelled_conv(graph, op) else {
            continue;
        };
        if let Some(elems) = workspace_elems_chunked(&c, algo, 1) {
            choice.insert(
                k,
                AlgoOption {
                    algo,
                    chunks: 1,
                    workspace: elems * ELEM,
                    us: algo_us(profile, graph, op, &c, algo, 1),
                },
            );
        }
    }
    with_choice(graph, &choice)
}

/// `graph` with the chosen algorithms written in: `attrs.algo` and the workspace of each op.
pub fn with_choice(graph: &Graph, choice: &BTreeMap<usize, AlgoOption>) -> Graph {
    let mut g = graph.clone();
    for (&k, o) in choice {
        let Some(op) = g.ops.get_mut(k) else {
            continue;
        };
        let set = |attrs: &mut Option<serde_json::Value>| {
            let mut m = match attrs.take() {
                Some(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            m.insert(ALGO_ATTR.into(), o.name().into());
            *attrs = Some(serde_json::Value::Object(m));
        };
        match op.fused.as_mut() {
            Some(f)
                if f.members
                    .first()
                    .is_some_and(|m| is_conv_type_name(&m.op_type)) =>
            {
                // The conv member runs in a prefix of the fused op's workspace.
                set(&mut f.members[0].attrs);
                f.members[0].workspace = o.workspace;
                op.workspace = f.members.iter().map(|m| m.workspace).max().unwrap_or(0);
            }
            _ => {
                set(&mut op.attrs);
                op.workspace = o.workspace;
            }
        }
    }
    g
}

/// Counts of each conv's algorithm in `graph` (`given` for convs with a graph-given
/// workspace, `none` for convs outside the model), by name.
pub fn algo_mix(graph: &Graph) -> BTreeMap<String, usize> {
    let mut mix = BTreeMap::new();
    for op in graph.ops.iter().filter(|o| is_conv_type(o)) {
        let name = match algo_of(op) {
            Some(a) => a.name(),
            None if conv_workspace(op) > 0 => "given",
            None => "none",
        };
        *mix.entry(name.to_string()).or_insert(0) += 1;
    }
    mix
}

/// Sum of the modelled times of the graph's ops (µs).
pub fn total_us(profile: &DeviceProfile, graph: &Graph) -> f64 {
    graph.ops.iter().map(|op| profile.op_us(graph, op)).sum()
}

/// What [`choose_and_plan`] produced.
#[derive(Debug, Clone)]
pub struct Choice {
    /// The graph with the algorithms written in (the plan refers to it).
    pub graph: Graph,
    /// The plan.
    pub plan: Plan,
    /// Convs upgraded by `auto` above their min-memory algorithm.
    pub upgraded: usize,
}

/// Chooses every conv's algorithm by `mode` and plans the result (module doc).
pub fn choose_and_plan(
    graph: &Graph,
    mode: ConvAlgoMode,
    profile: &DeviceProfile,
    opts: &PlanOptions,
) -> Result<Choice, ConvAlgoError> {
    let fixed = match mode {
        ConvAlgoMode::Off => BTreeMap::new(),
        _ => pick(profile, graph, mode == ConvAlgoMode::Fastest),
    };
    let g = with_choice(graph, &fixed);
    let plan = crate::planner::plan(&g, opts)?;
    if mode != ConvAlgoMode::Auto {
        return Ok(Choice {
            graph: g,
            plan,
            upgraded: 0,
        });
    }
    let (g, plan, upgraded) = upgrade_in_place(profile, &g, plan);
    Ok(Choice {
        graph: g,
        plan,
        upgraded,
    })
}

/// Free ranges `[lo, hi)` below `limit` between the reserved `ranges`.
fn free_ranges(ranges: &BTreeMap<String, (u64, u64)>, limit: u64) -> Vec<(u64, u64)> {
    let mut rs: Vec<(u64, u64)> = ranges.values().copied().collect();
    rs.sort_unstable();
    let mut out = Vec::new();
    let mut at = 0u64;
    for (lo, hi) in rs {
        if lo > at {
            out.push((at, lo));
        }
        at = at.max(hi);
    }
    if limit > at {
        out.push((at, limit));
    }
    out
}

/// The lowest aligned offset of the smallest free range that holds `size` bytes.
fn best_fit(free: &[(u64, u64)], size: u64, align: u64) -> Option<u64> {
    free.iter()
        .filter_map(|&(lo, hi)| {
            let at = memplan_solver::align_up(lo, align.max(1))?;
            (at.checked_add(size)? <= hi).then_some((hi - lo, at))
        })
        .min()
        .map(|(_, at)| at)
}

/// `auto`'s upgrade step on a plan of `g` (module doc): each conv executed once gets the
/// fastest algorithm whose workspace fits a free range below the plan's peak at its exec.
/// Returns the graph, the plan (same peak) and how many convs were upgraded.
pub fn upgrade_in_place(
    profile: &DeviceProfile,
    g: &Graph,
    mut plan: Plan,
) -> (Graph, Plan, usize) {
    let ids = g.op_indices();
    let limit = plan.arena_bytes;
    let mut execs = vec![0usize; g.ops.len()];
    for ins in &plan.instructions {
        if let Instruction::Exec { node, .. } = ins {
            if let Some(&k) = ids.get(node.as_str()) {
                execs[k] += 1;
            }
        }
    }
    // Candidates: (time saved, op, option, offset), found by replaying the reservations.
    let mut found: Vec<(f64, usize, AlgoOption, u64, usize)> = Vec::new();
    let mut ranges: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let size_of = |name: &str| g.tensor_by_name(name).map_or(0, |t| g.tensor(t).size);
    for (i, ins) in plan.instructions.iter().enumerate() {
        match ins {
            Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. } => {}
            Instruction::Alloc { tensor, offset, .. }
            | Instruction::SpillIn { tensor, offset, .. } => {
                let is_arena = g
                    .tensor_by_name(tensor)
                    .is_some_and(|t| g.tensor(t).kind != TensorKind::Weight);
                if is_arena {
                    ranges.insert(tensor.clone(), (*offset, offset + size_of(tensor)));
                }
            }
            Instruction::Free { tensor, .. } | Instruction::SpillOut { tensor, .. } => {
                ranges.remove(tensor);
            }
            Instruction::Exec { node, .. } => {
                let Some(&k) = ids.get(node.as_str()) else {
                    continue;
                };
                if execs[k] != 1 {
                    continue;
                }
                let opts = options(profile, g, &g.ops[k]);
                let Some(cur) = opts
                    .iter()
                    .find(|o| Some((o.algo, o.chunks)) == choice_of(&g.ops[k]))
                else {
                    continue;
                };
                let free = free_ranges(&ranges, limit);
                // Fastest first: the Pareto list is by time descending.
                for o in opts.iter().rev() {
                    if o.us >= cur.us {
                        break;
                    }
                    let at = if o.workspace == 0 {
                        Some(0)
                    } else {
                        best_fit(&free, o.workspace, g.alignment)
                    };
                    if let Some(at) = at {
                        found.push((cur.us - o.us, k, *o, at, i));
                        break;
                    }
                }
            }
        }
    }
    // In order of time saved (ties: op index); each op appears once, and the workspaces
    // live at different execs, so every upgrade found is kept.
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut choice = BTreeMap::new();
    for &(_, k, o, at, i) in &found {
        choice.insert(k, o);
        if let Some(Instruction::Exec {
            workspace_offset,
            algo,
            ..
        }) = plan.instructions.get_mut(i)
        {
            *workspace_offset = (o.workspace > 0).then_some(at);
            *algo = Some(o.name());
        }
    }
    (with_choice(g, &choice), plan, found.len())
}

/// The graph a plan refers to: `graph` with the algorithm each exec names (its `algo`
/// field) written in, as [`with_choice`] does. Execs without one leave their op alone.
pub fn graph_for_plan(
    profile: &DeviceProfile,
    graph: &Graph,
    plan: &Plan,
) -> Result<Graph, ConvAlgoError> {
    let ids = graph.op_indices();
    let mut choice: BTreeMap<usize, AlgoOption> = BTreeMap::new();
    for ins in &plan.instructions {
        let Instruction::Exec {
            node,
            algo: Some(name),
            ..
        } = ins
        else {
            continue;
        };
        let Some(&k) = ids.get(node.as_str()) else {
            continue;
        };
        let (algo, chunks) = parse_option_name(name).ok_or_else(|| ConvAlgoError::Unknown {
            node: node.clone(),
            algo: name.clone(),
        })?;
        let op = &graph.ops[k];
        let not_applicable = || ConvAlgoError::NotApplicable {
            node: node.clone(),
            algo: name.clone(),
        };
        let c = modelled_conv(graph, op).ok_or_else(not_applicable)?;
        let elems = workspace_elems_chunked(&c, algo, chunks).ok_or_else(not_applicable)?;
        let o = AlgoOption {
            algo,
            chunks,
            workspace: elems * ELEM,
            us: algo_us(profile, graph, op, &c, algo, chunks),
        };
        if let Some(prev) = choice
            .insert(k, o)
            .filter(|prev| (prev.algo, prev.chunks) != (algo, chunks))
        {
            return Err(ConvAlgoError::Inconsistent {
                node: node.clone(),
                first: prev.name(),
                then: name.clone(),
            });
        }
    }
    Ok(with_choice(graph, &choice))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Conv2d;

    fn conv_graph(x: [u64; 4], w: [u64; 4], y: [u64; 4], attrs: &str) -> Graph {
        let sz = |d: [u64; 4]| d.iter().product::<u64>() * 4;
        Graph::parse(&format!(
            r#"{{"format": "memplan-graph/1", "name": "g",
                "tensors": [
                  {{"name": "x", "size": {}, "shape": {:?}, "dtype": "f32", "kind": "input"}},
                  {{"name": "w", "size": {}, "shape": {:?}, "dtype": "f32", "kind": "weight"}},
                  {{"name": "y", "size": {}, "shape": {:?}, "dtype": "f32", "kind": "output"}}],
                "ops": [{{"name": "c", "type": "conv2d", "inputs": ["x", "w"], "outputs": ["y"],
                          "attrs": {attrs}}}]}}"#,
            sz(x),
            x,
            sz(w),
            w,
            sz(y),
            y
        ))
        .unwrap()
    }

    fn resnet_layer1() -> Graph {
        // resnet18 layer1 conv: [1, 64, 56, 56] * [64, 64, 3, 3], stride 1, padding 1.
        conv_graph(
            [1, 64, 56, 56],
            [64, 64, 3, 3],
            [1, 64, 56, 56],
            r#"{"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1}"#,
        )
    }

    fn shape(g: &Graph) -> Conv2d {
        modelled_conv(g, &g.ops[0]).unwrap()
    }

    #[test]
    fn im2col_workspace_is_the_column_matrix_of_one_group() {
        let g = resnet_layer1();
        let c = shape(&g);
        // (C/groups)·Kh·Kw × N·Ho·Wo = 64·3·3 × 1·56·56 = 576 × 3136 = 1_806_336 elements.
        assert_eq!(workspace_elems(&c, ConvAlgo::Im2col), Some(1_806_336));
        assert_eq!(workspace_bytes(&c, ConvAlgo::Im2col), Some(7_225_344));
        assert_eq!(workspace_elems(&c, ConvAlgo::Direct), Some(0));
        // Grouped, strided, batched: x [2, 8, 9, 9], w [6, 2, 3, 3], groups 4, stride 2,
        // padding 1 → Ho = Wo = (9 + 2 − 3)/2 + 1 = 5; (8/4)·3·3 × 2·5·5 = 18 × 50 = 900.
        let g = conv_graph(
            [2, 8, 9, 9],
            [8, 2, 3, 3],
            [2, 8, 5, 5],
            r#"{"stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "groups": 4}"#,
        );
        let c = shape(&g);
        assert_eq!(workspace_elems(&c, ConvAlgo::Im2col), Some(900));
        assert_eq!(workspace_elems(&c, ConvAlgo::WinogradF2), None);
    }

    #[test]
    fn chunked_workspaces_hold_one_chunk() {
        let c = shape(&resnet_layer1());
        // im2col in 4 chunks: 576 × ⌈3136/4⌉ = 576 × 784 = 451_584.
        assert_eq!(
            workspace_elems_chunked(&c, ConvAlgo::Im2col, 4),
            Some(451_584)
        );
        // F(4×4) in 4 chunks: filter 36·64·64 = 147_456, plus 36·(64 + 64)·⌈196/4⌉ =
        // 36·128·49 = 225_792 → 373_248.
        assert_eq!(
            workspace_elems_chunked(&c, ConvAlgo::WinogradF4, 4),
            Some(373_248)
        );
        // More chunks than tiles, and chunked direct, do not exist.
        assert_eq!(workspace_elems_chunked(&c, ConvAlgo::WinogradF4, 256), None);
        assert_eq!(parse_option_name("direct/2"), None);
        assert_eq!(parse_option_name("im2col/8"), Some((ConvAlgo::Im2col, 8)));
        assert_eq!(option_name(ConvAlgo::Im2col, 8), "im2col/8");
        assert_eq!(parse_option_name("im2col/0"), None);
    }

    #[test]
    fn a_pointwise_conv_needs_no_column_matrix() {
        let g = conv_graph(
            [1, 32, 7, 7],
            [16, 32, 1, 1],
            [1, 16, 7, 7],
            r#"{"stride": [1, 1], "padding": [0, 0]}"#,
        );
        assert_eq!(workspace_elems(&shape(&g), ConvAlgo::Im2col), Some(0));
    }

    #[test]
    fn winograd_workspaces_are_the_three_transformed_tensors() {
        let c = shape(&resnet_layer1());
        // F(2×2,3×3): α = 4, P = 1·⌈56/2⌉·⌈56/2⌉ = 784.
        // input 16·64·784 = 802_816, filter 16·64·64 = 65_536, output 16·64·784 = 802_816.
        assert_eq!(winograd_parts(&c, 2), (802_816, 65_536, 802_816));
        assert_eq!(workspace_elems(&c, ConvAlgo::WinogradF2), Some(1_671_168));
        // F(4×4,3×3): α = 6, P = ⌈56/4⌉² = 196.
        // input 36·64·196 = 451_584, filter 36·64·64 = 147_456, output 451_584.
        assert_eq!(workspace_elems(&c, ConvAlgo::WinogradF4), Some(1_050_624));
        // Odd output size rounds the tiles up: Ho = Wo = 7, m = 4 → P = 2·2 = 4 (batch 1),
        // C = 3, K = 5: 36·3·4 + 36·3·5 + 36·5·4 = 432 + 540 + 720 = 1692.
        let g = conv_graph(
            [1, 3, 7, 7],
            [5, 3, 3, 3],
            [1, 5, 7, 7],
            r#"{"stride": 1, "padding": 1}"#,
        );
        assert_eq!(
            workspace_elems(&shape(&g), ConvAlgo::WinogradF4),
            Some(1692)
        );
        // Stride 2 or dilation 2 rule Winograd out.
        let g = conv_graph(
            [1, 3, 8, 8],
            [5, 3, 3, 3],
            [1, 5, 4, 4],
            r#"{"stride": 2, "padding": 1}"#,
        );
        assert_eq!(workspace_elems(&shape(&g), ConvAlgo::WinogradF4), None);
        assert_eq!(ConvAlgo::WinogradF2.multiply_reduction(), 2.25);
        assert_eq!(ConvAlgo::WinogradF4.multiply_reduction(), 4.0);
    }

    #[test]
    fn the_speed_model_follows_the_documented_formulas() {
        let g = resnet_layer1();
        let op = &g.ops[0];
        let c = shape(&g);
        let p = DeviceProfile::h200();
        // F = 2·1·64·56·56·64·9 = 231_211_008 flops.
        let f = 231_211_008.0;
        let io_us = (802_816.0 * 2.0 + 147_456.0) / 4.8e12 * 1e6;
        let direct = f / (0.40 * 67e12) * 1e6;
        assert!(direct > io_us);
        assert!((algo_us(&p, &g, op, &c, ConvAlgo::Direct, 1) - direct).abs() < 1e-9);
        let im2col = f / (0.75 * 67e12) * 1e6 + 2.0 * 7_225_344.0 / 4.8e12 * 1e6;
        assert!((algo_us(&p, &g, op, &c, ConvAlgo::Im2col, 1) - im2col).abs() < 1e-9);
        let f4 = f / (4.0 * 0.75 * 67e12) * 1e6 + 2.0 * 4.0 * 1_050_624.0 / 4.8e12 * 1e6;
        assert!((algo_us(&p, &g, op, &c, ConvAlgo::WinogradF4, 1) - f4).abs() < 1e-9);
        // The Pareto front: direct (0 B, 8.6 µs), winograd_f4 in 4 chunks (1.49 MB,
        // 2.9 + 3 µs), in 2 (2.40 MB, 3.9 µs), unchunked (4.20 MB, 2.9 µs). F4 in 8 chunks
        // (2.9 + 7 µs) is slower than direct; F2 and im2col need more workspace than F4 at
        // the same chunk count and are slower, so they are dominated.
        let names: Vec<_> = options(&p, &g, op).iter().map(|o| o.name()).collect();
        assert_eq!(
            names,
            vec!["direct", "winograd_f4/4", "winograd_f4/2", "winograd_f4"]
        );
        // Each extra chunk costs CHUNK_US.
        let f4_4 = algo_us(&p, &g, op, &c, ConvAlgo::WinogradF4, 4);
        assert!((f4_4 - f4 - 3.0 * CHUNK_US).abs() < 1e-9);
        // A measured time is the fastest algorithm's; direct is scaled by the model ratio.
        let mut g2 = g.clone();
        g2.ops[0].time_us = Some(10.0);
        let d = algo_us(&p, &g2, &g2.ops[0], &c, ConvAlgo::Direct, 1);
        assert!((d - 10.0 * direct / f4).abs() < 1e-9);
    }

    #[test]
    fn a_given_workspace_overrides_the_model() {
        let mut g = resnet_layer1();
        g.ops[0].workspace = 1000;
        assert!(options(&DeviceProfile::h200(), &g, &g.ops[0]).is_empty());
        assert_eq!(algo_mix(&g).get("given"), Some(&1));
    }

    #[test]
    fn fixed_modes_write_algorithm_and_workspace_into_the_graph() {
        let g = resnet_layer1();
        let p = DeviceProfile::h200();
        let fast = with_choice(&g, &pick(&p, &g, true));
        assert_eq!(algo_of(&fast.ops[0]), Some(ConvAlgo::WinogradF4));
        assert_eq!(fast.ops[0].workspace, 4 * 1_050_624);
        let small = with_choice(&g, &pick(&p, &g, false));
        assert_eq!(algo_of(&small.ops[0]), Some(ConvAlgo::Direct));
        assert_eq!(small.ops[0].workspace, 0);
        assert!(total_us(&p, &fast) < total_us(&p, &small));
        // Written graphs parse back with the same choice.
        let back = Graph::parse(&fast.to_json()).unwrap();
        assert_eq!(algo_of(&back.ops[0]), Some(ConvAlgo::WinogradF4));
        assert_eq!(back.ops[0].workspace, fast.ops[0].workspace);
    }

    #[test]
    fn off_leaves_the_graph_as_it_is() {
        let g = resnet_layer1();
        let p = DeviceProfile::h200();
        let c = choose_and_plan(&g, ConvAlgoMode::Off, &p, &PlanOptions::default()).unwrap();
        assert_eq!(c.graph, g);
        assert!(pick_for_tiers(&p, &g, ConvAlgoMode::Off).is_empty());
        assert_eq!(ConvAlgoMode::from_name("off"), Some(ConvAlgoMode::Off));
    }

    #[test]
    fn under_tiers_auto_upgrades_within_the_min_memory_temporaries_region() {
        let mut g = resnet_layer1();
        let p = DeviceProfile::h200();
        // Alone, the conv's min-memory workspace is 0: auto cannot upgrade it.
        let alone = pick_for_tiers(&p, &g, ConvAlgoMode::Auto);
        assert_eq!(alone[&0].workspace, 0);
        assert_eq!(
            pick_for_tiers(&p, &g, ConvAlgoMode::Fastest)[&0],
            pick(&p, &g, true)[&0]
        );
        // Another op's given workspace sizes the region: the conv takes the fastest option
        // that fits in it, and nothing larger.
        let opts = options(&p, &g, &g.ops[0]);
        let room = opts[opts.len() - 2].workspace;
        let y = g.tensor_by_name("y").unwrap();
        let mut z = g.tensor(y).clone();
        z.name = "z".into();
        g.tensors[y.index()].kind = crate::TensorKind::Activation;
        g.tensors.push(z);
        let mut extra = g.ops[0].clone();
        extra.name = "scratchy".into();
        extra.op_type = "custom".into();
        extra.inputs = vec![y];
        extra.outputs = vec![crate::TensorId(g.tensors.len() as u32 - 1)];
        extra.workspace = room;
        extra.attrs = None;
        g.ops.push(extra);
        let g = g.rebuilt().unwrap();
        let chosen = pick_for_tiers(&p, &g, ConvAlgoMode::Auto);
        assert_eq!(chosen[&0], opts[opts.len() - 2]);
        assert!(chosen[&0].us < opts[0].us);
    }

    #[test]
    fn auto_upgrades_only_into_free_memory_below_the_min_memory_peak() {
        let g = resnet_layer1();
        let p = DeviceProfile::h200();
        // One conv alone: nothing is free below the min-memory peak (x and y), no upgrade.
        let c = choose_and_plan(&g, ConvAlgoMode::Auto, &p, &PlanOptions::default()).unwrap();
        assert_eq!(c.upgraded, 0);
        let m = choose_and_plan(&g, ConvAlgoMode::MinMemory, &p, &PlanOptions::default()).unwrap();
        assert_eq!(c.plan.arena_bytes, m.plan.arena_bytes);
        let f = choose_and_plan(&g, ConvAlgoMode::Fastest, &p, &PlanOptions::default()).unwrap();
        assert!(f.plan.arena_bytes > m.plan.arena_bytes);
        crate::validate(&f.graph, &f.plan, None).unwrap();
        // The plan names the algorithm, and the graph is recovered from it.
        let back = graph_for_plan(&p, &g, &f.plan).unwrap();
        assert_eq!(back, f.graph);
    }

    #[test]
    fn auto_uses_a_dead_tensor_s_bytes_for_a_workspace() {
        // x → big (1×1 conv... as a plain op) → small; then a 3×3 conv on small while big's
        // bytes are free: the conv's workspace fits there.
        let g = Graph::parse(
            r#"{"format": "memplan-graph/1", "name": "g", "alignment": 256,
                "tensors": [
                  {"name": "x", "size": 40000000, "kind": "input"},
                  {"name": "s", "size": 256, "shape": [1, 4, 8, 2], "dtype": "f32",
                   "kind": "activation"},
                  {"name": "w", "size": 576, "shape": [4, 4, 3, 3], "dtype": "f32",
                   "kind": "weight"},
                  {"name": "y", "size": 256, "shape": [1, 4, 8, 2], "dtype": "f32",
                   "kind": "output"}],
                "ops": [
                  {"name": "shrink", "inputs": ["x"], "outputs": ["s"]},
                  {"name": "c", "type": "conv2d", "inputs": ["s", "w"], "outputs": ["y"],
                   "flops": 1e12, "attrs": {"stride": 1, "padding": 1}}]}"#,
        )
        .unwrap();
        let p = DeviceProfile::h200();
        let c = choose_and_plan(&g, ConvAlgoMode::Auto, &p, &PlanOptions::default()).unwrap();
        let m = choose_and_plan(&g, ConvAlgoMode::MinMemory, &p, &PlanOptions::default()).unwrap();
        assert_eq!(c.upgraded, 1);
        assert_eq!(c.plan.arena_bytes, m.plan.arena_bytes);
        assert_ne!(algo_of(&c.graph.ops[1]), Some(ConvAlgo::Direct));
        crate::validate(&c.graph, &c.plan, None).unwrap();
        assert!(total_us(&p, &c.graph) < total_us(&p, &m.graph));
    }

    #[test]
    fn a_plan_naming_a_wrong_algorithm_is_refused() {
        let g = conv_graph(
            [1, 3, 8, 8],
            [5, 3, 3, 3],
            [1, 5, 4, 4],
            r#"{"stride": 2, "padding": 1}"#,
        );
        let p = DeviceProfile::h200();
        let mut plan = choose_and_plan(&g, ConvAlgoMode::Fastest, &p, &PlanOptions::default())
            .unwrap()
            .plan;
        for ins in &mut plan.instructions {
            if let Instruction::Exec { algo, .. } = ins {
                *algo = Some("winograd_f2".into());
            }
        }
        let e = graph_for_plan(&p, &g, &plan).unwrap_err();
        assert!(e.to_string().contains("does not apply"), "{e}");
        for ins in &mut plan.instructions {
            if let Instruction::Exec { algo, .. } = ins {
                *algo = Some("fft".into());
            }
        }
        assert!(matches!(
            graph_for_plan(&p, &g, &plan),
            Err(ConvAlgoError::Unknown { .. })
        ));
    }
}
