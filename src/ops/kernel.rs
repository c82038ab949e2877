//! Kernel selection, shared by every device: a registry maps op types to a selector that
//! reads the op's tensors (f32 dtype, shapes, `size == 4 · numel`) and attributes and
//! returns a [`Kernel`] with all shape parameters resolved, or `None` when the op does not
//! fit that real kernel. Ops without a fitting real kernel run the mixing kernel, which
//! reads every byte of every input and writes every byte of every output
//! (`memplan_executor::data`). A real kernel computes its first [`Kernel::computed_outputs`]
//! outputs; any further outputs (e.g. batch_norm's saved statistics) get the mixing fill.
//!
//! Selection is a pure function of the graph, so the plan run, the reference run and every
//! device use the same kernel for an op.

pub mod fused;

use crate::graph::{Graph, Op};
use crate::ops::{attr, attr_pair, attr_usize, f32_dims, inputs_dims, numel};
pub use crate::ops::{conv_shape, Conv2d};
use serde_json::Value;

/// How a tensor's bytes are interpreted by the generator and the mixing kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// f32 elements (dtype f32 and `size == 4 · numel`).
    F32,
    /// Raw bytes.
    Bytes,
}

/// How each tensor is filled (f32 elements or raw bytes).
pub fn fills(graph: &Graph) -> Vec<Fill> {
    graph
        .tensors
        .iter()
        .map(|t| {
            let numel = t
                .shape
                .as_ref()
                .map(|s| s.iter().try_fold(1u64, |a, &d| a.checked_mul(d)));
            match (t.dtype.as_deref(), numel) {
                (Some("f32"), Some(Some(n))) if n > 0 && n.checked_mul(4) == Some(t.size) => {
                    Fill::F32
                }
                _ => Fill::Bytes,
            }
        })
        .collect()
}

/// Element-wise unary functions (f32, NaN-propagating like PyTorch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unary {
    /// max(x, 0).
    Relu,
    /// 1 / (1 + e^−x).
    Sigmoid,
    /// x · sigmoid(x).
    Silu,
    /// x · Φ(x) with erf from Abramowitz–Stegun 7.1.26 (|error| < 1.5e−7).
    Gelu,
    /// clamp(x, min, max).
    Hardtanh(f32, f32),
    /// tanh(x).
    Tanh,
    /// −x.
    Neg,
}

/// Element-wise binary functions with NumPy broadcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// a + b.
    Add,
    /// a − b.
    Sub,
    /// a · b.
    Mul,
    /// a / b.
    Div,
}

/// How one operand of a binary op maps output elements to its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bcast {
    /// Same element count: element i.
    Flat,
    /// Strides (0 on broadcast dimensions) over the output's dimensions.
    Strides(Vec<usize>),
}

/// (Batched) matrix product `out[b] = a[b] · op(b[b]) (+ bias)`, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matmul {
    /// Input index of the left operand.
    pub a: usize,
    /// Input index of the right operand.
    pub b: usize,
    /// Input index of a bias of length `n`, added to every row.
    pub bias: Option<usize>,
    /// Number of products.
    pub batch: usize,
    /// Rows of a and out.
    pub m: usize,
    /// Columns of out.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Elements between consecutive matrices of b (0: one b shared by all).
    pub b_batch_stride: usize,
    /// b is stored as [n, k] (a linear layer's weight) instead of [k, n].
    pub b_trans: bool,
}

/// 2-D max or average pooling over `planes` planes of h × w.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// Max (true) or average.
    pub max: bool,
    /// N · C.
    pub planes: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Window (h, w).
    pub kernel: (usize, usize),
    /// Strides (h, w).
    pub stride: (usize, usize),
    /// Padding (h, w).
    pub pad: (usize, usize),
    /// Average: count padded elements in the divisor (PyTorch's default).
    pub count_include_pad: bool,
    /// Max: the second output receives the argmax (i64, index within the plane).
    pub indices: bool,
}

/// A kernel with its shape parameters resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum Kernel {
    /// The deterministic mixing kernel.
    Mix,
    /// out = input `src` (same byte size).
    Copy {
        /// Input index copied.
        src: usize,
    },
    /// `out[i] = f(in[i])`.
    Unary(Unary),
    /// out = f(a, b) with broadcasting over `dims`.
    Binary {
        /// The function.
        f: Binary,
        /// Output dimensions.
        dims: Vec<usize>,
        /// Left operand mapping.
        a: Bcast,
        /// Right operand mapping.
        b: Bcast,
    },
    /// Matrix product.
    Matmul(Matmul),
    /// Convolution (im2col + GEMM).
    Conv2d(Conv2d),
    /// Batch norm `(x − mean) / √(var + eps) · weight + bias`: with inputs x, weight, bias,
    /// running mean, running var (inference), or x, weight, bias and the batch's own
    /// statistics (training forward; then outputs 1 and 2, when `[C]`, get mean and invstd).
    BatchNorm {
        /// Batch.
        n: usize,
        /// Channels.
        c: usize,
        /// Elements per channel plane.
        spatial: usize,
        /// Epsilon.
        eps: f32,
        /// Statistics from the batch (3 inputs) instead of running statistics (5 inputs).
        batch_stats: bool,
        /// Outputs 1 and 2 are `[C]` f32 and receive mean and 1/√(var + eps).
        stats_outputs: bool,
    },
    /// Pooling.
    Pool(Pool),
    /// Adaptive average pooling (PyTorch's bin boundaries).
    AdaptiveAvgPool {
        /// N · C.
        planes: usize,
        /// Input height.
        h: usize,
        /// Input width.
        w: usize,
        /// Output height.
        oh: usize,
        /// Output width.
        ow: usize,
    },
    /// Softmax over the last dimension.
    Softmax {
        /// Rows.
        rows: usize,
        /// Last-dimension length.
        cols: usize,
    },
    /// Sum or mean over the dimensions where `reduce` is set (f32 accumulation in input
    /// order).
    Reduce {
        /// Mean instead of sum.
        mean: bool,
        /// Input dimensions.
        dims: Vec<usize>,
        /// Which dimensions are reduced.
        reduce: Vec<bool>,
    },
    /// Concatenation along one dimension: per outer index, each input contributes
    /// `inner[j]` consecutive elements.
    Concat {
        /// Product of the dimensions before the concatenated one.
        outer: usize,
        /// Elements per outer index of each input.
        inner: Vec<usize>,
    },
    /// Rows `[start, start + rows)` of one dimension (a byte copy, any dtype): per outer
    /// index, `rows · row_bytes` consecutive bytes from an input holding `rows_in` rows.
    /// Spatial tiling's strips read their input rows with it (type `slice_rows`).
    SliceRows {
        /// Product of the dimensions before the sliced one.
        outer: usize,
        /// Length of the sliced dimension in the input.
        rows_in: usize,
        /// First row copied.
        start: usize,
        /// Rows copied.
        rows: usize,
        /// Bytes per row (product of the later dimensions · element size).
        row_bytes: usize,
    },
    /// Constant padding of the two spatial dimensions of NCHW planes.
    Pad(Pad),
    /// A fused op: its members' kernels run in sequence ([`fused`]).
    Fused(Box<fused::FusedKernel>),
}

/// Constant spatial padding (`pad` / `constant_pad_nd` over the last two dimensions).
#[derive(Debug, Clone, PartialEq)]
pub struct Pad {
    /// N · C.
    pub planes: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Rows added above.
    pub top: usize,
    /// Rows added below.
    pub bottom: usize,
    /// Columns added on the left.
    pub left: usize,
    /// Columns added on the right.
    pub right: usize,
    /// The fill value.
    pub value: f32,
}

/// Which kernels to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelMode {
    /// Real f32 math where an op fits a registered kernel, mixing elsewhere.
    #[default]
    Real,
    /// The mixing kernel for every op (byte-exact on every device).
    Mix,
}

impl Kernel {
    /// How many leading outputs the kernel computes; the rest get the mixing fill.
    pub fn computed_outputs(&self) -> usize {
        match self {
            Kernel::Mix => 0,
            Kernel::Pool(p) if p.indices => 2,
            Kernel::BatchNorm {
                stats_outputs: true,
                ..
            } => 3,
            Kernel::Fused(f) => f.outputs,
            _ => 1,
        }
    }

    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Mix => "mix",
            Kernel::Copy { .. } => "copy",
            Kernel::Unary(_) => "unary",
            Kernel::Binary { .. } => "binary",
            Kernel::Matmul(_) => "matmul",
            Kernel::Conv2d(_) => "conv2d",
            Kernel::BatchNorm { .. } => "batch_norm",
            Kernel::Pool(_) => "pool",
            Kernel::AdaptiveAvgPool { .. } => "adaptive_avg_pool",
            Kernel::Softmax { .. } => "softmax",
            Kernel::Reduce { .. } => "reduce",
            Kernel::Concat { .. } => "concat",
            Kernel::Pad(_) => "pad",
            Kernel::Fused(_) => "fused",
            Kernel::SliceRows { .. } => "slice_rows",
        }
    }

    /// Whether the kernel does floating-point arithmetic whose last bits may differ between
    /// devices (everything but mix and copy).
    pub fn is_float_math(&self) -> bool {
        match self {
            Kernel::Mix | Kernel::Copy { .. } | Kernel::Pad(_) | Kernel::SliceRows { .. } => false,
            Kernel::Fused(f) => f.steps.iter().any(|s| s.kernel.is_float_math()),
            _ => true,
        }
    }
}

type Selector = fn(&Graph, &Op) -> Option<Kernel>;

/// The registry: op types (as in graphs, ATen names included) → selector.
const REGISTRY: &[(&[&str], Selector)] = &[
    (&["conv2d", "convolution", "conv"], select_conv),
    (&["matmul", "mm", "bmm", "addmm", "linear"], select_matmul),
    (
        &["relu", "sigmoid", "silu", "gelu", "hardtanh", "tanh", "neg"],
        select_unary,
    ),
    (&["add", "sub", "mul", "div"], select_binary),
    (&["batch_norm", "native_batch_norm"], select_batch_norm),
    (&["max_pool2d", "avg_pool2d"], select_pool),
    (&["adaptive_avg_pool2d"], select_adaptive),
    (&["softmax", "_softmax"], select_softmax),
    (&["sum", "mean"], select_reduce),
    (&["concat", "cat"], select_concat),
    (&["pad", "constant_pad_nd"], select_pad),
    (&["slice_rows"], select_slice_rows),
    (
        &[
            "clone",
            "_unsafe_view",
            "view",
            "reshape",
            "contiguous",
            "alias",
            "detach",
            "copy",
        ],
        select_copy,
    ),
];

/// The op types that have a real kernel (for documentation and reports).
pub fn real_op_types() -> Vec<&'static str> {
    let mut v: Vec<&str> = REGISTRY
        .iter()
        .flat_map(|(n, _)| n.iter().copied())
        .collect();
    v.sort_unstable();
    v
}

/// Chooses the kernel of every op.
pub fn select_all(graph: &Graph, mode: KernelMode) -> Vec<Kernel> {
    graph.ops.iter().map(|op| select(graph, op, mode)).collect()
}

/// Chooses an op's kernel.
pub fn select(graph: &Graph, op: &Op, mode: KernelMode) -> Kernel {
    // A fused op runs its members with their own kernels, in either mode.
    if op.fused.is_some() {
        return fused::select_fused(graph, op, mode)
            .map(|f| Kernel::Fused(Box::new(f)))
            .unwrap_or(Kernel::Mix);
    }
    if mode == KernelMode::Mix {
        return Kernel::Mix;
    }
    let ty = op.op_type.trim_start_matches("aten.").trim_end_matches('_');
    REGISTRY
        .iter()
        .find(|(names, _)| names.contains(&ty))
        .and_then(|(_, f)| f(graph, op))
        .unwrap_or(Kernel::Mix)
}

fn attr_f32(op: &Op, key: &str, default: f32) -> f32 {
    attr(op, key)
        .and_then(Value::as_f64)
        .map(|x| x as f32)
        .unwrap_or(default)
}

fn select_copy(graph: &Graph, op: &Op) -> Option<Kernel> {
    let out = graph.tensor(*op.outputs.first()?);
    // `copy(dst, src)` copies its last input; the view-like ops have one input, but
    // `reshape` may also read a shape operand (ONNX Reshape's `shape`, Squeeze's `axes`),
    // which the copy ignores: the output's shape is already static.
    let ty = op.op_type.trim_start_matches("aten.").trim_end_matches('_');
    let src = if ty == "copy" {
        op.inputs.len().checked_sub(1)?
    } else {
        0
    };
    let max_inputs = match ty {
        "copy" | "reshape" => 2,
        _ => 1,
    };
    if op.inputs.is_empty()
        || op.inputs.len() > max_inputs
        || graph.tensor(op.inputs[src]).size != out.size
    {
        return None;
    }
    Some(Kernel::Copy { src })
}

fn select_unary(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if ins.len() != 1 || numel(&ins[0]) != numel(&out) {
        return None;
    }
    let ty = op.op_type.trim_start_matches("aten.").trim_end_matches('_');
    let f = match ty {
        "relu" => Unary::Relu,
        "sigmoid" => Unary::Sigmoid,
        "silu" => Unary::Silu,
        "gelu" => Unary::Gelu,
        "hardtanh" => Unary::Hardtanh(attr_f32(op, "min_val", -1.0), attr_f32(op, "max_val", 1.0)),
        "tanh" => Unary::Tanh,
        "neg" => Unary::Neg,
        _ => return None,
    };
    Some(Kernel::Unary(f))
}

/// NumPy broadcasting of `inp` against `out` (right-aligned), as strides over `out`.
fn broadcast(inp: &[usize], out: &[usize]) -> Option<Bcast> {
    if numel(inp) == numel(out) {
        return Some(Bcast::Flat);
    }
    if inp.len() > out.len() {
        return None;
    }
    let lead = out.len() - inp.len();
    let mut strides = vec![0usize; out.len()];
    let mut stride = 1usize;
    for i in (0..inp.len()).rev() {
        let (d, o) = (inp[i], out[lead + i]);
        if d == o {
            strides[lead + i] = stride;
        } else if d != 1 {
            return None;
        }
        stride *= d;
    }
    Some(Bcast::Strides(strides))
}

fn select_binary(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if ins.len() != 2 {
        return None;
    }
    let ty = op.op_type.trim_start_matches("aten.").trim_end_matches('_');
    let f = match ty {
        "add" => Binary::Add,
        "sub" => Binary::Sub,
        "mul" => Binary::Mul,
        "div" => Binary::Div,
        _ => return None,
    };
    Some(Kernel::Binary {
        f,
        a: broadcast(&ins[0], &out)?,
        b: broadcast(&ins[1], &out)?,
        dims: out,
    })
}

fn select_matmul(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if out.len() < 2 {
        return None;
    }
    let n = *out.last()?;
    let total_rows = numel(&out) / n;
    // addmm(bias, a, b): a bias of n elements comes first; linear(a, weight, bias) (and
    // ONNX Gemm) puts it last; otherwise two operands.
    let (bias, a, b) = match ins.len() {
        2 => (None, 0, 1),
        3 if op.op_type == "linear" && numel(&ins[2]) == n => (Some(2), 0, 1),
        3 if numel(&ins[0]) == n => (Some(0), 1, 2),
        _ => return None,
    };
    let (da, db) = (&ins[a], &ins[b]);
    if db.len() < 2 {
        return None;
    }
    // The inner dimension comes from b ([k, n], or [n, k] for a linear layer's weight); a
    // may carry folded view dimensions (e.g. [1, 512, 1, 1] for 512 features).
    let b_last2 = (db[db.len() - 2], db[db.len() - 1]);
    let plain = b_last2.1 == n && numel(da) == total_rows * b_last2.0;
    let transposed = b_last2.0 == n && numel(da) == total_rows * b_last2.1;
    // A linear layer's weight is [n, k] (transposed) unless `trans_b: false` says [k, n];
    // other products take b as [k, n] when its shape allows both (square matrices).
    let prefer_trans =
        op.op_type == "linear" && attr(op, "trans_b").and_then(Value::as_bool) != Some(false);
    let (k, b_trans) = match (prefer_trans, plain, transposed) {
        (true, _, true) => (b_last2.1, true),
        (true, _, false) => return None,
        (false, true, _) => (b_last2.0, false),
        (false, false, true) if op.op_type != "linear" => (b_last2.1, true),
        _ => return None,
    };
    if numel(db) == k * n {
        // one right operand for all rows (a linear layer, or a batched a times a matrix)
        return Some(Kernel::Matmul(Matmul {
            a,
            b,
            bias,
            batch: 1,
            m: total_rows,
            n,
            k,
            b_batch_stride: 0,
            b_trans,
        }));
    }
    let m = out[out.len() - 2];
    let batch = total_rows / m;
    if numel(db) != batch * k * n {
        return None;
    }
    Some(Kernel::Matmul(Matmul {
        a,
        b,
        bias,
        batch,
        m,
        n,
        k,
        b_batch_stride: k * n,
        b_trans,
    }))
}

fn select_conv(graph: &Graph, op: &Op) -> Option<Kernel> {
    conv_shape(graph, op).map(Kernel::Conv2d)
}

fn select_batch_norm(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if !(ins.len() == 5 || ins.len() == 3) || ins[0].len() < 2 || ins[0] != out {
        return None;
    }
    let (n, c) = (out[0], out[1]);
    if ins[1..].iter().any(|d| numel(d) != c) {
        return None;
    }
    let stats_outputs = op.outputs.len() == 3
        && op.outputs[1..]
            .iter()
            .all(|&t| f32_dims(graph, t).is_some_and(|d| numel(&d) == c));
    Some(Kernel::BatchNorm {
        n,
        c,
        spatial: numel(&out[2..]),
        eps: attr_f32(op, "eps", 1e-5),
        batch_stats: ins.len() == 3,
        stats_outputs,
    })
}

/// Output length of a pooling window sweep (PyTorch's formula, ceil mode included).
fn pool_len(len: usize, k: usize, s: usize, p: usize, ceil: bool) -> Option<usize> {
    if s == 0 || k == 0 || len + 2 * p < k || p > k / 2 {
        return None;
    }
    let span = len + 2 * p - k;
    let mut out = if ceil { span.div_ceil(s) } else { span / s } + 1;
    // the last window must start inside the input or the left padding
    if ceil && (out - 1) * s >= len + p {
        out -= 1;
    }
    Some(out)
}

fn select_pool(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if ins.len() != 1 || ins[0].len() != 4 || out.len() != 4 || ins[0][..2] != out[..2] {
        return None;
    }
    let max = op.op_type.contains("max");
    // The kernels sweep dense windows: a dilated window has no real kernel.
    if attr_pair(op, "dilation", 1)? != (1, 1) {
        return None;
    }
    let (h, w, oh, ow) = (ins[0][2], ins[0][3], out[2], out[3]);
    let ceil_attr = attr(op, "ceil_mode").and_then(Value::as_bool);
    // Attributes when given; otherwise the first common configuration that explains the
    // shapes (graphs exported without attributes).
    type Window = ((usize, usize), (usize, usize), (usize, usize)); // kernel, stride, pad
    let candidates: Vec<Window> = if attr(op, "kernel_size").is_some() {
        let k = attr_pair(op, "kernel_size", 1)?;
        let s = match attr(op, "stride") {
            Some(Value::Array(a)) if a.is_empty() => k,
            Some(_) => attr_pair(op, "stride", 1)?,
            None => k,
        };
        vec![(k, s, attr_pair(op, "padding", 0)?)]
    } else {
        [
            (3, 2, 1),
            (3, 2, 0),
            (2, 2, 0),
            (3, 1, 1),
            (2, 1, 0),
            (1, 1, 0),
            (1, 2, 0),
        ]
        .iter()
        .map(|&(k, s, p)| ((k, k), (s, s), (p, p)))
        .collect()
    };
    // A strip of spatial tiling: explicit window and asymmetric H padding; the output height
    // is what the padded input gives (floor), windows are clipped to the input rows.
    if let Some(bottom) = attr_usize(op, "pad_bottom")? {
        attr(op, "kernel_size")?;
        let &(kernel, stride, pad) = candidates.first()?;
        let rows = (h + pad.0 + bottom).checked_sub(kernel.0)? / stride.0.max(1) + 1;
        if stride.0 == 0
            || rows != oh
            || pool_len(w, kernel.1, stride.1, pad.1, ceil_attr == Some(true)) != Some(ow)
            || (!max && (pad.0 != 0 || bottom != 0))
        {
            return None;
        }
        return Some(Kernel::Pool(Pool {
            max,
            planes: out[0] * out[1],
            h,
            w,
            oh,
            ow,
            kernel,
            stride,
            pad,
            count_include_pad: attr(op, "count_include_pad")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            indices: false,
        }));
    }
    let ceils: Vec<bool> = match ceil_attr {
        Some(c) => vec![c],
        None => vec![false, true],
    };
    for &(kernel, stride, pad) in &candidates {
        for &ceil in &ceils {
            if pool_len(h, kernel.0, stride.0, pad.0, ceil) == Some(oh)
                && pool_len(w, kernel.1, stride.1, pad.1, ceil) == Some(ow)
            {
                let indices = max
                    && op.outputs.get(1).is_some_and(|&t| {
                        let tensor = graph.tensor(t);
                        tensor.dtype.as_deref() == Some("i64")
                            && tensor.size == (numel(&out) * 8) as u64
                    });
                // The kernel writes indices within each plane (PyTorch's); indices over the
                // whole N·C·H·W tensor (ONNX's, `indices_layout: "nchw"`) have no kernel.
                if indices && attr(op, "indices_layout").and_then(Value::as_str) == Some("nchw") {
                    return None;
                }
                return Some(Kernel::Pool(Pool {
                    max,
                    planes: out[0] * out[1],
                    h,
                    w,
                    oh,
                    ow,
                    kernel,
                    stride,
                    pad,
                    count_include_pad: attr(op, "count_include_pad")
                        .and_then(Value::as_bool)
                        .unwrap_or(true),
                    indices,
                }));
            }
        }
    }
    None
}

fn select_adaptive(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if ins.len() != 1 || ins[0].len() != 4 || out.len() != 4 || ins[0][..2] != out[..2] {
        return None;
    }
    Some(Kernel::AdaptiveAvgPool {
        planes: out[0] * out[1],
        h: ins[0][2],
        w: ins[0][3],
        oh: out[2],
        ow: out[3],
    })
}

fn select_softmax(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if ins.len() != 1 || numel(&ins[0]) != numel(&out) {
        return None;
    }
    if let Some(d) = attr(op, "dim").and_then(Value::as_i64) {
        if d != -1 && d != out.len() as i64 - 1 {
            return None;
        }
    }
    let cols = *out.last()?;
    Some(Kernel::Softmax {
        rows: numel(&out) / cols,
        cols,
    })
}

fn select_reduce(graph: &Graph, op: &Op) -> Option<Kernel> {
    // A second input is ONNX's `axes` operand (opset 18): the reduced dimensions follow
    // from the output's shape, so it is not read.
    if op.inputs.len() > 2 {
        return None;
    }
    let out = f32_dims(graph, *op.outputs.first()?)?;
    let dims = f32_dims(graph, *op.inputs.first()?)?;
    let reduce: Vec<bool> = if numel(&out) == 1 {
        vec![true; dims.len()]
    } else if out.len() == dims.len() && out.iter().zip(&dims).all(|(&o, &i)| o == i || o == 1) {
        out.iter()
            .zip(&dims)
            .map(|(&o, &i)| o == 1 && i != 1)
            .collect()
    } else {
        return None;
    };
    Some(Kernel::Reduce {
        mean: op.op_type.contains("mean"),
        dims,
        reduce,
    })
}

fn select_pad(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if ins.len() != 1 || ins[0].len() != 4 || out.len() != 4 || ins[0][..2] != out[..2] {
        return None;
    }
    let pad: Vec<usize> = attr(op, "pad")?
        .as_array()?
        .iter()
        .map(|v| v.as_u64().and_then(|x| usize::try_from(x).ok()))
        .collect::<Option<_>>()?;
    if pad.len() < 2
        || pad.len() % 2 != 0
        || pad.len() > 8
        || pad[4.min(pad.len())..].iter().any(|&p| p != 0)
    {
        return None;
    }
    if let Some(m) = attr(op, "mode") {
        if m.as_str()? != "constant" {
            return None;
        }
    }
    let (left, right) = (pad[0], pad[1]);
    let (top, bottom) = if pad.len() >= 4 {
        (pad[2], pad[3])
    } else {
        (0, 0)
    };
    let (h, w) = (ins[0][2], ins[0][3]);
    if out[2] != h + top + bottom || out[3] != w + left + right {
        return None;
    }
    Some(Kernel::Pad(Pad {
        planes: out[0] * out[1],
        h,
        w,
        top,
        bottom,
        left,
        right,
        value: attr_f32(op, "value", 0.0),
    }))
}

fn select_concat(graph: &Graph, op: &Op) -> Option<Kernel> {
    let ins = inputs_dims(graph, op)?;
    let out = f32_dims(graph, *op.outputs.first()?)?;
    if ins.is_empty() || ins.iter().any(|d| d.len() != out.len()) {
        return None;
    }
    let rank = out.len();
    let dim = (0..rank).find(|&d| {
        ins.iter()
            .all(|x| (0..rank).all(|e| e == d || x[e] == out[e]))
            && ins.iter().map(|x| x[d]).sum::<usize>() == out[d]
    })?;
    let outer = numel(&out[..dim]);
    Some(Kernel::Concat {
        outer,
        inner: ins.iter().map(|x| numel(&x[dim..])).collect(),
    })
}

fn select_slice_rows(graph: &Graph, op: &Op) -> Option<Kernel> {
    let (&src, &dst) = (op.inputs.first()?, op.outputs.first()?);
    if op.inputs.len() != 1 || op.outputs.len() != 1 {
        return None;
    }
    let (x, y) = (graph.tensor(src), graph.tensor(dst));
    let (xs, ys) = (x.shape.as_ref()?, y.shape.as_ref()?);
    let dim = usize::try_from(attr(op, "dim")?.as_u64()?).ok()?;
    let start = attr_usize(op, "start")??;
    if xs.len() != ys.len() || dim >= xs.len() || x.dtype != y.dtype {
        return None;
    }
    let to =
        |d: &[u64]| -> Option<Vec<usize>> { d.iter().map(|&v| usize::try_from(v).ok()).collect() };
    let (xd, yd) = (to(xs)?, to(ys)?);
    if (0..xd.len()).any(|e| e != dim && xd[e] != yd[e]) || start + yd[dim] > xd[dim] {
        return None;
    }
    let numel_x = numel(&xd);
    if numel_x == 0 || x.size % numel_x as u64 != 0 {
        return None;
    }
    let elem = usize::try_from(x.size / numel_x as u64).ok()?;
    if y.size != (numel(&yd) * elem) as u64 {
        return None;
    }
    Some(Kernel::SliceRows {
        outer: numel(&xd[..dim]),
        rows_in: xd[dim],
        start,
        rows: yd[dim],
        row_bytes: numel(&xd[dim + 1..]) * elem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(tensors: &str, ops: &str) -> Graph {
        Graph::parse(&format!(
            r#"{{"format": "memplan-graph/1", "tensors": [{tensors}], "ops": [{ops}]}}"#
        ))
        .unwrap()
    }

    fn t(name: &str, shape: &[u64], kind: &str) -> String {
        let n: u64 = shape.iter().product();
        format!(
            r#"{{"name": "{name}", "size": {}, "shape": {shape:?}, "dtype": "f32", "kind": "{kind}"}}"#,
            n * 4
        )
    }

    #[test]
    fn a_resnet_stem_convolution_resolves_its_output_shape() {
        let g = graph(
            &[
                t("x", &[1, 3, 224, 224], "input"),
                t("w", &[64, 3, 7, 7], "weight"),
                t("y", &[1, 64, 112, 112], "output"),
            ]
            .join(","),
            r#"{"name": "c", "type": "conv2d", "inputs": ["x", "w"], "outputs": ["y"],
                "attrs": {"stride": [2,2], "padding": [3,3], "dilation": [1,1], "groups": 1, "transposed": false}}"#,
        );
        let Kernel::Conv2d(c) = select(&g, &g.ops[0], KernelMode::Real) else {
            panic!("not a conv")
        };
        assert_eq!((c.oh, c.ow, c.col_rows()), (112, 112, 147));
    }

    #[test]
    fn a_linear_layer_takes_its_bias_last_and_addmm_first() {
        let tensors = [
            t("a", &[2, 4], "input"),
            t("w", &[10, 4], "weight"),
            t("b", &[10], "weight"),
            t("y", &[2, 10], "output"),
        ]
        .join(",");
        let g = graph(
            &tensors,
            r#"{"name": "l", "type": "linear", "inputs": ["a", "w", "b"], "outputs": ["y"]}"#,
        );
        let Kernel::Matmul(m) = select(&g, &g.ops[0], KernelMode::Real) else {
            panic!("not a matmul")
        };
        assert_eq!((m.a, m.b, m.bias, m.b_trans, m.k), (0, 1, Some(2), true, 4));
        let g = graph(
            &tensors,
            r#"{"name": "l", "type": "addmm", "inputs": ["b", "a", "w"], "outputs": ["y"]}"#,
        );
        let Kernel::Matmul(m) = select(&g, &g.ops[0], KernelMode::Real) else {
            panic!("not a matmul")
        };
        assert_eq!((m.a, m.b, m.bias), (1, 2, Some(0)));
    }

    #[test]
    fn pooling_without_attributes_infers_the_window_from_the_shapes() {
        let g = graph(
            &[
                t("x", &[1, 64, 112, 112], "input"),
                t("y", &[1, 64, 56, 56], "output"),
                r#"{"name": "i", "size": 1605632, "shape": [1,64,56,56], "dtype": "i64", "kind": "output"}"#.to_string(),
            ]
            .join(","),
            r#"{"name": "p", "type": "max_pool2d", "inputs": ["x"], "outputs": ["y", "i"]}"#,
        );
        let Kernel::Pool(p) = select(&g, &g.ops[0], KernelMode::Real) else {
            panic!("not a pool")
        };
        assert_eq!(
            (p.kernel, p.stride, p.pad, p.indices),
            ((3, 3), (2, 2), (1, 1), true)
        );
    }

    #[test]
    fn a_linear_layer_with_bias_is_a_transposed_matmul() {
        let g = graph(
            &[
                t("b", &[10], "weight"),
                t("x", &[4, 32], "input"),
                t("w", &[10, 32], "weight"),
                t("y", &[4, 10], "output"),
            ]
            .join(","),
            r#"{"name": "m", "type": "matmul", "inputs": ["b", "x", "w"], "outputs": ["y"]}"#,
        );
        let Kernel::Matmul(m) = select(&g, &g.ops[0], KernelMode::Real) else {
            panic!("not a matmul")
        };
        assert_eq!(
            (m.bias, m.m, m.n, m.k, m.b_trans),
            (Some(0), 4, 10, 32, true)
        );
    }

    #[test]
    fn ops_that_fit_no_real_kernel_and_the_mix_mode_use_the_mixing_kernel() {
        let g = graph(
            &[t("x", &[4, 4], "input"), t("y", &[3], "output")].join(","),
            r#"{"name": "r", "type": "relu", "inputs": ["x"], "outputs": ["y"]}"#,
        );
        assert_eq!(select(&g, &g.ops[0], KernelMode::Real), Kernel::Mix);
        let g = graph(
            &[t("x", &[4, 4], "input"), t("y", &[4, 4], "output")].join(","),
            r#"{"name": "r", "type": "relu", "inputs": ["x"], "outputs": ["y"]}"#,
        );
        assert_eq!(
            select(&g, &g.ops[0], KernelMode::Real),
            Kernel::Unary(Unary::Relu)
        );
        assert_eq!(select(&g, &g.ops[0], KernelMode::Mix), Kernel::Mix);
    }

    #[test]
    fn a_strip_convolution_with_asymmetric_padding_and_a_row_slice_resolve() {
        // Rows 0..5 of a 3×3/pad-1 conv's input, one padded row on top and none below,
        // give 4 output rows.
        let g = graph(
            &[
                t("x", &[1, 2, 5, 6], "input"),
                t("w", &[4, 2, 3, 3], "weight"),
                t("y", &[1, 4, 4, 6], "output"),
                t("s", &[1, 2, 3, 6], "output"),
            ]
            .join(","),
            r#"{"name": "c", "type": "conv2d", "inputs": ["x", "w"], "outputs": ["y"],
                "attrs": {"stride": [1,1], "padding": [1,1], "pad_bottom": 0}},
               {"name": "sl", "type": "slice_rows", "inputs": ["x"], "outputs": ["s"],
                "attrs": {"dim": 2, "start": 1}}"#,
        );
        let Kernel::Conv2d(c) = select(&g, &g.ops[0], KernelMode::Real) else {
            panic!("not a conv")
        };
        assert_eq!((c.oh, c.pad), (4, (1, 1)));
        let k = select(&g, &g.ops[1], KernelMode::Real);
        assert_eq!(
            k,
            Kernel::SliceRows {
                outer: 2,
                rows_in: 5,
                start: 1,
                rows: 3,
                row_bytes: 24
            }
        );
        // Its execution is tested beside the CPU kernels (memplan-executor).
    }

    #[test]
    fn a_square_linear_layer_multiplies_by_the_transposed_weight_unless_told_otherwise() {
        // y = x · wᵀ for a [4, 4] weight: the shapes fit both orientations, the type decides.
        let tensors = [
            t("x", &[2, 4], "input"),
            t("w", &[4, 4], "weight"),
            t("y", &[2, 4], "output"),
        ]
        .join(",");
        let k = |ty: &str, attrs: &str| {
            let g = graph(
                &tensors,
                &format!(
                    r#"{{"name": "l", "type": "{ty}", "inputs": ["x", "w"], "outputs": ["y"]{attrs}}}"#
                ),
            );
            match select(&g, &g.ops[0], KernelMode::Real) {
                Kernel::Matmul(m) => m.b_trans,
                other => panic!("not a matmul: {other:?}"),
            }
        };
        assert!(k("linear", ""));
        assert!(!k("linear", r#", "attrs": {"trans_b": false}"#));
        assert!(!k("matmul", ""));
    }

    #[test]
    fn reshape_copies_its_data_operand_and_ignores_a_shape_operand() {
        let g = graph(
            &[
                t("x", &[2, 3], "input"),
                r#"{"name": "s", "size": 16, "shape": [2], "dtype": "i64", "kind": "weight"}"#
                    .to_string(),
                t("y", &[6], "output"),
            ]
            .join(","),
            r#"{"name": "r", "type": "reshape", "inputs": ["x", "s"], "outputs": ["y"]}"#,
        );
        assert_eq!(
            select(&g, &g.ops[0], KernelMode::Real),
            Kernel::Copy { src: 0 }
        );
    }

    #[test]
    fn a_mean_with_an_axes_operand_reduces_the_dimensions_the_output_drops() {
        let g = graph(
            &[
                t("x", &[1, 8, 3, 3], "input"),
                r#"{"name": "axes", "size": 16, "shape": [2], "dtype": "i64", "kind": "weight"}"#
                    .to_string(),
                t("y", &[1, 8, 1, 1], "output"),
            ]
            .join(","),
            r#"{"name": "m", "type": "mean", "inputs": ["x", "axes"], "outputs": ["y"]}"#,
        );
        assert_eq!(
            select(&g, &g.ops[0], KernelMode::Real),
            Kernel::Reduce {
                mean: true,
                dims: vec![1, 8, 3, 3],
                reduce: vec![false, false, true, true]
            }
        );
    }

    #[test]
    fn a_dilated_pooling_window_has_no_real_kernel() {
        let pool = |dilation: u64| {
            let g = graph(
                &[
                    t("x", &[1, 1, 6, 6], "input"),
                    t("y", &[1, 1, 2, 2], "output"),
                ]
                .join(","),
                &format!(
                    r#"{{"name": "p", "type": "max_pool2d", "inputs": ["x"], "outputs": ["y"],
                        "attrs": {{"kernel_size": [2, 2], "stride": [3, 3], "padding": [0, 0],
                                   "dilation": [{dilation}, {dilation}]}}}}"#
                ),
            );
            select(&g, &g.ops[0], KernelMode::Real)
        };
        // The output shape is also what an undilated 2×2 window gives: only the attribute
        // tells them apart.
        assert_eq!(pool(2), Kernel::Mix);
        assert!(matches!(pool(1), Kernel::Pool(_)));
    }

    #[test]
    fn max_pool_indices_over_the_whole_tensor_have_no_real_kernel() {
        let pool = |layout: &str| {
            let g = graph(
                &[
                    t("x", &[1, 2, 4, 4], "input"),
                    t("y", &[1, 2, 2, 2], "output"),
                    r#"{"name": "i", "size": 64, "shape": [1,2,2,2], "dtype": "i64", "kind": "output"}"#.to_string(),
                ]
                .join(","),
                &format!(
                    r#"{{"name": "p", "type": "max_pool2d", "inputs": ["x"], "outputs": ["y", "i"],
                        "attrs": {{"kernel_size": [2, 2], "stride": [2, 2]{layout}}}}}"#
                ),
            );
            select(&g, &g.ops[0], KernelMode::Real)
        };
        assert!(matches!(pool(""), Kernel::Pool(Pool { indices: true, .. })));
        assert_eq!(pool(r#", "indices_layout": "nchw""#), Kernel::Mix);
    }

    #[test]
    fn broadcasting_follows_numpy_rules() {
        assert_eq!(
            broadcast(&[4], &[2, 3, 4]),
            Some(Bcast::Strides(vec![0, 0, 1]))
        );
        assert_eq!(
            broadcast(&[3, 1], &[2, 3, 4]),
            Some(Bcast::Strides(vec![0, 1, 0]))
        );
        assert_eq!(broadcast(&[5], &[2, 3, 4]), None);
        assert_eq!(broadcast(&[4, 3, 2], &[2, 3, 4]), Some(Bcast::Flat));
    }
}
