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
