// memplan GPU kernels, compiled at run time with NVRTC. The hash functions mirror
// src/executor/data.rs bit for bit (see the definitions there); byte-wise access keeps
// every kernel correct at any alignment.
typedef unsigned long long u64;
typedef unsigned char u8;

#define PHI 0x9E3779B97F4A7C15ULL
#define PSI 0xD6E8FEB86659FD93ULL

__device__ __forceinline__ u64 mix64(u64 x) {
    u64 z = x + PHI;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ u64 element_hash(u64 seed, u64 k, u64 i) {
    return mix64(seed ^ mix64((k + 1) * PSI + i));
}

__device__ __forceinline__ float unit_f32(u64 h) {
    return (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

extern "C" __global__ void poison(u8* p, u64 n) {
    const u8 pat[4] = {0xAD, 0xDE, 0xC0, 0x7F};
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        p[i] = pat[i & 3];
}

// sum += Σ_i mix64(word_i + (i + 1)·φ) over the little-endian words of p[0..n).
extern "C" __global__ void checksum(const u8* p, u64 n, u64* sum) {
    __shared__ u64 part[256];
    u64 words = (n + 7) / 8, acc = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x) {
        u64 w = 0;
        for (int j = 0; j < 8; ++j) {
            u64 b = 8 * i + j;
            if (b < n) w |= (u64)p[b] << (8 * j);
        }
        acc += mix64(w + (i + 1) * PHI);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(sum, part[0]);  // wrapping u64 addition: order-free
}

extern "C" __global__ void set_u64(u64* p, u64 v) { *p = v; }

// seed = mix64(seed ^ sum) + size
extern "C" __global__ void fold(u64* seed, const u64* sum, u64 size) {
    *seed = mix64(*seed ^ *sum) + size;
}

// Output k of a mixing kernel: f32 elements (as_f32) or raw bytes.
extern "C" __global__ void mix_fill(u8* out, u64 n, const u64* seed, u64 k, int as_f32) {
    u64 s = *seed;
    u64 units = as_f32 ? n / 4 : (n + 7) / 8;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < units; i += (u64)gridDim.x * blockDim.x) {
        u64 h = element_hash(s, k, i);
        if (as_f32) {
            float v = unit_f32(h);
            unsigned bits = __float_as_uint(v);
            for (int j = 0; j < 4; ++j) out[4 * i + j] = (u8)(bits >> (8 * j));
        } else {
            for (int j = 0; j < 8; ++j) {
                u64 b = 8 * i + j;
                if (b < n) out[b] = (u8)(h >> (8 * j));
            }
        }
    }
}

__device__ float erf_as(float x) {
    float s = x < 0.0f ? -1.0f : 1.0f, a = fabsf(x);
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = t * (0.2548296f + t * (-0.28449674f + t * (1.4214137f + t * (-1.4531521f + t * 1.0614054f))));
    return s * (1.0f - p * expf(-a * a));
}

// op: 0 relu, 1 sigmoid, 2 silu, 3 gelu, 4 hardtanh(a, b), 5 tanh, 6 neg
extern "C" __global__ void unary(const float* x, float* y, u64 n, int op, float a, float b) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float v = x[i], r;
        switch (op) {
            case 0: r = v < 0.0f ? 0.0f : v; break;
            case 1: r = 1.0f / (1.0f + expf(-v)); break;
            case 2: r = v / (1.0f + expf(-v)); break;
            case 3: r = 0.5f * v * (1.0f + erf_as(v * 0.70710678118654752f)); break;
            case 4: r = v < a ? a : (v > b ? b : v); break;
            case 5: r = tanhf(v); break;
            default: r = -v; break;
        }
        y[i] = r;
    }
}

struct Bcast {
    u64 rank;
    u64 dims[8];
    u64 sa[8];  // strides of a over the output dims; flat when flat_a
    u64 sb[8];
    int flat_a, flat_b;
};

// op: 0 add, 1 sub, 2 mul, 3 div
extern "C" __global__ void binary(const float* a, const float* b, float* y, u64 n, int op, Bcast bc) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 ia = 0, ib = 0, rest = i;
        for (int d = (int)bc.rank - 1; d >= 0; --d) {
            u64 c = rest % bc.dims[d];
            rest /= bc.dims[d];
            ia += c * bc.sa[d];
            ib += c * bc.sb[d];
        }
        float x = a[bc.flat_a ? i : ia], z = b[bc.flat_b ? i : ib], r;
        switch (op) {
            case 0: r = x + z; break;
            case 1: r = x - z; break;
            case 2: r = x * z; break;
            default: r = x / z; break;
        }
        y[i] = r;
    }
}

extern "C" __global__ void add_bias_rows(float* y, const float* bias, u64 rows, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < rows * n; i += (u64)gridDim.x * blockDim.x)
        y[i] += bias[i % n];
}

#define GRID_LOOP(i, n) for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

// Constant padding of NCHW planes: y[pl][r][c] = x[pl][r - top][c - left] inside, else value.
extern "C" __global__ void pad2d(const float* x, float* y, u64 planes, u64 h, u64 w, u64 top, u64 left,
                                 u64 oh, u64 ow, float value) {
    GRID_LOOP(i, planes * oh * ow) {
        u64 c = i % ow, r = (i / ow) % oh, pl = i / (oh * ow);
        float v = value;
        if (r >= top && r < top + h && c >= left && c < left + w) v = x[(pl * h + (r - top)) * w + (c - left)];
        y[i] = v;
    }
}

// Rows of one dimension, as bytes: y[o][j] = x[o][from + j] for j < outb.
extern "C" __global__ void slice_rows(const u8* x, u8* y, u64 outer, u64 inb, u64 outb, u64 from) {
    GRID_LOOP(i, outer * outb) {
        u64 o = i / outb, j = i % outb;
        y[i] = x[o * inb + from + j];
    }
}

// One input of a concatenation: y[o][off + j] = p[o][j] for j < n, rows of `total`.
extern "C" __global__ void concat_part(const float* p, float* y, u64 outer, u64 n, u64 total, u64 off) {
    GRID_LOOP(i, outer * n) {
        u64 o = i / n, j = i % n;
        y[o * total + off + j] = p[i];
    }
}

struct ConvArg {
    u64 n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups;
};

// Direct convolution, one output element per thread: Σ over (input channel of the group,
// ky, kx) in that order, then + bias (null: none).
extern "C" __global__ void conv2d(const float* x, const float* wt, const float* bias, float* y, ConvArg a) {
    u64 cg = a.c / a.groups, og = a.o / a.groups;
    GRID_LOOP(i, a.n * a.o * a.oh * a.ow) {
        u64 ox = i % a.ow, oy = (i / a.ow) % a.oh, oc = (i / (a.ow * a.oh)) % a.o, ni = i / (a.ow * a.oh * a.o);
        u64 g = oc / og;
        const float* wo = wt + oc * cg * a.kh * a.kw;
        float acc = 0.0f;
        for (u64 ci = 0; ci < cg; ++ci) {
            const float* plane = x + (ni * a.c + g * cg + ci) * a.h * a.w;
            for (u64 ky = 0; ky < a.kh; ++ky) {
                long long iy = (long long)(oy * a.sh + ky * a.dh) - (long long)a.ph;
                if (iy < 0 || iy >= (long long)a.h) continue;
                for (u64 kx = 0; kx < a.kw; ++kx) {
                    long long ix = (long long)(ox * a.sw + kx * a.dw) - (long long)a.pw;
                    if (ix < 0 || ix >= (long long)a.w) continue;
                    acc += wo[(ci * a.kh + ky) * a.kw + kx] * plane[iy * a.w + ix];
                }
            }
        }
        y[i] = bias ? acc + bias[oc] : acc;
    }
}

// Batch statistics per channel, in the CPU's order (each plane summed, then added):
// mean and 1/sqrt(biased var + eps).
extern "C" __global__ void bn_stats(const float* x, float* mean, float* inv, u64 n, u64 c, u64 spatial, float eps) {
    GRID_LOOP(ci, c) {
        float count = (float)(n * spatial), s = 0.0f;
        for (u64 ni = 0; ni < n; ++ni) {
            const float* p = x + (ni * c + ci) * spatial;
            float ps = 0.0f;
            for (u64 k = 0; k < spatial; ++k) ps += p[k];
            s += ps;
        }
        float m = s / count, q = 0.0f;
        for (u64 ni = 0; ni < n; ++ni) {
            const float* p = x + (ni * c + ci) * spatial;
            float ps = 0.0f;
            for (u64 k = 0; k < spatial; ++k) ps += (p[k] - m) * (p[k] - m);
            q += ps;
        }
        mean[ci] = m;
        inv[ci] = 1.0f / sqrtf(q / count + eps);
    }
}

// Running statistics: mean = rm, inv = 1/sqrt(rv + eps).
extern "C" __global__ void bn_running(const float* rm, const float* rv, float* mean, float* inv, u64 c, float eps) {
    GRID_LOOP(ci, c) {
        mean[ci] = rm[ci];
        inv[ci] = 1.0f / sqrtf(rv[ci] + eps);
    }
}

extern "C" __global__ void bn_apply(const float* x, const float* mean, const float* inv, const float* wt,
                                    const float* b, float* y, u64 n, u64 c, u64 spatial) {
    GRID_LOOP(i, n * c * spatial) {
        u64 ci = (i / spatial) % c;
        y[i] = (x[i] - mean[ci]) * inv[ci] * wt[ci] + b[ci];
    }
}

struct PoolArg {
    u64 planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
    int max, count_include_pad, indices;
};

// Max or average pooling, one output per thread; max writes the argmax (i64, index in the
// plane, little-endian bytes) to idx when indices is set.
extern "C" __global__ void pool2d(const float* x, float* y, u8* idx, PoolArg a) {
    GRID_LOOP(o, a.planes * a.oh * a.ow) {
        u64 ox = o % a.ow, oy = (o / a.ow) % a.oh, pl = o / (a.ow * a.oh);
        const float* plane = x + pl * a.h * a.w;
        long long hs = (long long)(oy * a.sh) - (long long)a.ph, ws = (long long)(ox * a.sw) - (long long)a.pw;
        if (a.max) {
            long long he = min(hs + (long long)a.kh, (long long)a.h), we = min(ws + (long long)a.kw, (long long)a.w);
            float best = __int_as_float(0xff800000);
            long long at = -1;
            for (long long iy = max(hs, 0LL); iy < he; ++iy)
                for (long long ix = max(ws, 0LL); ix < we; ++ix) {
                    float v = plane[iy * a.w + ix];
                    if (v > best || isnan(v)) { best = v; at = iy * (long long)a.w + ix; }
                }
            y[o] = best;
            if (a.indices)
                for (int j = 0; j < 8; ++j) idx[8 * o + j] = (u8)((unsigned long long)at >> (8 * j));
        } else {
            long long he = min(hs + (long long)a.kh, (long long)(a.h + a.ph));
            long long we = min(ws + (long long)a.kw, (long long)(a.w + a.pw));
            long long pool_size = (he - hs) * (we - ws);
            long long h0 = max(hs, 0LL), w0 = max(ws, 0LL), h1 = min(he, (long long)a.h), w1 = min(we, (long long)a.w);
            float s = 0.0f;
            for (long long iy = h0; iy < h1; ++iy)
                for (long long ix = w0; ix < w1; ++ix) s += plane[iy * a.w + ix];
            long long div = a.count_include_pad ? pool_size : (h1 - h0) * (w1 - w0);
            y[o] = s / (float)(div > 1 ? div : 1);
        }
    }
}

// Adaptive average pooling with PyTorch's bins.
extern "C" __global__ void adaptive_avg(const float* x, float* y, u64 planes, u64 h, u64 w, u64 oh, u64 ow) {
    GRID_LOOP(o, planes * oh * ow) {
        u64 ox = o % ow, oy = (o / ow) % oh, pl = o / (ow * oh);
        u64 hs = oy * h / oh, he = ((oy + 1) * h + oh - 1) / oh;
        u64 ws = ox * w / ow, we = ((ox + 1) * w + ow - 1) / ow;
        float s = 0.0f;
        for (u64 iy = hs; iy < he; ++iy)
            for (u64 ix = ws; ix < we; ++ix) s += x[(pl * h + iy) * w + ix];
        y[o] = s / (float)((he - hs) * (we - ws));
    }
}

// Softmax over rows, one row per thread.
extern "C" __global__ void softmax_rows(const float* x, float* y, u64 rows, u64 cols) {
    GRID_LOOP(r, rows) {
        const float* xs = x + r * cols;
        float* ys = y + r * cols;
        float mx = __int_as_float(0xff800000), sum = 0.0f;
        for (u64 k = 0; k < cols; ++k) mx = fmaxf(mx, xs[k]);
        for (u64 k = 0; k < cols; ++k) { ys[k] = expf(xs[k] - mx); sum += ys[k]; }
        for (u64 k = 0; k < cols; ++k) ys[k] /= sum;
    }
}

struct ReduceArg {
    u64 rank;
    u64 dims[8];
    int red[8];
};

// Sum (or mean) over the reduced dimensions, one output per thread, in input order.
extern "C" __global__ void reduce_dims(const float* x, float* y, u64 out_n, u64 count, int mean, ReduceArg a) {
    GRID_LOOP(o, out_n) {
        // input offset of the output's coordinates (reduced ones at 0)
        u64 base = 0, rest = o, stride = 1;
        u64 istr[8];
        for (int d = (int)a.rank - 1; d >= 0; --d) { istr[d] = stride; stride *= a.dims[d]; }
        for (int d = (int)a.rank - 1; d >= 0; --d)
            if (!a.red[d]) { base += (rest % a.dims[d]) * istr[d]; rest /= a.dims[d]; }
        float s = 0.0f;
        for (u64 k = 0; k < count; ++k) {
            u64 off = base, r = k;
            for (int d = (int)a.rank - 1; d >= 0; --d)
                if (a.red[d]) { off += (r % a.dims[d]) * istr[d]; r /= a.dims[d]; }
            s += x[off];
        }
        y[o] = mean ? s / (float)count : s;
    }
}
