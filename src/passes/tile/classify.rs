//! Which ops the tiling pass can split into strips, and where: [`classify`] decides per op
//! whether it is row-local and how its output rows map to its input rows ([`RowMap`],
//! [`input_rows`]); [`components`] groups the tileable ops into connected components and
//! finds their *cuts* (positions where exactly one tensor crosses), the candidate region
//! boundaries. Kernel selection (`select`, [`Kernel`], [`KernelMode`]) is imported here only.

use super::{Ctx, Rows};
use crate::graph::{Graph, Op, Tensor, TensorId, TensorKind};
use crate::ops::kernel::{self as kernels, Kernel, KernelMode};
use std::collections::{BTreeMap, BTreeSet};

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

/// What the pass knows about a tileable op.
#[derive(Debug, Clone)]
pub(super) struct Local {
    pub(super) map: RowMap,
    /// Input slots read row by row (the others are weights or broadcast along H).
    pub(super) spatial: Vec<usize>,
    /// Pool window attrs to write on strips: (kernel, stride, pad_w, ceil_w).
    pub(super) pool: Option<PoolWindow>,
    /// Conv W padding.
    pub(super) conv_pad_w: Option<usize>,
}

pub(super) fn shape4(t: &Tensor) -> Option<[usize; 4]> {
    let s = t.shape.as_ref()?;
    if s.len() != 4 || s.contains(&0) {
        return None;
    }
    Some([s[0] as usize, s[1] as usize, s[2] as usize, s[3] as usize])
}

/// Bytes of one H row of a 4-D tensor (size / H), when exact.
pub(super) fn row_bytes(t: &Tensor) -> Option<u64> {
    let h = shape4(t)?[2] as u64;
    (t.size % h == 0).then_some(t.size / h)
}

pub(super) fn classify(g: &Graph, op: &Op, consumers: &[Vec<usize>]) -> Option<Local> {
    // Strips recompute their halo rows: an op that may not run twice is never tiled.
    if !crate::ops::may_recompute(op) {
        return None;
    }
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

/// A component of tileable ops, its cuts and the regions' costs.
pub(super) struct Component {
    /// Op indices in listed order.
    pub(super) ops: Vec<usize>,
    /// Cut positions (number of component ops before the cut) and the tensor crossing there.
    pub(super) cuts: Vec<(usize, TensorId)>,
}

impl Component {
    pub(super) fn cuts_tensor(&self, pos: usize) -> Option<TensorId> {
        self.cuts.iter().find(|c| c.0 == pos).map(|c| c.1)
    }
}

/// Whether no tensor made inside the region other than `output` is read outside it or is
/// a graph output, and `output` is made inside it.
pub(super) fn region_is_closed(ctx: &Ctx<'_>, ops: &[usize], output: TensorId) -> bool {
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
pub(super) fn components(ctx: &Ctx<'_>) -> Vec<Component> {
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
