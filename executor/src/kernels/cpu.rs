//! CPU implementations of the [`Kernel`]s: plain loops over f32 slices, and im2col + GEMM
//! (the `matrixmultiply` crate's sgemm) for convolution and matrix products. Every kernel
//! overwrites every byte of its outputs and reads its inputs in a fixed order, so results
//! are deterministic; f32 views of the byte ranges are zero-copy when aligned and copied
//! otherwise.

use super::fused::{Buf, FusedKernel};
use super::{Bcast, Binary, Conv2d, Kernel, Matmul, Pool, Unary};
use crate::arena::AlignedBuf;
use crate::data::{self, Fill};
use std::borrow::Cow;

/// Growable scratch memory for kernels (im2col when the op has no big enough workspace,
/// unaligned operands); its peak is reported as memory outside the plan.
#[derive(Debug, Default)]
pub struct Scratch {
    buf: Vec<f32>,
    /// Bytes held outside `buf` right now (a fused op's private buffers and copies).
    held: u64,
    /// Largest scratch size used (bytes).
    pub peak_bytes: u64,
}

impl Scratch {
    fn take(&mut self, len: usize) -> &mut [f32] {
        if self.buf.len() < len {
            self.buf.resize(len, 0.0);
        }
        self.note();
        &mut self.buf[..len]
    }

    fn note(&mut self) {
        self.peak_bytes = self.peak_bytes.max((self.buf.len() * 4) as u64 + self.held);
    }

    /// Counts `bytes` more held (positive) or released (negative) outside `buf`.
    fn hold(&mut self, bytes: i64) {
        self.held = self.held.saturating_add_signed(bytes);
        self.note();
    }
}

/// One op's operands as byte slices.
pub struct Operands<'a, 'b> {
    /// Op name (seeds the mixing kernel).
    pub name: &'a str,
    /// Inputs in the op's order (weights included).
    pub inputs: &'a [&'b [u8]],
    /// Outputs in the op's order.
    pub outputs: &'a mut [&'b mut [u8]],
    /// How each output is filled by the mixing kernel.
    pub fills: &'a [Fill],
    /// The op's workspace, when it has one.
    pub workspace: Option<&'a mut [u8]>,
}

/// The mixing seed of an op: its name's hash folded with every input's checksum and size.
pub fn mix_seed(name: &str, inputs: &[&[u8]]) -> u64 {
    inputs.iter().fold(data::fnv1a(name), |s, b| {
        data::fold(s, data::checksum(b), b.len() as u64)
    })
}

/// Runs `kernel` on `ops`. Errors only if operand sizes contradict the kernel (a bug).
pub fn exec(kernel: &Kernel, ops: Operands<'_, '_>, scratch: &mut Scratch) -> Result<(), String> {
    let Operands {
        name,
        inputs,
        outputs,
        fills,
        workspace,
    } = ops;
    if let Kernel::Fused(f) = kernel {
        return exec_fused(f, inputs, outputs, workspace, scratch);
    }
    let computed = kernel.computed_outputs().min(outputs.len());
    if computed < outputs.len() {
        let seed = mix_seed(name, inputs);
        for (k, out) in outputs.iter_mut().enumerate().skip(computed) {
            data::mix_fill(
                out,
                fills.get(k).copied().unwrap_or(Fill::Bytes),
                seed,
                k as u64,
            );
        }
    }
    if computed == 0 {
        return Ok(());
    }
    let (first, rest) = outputs.split_at_mut(1);
    let out: &mut [u8] = first[0];
    let input = |i: usize| -> Result<Cow<'_, [f32]>, String> {
        inputs
            .get(i)
            .map(|b| f32s(b))
            .ok_or_else(|| format!("kernel {} needs input {i}", kernel.name()))
    };
    match kernel {
        Kernel::Mix | Kernel::Fused(_) => {}
        Kernel::Pad(p) => {
            let x = input(0)?;
            with_f32_out(out, |y| {
                let (oh, ow) = (p.h + p.top + p.bottom, p.w + p.left + p.right);
                check(
                    x.len() == p.planes * p.h * p.w && y.len() == p.planes * oh * ow,
                    "pad sizes",
                )?;
                y.fill(p.value);
                for pl in 0..p.planes {
                    for r in 0..p.h {
                        let src = (pl * p.h + r) * p.w;
                        let dst = (pl * oh + r + p.top) * ow + p.left;
                        y[dst..dst + p.w].copy_from_slice(&x[src..src + p.w]);
                    }
                }
                Ok(())
            })?;
        }
        Kernel::Copy { src } => {
            let s = inputs.get(*src).ok_or("copy source missing")?;
            if s.len() != out.len() {
                return Err("copy between tensors of different sizes".into());
            }
            out.copy_from_slice(s);
        }
        Kernel::Unary(f) => {
            let x = input(0)?;
            with_f32_out(out, |y| {
                check(y.len() == x.len(), "unary operand sizes")?;
                for (o, &v) in y.iter_mut().zip(x.iter()) {
                    *o = unary(*f, v);
                }
                Ok(())
            })?;
        }
        Kernel::Binary { f, dims, a, b } => {
            let (x, z) = (input(0)?, input(1)?);
            with_f32_out(out, |y| binary(*f, dims, (&x, a), (&z, b), y))?;
        }
        Kernel::Matmul(m) => {
            let (a, b) = (input(m.a)?, input(m.b)?);
            let bias = m.bias.map(input).transpose()?;
            with_f32_out(out, |y| matmul(m, &a, &b, bias.as_deref(), y))?;
        }
        Kernel::Conv2d(c) => {
            let (x, w) = (input(0)?, input(1)?);
            let bias = c.bias.map(input).transpose()?;
            with_f32_out(out, |y| {
                conv2d(c, &x, &w, bias.as_deref(), y, workspace, scratch)
            })?;
        }
        Kernel::BatchNorm {
            n,
            c,
            spatial,
            eps,
            batch_stats,
            stats_outputs,
        } => {
            let x = input(0)?;
            let p: Vec<Cow<'_, [f32]>> = (1..inputs.len()).map(input).collect::<Result<_, _>>()?;
            check(
                x.len() == n * c * spatial && p.iter().all(|v| v.len() == *c),
                "batch_norm sizes",
            )?;
            let (mean, inv) = batch_norm_stats(*n, *c, *spatial, *eps, *batch_stats, &x, &p)?;
            with_f32_out(out, |y| {
                check(y.len() == x.len(), "batch_norm output size")?;
                for ni in 0..*n {
                    for ci in 0..*c {
                        let base = (ni * c + ci) * spatial;
                        for i in base..base + spatial {
                            y[i] = (x[i] - mean[ci]) * inv[ci] * p[0][ci] + p[1][ci];
                        }
                    }
                }
                Ok(())
            })?;
            if *stats_outputs {
                if let [m, v, ..] = rest {
                    with_f32_out(m, |o| {
                        check(o.len() == *c, "batch_norm mean output")?;
                        o.copy_from_slice(&mean);
                        Ok(())
                    })?;
                    with_f32_out(v, |o| {
                        check(o.len() == *c, "batch_norm invstd output")?;
                        o.copy_from_slice(&inv);
                        Ok(())
                    })?;
                }
            }
        }
        Kernel::Pool(p) => {
            let x = input(0)?;
            let idx_out = rest.first_mut().filter(|_| p.indices);
            with_f32_out(out, |y| pool(p, &x, y, idx_out))?;
        }
        Kernel::AdaptiveAvgPool {
            planes,
            h,
            w,
            oh,
            ow,
        } => {
            let x = input(0)?;
            with_f32_out(out, |y| {
                check(
                    x.len() == planes * h * w && y.len() == planes * oh * ow,
                    "adaptive pool sizes",
                )?;
                for pl in 0..*planes {
                    for oy in 0..*oh {
                        let (hs, he) = (oy * h / oh, ((oy + 1) * h).div_ceil(*oh));
                        for ox in 0..*ow {
                            let (ws, we) = (ox * w / ow, ((ox + 1) * w).div_ceil(*ow));
                            let mut s = 0.0f32;
                            for iy in hs..he {
                                for ix in ws..we {
                                    s += x[(pl * h + iy) * w + ix];
                                }
                            }
                            y[(pl * oh + oy) * ow + ox] = s / ((he - hs) * (we - ws)) as f32;
                        }
                    }
                }
                Ok(())
            })?;
        }
        Kernel::Softmax { rows, cols } => {
            let x = input(0)?;
            with_f32_out(out, |y| {
                check(
                    x.len() == rows * cols && y.len() == x.len(),
                    "softmax sizes",
                )?;
                for r in 0..*rows {
                    let (xs, ys) = (
                        &x[r * cols..(r + 1) * cols],
                        &mut y[r * cols..(r + 1) * cols],
                    );
                    let mx = xs.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                    let mut sum = 0.0f32;
                    for (o, &v) in ys.iter_mut().zip(xs) {
                        *o = (v - mx).exp();
                        sum += *o;
                    }
                    for o in ys.iter_mut() {
                        *o /= sum;
                    }
                }
                Ok(())
            })?;
        }
        Kernel::Reduce { mean, dims, reduce } => {
            let x = input(0)?;
            with_f32_out(out, |y| reduce_kernel(*mean, dims, reduce, &x, y))?;
        }
        Kernel::SliceRows {
            outer,
            rows_in,
            start,
            rows,
            row_bytes,
        } => {
            let x = inputs.first().ok_or("slice_rows needs an input")?;
            let (inb, outb) = (rows_in * row_bytes, rows * row_bytes);
            check(
                x.len() == outer * inb && out.len() == outer * outb,
                "slice_rows sizes",
            )?;
            for o in 0..*outer {
                let from = o * inb + start * row_bytes;
                out[o * outb..(o + 1) * outb].copy_from_slice(&x[from..from + outb]);
            }
        }
        Kernel::Concat { outer, inner } => {
            let parts: Vec<Cow<'_, [f32]>> =
                (0..inner.len()).map(input).collect::<Result<_, _>>()?;
            with_f32_out(out, |y| {
                let total: usize = inner.iter().sum();
                check(y.len() == outer * total, "concat output size")?;
                check(
                    parts.iter().zip(inner).all(|(p, &n)| p.len() == outer * n),
                    "concat input sizes",
                )?;
                let mut at = 0;
                for o in 0..*outer {
                    for (p, &n) in parts.iter().zip(inner) {
                        y[at..at + n].copy_from_slice(&p[o * n..(o + 1) * n]);
                        at += n;
                    }
                }
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// Per-channel mean and 1/√(var + eps): from the running statistics (inputs 3 and 4) or
/// from the batch (biased variance, two passes in a fixed order).
fn batch_norm_stats(
    n: usize,
    c: usize,
    spatial: usize,
    eps: f32,
    batch_stats: bool,
    x: &[f32],
    p: &[Cow<'_, [f32]>],
) -> Result<(Vec<f32>, Vec<f32>), String> {
    if !batch_stats {
        check(p.len() == 4, "batch_norm running statistics")?;
        let inv = p[3].iter().map(|&v| 1.0 / (v + eps).sqrt()).collect();
        return Ok((p[2].to_vec(), inv));
    }
    let count = (n * spatial) as f32;
    let mut mean = vec![0f32; c];
    let mut inv = vec![0f32; c];
    for ci in 0..c {
        let mut s = 0f32;
        for ni in 0..n {
            let base = (ni * c + ci) * spatial;
            s += x[base..base + spatial].iter().sum::<f32>();
        }
        let m = s / count;
        let mut q = 0f32;
        for ni in 0..n {
            let base = (ni * c + ci) * spatial;
            q += x[base..base + spatial]
                .iter()
                .map(|&v| (v - m) * (v - m))
                .sum::<f32>();
        }
        mean[ci] = m;
        inv[ci] = 1.0 / (q / count + eps).sqrt();
    }
    Ok((mean, inv))
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what} do not match the kernel"))
    }
}

/// An f32 view of bytes: borrowed when aligned, copied otherwise.
fn f32s(b: &[u8]) -> Cow<'_, [f32]> {
    match bytemuck::try_cast_slice(b) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
    }
}

/// Runs `f` on an f32 view of `b` (through a copy when unaligned).
fn with_f32_out(
    b: &mut [u8],
    f: impl FnOnce(&mut [f32]) -> Result<(), String>,
) -> Result<(), String> {
    match bytemuck::try_cast_slice_mut(b) {
        Ok(s) => f(s),
        Err(_) => {
            let mut v = vec![0f32; b.len() / 4];
            f(&mut v)?;
            for (c, x) in b.chunks_exact_mut(4).zip(v) {
                c.copy_from_slice(&x.to_le_bytes());
            }
            Ok(())
        }
    }
}

/// Runs `f` on an f32 view of `b` that holds `b`'s values (through a copy when unaligned).
fn with_f32_inout(
    b: &mut [u8],
    f: impl FnOnce(&mut [f32]) -> Result<(), String>,
) -> Result<(), String> {
    match bytemuck::try_cast_slice_mut(b) {
        Ok(s) => f(s),
        Err(_) => {
            let mut v: Vec<f32> = f32s(b).into_owned();
            f(&mut v)?;
            for (c, x) in b.chunks_exact_mut(4).zip(v) {
                c.copy_from_slice(&x.to_le_bytes());
            }
            Ok(())
        }
    }
}

/// erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e−7), mirrored by the CUDA source.
pub fn erf(x: f32) -> f32 {
    let s = if x < 0.0 { -1.0 } else { 1.0 };
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let p = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    s * (1.0 - p * (-a * a).exp())
}

/// One element of a unary kernel (NaN passes through, as in PyTorch).
pub fn unary(f: Unary, x: f32) -> f32 {
    match f {
        Unary::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Unary::Silu => x / (1.0 + (-x).exp()),
        Unary::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
        Unary::Hardtanh(lo, hi) => {
            if x < lo {
                lo
            } else if x > hi {
                hi
            } else {
                x
            }
        }
        Unary::Tanh => x.tanh(),
        Unary::Neg => -x,
    }
}

fn binary_op(f: Binary, a: f32, b: f32) -> f32 {
    match f {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Div => a / b,
    }
}

fn binary(
    f: Binary,
    dims: &[usize],
    (x, bx): (&[f32], &Bcast),
    (z, bz): (&[f32], &Bcast),
    y: &mut [f32],
) -> Result<(), String> {
    let n: usize = dims.iter().product();
    check(y.len() == n, "binary output size")?;
    if let (Bcast::Flat, Bcast::Flat) = (bx, bz) {
        check(x.len() == n && z.len() == n, "binary operand sizes")?;
        for ((o, &a), &b) in y.iter_mut().zip(x).zip(z) {
            *o = binary_op(f, a, b);
        }
        return Ok(());
    }
    // Odometer over the output index, carrying each operand's offset along.
    let strides = |b: &Bcast| match b {
        Bcast::Flat => None,
        Bcast::Strides(s) => Some(s.clone()),
    };
    let (sx, sz) = (strides(bx), strides(bz));
    let reach = |s: &Option<Vec<usize>>, len: usize| match s {
        None => len == n,
        Some(s) => {
            s.iter()
                .zip(dims)
                .map(|(&st, &d)| st * (d - 1))
                .sum::<usize>()
                < len.max(1)
        }
    };
    check(
        reach(&sx, x.len()) && reach(&sz, z.len()),
        "binary operand sizes",
    )?;
    let rank = dims.len();
    let mut ctr = vec![0usize; rank];
    let (mut ix, mut iz) = (0usize, 0usize);
    for (i, o) in y.iter_mut().enumerate() {
        let a = x[if sx.is_some() { ix } else { i }];
        let b = z[if sz.is_some() { iz } else { i }];
        *o = binary_op(f, a, b);
        for d in (0..rank).rev() {
            ctr[d] += 1;
            if let Some(s) = &sx {
                ix += s[d];
            }
            if let Some(s) = &sz {
                iz += s[d];
            }
            if ctr[d] < dims[d] {
                break;
            }
            if let Some(s) = &sx {
                ix -= s[d] * dims[d];
            }
            if let Some(s) = &sz {
                iz -= s[d] * dims[d];
            }
            ctr[d] = 0;
        }
    }
    Ok(())
}

/// `c = a · b` for row-major a (m × k) and b (k × n, or n × k when `b_trans`), c (m × n).
fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    b_trans: bool,
    c: &mut [f32],
) -> Result<(), String> {
    check(
        a.len() >= m * k && b.len() >= k * n && c.len() >= m * n,
        "gemm operand sizes",
    )?;
    let (rsb, csb) = if b_trans { (1, k) } else { (n, 1) };
    // SAFETY: matrixmultiply reads a[i·k + l], b[l·rsb + j·csb] and writes c[i·n + j] for
    // i < m, l < k, j < n; the lengths were checked just above, so every access is in
    // bounds, and `c` is an exclusive borrow disjoint from `a` and `b`. With beta = 0 the
    // old (possibly poisoned) contents of c are not read.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
    Ok(())
}

fn matmul(
    m: &Matmul,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), String> {
    check(
        a.len() == m.batch * m.m * m.k
            && y.len() == m.batch * m.m * m.n
            && b.len() >= m.k * m.n + (m.batch - 1) * m.b_batch_stride,
        "matmul sizes",
    )?;
    for bi in 0..m.batch {
        let bo = bi * m.b_batch_stride;
        sgemm(
            m.m,
            m.n,
            m.k,
            &a[bi * m.m * m.k..],
            &b[bo..],
            m.b_trans,
            &mut y[bi * m.m * m.n..(bi + 1) * m.m * m.n],
        )?;
    }
    if let Some(bias) = bias {
        check(bias.len() == m.n, "matmul bias size")?;
        for row in y.chunks_exact_mut(m.n) {
            for (o, &b) in row.iter_mut().zip(bias) {
                *o += b;
            }
        }
    }
    Ok(())
}

fn im2col(c: &Conv2d, x: &[f32], col: &mut [f32]) {
    let cg = c.c / c.groups;
    let ohw = c.oh * c.ow;
    for ch in 0..cg {
        for i in 0..c.kh {
            for j in 0..c.kw {
                let row = (ch * c.kh + i) * c.kw + j;
                let dst = &mut col[row * ohw..(row + 1) * ohw];
                for oy in 0..c.oh {
                    let iy = (oy * c.stride.0 + i * c.dilation.0) as isize - c.pad.0 as isize;
                    for ox in 0..c.ow {
                        let ix = (ox * c.stride.1 + j * c.dilation.1) as isize - c.pad.1 as isize;
                        dst[oy * c.ow + ox] =
                            if iy >= 0 && (iy as usize) < c.h && ix >= 0 && (ix as usize) < c.w {
                                x[(ch * c.h + iy as usize) * c.w + ix as usize]
                            } else {
                                0.0
                            };
                    }
                }
            }
        }
    }
}

fn conv2d(
    c: &Conv2d,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    workspace: Option<&mut [u8]>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    let (cg, og) = (c.c / c.groups, c.o / c.groups);
    let (hw, ohw, kc) = (c.h * c.w, c.oh * c.ow, c.col_rows());
    check(
        x.len() == c.n * c.c * hw && y.len() == c.n * c.o * ohw && w.len() == c.o * kc,
        "conv2d sizes",
    )?;
    if let Some(algo) = c.algo {
        // The graph chose the algorithm: it runs in the op's workspace only.
        let ws: &mut [f32] = match workspace {
            Some(b) => bytemuck::try_cast_slice_mut::<u8, f32>(b)
                .map_err(|_| "conv2d workspace is not an f32 buffer".to_string())?,
            None => &mut [],
        };
        super::conv_cpu::conv2d_algo(c, algo, x, w, y, ws)?;
        return add_bias(c, bias, y);
    }
    // im2col goes into the op's workspace when the plan gave it one big enough (so the
    // workspace bytes really are used), else into private scratch.
    let ws: Option<&mut [f32]> = workspace
        .and_then(|b| bytemuck::try_cast_slice_mut::<u8, f32>(b).ok())
        .filter(|b| b.len() >= kc * ohw);
    let col: &mut [f32] = match ws {
        Some(b) => &mut b[..kc * ohw],
        None if c.is_pointwise() => &mut [],
        None => scratch.take(kc * ohw),
    };
    for ni in 0..c.n {
        for g in 0..c.groups {
            let xg = &x[(ni * c.c + g * cg) * hw..(ni * c.c + (g + 1) * cg) * hw];
            let src: &[f32] = if c.is_pointwise() {
                xg
            } else {
                im2col(c, xg, col);
                col
            };
            let yo = (ni * c.o + g * og) * ohw;
            sgemm(
                og,
                ohw,
                kc,
                &w[g * og * kc..(g + 1) * og * kc],
                src,
                false,
                &mut y[yo..yo + og * ohw],
            )?;
        }
    }
    add_bias(c, bias, y)
}

fn add_bias(c: &Conv2d, bias: Option<&[f32]>, y: &mut [f32]) -> Result<(), String> {
    if let Some(b) = bias {
        check(b.len() == c.o, "conv2d bias size")?;
        for (i, plane) in y.chunks_exact_mut(c.oh * c.ow).enumerate() {
            let bv = b[i % c.o];
            for v in plane {
                *v += bv;
            }
        }
    }
    Ok(())
}

fn pool(p: &Pool, x: &[f32], y: &mut [f32], idx: Option<&mut &mut [u8]>) -> Result<(), String> {
    check(
        x.len() == p.planes * p.h * p.w && y.len() == p.planes * p.oh * p.ow,
        "pool sizes",
    )?;
    let mut indices = Vec::new();
    for pl in 0..p.planes {
        let plane = &x[pl * p.h * p.w..(pl + 1) * p.h * p.w];
        for oy in 0..p.oh {
            let hs = (oy * p.stride.0) as isize - p.pad.0 as isize;
            for ox in 0..p.ow {
                let ws = (ox * p.stride.1) as isize - p.pad.1 as isize;
                let o = (pl * p.oh + oy) * p.ow + ox;
                if p.max {
                    let he = (hs + p.kernel.0 as isize).min(p.h as isize);
                    let we = (ws + p.kernel.1 as isize).min(p.w as isize);
                    let (mut best, mut at) = (f32::NEG_INFINITY, -1i64);
                    for iy in hs.max(0)..he {
                        for ix in ws.max(0)..we {
                            let v = plane[iy as usize * p.w + ix as usize];
                            if v > best || v.is_nan() {
                                best = v;
                                at = iy as i64 * p.w as i64 + ix as i64;
                            }
                        }
                    }
                    y[o] = best;
                    indices.push(at);
                } else {
                    let he = (hs + p.kernel.0 as isize).min((p.h + p.pad.0) as isize);
                    let we = (ws + p.kernel.1 as isize).min((p.w + p.pad.1) as isize);
                    let pool_size = (he - hs) * (we - ws);
                    let (h0, w0) = (hs.max(0), ws.max(0));
                    let (h1, w1) = (he.min(p.h as isize), we.min(p.w as isize));
                    let mut s = 0.0f32;
                    for iy in h0..h1 {
                        for ix in w0..w1 {
                            s += plane[iy as usize * p.w + ix as usize];
                        }
                    }
                    let div = if p.count_include_pad {
                        pool_size
                    } else {
                        (h1 - h0) * (w1 - w0)
                    };
                    y[o] = s / div.max(1) as f32;
                }
            }
        }
    }
    if let Some(out) = idx {
        check(out.len() == indices.len() * 8, "pool indices size")?;
        for (c, v) in out.chunks_exact_mut(8).zip(indices) {
            c.copy_from_slice(&v.to_le_bytes());
        }
    }
    Ok(())
}

fn reduce_kernel(
    mean: bool,
    dims: &[usize],
    reduce: &[bool],
    x: &[f32],
    y: &mut [f32],
) -> Result<(), String> {
    let n: usize = dims.iter().product();
    let out_n: usize = dims
        .iter()
        .zip(reduce)
        .map(|(&d, &r)| if r { 1 } else { d })
        .product();
    check(x.len() == n && y.len() == out_n, "reduce sizes")?;
    // Output strides over the input's dimensions (0 on reduced ones).
    let rank = dims.len();
    let mut ostr = vec![0usize; rank];
    let mut s = 1;
    for d in (0..rank).rev() {
        if !reduce[d] {
            ostr[d] = s;
            s *= dims[d];
        }
    }
    y.fill(0.0);
    let mut ctr = vec![0usize; rank];
    let mut oi = 0usize;
    for &v in x {
        y[oi] += v;
        for d in (0..rank).rev() {
            ctr[d] += 1;
            oi += ostr[d];
            if ctr[d] < dims[d] {
                break;
            }
            oi -= ostr[d] * dims[d];
            ctr[d] = 0;
        }
    }
    if mean {
        let count = (n / out_n.max(1)) as f32;
        for v in y.iter_mut() {
            *v /= count;
        }
    }
    Ok(())
}

/// Runs a fused op: each member's kernel in sequence on the buffers chosen by
/// [`super::fused::select_fused`] (see there for the memory rules).
fn exec_fused(
    f: &FusedKernel,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    mut workspace: Option<&mut [u8]>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    if outputs.len() != f.outputs {
        return Err(format!(
            "fused op has {} outputs, the kernel expects {}",
            outputs.len(),
            f.outputs
        ));
    }
    let mut private: Vec<AlignedBuf> = Vec::with_capacity(f.buffers.len());
    for &b in &f.buffers {
        private.push(AlignedBuf::new(b, "a fused op's private buffer").map_err(|e| e.to_string())?);
    }
    let held = f.private_bytes() as i64;
    scratch.hold(held);
    let result = run_members(f, inputs, outputs, &mut workspace, &mut private, scratch);
    scratch.hold(-held);
    result
}

fn run_members(
    f: &FusedKernel,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    workspace: &mut Option<&mut [u8]>,
    private: &mut [AlignedBuf],
    scratch: &mut Scratch,
) -> Result<(), String> {
    let n_out = outputs.len();
    // One pool of writable buffers: the op's outputs, then the private buffers.
    let mut pool: Vec<&mut [u8]> = outputs.iter_mut().map(|o| &mut **o).collect();
    pool.extend(private.iter_mut().map(AlignedBuf::bytes_mut));
    let pool_index = |b: Buf| match b {
        Buf::Input(_) => None,
        Buf::Output(k) => Some(k),
        Buf::Private(j) => Some(n_out + j),
    };
    for step in &f.steps {
        let outs: Vec<usize> = step
            .outputs
            .iter()
            .map(|&b| pool_index(b).ok_or("a member writes an input of its fused op"))
            .collect::<Result<_, _>>()?;
        let ws = match workspace.as_deref_mut() {
            Some(w) if step.workspace > 0 => {
                let len = usize::try_from(step.workspace).map_err(|_| "workspace size")?;
                Some(
                    w.get_mut(..len)
                        .ok_or("member workspace exceeds the op's")?,
                )
            }
            _ => None,
        };
        let aliased: Vec<usize> = step
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, &b)| pool_index(b).is_some_and(|p| outs.contains(&p)))
            .map(|(i, _)| i)
            .collect();
        // In place: one output, sharing its buffer with element-wise input(s) of the kernel.
        if outs.len() == 1
            && !aliased.is_empty()
            && aliased.iter().all(|&i| super::in_place_ok(&step.kernel, i))
        {
            let (lo, hi) = pool.split_at_mut(outs[0]);
            let (buf, hi) = hi.split_first_mut().ok_or("member output buffer missing")?;
            let ins: Vec<Option<&[u8]>> = step
                .inputs
                .iter()
                .map(|&b| match b {
                    Buf::Input(i) => inputs.get(i).copied(),
                    other => pool_index(other).and_then(|p| match p.cmp(&outs[0]) {
                        std::cmp::Ordering::Less => lo.get(p).map(|x| &**x),
                        std::cmp::Ordering::Equal => None,
                        std::cmp::Ordering::Greater => hi.get(p - outs[0] - 1).map(|x| &**x),
                    }),
                })
                .collect();
            exec_in_place(&step.kernel, buf, &ins)
                .map_err(|m| format!("member {:?}: {m}", step.name))?;
            continue;
        }
        // Otherwise inputs that share a buffer with an output are read from a copy.
        let copies: Vec<(usize, Vec<u8>)> = aliased
            .iter()
            .filter_map(|&i| pool_index(step.inputs[i]).map(|p| (i, pool[p].to_vec())))
            .collect();
        let copied: i64 = copies.iter().map(|(_, v)| v.len() as i64).sum();
        scratch.hold(copied);
        let mut out_refs: Vec<Option<&mut [u8]>> = (0..outs.len()).map(|_| None).collect();
        let mut shared: Vec<Option<&[u8]>> = vec![None; pool.len()];
        for (p, b) in pool.iter_mut().enumerate() {
            match outs.iter().position(|&o| o == p) {
                Some(k) => out_refs[k] = Some(&mut **b),
                None => shared[p] = Some(&**b),
            }
        }
        let ins: Vec<&[u8]> = step
            .inputs
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if let Some((_, v)) = copies.iter().find(|(j, _)| *j == i) {
                    return Ok(v.as_slice());
                }
                match b {
                    Buf::Input(x) => inputs.get(x).copied(),
                    other => pool_index(other).and_then(|p| shared[p]),
                }
                .ok_or_else(|| format!("member {:?}: input {i} missing", step.name))
            })
            .collect::<Result<_, String>>()?;
        let mut out_list: Vec<&mut [u8]> = out_refs.into_iter().flatten().collect();
        let result = exec(
            &step.kernel,
            Operands {
                name: &step.name,
                inputs: &ins,
                outputs: &mut out_list,
                fills: &step.fills,
                workspace: ws,
            },
            scratch,
        );
        scratch.hold(-copied);
        result.map_err(|m| format!("member {:?}: {m}", step.name))?;
    }
    Ok(())
}

/// Runs an element-wise kernel whose output 0 is `buf`, which also holds every input that
/// is `None` in `inputs` (see `super::in_place_ok`); the arithmetic is the same as [`exec`]'s.
fn exec_in_place(kernel: &Kernel, buf: &mut [u8], inputs: &[Option<&[u8]>]) -> Result<(), String> {
    let other = |i: usize| -> Result<Cow<'_, [f32]>, String> {
        inputs
            .get(i)
            .copied()
            .flatten()
            .map(f32s)
            .ok_or_else(|| format!("kernel {} needs input {i}", kernel.name()))
    };
    match kernel {
        Kernel::Copy { src } => {
            if inputs.get(*src).is_some_and(Option::is_some) {
                return Err("in-place copy from another buffer".into());
            }
        }
        Kernel::Unary(f) => with_f32_inout(buf, |y| {
            for v in y.iter_mut() {
                *v = unary(*f, *v);
            }
            Ok(())
        })?,
        Kernel::BatchNorm {
            n,
            c,
            spatial,
            eps,
            batch_stats,
            ..
        } => {
            let p: Vec<Cow<'_, [f32]>> = (1..inputs.len()).map(other).collect::<Result<_, _>>()?;
            with_f32_inout(buf, |y| {
                check(
                    y.len() == n * c * spatial && p.iter().all(|v| v.len() == *c),
                    "batch_norm sizes",
                )?;
                let (mean, inv) = batch_norm_stats(*n, *c, *spatial, *eps, *batch_stats, y, &p)?;
                for ni in 0..*n {
                    for ci in 0..*c {
                        let base = (ni * c + ci) * spatial;
                        for v in &mut y[base..base + spatial] {
                            *v = (*v - mean[ci]) * inv[ci] * p[0][ci] + p[1][ci];
                        }
                    }
                }
                Ok(())
            })?;
        }
        Kernel::Binary { f, .. } => {
            let a = inputs.first().copied().flatten().map(f32s);
            let b = inputs.get(1).copied().flatten().map(f32s);
            with_f32_inout(buf, |y| {
                check(
                    a.as_ref().is_none_or(|a| a.len() == y.len())
                        && b.as_ref().is_none_or(|b| b.len() == y.len()),
                    "binary operand sizes",
                )?;
                for (i, v) in y.iter_mut().enumerate() {
                    let x = a.as_ref().map_or(*v, |a| a[i]);
                    let z = b.as_ref().map_or(*v, |b| b[i]);
                    *v = binary_op(*f, x, z);
                }
                Ok(())
            })?;
        }
        other => return Err(format!("kernel {} cannot run in place", other.name())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Conv2d, Kernel};

    #[test]
    fn a_row_slice_copies_the_selected_rows_of_every_plane() {
        let g = memplan::graph::Graph::parse(
            r#"{"format": "memplan-graph/1", "tensors": [
                {"name": "x", "size": 240, "shape": [1, 2, 5, 6], "dtype": "f32", "kind": "input"},
                {"name": "s", "size": 144, "shape": [1, 2, 3, 6], "dtype": "f32", "kind": "output"}],
               "ops": [{"name": "sl", "type": "slice_rows", "inputs": ["x"], "outputs": ["s"],
                "attrs": {"dim": 2, "start": 1}}]}"#,
        )
        .unwrap();
        let k = crate::kernels::select(&g, &g.ops[0], crate::kernels::KernelMode::Real);
        assert!(matches!(k, Kernel::SliceRows { .. }), "{k:?}");
        let x: Vec<u8> = (0..240u8).collect();
        let mut out = [0u8; 144];
        exec(
            &k,
            Operands {
                name: "sl",
                inputs: &[&x],
                outputs: &mut [&mut out[..]],
                fills: &[],
                workspace: None,
            },
            &mut Scratch::default(),
        )
        .unwrap();
        // Plane 0 rows 1..4 are bytes 24..96, plane 1 rows 1..4 bytes 144..216.
        assert_eq!(&out[..72], &x[24..96]);
        assert_eq!(&out[72..], &x[144..216]);
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
    fn run(kernel: &Kernel, inputs: &[Vec<u8>], out_len: usize) -> Vec<f32> {
        let ins: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        let mut out = vec![0u8; out_len * 4];
        let mut outs = [out.as_mut_slice()];
        exec(
            kernel,
            Operands {
                name: "t",
                inputs: &ins,
                outputs: &mut outs,
                fills: &[Fill::F32],
                workspace: None,
            },
            &mut Scratch::default(),
        )
        .unwrap();
        floats(&out)
    }

    #[test]
    fn conv2d_matches_a_hand_computed_3x3_convolution_with_padding() {
        // 1×1×3×3 input 1..9, one 3×3 kernel of ones, pad 1: each output = sum of its
        // neighbourhood.
        let c = Conv2d {
            bias: None,
            n: 1,
            c: 1,
            h: 3,
            w: 3,
            o: 1,
            kh: 3,
            kw: 3,
            oh: 3,
            ow: 3,
            stride: (1, 1),
            pad: (1, 1),
            dilation: (1, 1),
            groups: 1,
            algo: None,
        };
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let y = run(&Kernel::Conv2d(c), &[bytes(&x), bytes(&[1.0; 9])], 9);
        assert_eq!(y, vec![12., 21., 16., 27., 45., 33., 24., 39., 28.]);
    }

    #[test]
    fn matmul_with_a_transposed_weight_and_bias_is_a_linear_layer() {
        let m = Matmul {
            a: 1,
            b: 2,
            bias: Some(0),
            batch: 1,
            m: 2,
            n: 2,
            k: 3,
            b_batch_stride: 0,
            b_trans: true,
        };
        let x = [1., 2., 3., 4., 5., 6.];
        let w = [1., 0., 0., 0., 1., 1.]; // rows: e0, e1 + e2
        let y = run(
            &Kernel::Matmul(m),
            &[bytes(&[10., 20.]), bytes(&x), bytes(&w)],
            4,
        );
        assert_eq!(y, vec![11., 25., 14., 31.]);
    }

    #[test]
    fn relu_and_max_pool_propagate_nan_poison() {
        assert!(unary(Unary::Relu, f32::NAN).is_nan());
        let p = Pool {
            max: true,
            planes: 1,
            h: 2,
            w: 2,
            oh: 1,
            ow: 1,
            kernel: (2, 2),
            stride: (2, 2),
            pad: (0, 0),
            count_include_pad: true,
            indices: false,
        };
        let y = run(&Kernel::Pool(p), &[bytes(&[1., f32::NAN, 3., 2.])], 1);
        assert!(y[0].is_nan());
    }

    #[test]
    fn broadcast_add_and_reductions_compute_what_numpy_would() {
        let k = Kernel::Binary {
            f: Binary::Add,
            dims: vec![2, 3],
            a: Bcast::Flat,
            b: Bcast::Strides(vec![1, 0]),
        };
        let y = run(
            &k,
            &[bytes(&[0., 1., 2., 3., 4., 5.]), bytes(&[10., 20.])],
            6,
        );
        assert_eq!(y, vec![10., 11., 12., 23., 24., 25.]);
        let r = Kernel::Reduce {
            mean: true,
            dims: vec![2, 3],
            reduce: vec![true, false],
        };
        let y = run(&r, &[bytes(&[0., 1., 2., 3., 4., 5.])], 3);
        assert_eq!(y, vec![1.5, 2.5, 3.5]);
    }

    #[test]
    fn softmax_rows_sum_to_one() {
        let y = run(
            &Kernel::Softmax { rows: 2, cols: 3 },
            &[bytes(&[1., 2., 3., 0., 0., 0.])],
            6,
        );
        assert!((y[..3].iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((y[3] - 1.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn the_mixing_kernel_writes_every_output_byte_from_all_input_bytes() {
        let a = vec![1u8; 13];
        let mut b = a.clone();
        let mut out1 = vec![0u8; 11];
        let mut out2 = vec![0u8; 11];
        for (inp, out) in [(&a, &mut out1), (&b.clone(), &mut out2)] {
            let ins = [inp.as_slice()];
            let mut outs = [out.as_mut_slice()];
            exec(
                &Kernel::Mix,
                Operands {
                    name: "m",
                    inputs: &ins,
                    outputs: &mut outs,
                    fills: &[Fill::Bytes],
                    workspace: None,
                },
                &mut Scratch::default(),
            )
            .unwrap();
        }
        assert_eq!(out1, out2);
        b[12] = 2;
        assert_ne!(mix_seed("m", &[&a]), mix_seed("m", &[&b]));
    }
}
