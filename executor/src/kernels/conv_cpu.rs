//! CPU convolution algorithms named by a conv's `attrs.algo` ([`memplan::conv_algo`]), each
//! working only in the op's workspace from the plan (no private scratch):
//!
//! - **direct**: loops over output channels, input channels and kernel taps, accumulating
//!   a tap's contribution over whole output rows (the inner loop is contiguous). No
//!   workspace. O(N·K·Ho·Wo·C/g·Kh·Kw).
//! - **im2col**: per image and group, the column matrix `[C/g·Kh·Kw × columns]` of as many
//!   output columns as the workspace holds (the whole `Ho·Wo` unchunked, `⌈N·Ho·Wo/chunks⌉`
//!   when chunked), then one SGEMM per chunk writing those output columns. A pointwise conv
//!   multiplies the input directly.
//! - **Winograd F(m×m, 3×3)**, m = 2 or 4 (Lavin & Gray, CVPR 2016, transform matrices of
//!   their §5): the transformed filter `U = G g Gᵀ` (`α²·K·C`), then per chunk of tiles (as
//!   many as the workspace holds) the transformed input `V = Bᵀ d B` (`α²·C·tiles`), the
//!   `α²` products `M_ξ = U_ξ · V_ξ` (SGEMM) and the inverse transform `Y = Aᵀ M A`. Results
//!   differ from direct convolution by rounding (F4's transforms amplify it more); the
//!   reference run uses the same algorithm and workspace, so plan runs compare bitwise.
//!
//! The chunk size depends only on the workspace size, which the plan run and the reference
//! run share, so both compute in the same order.

use super::Conv2d;
use memplan::ops::ConvAlgo;

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what} do not match the kernel"))
    }
}

/// `c[i·ldc + j] = Σ_l a[i·k + l] · b[l·ldb + j]` for i < m, j < n (row-major, strided b/c).
#[allow(clippy::too_many_arguments)]
fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), String> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    check(
        a.len() >= m * k
            && (k == 0 || b.len() >= (k - 1) * ldb + n)
            && c.len() >= (m - 1) * ldc + n
            && ldb >= n
            && ldc >= n,
        "gemm operand sizes",
    )?;
    // SAFETY: matrixmultiply reads a[i·k + l] (< m·k), b[l·ldb + j] (< (k−1)·ldb + n) and
    // writes c[i·ldc + j] (< (m−1)·ldc + n) for i < m, l < k, j < n; the lengths were
    // checked above. `c` is an exclusive borrow disjoint from `a` and `b`; beta = 0, so the
    // old contents of c are not read.
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
            ldb as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            ldc as isize,
            1,
        );
    }
    Ok(())
}

/// Runs `c.algo` (one of direct / im2col / Winograd) without bias; `ws` is the op's
/// workspace (f32 view).
pub fn conv2d_algo(
    c: &Conv2d,
    algo: ConvAlgo,
    x: &[f32],
    w: &[f32],
    y: &mut [f32],
    ws: &mut [f32],
) -> Result<(), String> {
    let kc = c.c / c.groups * c.kh * c.kw;
    check(
        x.len() == c.n * c.c * c.h * c.w
            && y.len() == c.n * c.o * c.oh * c.ow
            && w.len() == c.o * kc,
        "conv2d sizes",
    )?;
    match algo {
        ConvAlgo::Direct => {
            direct(c, x, w, y);
            Ok(())
        }
        ConvAlgo::Im2col => im2col_chunked(c, x, w, y, ws),
        ConvAlgo::WinogradF2 => winograd(c, &F2, x, w, y, ws),
        ConvAlgo::WinogradF4 => winograd(c, &F4, x, w, y, ws),
    }
}

/// Output range `[lo, hi)` along one axis whose input index `o·stride + tap − pad` is in
/// `[0, len)`.
fn valid(out: usize, stride: usize, tap: usize, pad: usize, len: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(tap).div_ceil(stride).min(out);
    // o·stride + tap − pad ≤ len − 1  ⇔  o ≤ (len − 1 + pad − tap) / stride.
    let hi = if len + pad > tap {
        ((len - 1 + pad - tap) / stride + 1).min(out)
    } else {
        0
    };
    (lo, hi.max(lo))
}

fn direct(c: &Conv2d, x: &[f32], w: &[f32], y: &mut [f32]) {
    let (cg, og) = (c.c / c.groups, c.o / c.groups);
    let (hw, ohw) = (c.h * c.w, c.oh * c.ow);
    y.fill(0.0);
    for ni in 0..c.n {
        for oc in 0..c.o {
            let g = oc / og;
            let plane = &mut y[(ni * c.o + oc) * ohw..(ni * c.o + oc + 1) * ohw];
            for icg in 0..cg {
                let ic = g * cg + icg;
                let xp = &x[(ni * c.c + ic) * hw..(ni * c.c + ic + 1) * hw];
                for i in 0..c.kh {
                    let ti = i * c.dilation.0;
                    let (ylo, yhi) = valid(c.oh, c.stride.0, ti, c.pad.0, c.h);
                    for j in 0..c.kw {
                        let tj = j * c.dilation.1;
                        let (xlo, xhi) = valid(c.ow, c.stride.1, tj, c.pad.1, c.w);
                        let wv = w[((oc * cg + icg) * c.kh + i) * c.kw + j];
                        for oy in ylo..yhi {
                            let iy = oy * c.stride.0 + ti - c.pad.0;
                            let row = &mut plane[oy * c.ow..(oy + 1) * c.ow];
                            let xr = &xp[iy * c.w..(iy + 1) * c.w];
                            for (ox, o) in row.iter_mut().enumerate().take(xhi).skip(xlo) {
                                *o += wv * xr[ox * c.stride.1 + tj - c.pad.1];
                            }
                        }
                    }
                }
            }
        }
    }
}

fn im2col_chunked(
    c: &Conv2d,
    x: &[f32],
    w: &[f32],
    y: &mut [f32],
    ws: &mut [f32],
) -> Result<(), String> {
    let (cg, og) = (c.c / c.groups, c.o / c.groups);
    let (hw, ohw, kc) = (c.h * c.w, c.oh * c.ow, cg * c.kh * c.kw);
    let pointwise = c.kh == 1 && c.kw == 1 && c.stride == (1, 1) && c.pad == (0, 0);
    let cols = if pointwise {
        ohw
    } else {
        (ws.len() / kc).min(ohw)
    };
    check(
        cols > 0,
        "im2col workspace (smaller than one column) and conv2d sizes",
    )?;
    for ni in 0..c.n {
        for g in 0..c.groups {
            let xg = &x[(ni * c.c + g * cg) * hw..(ni * c.c + (g + 1) * cg) * hw];
            let wg = &w[g * og * kc..(g + 1) * og * kc];
            let yo = (ni * c.o + g * og) * ohw;
            let yg = &mut y[yo..yo + og * ohw];
            if pointwise {
                gemm(og, ohw, kc, wg, xg, ohw, yg, ohw)?;
                continue;
            }
            let mut j0 = 0;
            while j0 < ohw {
                let j1 = (j0 + cols).min(ohw);
                let cw = j1 - j0;
                for ch in 0..cg {
                    for i in 0..c.kh {
                        for j in 0..c.kw {
                            let row = (ch * c.kh + i) * c.kw + j;
                            let dst = &mut ws[row * cw..(row + 1) * cw];
                            for (q, d) in dst.iter_mut().enumerate() {
                                let p = j0 + q;
                                let (oy, ox) = (p / c.ow, p % c.ow);
                                let iy = (oy * c.stride.0 + i * c.dilation.0) as isize
                                    - c.pad.0 as isize;
                                let ix = (ox * c.stride.1 + j * c.dilation.1) as isize
                                    - c.pad.1 as isize;
                                *d = if iy >= 0
                                    && (iy as usize) < c.h
                                    && ix >= 0
                                    && (ix as usize) < c.w
                                {
                                    xg[(ch * c.h + iy as usize) * c.w + ix as usize]
                                } else {
                                    0.0
                                };
                            }
                        }
                    }
                }
                gemm(og, cw, kc, wg, &ws[..kc * cw], cw, &mut yg[j0..], ohw)?;
                j0 = j1;
            }
        }
    }
    Ok(())
}

/// Winograd F(m×m, 3×3) transform matrices, row-major: `bt` (α×α), `g` (α×3), `at` (m×α).
struct Winograd {
    m: usize,
    bt: &'static [f32],
    g: &'static [f32],
    at: &'static [f32],
}

const F2: Winograd = Winograd {
    m: 2,
    bt: &[
        1.0, 0.0, -1.0, 0.0, //
        0.0, 1.0, 1.0, 0.0, //
        0.0, -1.0, 1.0, 0.0, //
        0.0, 1.0, 0.0, -1.0,
    ],
    g: &[
        1.0, 0.0, 0.0, //
        0.5, 0.5, 0.5, //
        0.5, -0.5, 0.5, //
        0.0, 0.0, 1.0,
    ],
    at: &[
        1.0, 1.0, 1.0, 0.0, //
        0.0, 1.0, -1.0, -1.0,
    ],
};

const F4: Winograd = Winograd {
    m: 4,
    bt: &[
        4.0, 0.0, -5.0, 0.0, 1.0, 0.0, //
        0.0, -4.0, -4.0, 1.0, 1.0, 0.0, //
        0.0, 4.0, -4.0, -1.0, 1.0, 0.0, //
        0.0, -2.0, -1.0, 2.0, 1.0, 0.0, //
        0.0, 2.0, -1.0, -2.0, 1.0, 0.0, //
        0.0, 4.0, 0.0, -5.0, 0.0, 1.0,
    ],
    g: &[
        1.0 / 4.0,
        0.0,
        0.0, //
        -1.0 / 6.0,
        -1.0 / 6.0,
        -1.0 / 6.0, //
        -1.0 / 6.0,
        1.0 / 6.0,
        -1.0 / 6.0, //
        1.0 / 24.0,
        1.0 / 12.0,
        1.0 / 6.0, //
        1.0 / 24.0,
        -1.0 / 12.0,
        1.0 / 6.0, //
        0.0,
        0.0,
        1.0,
    ],
    at: &[
        1.0, 1.0, 1.0, 1.0, 1.0, 0.0, //
        0.0, 1.0, -1.0, 2.0, -2.0, 0.0, //
        0.0, 1.0, 1.0, 4.0, 4.0, 0.0, //
        0.0, 1.0, -1.0, 8.0, -8.0, 1.0,
    ],
};

/// `out (p×p) = l (p×q) · x (q×q) · lᵀ`, with `tmp` of p·q (the filter transform has
/// p = α, q = 3; the input transform p = q = α).
fn sandwich(l: &[f32], p: usize, q: usize, x: &[f32], tmp: &mut [f32], out: &mut [f32]) {
    for i in 0..p {
        for j in 0..q {
            let mut s = 0.0;
            for r in 0..q {
                s += l[i * q + r] * x[r * q + j];
            }
            tmp[i * q + j] = s;
        }
    }
    for i in 0..p {
        for j in 0..p {
            let mut s = 0.0;
            for r in 0..q {
                s += tmp[i * q + r] * l[j * q + r];
            }
            out[i * p + j] = s;
        }
    }
}

fn winograd(
    c: &Conv2d,
    f: &Winograd,
    x: &[f32],
    w: &[f32],
    y: &mut [f32],
    ws: &mut [f32],
) -> Result<(), String> {
    check(
        c.kh == 3 && c.kw == 3 && c.stride == (1, 1) && c.dilation == (1, 1) && c.groups == 1,
        "Winograd needs a 3×3 stride-1 undilated ungrouped conv; its shape and sizes",
    )?;
    let (m, a) = (f.m, f.m + 2);
    let a2 = a * a;
    let (cc, k) = (c.c, c.o);
    let (th, tw) = (c.oh.div_ceil(m), c.ow.div_ceil(m));
    let tiles = c.n * th * tw;
    let u_len = a2 * k * cc;
    check(ws.len() > u_len, "Winograd workspace and conv2d sizes")?;
    let per = ((ws.len() - u_len) / (a2 * (cc + k))).min(tiles);
    check(
        per > 0,
        "Winograd workspace (smaller than one tile) and conv2d sizes",
    )?;
    let (u, rest) = ws.split_at_mut(u_len);
    let mut tmp = vec![0.0f32; a * a];
    let mut blk = vec![0.0f32; a2];
    let mut out = vec![0.0f32; a2];
    // U[ξ][k][c] = (G g Gᵀ)[ξ].
    for ko in 0..k {
        for ci in 0..cc {
            let g = &w[(ko * cc + ci) * 9..(ko * cc + ci + 1) * 9];
            sandwich(f.g, a, 3, g, &mut tmp, &mut out);
            for (xi, &v) in out.iter().enumerate() {
                u[(xi * k + ko) * cc + ci] = v;
            }
        }
    }
    let (hw, ohw) = (c.h * c.w, c.oh * c.ow);
    let mut t0 = 0;
    while t0 < tiles {
        let t1 = (t0 + per).min(tiles);
        let cw = t1 - t0;
        let (v, mm) = rest.split_at_mut(a2 * cc * cw);
        // V[ξ][c][t] = (Bᵀ d B)[ξ] for the α×α input patch d of tile t.
        for t in t0..t1 {
            let (ni, ty, tx) = (t / (th * tw), (t / tw) % th, t % tw);
            for ci in 0..cc {
                let xp = &x[(ni * cc + ci) * hw..(ni * cc + ci + 1) * hw];
                for i in 0..a {
                    let iy = (ty * m + i) as isize - c.pad.0 as isize;
                    for j in 0..a {
                        let ix = (tx * m + j) as isize - c.pad.1 as isize;
                        blk[i * a + j] =
                            if iy >= 0 && (iy as usize) < c.h && ix >= 0 && (ix as usize) < c.w {
                                xp[iy as usize * c.w + ix as usize]
                            } else {
                                0.0
                            };
                    }
                }
                sandwich(f.bt, a, a, &blk, &mut tmp, &mut out);
                for (xi, &val) in out.iter().enumerate() {
                    v[(xi * cc + ci) * cw + (t - t0)] = val;
                }
            }
        }
        // M[ξ] (K × cw) = U[ξ] (K × C) · V[ξ] (C × cw).
        for xi in 0..a2 {
            gemm(
                k,
                cw,
                cc,
                &u[xi * k * cc..(xi + 1) * k * cc],
                &v[xi * cc * cw..(xi + 1) * cc * cw],
                cw,
                &mut mm[xi * k * cw..(xi + 1) * k * cw],
                cw,
            )?;
        }
        // Y = Aᵀ M A per (k, tile), clipped to the output.
        for t in t0..t1 {
            let (ni, ty, tx) = (t / (th * tw), (t / tw) % th, t % tw);
            for ko in 0..k {
                for (xi, b) in blk.iter_mut().enumerate() {
                    *b = mm[(xi * k + ko) * cw + (t - t0)];
                }
                // Aᵀ is m×α: out (m×m) = Aᵀ · blk · A.
                for i in 0..m {
                    for j in 0..a {
                        let mut s = 0.0;
                        for r in 0..a {
                            s += f.at[i * a + r] * blk[r * a + j];
                        }
                        tmp[i * a + j] = s;
                    }
                }
                let plane = &mut y[(ni * k + ko) * ohw..(ni * k + ko + 1) * ohw];
                for i in 0..m {
                    let oy = ty * m + i;
                    if oy >= c.oh {
                        break;
                    }
                    for j in 0..m {
                        let ox = tx * m + j;
                        if ox >= c.ow {
                            break;
                        }
                        let mut s = 0.0;
                        for r in 0..a {
                            s += tmp[i * a + r] * f.at[j * a + r];
                        }
                        plane[oy * c.ow + ox] = s;
                    }
                }
            }
        }
        t0 = t1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    /// The textbook definition, in f64.
    fn reference(c: &Conv2d, x: &[f32], w: &[f32]) -> Vec<f64> {
        let (cg, og) = (c.c / c.groups, c.o / c.groups);
        let mut y = vec![0.0f64; c.n * c.o * c.oh * c.ow];
        for ni in 0..c.n {
            for oc in 0..c.o {
                let g = oc / og;
                for oy in 0..c.oh {
                    for ox in 0..c.ow {
                        let mut s = 0.0f64;
                        for icg in 0..cg {
                            let ic = g * cg + icg;
                            for i in 0..c.kh {
                                for j in 0..c.kw {
                                    let iy = (oy * c.stride.0 + i * c.dilation.0) as isize
                                        - c.pad.0 as isize;
                                    let ix = (ox * c.stride.1 + j * c.dilation.1) as isize
                                        - c.pad.1 as isize;
                                    if iy < 0 || ix < 0 || iy as usize >= c.h || ix as usize >= c.w
                                    {
                                        continue;
                                    }
                                    s += f64::from(
                                        x[((ni * c.c + ic) * c.h + iy as usize) * c.w
                                            + ix as usize],
                                    ) * f64::from(w[((oc * cg + icg) * c.kh + i) * c.kw + j]);
                                }
                            }
                        }
                        y[((ni * c.o + oc) * c.oh + oy) * c.ow + ox] = s;
                    }
                }
            }
        }
        y
    }

    #[allow(clippy::too_many_arguments)]
    fn conv(
        n: usize,
        ch: usize,
        h: usize,
        o: usize,
        k: usize,
        stride: usize,
        pad: usize,
        dil: usize,
        groups: usize,
    ) -> Conv2d {
        let span = dil * (k - 1) + 1;
        let oh = (h + 2 * pad - span) / stride + 1;
        Conv2d {
            bias: None,
            n,
            c: ch,
            h,
            w: h,
            o,
            kh: k,
            kw: k,
            oh,
            ow: oh,
            stride: (stride, stride),
            pad: (pad, pad),
            dilation: (dil, dil),
            groups,
            algo: None,
        }
    }

    fn max_err(c: &Conv2d, algo: ConvAlgo, chunks: u32) -> f64 {
        let mut seed = 7;
        let x: Vec<f32> = (0..c.n * c.c * c.h * c.w).map(|_| lcg(&mut seed)).collect();
        let w: Vec<f32> = (0..c.o * c.c / c.groups * c.kh * c.kw)
            .map(|_| lcg(&mut seed))
            .collect();
        let elems = memplan::ops::workspace_elems_chunked(c, algo, chunks).unwrap();
        let mut ws = vec![f32::NAN; elems as usize];
        let mut y = vec![f32::NAN; c.n * c.o * c.oh * c.ow];
        conv2d_algo(c, algo, &x, &w, &mut y, &mut ws).unwrap();
        let r = reference(c, &x, &w);
        y.iter()
            .zip(&r)
            .map(|(&a, &b)| (f64::from(a) - b).abs())
            .fold(0.0, f64::max)
    }

    /// Tolerance: inputs and weights in [−0.5, 0.5), sums of at most 8·9 = 72 products; f32
    /// rounding stays below 1e−5 for direct and im2col. Winograd's transforms add rounding
    /// of their intermediate sums (F4's with factors up to 8): 1e−4 (F2) and 1e−3 (F4).
    #[test]
    fn every_algorithm_computes_the_convolution_within_its_tolerance() {
        for c in [
            conv(2, 8, 9, 6, 3, 1, 1, 1, 1),
            conv(1, 4, 10, 5, 3, 2, 1, 1, 1),
            conv(1, 8, 7, 8, 3, 1, 2, 2, 2),
            conv(2, 6, 6, 4, 1, 1, 0, 1, 1),
            conv(1, 3, 11, 4, 5, 1, 2, 1, 1),
        ] {
            assert!(max_err(&c, ConvAlgo::Direct, 1) < 1e-5, "{c:?}");
            assert!(max_err(&c, ConvAlgo::Im2col, 1) < 1e-5, "{c:?}");
            if c.oh > 3 && c.kh > 1 {
                assert!(max_err(&c, ConvAlgo::Im2col, 3) < 1e-5, "{c:?}");
            }
            if memplan::ops::applies(&c, ConvAlgo::WinogradF2) {
                for chunks in [1, 2, 5] {
                    assert!(max_err(&c, ConvAlgo::WinogradF2, chunks) < 1e-4, "{c:?}");
                }
                for chunks in [1, 3] {
                    assert!(max_err(&c, ConvAlgo::WinogradF4, chunks) < 1e-3, "{c:?}");
                }
            }
        }
    }

    #[test]
    fn a_too_small_workspace_is_an_error_not_a_panic() {
        let c = conv(1, 4, 8, 4, 3, 1, 1, 1, 1);
        let x = vec![0.0; 4 * 64];
        let w = vec![0.0; 4 * 4 * 9];
        let mut y = vec![0.0; 4 * 64];
        let mut ws = vec![0.0; 5];
        assert!(conv2d_algo(&c, ConvAlgo::Im2col, &x, &w, &mut y, &mut ws).is_err());
        assert!(conv2d_algo(&c, ConvAlgo::WinogradF2, &x, &w, &mut y, &mut ws).is_err());
    }
}
