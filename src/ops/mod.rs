//! Op semantics, below the cost model and above the graph format: what an op computes and
//! needs, independent of any device or plan. Today: 2-D convolution — its geometry
//! ([`Conv2d`], read from the graph by [`conv_shape`]), the algorithms that implement it
//! ([`ConvAlgo`], named by the op's `algo` attribute: [`choice_of`], [`option_name`]) and the
//! workspace each algorithm needs ([`workspace_elems`], [`workspace_elems_chunked`]; the
//! formulas are in [`crate::conv_algo`]'s module doc). The executor's kernels, the cost
//! model, the per-conv choice ([`crate::conv_algo`]), tiling and the plan's `algo` field all
//! read them from here. Also whether an op may run twice ([`may_recompute`], in
//! [`recompute`]): random and stateful ops may not, which every budget strategy, the tiling
//! pass and the validator honour.

pub mod kernel;
pub mod recompute;

pub use recompute::may_recompute;

use crate::graph::{Graph, Op, TensorId};
use serde_json::Value;

/// The op attribute that names a conv's chosen algorithm.
pub const ALGO_ATTR: &str = "algo";
/// Bytes per element (the model covers f32 convs).
pub(crate) const ELEM: u64 = 4;
/// Chunk counts tried for im2col and Winograd (each at most the columns / tiles).
pub const CHUNKS: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// A convolution implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConvAlgo {
    /// Nested loops, no workspace.
    Direct,
    /// im2col column matrix + GEMM.
    Im2col,
    /// Winograd F(2×2, 3×3).
    WinogradF2,
    /// Winograd F(4×4, 3×3).
    WinogradF4,
}

impl ConvAlgo {
    /// Every algorithm.
    pub const ALL: [ConvAlgo; 4] = [
        ConvAlgo::Direct,
        ConvAlgo::Im2col,
        ConvAlgo::WinogradF2,
        ConvAlgo::WinogradF4,
    ];

    /// Stable name (the `algo` attribute and plan field).
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgo::Direct => "direct",
            ConvAlgo::Im2col => "im2col",
            ConvAlgo::WinogradF2 => "winograd_f2",
            ConvAlgo::WinogradF4 => "winograd_f4",
        }
    }

    /// The algorithm of a name.
    pub fn from_name(name: &str) -> Option<ConvAlgo> {
        ConvAlgo::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Output tile size m of a Winograd algorithm.
    pub fn winograd_m(self) -> Option<usize> {
        match self {
            ConvAlgo::WinogradF2 => Some(2),
            ConvAlgo::WinogradF4 => Some(4),
            _ => None,
        }
    }

    /// Multiplies saved per output by Winograd F(m×m, 3×3): m²·9 / α².
    pub fn multiply_reduction(self) -> f64 {
        match self.winograd_m() {
            Some(m) => {
                let alpha = (m + 2) as f64;
                (m * m * 9) as f64 / (alpha * alpha)
            }
            None => 1.0,
        }
    }
}

/// An algorithm and chunk count as a name (`winograd_f4`, `im2col/4`).
pub fn option_name(algo: ConvAlgo, chunks: u32) -> String {
    if chunks > 1 {
        format!("{}/{chunks}", algo.name())
    } else {
        algo.name().to_string()
    }
}

/// Parses `NAME` or `NAME/CHUNKS` (chunks ≥ 1; direct is never chunked).
pub fn parse_option_name(name: &str) -> Option<(ConvAlgo, u32)> {
    let (base, chunks) = match name.split_once('/') {
        Some((b, c)) => (b, c.parse::<u32>().ok().filter(|&c| c >= 1)?),
        None => (name, 1),
    };
    let algo = ConvAlgo::from_name(base)?;
    (algo != ConvAlgo::Direct || chunks == 1).then_some((algo, chunks))
}

/// The conv member of a fused op ([`crate::fused`]): its first member, when that is a conv.
/// A fused conv → batch_norm → activation runs its conv with the member's algorithm inside
/// the fused op's workspace, so the choice is the member's and is modelled on the fused op
/// (its flops and operands are the conv's plus the cheap element-wise tail).
pub(crate) fn fused_conv(op: &Op) -> Option<&crate::fused::Member> {
    let m = op.fused.as_ref()?.members.first()?;
    is_conv_type_name(&m.op_type).then_some(m)
}

/// The attributes that carry an op's algorithm: its own, or its fused conv member's.
pub(crate) fn algo_attrs(op: &Op) -> Option<&serde_json::Value> {
    match fused_conv(op) {
        Some(m) => m.attrs.as_ref(),
        None => op.attrs.as_ref(),
    }
}

/// The workspace an op's conv needs as the graph gives it (a fused op: its conv member's).
pub(crate) fn conv_workspace(op: &Op) -> u64 {
    fused_conv(op).map_or(op.workspace, |m| m.workspace)
}

/// The algorithm and chunk count named by an op's `algo` attribute (a fused op: its conv
/// member's).
pub fn choice_of(op: &Op) -> Option<(ConvAlgo, u32)> {
    algo_attrs(op)?
        .get(ALGO_ATTR)?
        .as_str()
        .and_then(parse_option_name)
}

/// The algorithm named by an op's `algo` attribute.
pub fn algo_of(op: &Op) -> Option<ConvAlgo> {
    choice_of(op).map(|(a, _)| a)
}

pub(crate) fn is_conv_type_name(op_type: &str) -> bool {
    let ty = op_type.trim_start_matches("aten.").trim_end_matches('_');
    matches!(ty, "conv2d" | "convolution" | "conv")
}

/// A conv, or a fused op whose first member is a conv.
pub(crate) fn is_conv_type(op: &Op) -> bool {
    is_conv_type_name(&op.op_type) || fused_conv(op).is_some()
}

/// The conv parameters of an op the model covers: a conv2d with f32 shapes (or a fused op
/// led by one) whose workspace is not given by the graph (or was chosen by this model: it has
/// an `algo` attribute).
pub fn modelled_conv(graph: &Graph, op: &Op) -> Option<Conv2d> {
    if !is_conv_type(op) || (conv_workspace(op) > 0 && algo_of(op).is_none()) {
        return None;
    }
    if fused_conv(op).is_some() {
        let mg = crate::fused::MemberGraph::of(graph, op)?;
        return conv_shape(&mg.graph, mg.graph.ops.first()?);
    }
    conv_shape(graph, op)
}

pub(crate) fn is_pointwise(c: &Conv2d) -> bool {
    c.kh == 1 && c.kw == 1 && c.stride == (1, 1) && c.pad == (0, 0)
}

/// Whether `algo` can run `c`.
pub fn applies(c: &Conv2d, algo: ConvAlgo) -> bool {
    match algo {
        ConvAlgo::Direct | ConvAlgo::Im2col => true,
        ConvAlgo::WinogradF2 | ConvAlgo::WinogradF4 => {
            c.kh == 3 && c.kw == 3 && c.stride == (1, 1) && c.dilation == (1, 1) && c.groups == 1
        }
    }
}

/// Workspace elements of `algo` on `c` (module doc), `None` when it does not apply.
pub fn workspace_elems(c: &Conv2d, algo: ConvAlgo) -> Option<u64> {
    if !applies(c, algo) {
        return None;
    }
    let u = |x: usize| x as u64;
    Some(match algo {
        ConvAlgo::Direct => 0,
        ConvAlgo::Im2col if is_pointwise(c) => 0,
        ConvAlgo::Im2col => u(c.c / c.groups) * u(c.kh) * u(c.kw) * u(c.n) * u(c.oh) * u(c.ow),
        ConvAlgo::WinogradF2 | ConvAlgo::WinogradF4 => {
            let (input, filter, output) = winograd_parts(c, algo.winograd_m().unwrap_or(2));
            input + filter + output
        }
    })
}

/// Winograd F(m×m, 3×3) buffers in elements: transformed input `α²·C·P`, filter `α²·C·K`,
/// output `α²·K·P`.
pub fn winograd_parts(c: &Conv2d, m: usize) -> (u64, u64, u64) {
    let alpha2 = ((m + 2) * (m + 2)) as u64;
    let p = (c.n * c.oh.div_ceil(m) * c.ow.div_ceil(m)) as u64;
    let (cc, k) = (c.c as u64, c.o as u64);
    (alpha2 * cc * p, alpha2 * cc * k, alpha2 * k * p)
}

/// Workspace bytes of `algo` on `c`.
pub fn workspace_bytes(c: &Conv2d, algo: ConvAlgo) -> Option<u64> {
    workspace_elems(c, algo).map(|e| e * ELEM)
}

/// Columns (im2col: `N·Ho·Wo`) or tiles (Winograd: `P`) that chunking splits; 0 for direct
/// and pointwise im2col (nothing to chunk).
pub fn chunk_units(c: &Conv2d, algo: ConvAlgo) -> u64 {
    match algo {
        ConvAlgo::Direct => 0,
        ConvAlgo::Im2col if is_pointwise(c) => 0,
        ConvAlgo::Im2col => (c.n * c.oh * c.ow) as u64,
        ConvAlgo::WinogradF2 | ConvAlgo::WinogradF4 => {
            let m = algo.winograd_m().unwrap_or(2);
            (c.n * c.oh.div_ceil(m) * c.ow.div_ceil(m)) as u64
        }
    }
}

/// Workspace elements of `algo` on `c` run in `chunks` chunks: im2col
/// `cg·Kh·Kw × ⌈N·Ho·Wo / chunks⌉`; Winograd the whole transformed filter `α²·C·K` plus
/// `α²·(C + K)·⌈P / chunks⌉` for one chunk of transformed input and output tiles.
pub fn workspace_elems_chunked(c: &Conv2d, algo: ConvAlgo, chunks: u32) -> Option<u64> {
    let units = chunk_units(c, algo);
    if chunks <= 1 || units == 0 {
        return workspace_elems(c, algo).filter(|_| chunks >= 1);
    }
    if u64::from(chunks) > units || !applies(c, algo) {
        return None;
    }
    let per = units.div_ceil(u64::from(chunks));
    Some(match algo.winograd_m() {
        None => (c.c / c.groups * c.kh * c.kw) as u64 * per,
        Some(m) => {
            let alpha2 = ((m + 2) * (m + 2)) as u64;
            let (cc, k) = (c.c as u64, c.o as u64);
            alpha2 * cc * k + alpha2 * (cc + k) * per
        }
    })
}

/// 2-D convolution (NCHW, weight [O, C/groups, kh, kw]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conv2d {
    /// Input index of the bias, when given.
    pub bias: Option<usize>,
    /// Batch.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub o: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Strides (h, w).
    pub stride: (usize, usize),
    /// Padding (h, w).
    pub pad: (usize, usize),
    /// Dilation (h, w).
    pub dilation: (usize, usize),
    /// Groups.
    pub groups: usize,
    /// The implementation the graph chose (`attrs.algo`, [`crate::conv_algo`], [`ConvAlgo`]); `None`:
    /// im2col into the workspace when big enough, else into private scratch.
    pub algo: Option<ConvAlgo>,
}

impl Conv2d {
    /// Rows of one group's im2col matrix (C/groups · kh · kw).
    pub fn col_rows(&self) -> usize {
        self.c / self.groups * self.kh * self.kw
    }
    /// Bytes of one im2col matrix (one image, one group).
    pub fn col_bytes(&self) -> u64 {
        (self.col_rows() * self.oh * self.ow * 4) as u64
    }
    /// Whether the input can be used as the im2col matrix directly (1×1, stride 1, no pad).
    pub fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.stride == (1, 1) && self.pad == (0, 0)
    }
}

/// The shape parameters of a conv2d op (f32 NCHW input, weight `[O, C/groups, kh, kw]`,
/// optional bias, attrs stride/padding/dilation/groups; not transposed), with the algorithm
/// named by its `algo` attribute; `None` when the op does not fit.
pub fn conv_shape(graph: &Graph, op: &Op) -> Option<Conv2d> {
    if attr(op, "transposed").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if !(2..=3).contains(&ins.len()) || ins[0].len() != 4 || ins[1].len() != 4 || out.len() != 4 {
        return None;
    }
    let (x, wt) = (&ins[0], &ins[1]);
    let groups = attr(op, "groups")
        .and_then(Value::as_u64)
        .and_then(|g| usize::try_from(g).ok())
        .unwrap_or(1);
    let stride = attr_pair(op, "stride", 1)?;
    let pad = attr_pair(op, "padding", 0)?;
    let dilation = attr_pair(op, "dilation", 1)?;
    // `pad_bottom` (spatial tiling's strips): the bottom padding of H when it differs from
    // the top one (`padding[0]`).
    let pad_bottom = attr_usize(op, "pad_bottom")?.unwrap_or(pad.0);
    let (n, c, h, w) = (x[0], x[1], x[2], x[3]);
    let (o, cg, kh, kw) = (wt[0], wt[1], wt[2], wt[3]);
    if groups == 0
        || c % groups != 0
        || o % groups != 0
        || cg != c / groups
        || stride.0 == 0
        || stride.1 == 0
        || dilation.0 == 0
        || dilation.1 == 0
    {
        return None;
    }
    let span_h = dilation.0 * (kh - 1) + 1;
    let span_w = dilation.1 * (kw - 1) + 1;
    if h + pad.0 + pad_bottom < span_h || w + 2 * pad.1 < span_w {
        return None;
    }
    let oh = (h + pad.0 + pad_bottom - span_h) / stride.0 + 1;
    let ow = (w + 2 * pad.1 - span_w) / stride.1 + 1;
    if out != [n, o, oh, ow] {
        return None;
    }
    let bias = if ins.len() == 3 {
        (numel(&ins[2]) == o).then_some(2)?;
        Some(2)
    } else {
        None
    };
    Some(Conv2d {
        bias,
        n,
        c,
        h,
        w,
        o,
        kh,
        kw,
        oh,
        ow,
        stride,
        pad,
        dilation,
        groups,
        algo: algo_of(op),
    })
}

/// Dimensions of an f32 tensor whose size is exactly 4 · numel (numel > 0).
pub(crate) fn f32_dims(graph: &Graph, t: TensorId) -> Option<Vec<usize>> {
    let tensor = graph.tensor(t);
    if tensor.dtype.as_deref() != Some("f32") {
        return None;
    }
    let shape = tensor.shape.as_ref()?;
    let mut numel: u64 = 1;
    for &d in shape {
        numel = numel.checked_mul(d)?;
    }
    if numel == 0 || numel.checked_mul(4)? != tensor.size || numel > u64::from(u32::MAX) {
        return None;
    }
    shape.iter().map(|&d| usize::try_from(d).ok()).collect()
}

/// Elements of a shape.
pub(crate) fn numel(d: &[usize]) -> usize {
    d.iter().product()
}

/// Dimensions of every input of `op` ([`f32_dims`]).
pub(crate) fn inputs_dims(graph: &Graph, op: &Op) -> Option<Vec<Vec<usize>>> {
    op.inputs.iter().map(|&t| f32_dims(graph, t)).collect()
}

/// The attribute `key` of `op`.
pub(crate) fn attr<'a>(op: &'a Op, key: &str) -> Option<&'a Value> {
    op.attrs.as_ref()?.get(key)
}

/// An attribute given as an int or a list of one or two ints, as a pair.
pub(crate) fn attr_pair(op: &Op, key: &str, default: usize) -> Option<(usize, usize)> {
    let Some(v) = attr(op, key) else {
        return Some((default, default));
    };
    let get = |v: &Value| v.as_u64().and_then(|x| usize::try_from(x).ok());
    match v {
        Value::Array(a) if a.len() == 2 => Some((get(&a[0])?, get(&a[1])?)),
        Value::Array(a) if a.len() == 1 => {
            let x = get(&a[0])?;
            Some((x, x))
        }
        Value::Array(a) if a.is_empty() => Some((default, default)),
        other => {
            let x = get(other)?;
            Some((x, x))
        }
    }
}

/// An optional non-negative integer attribute: `Some(None)` when absent, `None` when malformed.
pub(crate) fn attr_usize(op: &Op, key: &str) -> Option<Option<usize>> {
    match attr(op, key) {
        None => Some(None),
        Some(v) => v.as_u64().and_then(|x| usize::try_from(x).ok()).map(Some),
    }
}

/// The `algo` field of a conv's exec instruction: the op's chosen algorithm (and chunks) as
/// named by its `algo` attribute, `None` for every other op.
pub fn algo_attr(op: &Op) -> Option<String> {
    choice_of(op).map(|(a, c)| option_name(a, c))
}
