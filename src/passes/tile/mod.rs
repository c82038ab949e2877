//! Spatial tiling: rewrites chains and single-entry DAG regions of
//! row-local ops (conv2d, fixed-window pools, inference batch_norm, element-wise unary and
//! binary ops) into `n` horizontal strips that run one after another, so only one strip's
//! intermediates are live at a time.
//!
//! **Regions.** Tileable ops are grouped into connected components (edges: a tileable op
//! reading another's output). Inside a component (listed order), a *cut* is a position where
//! exactly one tensor crosses from the ops before to the ops after; a region runs from one cut
//! to a later one, so it has one entry tensor and one output tensor, and no other tensor it
//! makes is read outside it.
//!
//! **Strips.** Strip `k` of a region produces output rows `[k·H/n, (k+1)·H/n)`. The rows every
//! tensor of the strip needs are back-propagated through each op's receptive field
//! (`[a·s − p, (b−1)·s − p + d·(k−1) + 1)` clipped to the input for a window of stride `s`,
//! padding `p`, dilation `d`; identity for element-wise ops), taking the hull where a tensor
//! has several consumers; halo rows are recomputed. Each strip starts with a `slice_rows`
//! op reading its rows of the entry, runs the region's ops on strip-sized tensors (convs and
//! pools with the strip's own top padding `padding[0]` and bottom padding `pad_bottom`), crops
//! (`slice_rows`) where a consumer needs fewer rows than its producer made (residual adds), and
//! the region's output is assembled by one `concat` over H of the strips' outputs (each tensor
//! keeps exactly one producer). Ops are listed strip by strip, so strip `k`'s intermediates die
//! before strip `k+1` starts; the entry itself stays live until the last strip has sliced it
//! (the seed's lesson: strips' inputs overlap, never release the boundary tensor early).
//!
//! **Choice.** For every region (cut pair `(p, q)`) and strip count the pass builds the strip
//! schedule and estimates its peak (live bytes over the listed order, outputs and workspace
//! included) and its modelled overhead (the [`DeviceProfile`] roofline of the new ops minus
//! that of the original ops: halo recompute, slices, crops, concat). A binary search over the
//! peak `P`, with a dynamic program per component for the least total overhead of a
//! partition into regions each with peak ≤ `P`, picks the lowest `P` whose overhead stays
//! within `max_overhead` of the untiled graph's modelled time. `TileSpec::Strips(n)` offers
//! each region `{untiled, n}`, `TileSpec::Auto` offers `{untiled, 2, 4, …, max_strips}`.
//! Cost: `O(K² · |options| · strips · region ops)` for `K` cuts per component; a strip count
//! whose overhead alone exceeds 4× the limit on a region stops being extended from that
//! region's start (halos grow with the region), which prunes most long regions.
//!
//! **Determinism and cancellation.** `TileSpec::Auto` judges its candidate selections by the
//! peak of a heuristic plan of each rewritten graph, planned with deterministic work caps and
//! no time limit ([`PlanOptions`](crate::planner::PlanOptions) `effort: Some(1)`), so the
//! pass gives the same graph on any machine and under any load. [`Tile::cancel`] is checked
//! between regions and between candidates and passed to those plans: once raised, the pass
//! keeps the regions and the candidate found so far (a valid, possibly less tiled graph).
//!
//! Tensor and op names of strips derive from the originals (`name@s3`); inputs, weights and
//! the regions' entry and output tensors keep their names. Dead side outputs (batch_norm's
//! saved statistics, max_pool's indices in inference graphs) get one strip copy each.
//!
//! The pass in four parts: `classify` (which ops are row-local, their row maps, the
//! components and cuts), `choose` (costs and the choice of regions and strip counts),
//! `emit` (the strip schedules and the rewritten graph); this module holds the pass's
//! options and [`tile_graph`], which runs the three in order.

mod choose;
mod classify;
mod emit;

pub use classify::{input_rows, RowMap};

use super::{Pass, PassError, PassOutcome, PassReport, RewriteStep};
use crate::cost::DeviceProfile;
use crate::graph::{Graph, TensorId};
use crate::plan::TileRegionStep;
use choose::{best_selection, region_table, Choice};
use classify::{classify, components, shape4, Local};
use emit::Rewrite;
use memplan_solver::CancelToken;

/// The pass's name.
pub const NAME: &str = "tile";
/// Default limit on the modelled overhead, as a share of the untiled graph's modelled time.
pub const DEFAULT_MAX_OVERHEAD: f64 = 0.10;
/// A strip count stops being extended from a region start once a region's overhead alone
/// exceeds this multiple of the limit.
const PRUNE_FACTOR: f64 = 4.0;
/// Default largest strip count `TileSpec::Auto` tries.
pub const DEFAULT_MAX_STRIPS: usize = 32;

/// How many strips to cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileSpec {
    /// Exactly `n` strips (≥ 2) for every region tiled.
    Strips(usize),
    /// Per region the strip count among 2, 4, 8, … that gives the lowest peak within the
    /// overhead limit.
    Auto,
}

/// The `tile` value that leaves the tile rewrite out.
pub const OFF: &str = "off";

/// Largest strip count `tile` takes (nine digits).
pub const MAX_TILE_STRIPS: usize = 999_999_999;

/// The grammar of `tile`, as the OpenAPI document states it: `auto`, `off`, or a strip count
/// from 2 to [`MAX_TILE_STRIPS`] without a leading zero. [`TileSpec::parse`] accepts exactly
/// these.
pub const TILE_PATTERN: &str = "^(?:auto|off|[2-9]|[1-9][0-9]{1,8})$";

impl TileSpec {
    /// Parses a `tile` value as [`TILE_PATTERN`] writes it: `auto`, `off` (`None`) or a strip
    /// count from 2 to [`MAX_TILE_STRIPS`].
    pub fn parse(text: &str) -> Result<Option<TileSpec>, String> {
        let strips = || {
            let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
            (digits && !text.starts_with('0') && text.len() <= 9)
                .then(|| text.parse::<usize>().ok())
                .flatten()
                .filter(|&n| (2..=MAX_TILE_STRIPS).contains(&n))
        };
        match text {
            OFF => Ok(None),
            "auto" => Ok(Some(TileSpec::Auto)),
            _ => match strips() {
                Some(n) => Ok(Some(TileSpec::Strips(n))),
                None => Err(format!(
                    "tile: expected auto, off or a strip count from 2 to {MAX_TILE_STRIPS}, got \
                     {text:?}"
                )),
            },
        }
    }
}

/// The tiling pass.
#[derive(Debug, Clone)]
pub struct Tile {
    /// Strip count.
    pub spec: TileSpec,
    /// Largest modelled overhead allowed, as a share of the untiled modelled time
    /// (`f64::INFINITY`: minimise the peak whatever it costs).
    pub max_overhead: f64,
    /// Largest strip count `Auto` tries.
    pub max_strips: usize,
    /// Device whose roofline times the overhead.
    pub profile: DeviceProfile,
    /// Stop flag (a user's cancel, or the pipeline's wall-clock cap): checked between regions
    /// and candidates and passed to the candidates' plans (module doc). `None`: never stops.
    pub cancel: Option<CancelToken>,
}

impl Tile {
    fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }
}

impl Tile {
    /// The pass with the default overhead limit, strip cap and the H200 profile.
    pub fn new(spec: TileSpec) -> Tile {
        Tile {
            spec,
            max_overhead: DEFAULT_MAX_OVERHEAD,
            max_strips: DEFAULT_MAX_STRIPS,
            profile: DeviceProfile::h200(),
            cancel: None,
        }
    }
}

/// One tiled region, for reports and benchmarks.
#[derive(Debug, Clone, PartialEq)]
pub struct TiledRegion {
    /// First op of the region (original name).
    pub first_op: String,
    /// Last op of the region (original name).
    pub last_op: String,
    /// Ops in the region.
    pub ops: usize,
    /// The entry tensor.
    pub entry: String,
    /// The output tensor.
    pub output: String,
    /// Strips cut.
    pub strips: usize,
    /// Estimated peak of the region before tiling (bytes).
    pub peak_before: u64,
    /// Estimated peak of the region after tiling (bytes).
    pub peak_after: u64,
}

/// What the pass did.
#[derive(Debug, Clone, PartialEq)]
pub struct TileSummary {
    /// Tiled regions in graph order.
    pub regions: Vec<TiledRegion>,
    /// Modelled time of the original graph (µs, [`DeviceProfile::op_us`] summed).
    pub time_before_us: f64,
    /// Modelled time of the tiled graph (µs).
    pub time_after_us: f64,
}

impl TileSummary {
    /// Modelled overhead as a share of the original time.
    pub fn overhead(&self) -> f64 {
        if self.time_before_us > 0.0 {
            (self.time_after_us - self.time_before_us) / self.time_before_us
        } else {
            0.0
        }
    }

    /// The largest strip count used (1 when nothing was tiled).
    pub fn max_strips(&self) -> usize {
        self.regions.iter().map(|r| r.strips).max().unwrap_or(1)
    }
}

impl Pass for Tile {
    fn name(&self) -> &'static str {
        NAME
    }

    fn run(&self, graph: &Graph) -> Result<PassOutcome, PassError> {
        let (out, summary) = tile_graph(graph, self)?;
        let mut report = PassReport::compare(NAME, graph, &out);
        for r in &summary.regions {
            report.notes.push(format!(
                "region {}..{} ({} ops, {} -> {}): {} strips, estimated peak {} -> {} bytes",
                r.first_op,
                r.last_op,
                r.ops,
                r.entry,
                r.output,
                r.strips,
                r.peak_before,
                r.peak_after
            ));
        }
        if summary.regions.is_empty() {
            report.notes.push(
                "no region tiled (no tileable chain, or none lowers the peak within the \
                 overhead limit)"
                    .into(),
            );
        }
        report.notes.push(format!(
            "modelled time {:.1} -> {:.1} us ({:+.2} %, limit {:.1} %)",
            summary.time_before_us,
            summary.time_after_us,
            100.0 * summary.overhead(),
            100.0 * self.max_overhead
        ));
        let step = (!summary.regions.is_empty()).then(|| RewriteStep::Tile {
            regions: summary
                .regions
                .iter()
                .map(|r| TileRegionStep {
                    first_op: r.first_op.clone(),
                    last_op: r.last_op.clone(),
                    strips: r.strips,
                })
                .collect(),
        });
        Ok(PassOutcome {
            graph: out,
            report,
            step,
        })
    }
}

/// Tiles `graph` as a recorded [`RewriteStep::Tile`] says, without choosing: each region
/// (first and last op by name, in graph order, not overlapping) must run from one cut of a
/// component of tileable ops to a later one and be closed (module doc), and its strip count
/// must be one the output's rows allow. The graph [`tile_graph`] made when it picked these
/// regions comes back; a region the graph has not is an error naming it.
pub fn replay(graph: &Graph, steps: &[TileRegionStep]) -> Result<Graph, PassError> {
    let profile = DeviceProfile::h200();
    let ctx = Ctx::new(graph, &profile);
    let components = components(&ctx);
    let ids = graph.op_indices();
    let mut regions: Regions = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let bad = |why: String| PassError::Unsupported {
            pass: NAME,
            message: format!(
                "recorded region {i} ({:?}..{:?}, {} strips) {why}",
                step.first_op, step.last_op, step.strips
            ),
        };
        let op = |name: &str| {
            ids.get(name)
                .copied()
                .ok_or_else(|| bad(format!("names op {name:?}, which the graph does not have")))
        };
        let (first, last) = (op(&step.first_op)?, op(&step.last_op)?);
        let comp = components
            .iter()
            .find(|c| c.ops.contains(&first))
            .ok_or_else(|| bad("does not start at a tileable op".into()))?;
        let pos = |o: usize| comp.ops.iter().position(|&x| x == o);
        let (Some(p), Some(l)) = (pos(first), pos(last)) else {
            return Err(bad("does not end in its first op's component".into()));
        };
        let q = l + 1;
        if p >= q {
            return Err(bad("ends before it starts".into()));
        }
        let (Some(entry), Some(output)) = (comp.cuts_tensor(p), comp.cuts_tensor(q)) else {
            return Err(bad("does not run from one cut to another".into()));
        };
        let ops = comp.ops[p..q].to_vec();
        if !classify::region_is_closed(&ctx, &ops, output) {
            return Err(bad(format!(
                "is not closed: a tensor made inside it other than its output {:?} is read \
                 outside it or is a graph output, or that output has fewer than 2 rows",
                graph.tensor(output).name
            )));
        }
        if regions.last().is_some_and(|r| r.0[0] >= ops[0]) {
            return Err(bad("is not after the region before it".into()));
        }
        if regions.iter().any(|r| r.0.iter().any(|o| ops.contains(o))) {
            return Err(bad("overlaps an earlier region".into()));
        }
        let rw = ctx
            .strips(&ops, entry, output, step.strips)
            .ok_or_else(|| {
                bad(format!(
                    "cannot be cut into that many strips (its output {:?} has {} rows: 2 to {} \
                     strips, each reading some rows of the entry)",
                    graph.tensor(output).name,
                    ctx.h(output),
                    ctx.h(output)
                ))
            })?;
        let choice = Choice {
            strips: step.strips,
            peak: 0,
            overhead_us: 0.0,
        };
        regions.push((ops, entry, output, choice, 0, rw));
    }
    emit::emit(&ctx, &regions)
}

/// A row interval `[lo, hi)`.
type Rows = (usize, usize);

/// Tiled regions: ops, entry, output, choice, estimated untiled peak, strip schedule.
type Regions = Vec<(Vec<usize>, TensorId, TensorId, Choice, u64, Rewrite)>;

/// What the pass knows about the graph it tiles: each op's row-local behaviour
/// (`None`: not tileable), each tensor's consumers (op indices), the device model.
struct Ctx<'a> {
    g: &'a Graph,
    locals: Vec<Option<Local>>,
    consumers: Vec<Vec<usize>>,
    profile: &'a DeviceProfile,
}

impl<'a> Ctx<'a> {
    /// Classifies every op of `g`.
    fn new(g: &'a Graph, profile: &'a DeviceProfile) -> Ctx<'a> {
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); g.tensors.len()];
        for (i, op) in g.ops.iter().enumerate() {
            for &t in &op.inputs {
                if consumers[t.index()].last() != Some(&i) {
                    consumers[t.index()].push(i);
                }
            }
        }
        let locals: Vec<Option<Local>> =
            g.ops.iter().map(|op| classify(g, op, &consumers)).collect();
        Ctx {
            g,
            locals,
            consumers,
            profile,
        }
    }

    /// Rows (H) of a 4-D tensor; 0 for any other.
    fn h(&self, t: TensorId) -> usize {
        shape4(self.g.tensor(t)).map_or(0, |s| s[2])
    }
}

/// `v · num / den`, rounded up (`v` itself when `den` or `v` is 0).
fn scaled_u64(v: u64, num: usize, den: usize) -> u64 {
    if den == 0 || v == 0 {
        return v;
    }
    ((v as u128 * num as u128).div_ceil(den as u128)) as u64
}

/// Tiles `graph` as `tile` asks; returns the rewritten, validated graph and what was done.
pub fn tile_graph(graph: &Graph, tile: &Tile) -> Result<(Graph, TileSummary), PassError> {
    let g = graph;
    let ctx = Ctx::new(g, &tile.profile);
    let time_before: f64 = g.ops.iter().map(|op| tile.profile.op_us(g, op)).sum();
    let options: Vec<usize> = match tile.spec {
        TileSpec::Strips(n) => vec![n],
        TileSpec::Auto => std::iter::successors(Some(2usize), |&n| Some(n * 2))
            .take_while(|&n| n <= tile.max_strips.max(2))
            .collect(),
    };
    let components = components(&ctx);
    let budget_us = if tile.max_overhead.is_finite() {
        tile.max_overhead.max(0.0) * time_before
    } else {
        f64::INFINITY
    };
    let table = region_table(&ctx, tile, &components, &options, budget_us);
    let (out, regions) = best_selection(&ctx, tile, &components, &table, &options, budget_us)?;
    let time_after: f64 = out.ops.iter().map(|op| tile.profile.op_us(&out, op)).sum();
    let summary = TileSummary {
        regions: regions
            .iter()
            .map(|(ops, entry, output, choice, before, _)| TiledRegion {
                first_op: g.ops[ops[0]].name.clone(),
                last_op: g.ops[ops[ops.len() - 1]].name.clone(),
                ops: ops.len(),
                entry: g.tensor(*entry).name.clone(),
                output: g.tensor(*output).name.clone(),
                strips: choice.strips,
                peak_before: *before,
                peak_after: choice.peak,
            })
            .collect(),
        time_before_us: time_before,
        time_after_us: time_after,
    };
    Ok((out, summary))
}
