//! Spatial tiling (seed 000 §3.2, §5.2): rewrites chains and single-entry DAG regions of
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

use super::{Pass, PassError, PassOutcome, PassReport};
use crate::cost::DeviceProfile;
use crate::graph::{Graph, Op, Tensor, TensorId, TensorKind};
use crate::ops::kernel::{self as kernels, Kernel, KernelMode};
use memplan_solver::CancelToken;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

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

impl TileSpec {
    /// Parses a CLI value: `auto`, `off` (`None`) or a strip count ≥ 2.
    pub fn parse(text: &str) -> Result<Option<TileSpec>, String> {
        match text {
            "off" => Ok(None),
            "auto" => Ok(Some(TileSpec::Auto)),
            n => match n.parse::<usize>() {
                Ok(n) if n >= 2 => Ok(Some(TileSpec::Strips(n))),
                _ => Err(format!(
                    "tile: expected auto, off or a strip count >= 2, got {text:?}"
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
        Ok(PassOutcome { graph: out, report })
    }
}

/// A row interval `[lo, hi)`.
type Rows = (usize, usize);

/// How an op maps its output rows to the rows of a spatial input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowMap {
    /// Element-wise: the same rows.
    Same,
    /// A sliding window over H.
    Window {
        /// Rows one window spans (`dilation · (k − 1) + 1`).
        span: usize,
        /// Stride over H.
        stride: usize,
        /// Top padding of the untiled op.
        pad: usize,
    },
}

/// The input rows an output row range `[a, b)` reads, clipped to `[0, h_in)`, with the
/// padding left above and below: `(rows, top, bottom)`. `None` when the window lies wholly in
/// the padding.
pub fn input_rows(map: RowMap, out: Rows, h_in: usize) -> Option<(Rows, usize, usize)> {
    match map {
        RowMap::Same => Some((out, 0, 0)),
        RowMap::Window { span, stride, pad } => {
            let (a, b) = out;
            if b <= a {
                return None;
            }
            let ws = (a * stride) as i64 - pad as i64;
            let we = ((b - 1) * stride) as i64 - pad as i64 + span as i64;
            let lo = ws.max(0);
            let hi = we.min(h_in as i64);
            if hi <= lo {
                return None;
            }
            Some((
                (lo as usize, hi as usize),
                (lo - ws) as usize,
                (we - hi) as usize,
            ))
        }
    }
}

/// A pool's window as strips write it: (kernel, stride, W padding, W ceil mode).
type PoolWindow = ((usize, usize), (usize, usize), usize, bool);

/// Regions picked in one component: (start cut, end cut, choice).
type Picks = Vec<(usize, usize, Choice)>;

/// What the pass knows about a tileable op.
#[derive(Debug, Clone)]
struct Local {
    map: RowMap,
    /// Input slots read row by row (the others are weights or broadcast along H).
    spatial: Vec<usize>,
    /// Pool window attrs to write on strips: (kernel, stride, pad_w, ceil_w).
    pool: Option<PoolWindow>,
    /// Conv W padding.
    conv_pad_w: Option<usize>,
}

fn shape4(t: &Tensor) -> Option<[usize; 4]> {
    let s = t.shape.as_ref()?;
    if s.len() != 4 || s.contains(&0) {
        return None;
    }
    Some([s[0] as usize, s[1] as usize, s[2] as usize, s[3] as usize])
}

/// Bytes of one H row of a 4-D tensor (size / H), when exact.
fn row_bytes(t: &Tensor) -> Option<u64> {
    let h = shape4(t)?[2] as u64;
    (t.size % h == 0).then_some(t.size / h)
}

fn classify(g: &Graph, op: &Op, consumers: &[Vec<usize>]) -> Option<Local> {
    let out = g.tensor(*op.outputs.first()?);
    let os = shape4(out)?;
    row_bytes(out)?;
    if op
        .attrs
        .as_ref()
        .and_then(|a| a.get("pad_bottom"))
        .is_some()
    {
        return None; // already a strip
    }
    // Side outputs must be dead: strips give them strip-local contents.
    for &e in &op.outputs[1..] {
        let t = g.tensor(e);
        if !consumers[e.index()].is_empty() || t.kind != TensorKind::Activation {
            return None;
        }
        if let Some(s) = shape4(t) {
            if s[2] == os[2] && row_bytes(t).is_none() {
                return None;
            }
        }
    }
    let weights_only = |skip: &[usize]| {
        op.inputs
            .iter()
            .enumerate()
            .all(|(i, &t)| skip.contains(&i) || g.tensor(t).kind == TensorKind::Weight)
    };
    let input4 = |i: usize| -> Option<[usize; 4]> {
        let t = g.tensor(*op.inputs.get(i)?);
        row_bytes(t)?;
        shape4(t)
    };
    match kernels::select(g, op, KernelMode::Real) {
        Kernel::Conv2d(c) => {
            let x = input4(0)?;
            (x[0] == os[0] && weights_only(&[0])).then_some(Local {
                map: RowMap::Window {
                    span: c.dilation.0 * (c.kh - 1) + 1,
                    stride: c.stride.0,
                    pad: c.pad.0,
                },
                spatial: vec![0],
                pool: None,
                conv_pad_w: Some(c.pad.1),
            })
        }
        Kernel::Pool(p) => {
            let x = input4(0)?;
            if x[0] != os[0] || op.inputs.len() != 1 {
                return None;
            }
            // Average pools only without padding and with every window inside the input,
            // so that every divisor is the full window on strips too.
            if !p.max && (p.pad.0 != 0 || (p.oh - 1) * p.stride.0 + p.kernel.0 > p.h) {
                return None;
            }
            let ceil_w = (p.w + 2 * p.pad.1 - p.kernel.1) / p.stride.1 + 1 != p.ow;
            Some(Local {
                map: RowMap::Window {
                    span: p.kernel.0,
                    stride: p.stride.0,
                    pad: p.pad.0,
                },
                spatial: vec![0],
                pool: Some((p.kernel, p.stride, p.pad.1, ceil_w)),
                conv_pad_w: None,
            })
        }
        Kernel::BatchNorm {
            batch_stats: false, ..
        } => {
            let x = input4(0)?;
            (x == os && weights_only(&[0])).then_some(same(vec![0]))
        }
        Kernel::Unary(_) => (input4(0)? == os && op.inputs.len() == 1).then_some(same(vec![0])),
        Kernel::Binary { .. } => {
            let mut spatial = Vec::new();
            for (i, &t) in op.inputs.iter().enumerate() {
                let tensor = g.tensor(t);
                if shape4(tensor) == Some(os) {
                    row_bytes(tensor)?;
                    spatial.push(i);
                } else {
                    // A weight broadcast along H: its dimension aligned with H is 1 or absent.
                    let s = tensor.shape.as_ref()?;
                    let h_dim = (s.len() + 2).checked_sub(4);
                    let along_h = s.len() >= 2 && h_dim.is_some_and(|d| s[d] != 1);
                    if tensor.kind != TensorKind::Weight || along_h {
                        return None;
                    }
                }
            }
            (!spatial.is_empty()).then_some(same(spatial))
        }
        _ => None,
    }
}

fn same(spatial: Vec<usize>) -> Local {
    Local {
        map: RowMap::Same,
        spatial,
        pool: None,
        conv_pad_w: None,
    }
}

/// A tensor reference in a region rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TRef {
    Old(TensorId),
    New(usize),
}

#[derive(Debug, Clone)]
struct NewTensor {
    base: TensorId,
    strip: usize,
    /// `None`: the strip copy; `Some(j)`: the j-th crop of that strip copy.
    crop: Option<usize>,
    /// The strip's slice of the region's entry (named apart from the previous region's
    /// strips of the same tensor).
    entry: bool,
    rows: usize,
    size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum NewKind {
    /// Strip `k` of an original op, with its H padding (top, bottom).
    Strip { op: usize, pads: (usize, usize) },
    /// `slice_rows` starting at a row.
    Slice { start: usize },
    /// The final concat.
    Concat,
}

#[derive(Debug, Clone)]
struct NewOp {
    kind: NewKind,
    strip: usize,
    inputs: Vec<TRef>,
    outputs: Vec<TRef>,
    /// Rows produced / rows of the untiled output (scales flops, time and workspace).
    frac: (usize, usize),
}

#[derive(Debug, Clone, Default)]
struct Rewrite {
    tensors: Vec<NewTensor>,
    ops: Vec<NewOp>,
}

/// A component of tileable ops, its cuts and the regions' costs.
struct Component {
    /// Op indices in listed order.
    ops: Vec<usize>,
    /// Cut positions (number of component ops before the cut) and the tensor crossing there.
    cuts: Vec<(usize, TensorId)>,
}

struct Ctx<'a> {
    g: &'a Graph,
    locals: Vec<Option<Local>>,
    consumers: Vec<Vec<usize>>,
    profile: &'a DeviceProfile,
}

impl Ctx<'_> {
    fn h(&self, t: TensorId) -> usize {
        shape4(self.g.tensor(t)).map_or(0, |s| s[2])
    }

    fn new_op_us(&self, rw: &Rewrite, op: &NewOp) -> f64 {
        let size = |r: &TRef| match *r {
            TRef::Old(t) => self.g.tensor(t).size,
            TRef::New(i) => rw.tensors[i].size,
        };
        let bytes: u64 = op.inputs.iter().chain(&op.outputs).map(size).sum();
        let (num, den) = (op.frac.0 as f64, op.frac.1.max(1) as f64);
        let (flops, time_us, wide) = match &op.kind {
            NewKind::Strip { op: o, .. } => {
                let orig = &self.g.ops[*o];
                let wide = orig.outputs.iter().all(|&t| {
                    matches!(
                        self.g.tensor(t).dtype.as_deref(),
                        None | Some("f32") | Some("f64") | Some("float32") | Some("float64")
                    )
                });
                (
                    orig.flops.unwrap_or(0.0) * num / den,
                    orig.time_us.map(|t| t * num / den),
                    wide,
                )
            }
            _ => (0.0, None, true),
        };
        if let Some(t) = time_us {
            return t;
        }
        let thr = if wide {
            self.profile.fp32_flops_per_s
        } else {
            self.profile.half_flops_per_s
        };
        (flops / thr).max(bytes as f64 / self.profile.memory_bytes_per_s) * 1e6
    }

    /// Builds the strip schedule of region `ops` (listed order) from `entry` to `output` in
    /// `n` strips; `None` when some strip would read nothing.
    fn strips(
        &self,
        ops: &[usize],
        entry: TensorId,
        output: TensorId,
        n: usize,
    ) -> Option<Rewrite> {
        let h_out = self.h(output);
        if n < 2 || n > h_out {
            return None;
        }
        let mut rw = Rewrite::default();
        for k in 0..n {
            let want = (k * h_out / n, (k + 1) * h_out / n);
            // Back-propagate the rows each tensor must hold in this strip.
            let mut need: BTreeMap<TensorId, Rows> = BTreeMap::new();
            need.insert(output, want);
            for &o in ops.iter().rev() {
                let op = &self.g.ops[o];
                let local = self.locals[o].as_ref()?;
                let out_rows = *need.get(&op.outputs[0])?;
                for &slot in &local.spatial {
                    let t = op.inputs[slot];
                    let (r, _, _) = input_rows(local.map, out_rows, self.h(t))?;
                    need.entry(t)
                        .and_modify(|x| *x = (x.0.min(r.0), x.1.max(r.1)))
                        .or_insert(r);
                }
            }
            let mut have: BTreeMap<TensorId, (TRef, Rows)> = BTreeMap::new();
            let mut crops: BTreeMap<(TensorId, Rows), TRef> = BTreeMap::new();
            let entry_rows = *need.get(&entry)?;
            if entry_rows == (0, self.h(entry)) {
                have.insert(entry, (TRef::Old(entry), entry_rows));
            } else {
                let r = self.push_tensor(&mut rw, entry, k, None, entry_rows)?;
                if let TRef::New(i) = r {
                    rw.tensors[i].entry = true;
                }
                rw.ops.push(NewOp {
                    kind: NewKind::Slice {
                        start: entry_rows.0,
                    },
                    strip: k,
                    inputs: vec![TRef::Old(entry)],
                    outputs: vec![r],
                    frac: (entry_rows.1 - entry_rows.0, self.h(entry)),
                });
                have.insert(entry, (r, entry_rows));
            }
            for &o in ops {
                let op = &self.g.ops[o];
                let local = self.locals[o].as_ref()?;
                let main = op.outputs[0];
                let out_rows = *need.get(&main)?;
                let mut inputs: Vec<TRef> = op.inputs.iter().map(|&t| TRef::Old(t)).collect();
                let mut pads = (0, 0);
                for &slot in &local.spatial {
                    let t = op.inputs[slot];
                    let (req, top, bottom) = input_rows(local.map, out_rows, self.h(t))?;
                    pads = (top, bottom);
                    let &(src, avail) = have.get(&t)?;
                    inputs[slot] = if avail == req {
                        src
                    } else if let Some(&c) = crops.get(&(t, req)) {
                        c
                    } else {
                        let j = crops.len();
                        let c = self.push_tensor(&mut rw, t, k, Some(j), req)?;
                        rw.ops.push(NewOp {
                            kind: NewKind::Slice {
                                start: req.0 - avail.0,
                            },
                            strip: k,
                            inputs: vec![src],
                            outputs: vec![c],
                            frac: (req.1 - req.0, self.h(t)),
                        });
                        crops.insert((t, req), c);
                        c
                    };
                }
                let mut outputs = Vec::with_capacity(op.outputs.len());
                for (i, &t) in op.outputs.iter().enumerate() {
                    let spatial =
                        i == 0 || shape4(self.g.tensor(t)).is_some_and(|s| s[2] == self.h(main));
                    let rows = if spatial { out_rows } else { (0, 0) };
                    outputs.push(self.push_tensor(&mut rw, t, k, None, rows)?);
                }
                have.insert(main, (outputs[0], out_rows));
                rw.ops.push(NewOp {
                    kind: NewKind::Strip { op: o, pads },
                    strip: k,
                    inputs,
                    outputs,
                    frac: (out_rows.1 - out_rows.0, self.h(main)),
                });
            }
        }
        // The concat reads every strip's output, in order.
        let parts: Vec<TRef> = (0..rw.tensors.len())
            .filter(|&i| rw.tensors[i].base == output && rw.tensors[i].crop.is_none())
            .map(TRef::New)
            .collect();
        rw.ops.push(NewOp {
            kind: NewKind::Concat,
            strip: n,
            inputs: parts,
            outputs: vec![TRef::Old(output)],
            frac: (h_out, h_out),
        });
        Some(rw)
    }

    /// Adds a strip tensor of `base` holding `rows` (`(0, 0)`: a non-spatial side output of
    /// the same size as the original).
    fn push_tensor(
        &self,
        rw: &mut Rewrite,
        base: TensorId,
        strip: usize,
        crop: Option<usize>,
        rows: Rows,
    ) -> Option<TRef> {
        let t = self.g.tensor(base);
        let n = rows.1.checked_sub(rows.0)?;
        let size = if rows == (0, 0) {
            t.size
        } else {
            row_bytes(t)? * n as u64
        };
        if size == 0 {
            return None;
        }
        rw.tensors.push(NewTensor {
            base,
            strip,
            crop,
            entry: false,
            rows: n,
            size,
        });
        Some(TRef::New(rw.tensors.len() - 1))
    }

    /// Estimated peak of the rewrite: live bytes over its listed order (the entry is live
    /// from the start, outputs from their op, workspace during its op).
    fn rewrite_peak(&self, rw: &Rewrite) -> u64 {
        let sim: Vec<SimOp> = rw
            .ops
            .iter()
            .map(|op| {
                let r = |x: &TRef| match *x {
                    TRef::Old(t) => (t.index(), self.g.tensor(t).size),
                    TRef::New(i) => (self.g.tensors.len() + i, rw.tensors[i].size),
                };
                let arena = |x: &&TRef| match **x {
                    TRef::Old(t) => self.g.in_arena(t),
                    TRef::New(_) => true,
                };
                let ws = match op.kind {
                    NewKind::Strip { op: o, .. } => {
                        scaled_u64(self.g.ops[o].workspace, op.frac.0, op.frac.1)
                    }
                    _ => 0,
                };
                SimOp {
                    ins: op.inputs.iter().filter(arena).map(r).collect(),
                    outs: op.outputs.iter().map(r).collect(),
                    ws,
                }
            })
            .collect();
        simulate(&sim)
    }

    /// Estimated peak of the region's original ops.
    fn region_peak(&self, ops: &[usize]) -> u64 {
        let r = |t: &TensorId| (t.index(), self.g.tensor(*t).size);
        let sim: Vec<SimOp> = ops
            .iter()
            .map(|&o| {
                let op = &self.g.ops[o];
                SimOp {
                    ins: op
                        .inputs
                        .iter()
                        .filter(|&&t| self.g.in_arena(t))
                        .map(r)
                        .collect(),
                    outs: op.outputs.iter().map(r).collect(),
                    ws: op.workspace,
                }
            })
            .collect();
        simulate(&sim)
    }
}

fn scaled_u64(v: u64, num: usize, den: usize) -> u64 {
    if den == 0 || v == 0 {
        return v;
    }
    ((v as u128 * num as u128).div_ceil(den as u128)) as u64
}

struct SimOp {
    ins: Vec<(usize, u64)>,
    outs: Vec<(usize, u64)>,
    ws: u64,
}

/// Peak live bytes over a listed order: a tensor is live from its producer (or the start,
/// when nothing in the list produces it) to its last reader (or its producer, when unread).
fn simulate(ops: &[SimOp]) -> u64 {
    let mut last: BTreeMap<usize, usize> = BTreeMap::new();
    let mut produced: BTreeSet<usize> = BTreeSet::new();
    let mut size: BTreeMap<usize, u64> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        for &(t, s) in &op.ins {
            last.insert(t, i);
            size.insert(t, s);
        }
        for &(t, s) in &op.outs {
            produced.insert(t);
            size.insert(t, s);
            last.entry(t).or_insert(i);
        }
    }
    let mut live: u64 = size
        .iter()
        .filter(|(t, _)| !produced.contains(t))
        .map(|(_, &s)| s)
        .sum();
    let mut peak = live;
    for (i, op) in ops.iter().enumerate() {
        live += op.outs.iter().map(|&(_, s)| s).sum::<u64>();
        peak = peak.max(live + op.ws);
        let mut dead: BTreeSet<usize> = BTreeSet::new();
        for &(t, _) in op.ins.iter().chain(&op.outs) {
            if last.get(&t) == Some(&i) {
                dead.insert(t);
            }
        }
        for t in dead {
            live = live.saturating_sub(size[&t]);
        }
    }
    peak
}

/// One candidate for a region: strip count (1: untiled), estimated peak, modelled overhead.
#[derive(Debug, Clone, Copy)]
struct Choice {
    strips: usize,
    peak: u64,
    overhead_us: f64,
}

/// Tiles `graph` as `tile` asks; returns the rewritten, validated graph and what was done.
pub fn tile_graph(graph: &Graph, tile: &Tile) -> Result<(Graph, TileSummary), PassError> {
    let g = graph;
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); g.tensors.len()];
    for (i, op) in g.ops.iter().enumerate() {
        for &t in &op.inputs {
            if consumers[t.index()].last() != Some(&i) {
                consumers[t.index()].push(i);
            }
        }
    }
    let locals: Vec<Option<Local>> = g.ops.iter().map(|op| classify(g, op, &consumers)).collect();
    let ctx = Ctx {
        g,
        locals,
        consumers,
        profile: &tile.profile,
    };
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
    // Every region's choices: (component, p, q) -> choices.
    let mut table: Vec<BTreeMap<(usize, usize), Vec<Choice>>> = Vec::new();
    for comp in &components {
        let mut m = BTreeMap::new();
        for (pi, &(p, entry)) in comp.cuts.iter().enumerate() {
            // Stopped: the regions found so far (a partial table still partitions: the
            // stretches between adjacent cuts stay untiled).
            if tile.cancelled() {
                break;
            }
            // Strip counts still worth trying from cut p: a region whose overhead alone
            // exceeds the budget is not extended further with that count (halos only grow
            // with the region), which keeps long graphs fast.
            let mut alive: Vec<usize> = options.clone();
            for &(q, output) in &comp.cuts[pi + 1..] {
                if tile.cancelled() {
                    break;
                }
                let ops = &comp.ops[p..q];
                if !region_is_closed(&ctx, ops, output) {
                    continue;
                }
                let orig_us: f64 = ops.iter().map(|&o| tile.profile.op_us(g, &g.ops[o])).sum();
                let mut choices = vec![Choice {
                    strips: 1,
                    peak: ctx.region_peak(ops),
                    overhead_us: 0.0,
                }];
                let mut over = Vec::new();
                for &n in &alive {
                    if let Some(rw) = ctx.strips(ops, entry, output, n) {
                        let us: f64 = rw.ops.iter().map(|o| ctx.new_op_us(&rw, o)).sum();
                        let overhead_us = (us - orig_us).max(0.0);
                        if overhead_us > budget_us {
                            // Unusable here; stop extending once far past the limit (slice
                            // and concat costs can shrink with a smaller output, halos not).
                            if overhead_us > PRUNE_FACTOR * budget_us {
                                over.push(n);
                            }
                            continue;
                        }
                        choices.push(Choice {
                            strips: n,
                            peak: ctx.rewrite_peak(&rw),
                            overhead_us,
                        });
                    }
                }
                alive.retain(|n| !over.contains(n));
                m.insert((p, q), choices);
            }
        }
        table.push(m);
    }
    // Candidate selections: with `Auto`, the per-region mix of strip counts and every single
    // count; each is judged by the peak the planner (heuristics) gives its rewritten graph.
    let filters: Vec<Option<usize>> = match tile.spec {
        TileSpec::Strips(_) => vec![None],
        TileSpec::Auto => std::iter::once(None)
            .chain(options.iter().map(|&n| Some(n)))
            .collect(),
    };
    let mut best: Option<(u64, f64, Graph, Regions)> = None;
    for filter in filters {
        if best.is_some() && tile.cancelled() {
            break;
        }
        let picks = choose(&components, &table, budget_us, filter);
        let regions = rewrite_regions(&ctx, &components, &picks);
        if filter.is_some() && regions.is_empty() {
            continue;
        }
        let out = emit(&ctx, &regions)?;
        let overhead: f64 = regions.iter().map(|r| r.3.overhead_us).sum();
        let peak = if tile.spec == TileSpec::Auto {
            planned_peak(&out, tile.cancel.as_ref())?
        } else {
            0
        };
        if best
            .as_ref()
            .is_none_or(|b| (peak, overhead) < (b.0, b.1) || (peak == b.0 && overhead < b.1))
        {
            best = Some((peak, overhead, out, regions));
        }
    }
    let (out, regions) = match best {
        Some((_, _, out, regions)) => (out, regions),
        None => (g.clone(), Vec::new()),
    };
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

/// Tiled regions: ops, entry, output, choice, estimated untiled peak, strip schedule.
type Regions = Vec<(Vec<usize>, TensorId, TensorId, Choice, u64, Rewrite)>;

/// Region choices per component: binary search over the peak bound for the lowest bound
/// whose least-overhead partition fits the budget. `filter`: only this strip count (and
/// untiled) is offered.
fn choose(
    components: &[Component],
    table: &[BTreeMap<(usize, usize), Vec<Choice>>],
    budget_us: f64,
    filter: Option<usize>,
) -> Vec<Picks> {
    let table: Vec<BTreeMap<(usize, usize), Vec<Choice>>> = table
        .iter()
        .map(|m| {
            m.iter()
                .map(|(&k, v)| {
                    let kept = v
                        .iter()
                        .filter(|c| c.strips == 1 || filter.is_none_or(|n| c.strips == n))
                        .copied()
                        .collect();
                    (k, kept)
                })
                .collect()
        })
        .collect();
    let mut bounds: Vec<u64> = table
        .iter()
        .flat_map(|m| m.values().flatten().map(|c| c.peak))
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let plan_for = |bound: u64| -> Option<Vec<Picks>> {
        let mut total = 0.0;
        let mut picks = Vec::new();
        for (ci, comp) in components.iter().enumerate() {
            let (cost, pick) = partition(comp, &table[ci], bound)?;
            total += cost;
            picks.push(pick);
        }
        (total <= budget_us).then_some(picks)
    };
    let mut best = None;
    let (mut lo, mut hi) = (0usize, bounds.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        match plan_for(bounds[mid]) {
            Some(p) => {
                best = Some(p);
                hi = mid;
            }
            None => lo = mid + 1,
        }
    }
    best.unwrap_or_default()
}

/// The strip schedules of the picked regions, in graph order.
fn rewrite_regions(ctx: &Ctx<'_>, components: &[Component], picks: &[Picks]) -> Regions {
    let mut regions: Regions = Vec::new();
    for (ci, pick) in picks.iter().enumerate() {
        let comp = &components[ci];
        for &(p, q, choice) in pick {
            if choice.strips < 2 {
                continue;
            }
            let ops = comp.ops[p..q].to_vec();
            let (Some(entry), Some(output)) = (comp.cuts_tensor(p), comp.cuts_tensor(q)) else {
                continue;
            };
            let Some(rw) = ctx.strips(&ops, entry, output, choice.strips) else {
                continue;
            };
            let before = ctx.region_peak(&ops);
            regions.push((ops, entry, output, choice, before, rw));
        }
    }
    regions.sort_by_key(|r| r.0[0]);
    regions
}

/// The peak of a heuristic plan of `g` (the CLI's default order search) at deterministic
/// work caps (no time limit, effort 1), stopped early by `cancel`.
fn planned_peak(g: &Graph, cancel: Option<&CancelToken>) -> Result<u64, PassError> {
    let opts = crate::planner::PlanOptions {
        strategy: crate::planner::Strategy::Heuristic,
        time_limit: None,
        effort: Some(1),
        cancel: cancel.cloned(),
        ..crate::planner::PlanOptions::default()
    };
    crate::planner::plan(g, &opts)
        .map(|p| p.stats.peak_bytes)
        .map_err(|e| PassError::Unsupported {
            pass: NAME,
            message: format!("planning a tiling candidate failed: {e}"),
        })
}

impl Component {
    fn cuts_tensor(&self, pos: usize) -> Option<TensorId> {
        self.cuts.iter().find(|c| c.0 == pos).map(|c| c.1)
    }
}

/// Least total overhead of covering the component's cuts with regions whose chosen peak is
/// at most `bound` (untiled stretches between non-adjacent cuts count as regions too, so a
/// component whose first cut is not at its start leaves its head untiled). `None` when no
/// partition fits the bound.
fn partition(
    comp: &Component,
    table: &BTreeMap<(usize, usize), Vec<Choice>>,
    bound: u64,
) -> Option<(f64, Picks)> {
    let k = comp.cuts.len();
    if k < 2 {
        return Some((0.0, Vec::new()));
    }
    // dp[j]: least overhead covering cuts[0]..cuts[j]; back[j]: (i, choice).
    let mut dp: Vec<Option<f64>> = vec![None; k];
    let mut back: Vec<Option<(usize, Choice)>> = vec![None; k];
    dp[0] = Some(0.0);
    for j in 1..k {
        for i in 0..j {
            let Some(base) = dp[i] else { continue };
            let key = (comp.cuts[i].0, comp.cuts[j].0);
            let best = match table.get(&key) {
                Some(choices) => choices
                    .iter()
                    .filter(|c| c.peak <= bound)
                    .min_by(|a, b| a.overhead_us.total_cmp(&b.overhead_us))
                    .copied(),
                // A stretch between adjacent cuts that cannot be a region stays as it is.
                None if j == i + 1 => Some(Choice {
                    strips: 1,
                    peak: 0,
                    overhead_us: 0.0,
                }),
                None => None,
            };
            if let Some(c) = best {
                let v = base + c.overhead_us;
                if dp[j].is_none_or(|d| v < d) {
                    dp[j] = Some(v);
                    back[j] = Some((i, c));
                }
            }
        }
    }
    let total = dp[k - 1]?;
    let mut picks = Vec::new();
    let mut j = k - 1;
    while j > 0 {
        let (i, c) = back[j]?;
        picks.push((comp.cuts[i].0, comp.cuts[j].0, c));
        j = i;
    }
    picks.reverse();
    Some((total, picks))
}

/// Whether no tensor made inside the region other than `output` is read outside it or is
/// a graph output, and `output` is made inside it.
fn region_is_closed(ctx: &Ctx<'_>, ops: &[usize], output: TensorId) -> bool {
    let inside: BTreeSet<usize> = ops.iter().copied().collect();
    let mut makes_output = false;
    for &o in ops {
        for &t in &ctx.g.ops[o].outputs {
            if t == output {
                makes_output = true;
                continue;
            }
            if ctx.g.tensor(t).kind == TensorKind::Output
                || ctx.consumers[t.index()].iter().any(|c| !inside.contains(c))
            {
                return false;
            }
        }
    }
    makes_output && ctx.h(output) >= 2
}

/// Connected components of tileable ops and their cuts.
fn components(ctx: &Ctx<'_>) -> Vec<Component> {
    let g = ctx.g;
    let n = g.ops.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for (o, local) in ctx.locals.iter().enumerate() {
        let Some(local) = local else { continue };
        for &slot in &local.spatial {
            let t = g.ops[o].inputs[slot];
            if let Some(p) = g.producer[t.index()] {
                if ctx.locals[p.index()].is_some() {
                    let (a, b) = (find(&mut parent, o), find(&mut parent, p.index()));
                    if a != b {
                        parent[a.max(b)] = a.min(b);
                    }
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for o in 0..n {
        if ctx.locals[o].is_some() {
            let r = find(&mut parent, o);
            groups.entry(r).or_default().push(o);
        }
    }
    let mut out = Vec::new();
    for (_, ops) in groups {
        if ops.len() < 2 {
            continue;
        }
        let pos: BTreeMap<usize, usize> = ops.iter().enumerate().map(|(i, &o)| (o, i)).collect();
        // Last component position reading each tensor through a spatial slot.
        let mut last_read: BTreeMap<TensorId, usize> = BTreeMap::new();
        for (i, &o) in ops.iter().enumerate() {
            if let Some(local) = &ctx.locals[o] {
                for &slot in &local.spatial {
                    last_read.insert(g.ops[o].inputs[slot], i);
                }
            }
        }
        let made_at = |t: TensorId| -> Option<usize> {
            g.producer[t.index()].and_then(|p| pos.get(&p.index()).copied())
        };
        let mut cuts = Vec::new();
        for p in 0..ops.len() {
            // Tensors available before position p and read at p or later.
            let crossing: Vec<TensorId> = last_read
                .iter()
                .filter(|(&t, &lr)| lr >= p && made_at(t).is_none_or(|m| m < p))
                .map(|(&t, _)| t)
                .collect();
            if let [t] = crossing[..] {
                if ctx.h(t) > 0 {
                    cuts.push((p, t));
                }
            }
        }
        let last = ops[ops.len() - 1];
        cuts.push((ops.len(), g.ops[last].outputs[0]));
        out.push(Component { ops, cuts });
    }
    out
}

fn strip_name(base: &str, t: &NewTensor) -> String {
    match t.crop {
        None if t.entry => format!("{base}@in{}", t.strip),
        None => format!("{base}@s{}", t.strip),
        Some(j) => format!("{base}@s{}.crop{j}", t.strip),
    }
}

/// Writes the rewritten graph: original ops in listed order, each tiled region's ops
/// replaced (at its first op's place) by its strip schedule.
fn emit(ctx: &Ctx<'_>, regions: &Regions) -> Result<Graph, PassError> {
    let g = ctx.g;
    if regions.is_empty() {
        return Ok(g.clone());
    }
    let mut region_of: BTreeMap<usize, usize> = BTreeMap::new();
    let mut dropped: BTreeSet<TensorId> = BTreeSet::new();
    for (ri, (ops, _, output, ..)) in regions.iter().enumerate() {
        for &o in ops {
            region_of.insert(o, ri);
            for &t in &g.ops[o].outputs {
                if t != *output {
                    dropped.insert(t);
                }
            }
        }
    }
    let mut tensors: Vec<Tensor> = Vec::new();
    let mut new_id: Vec<Option<TensorId>> = vec![None; g.tensors.len()];
    for (i, t) in g.tensors.iter().enumerate() {
        if !dropped.contains(&TensorId(i as u32)) {
            new_id[i] = Some(TensorId(tensors.len() as u32));
            tensors.push(t.clone());
        }
    }
    let mut names: BTreeSet<String> = g.tensors.iter().map(|t| t.name.clone()).collect();
    let mut op_names: BTreeSet<String> = g.ops.iter().map(|o| o.name.clone()).collect();
    let clash = |what: &str, name: &str| PassError::Unsupported {
        pass: NAME,
        message: format!("the strip {what} name {name:?} is already taken in the graph"),
    };
    // Region tensors, per region.
    let mut region_ids: Vec<Vec<TensorId>> = Vec::new();
    for (_, _, _, _, _, rw) in regions {
        let mut ids = Vec::with_capacity(rw.tensors.len());
        for nt in &rw.tensors {
            let base = g.tensor(nt.base);
            let name = strip_name(&base.name, nt);
            if !names.insert(name.clone()) {
                return Err(clash("tensor", &name));
            }
            let shape = match (&base.shape, shape4(base)) {
                (Some(s), Some(s4)) if nt.size != base.size || s4[2] == nt.rows => {
                    let mut s = s.clone();
                    s[2] = nt.rows as u64;
                    Some(s)
                }
                (s, _) => s.clone(),
            };
            ids.push(TensorId(tensors.len() as u32));
            tensors.push(Tensor {
                name,
                size: nt.size,
                alignment: base.alignment,
                kind: TensorKind::Activation,
                shape,
                dtype: base.dtype.clone(),
            });
        }
        region_ids.push(ids);
    }
    let mut ops: Vec<Op> = Vec::new();
    let mut emitted: BTreeSet<usize> = BTreeSet::new();
    for (o, op) in g.ops.iter().enumerate() {
        let Some(&ri) = region_of.get(&o) else {
            let mut op = op.clone();
            for t in op.inputs.iter_mut().chain(op.outputs.iter_mut()) {
                *t = new_id[t.index()].ok_or_else(|| PassError::Unsupported {
                    pass: NAME,
                    message: format!("op {:?} reads a tensor inside a tiled region", op.name),
                })?;
            }
            ops.push(op);
            continue;
        };
        if !emitted.insert(ri) {
            continue;
        }
        let rw = &regions[ri].5;
        let ids = &region_ids[ri];
        let map = |r: &TRef| -> Result<TensorId, PassError> {
            match *r {
                TRef::New(i) => Ok(ids[i]),
                TRef::Old(t) => new_id[t.index()].ok_or_else(|| PassError::Unsupported {
                    pass: NAME,
                    message: format!("tiled region reads dropped tensor {:?}", g.tensor(t).name),
                }),
            }
        };
        for nop in rw.ops.iter() {
            let inputs = nop.inputs.iter().map(map).collect::<Result<Vec<_>, _>>()?;
            let outputs = nop.outputs.iter().map(map).collect::<Result<Vec<_>, _>>()?;
            let first_out = &tensors[outputs[0].index()].name;
            let built = match &nop.kind {
                NewKind::Slice { start } => Op {
                    name: format!("slice:{first_out}"),
                    op_type: "slice_rows".into(),
                    inputs,
                    outputs,
                    flops: Some(0.0),
                    time_us: None,
                    workspace: 0,
                    attrs: Some(json!({"dim": 2, "start": start})),
                    inplace: Vec::new(),
                    fused: None,
                },
                NewKind::Concat => Op {
                    name: format!("concat:{first_out}"),
                    op_type: "concat".into(),
                    inputs,
                    outputs,
                    flops: Some(0.0),
                    time_us: None,
                    workspace: 0,
                    attrs: Some(json!({"dim": 2})),
                    inplace: Vec::new(),
                    fused: None,
                },
                NewKind::Strip { op: base, pads } => {
                    let orig = &g.ops[*base];
                    let local =
                        ctx.locals[*base]
                            .as_ref()
                            .ok_or_else(|| PassError::Unsupported {
                                pass: NAME,
                                message: format!("op {:?} is not tileable", orig.name),
                            })?;
                    let (num, den) = nop.frac;
                    Op {
                        name: format!("{}@s{}", orig.name, nop.strip),
                        op_type: orig.op_type.clone(),
                        inputs,
                        outputs,
                        flops: orig.flops.map(|f| f * num as f64 / den.max(1) as f64),
                        time_us: orig.time_us.map(|t| t * num as f64 / den.max(1) as f64),
                        workspace: scaled_u64(orig.workspace, num, den),
                        attrs: strip_attrs(orig, local, *pads),
                        inplace: orig.inplace.clone(),
                        // Fused ops are not row-local (the pass runs before fusion).
                        fused: None,
                    }
                }
            };
            if !op_names.insert(built.name.clone()) {
                return Err(clash("op", &built.name));
            }
            ops.push(built);
        }
    }
    let out = Graph {
        name: g.name.clone(),
        alignment: g.alignment,
        meta: g.meta.clone(),
        tensors,
        ops,
        producer: Vec::new(),
    };
    out.rebuilt()
        .map_err(|source| PassError::Invalid { pass: NAME, source })
}

fn strip_attrs(orig: &Op, local: &Local, (top, bottom): (usize, usize)) -> Option<Value> {
    let mut attrs = match &orig.attrs {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    if let Some(pw) = local.conv_pad_w {
        attrs.insert("padding".into(), json!([top, pw]));
        attrs.insert("pad_bottom".into(), json!(bottom));
    } else if let Some((kernel, stride, pw, ceil_w)) = local.pool {
        attrs.insert("kernel_size".into(), json!([kernel.0, kernel.1]));
        attrs.insert("stride".into(), json!([stride.0, stride.1]));
        attrs.insert("padding".into(), json!([top, pw]));
        attrs.insert("pad_bottom".into(), json!(bottom));
        attrs.insert("ceil_mode".into(), json!(ceil_w));
    } else if attrs.is_empty() {
        return orig.attrs.clone();
    }
    Some(Value::Object(attrs))
}
