//! Deterministic data: the seeded generator for inputs and weights, the poison pattern, and
//! the hashing behind the mixing kernel. Every function here is mirrored bit for bit by the
//! CUDA source (`cuda/kernels.cu`), so a mixing kernel gives the same bytes on both devices.
//!
//! Definitions (all arithmetic wrapping on `u64`):
//! - `mix64` is the splitmix64 finaliser, a bijection with full avalanche;
//! - a byte string is read as little-endian 64-bit words, the last one zero-padded;
//! - `checksum(bytes) = Σ_i mix64(word_i + (i + 1)·φ)` with φ = 0x9E3779B97F4A7C15. A sum of
//!   per-word terms is order-independent to compute (a parallel reduction on the GPU gives
//!   the same value), yet changing any one word changes its term and so the sum;
//! - an op's seed is `fnv1a(op name)`, folded with each input's checksum and size in order;
//! - output `k`, element `i` gets `h = mix64(seed ^ mix64((k + 1)·ψ + i))`; f32 tensors get
//!   the finite value `(h >> 40)·2⁻²³ − 1 ∈ [−1, 1)`, other tensors the bytes of `h`.

/// The golden-ratio increment of splitmix64.
pub const PHI: u64 = 0x9E37_79B9_7F4A_7C15;
/// Stride separating the outputs of one op in the mixing stream.
pub const PSI: u64 = 0xD6E8_FEB8_6659_FD93;
/// Poison written over freed and never-written memory: a quiet f32 NaN with the payload
/// 0x40DEAD (bytes `AD DE C0 7F`), so a stale f32 read propagates NaN through real math and
/// changes the checksum of any mixing kernel.
pub const POISON_WORD: u32 = 0x7FC0_DEAD;

/// The splitmix64 finaliser.
#[inline]
pub fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(PHI);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over a string: the per-op and per-tensor name hash.
pub fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// The checksum of a byte string (see the module doc).
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut sum = 0u64;
    let mut chunks = bytes.chunks_exact(8);
    let mut i = 0u64;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        i += 1;
        sum = sum.wrapping_add(mix64(
            u64::from_le_bytes(w).wrapping_add(i.wrapping_mul(PHI)),
        ));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        i += 1;
        sum = sum.wrapping_add(mix64(
            u64::from_le_bytes(w).wrapping_add(i.wrapping_mul(PHI)),
        ));
    }
    sum
}

/// Folds one input's checksum and size into an op seed.
#[inline]
pub fn fold(seed: u64, checksum: u64, size: u64) -> u64 {
    mix64(seed ^ checksum).wrapping_add(size)
}

/// The mixing hash of element `i` of output `k` under `seed`.
#[inline]
pub fn element_hash(seed: u64, k: u64, i: u64) -> u64 {
    mix64(seed ^ mix64((k + 1).wrapping_mul(PSI).wrapping_add(i)))
}

/// A finite f32 in [−1, 1) from a hash (exact in f32, identical on every device).
#[inline]
pub fn unit_f32(h: u64) -> f32 {
    ((h >> 40) as f32) * (1.0 / 8_388_608.0) - 1.0
}

pub use memplan::ops::kernel::Fill;

/// Values supplied for inputs and weights: the bytes of each tensor by name (e.g. read from a
/// tensor file with `memplan::data_file`), used instead of the seeded generator.
pub type TensorValues = std::collections::BTreeMap<String, Vec<u8>>;

/// Where the initial bytes of inputs and weights come from: the supplied values where they
/// name the tensor, else the seeded generator ([`generate`]).
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// Seed of the generator.
    pub seed: u64,
    /// Supplied values (checked beforehand to name inputs or weights and match their sizes).
    pub values: Option<&'a TensorValues>,
}

impl Source<'_> {
    /// A source with the generator only.
    pub fn seeded(seed: u64) -> Source<'static> {
        Source { seed, values: None }
    }

    /// The supplied bytes of tensor `name`, if any.
    pub fn supplied(&self, name: &str) -> Option<&[u8]> {
        self.values?.get(name).map(Vec::as_slice)
    }
}

/// Fills `out` as output `k` of a mixing kernel with seed `seed`.
pub fn mix_fill(out: &mut [u8], fill: Fill, seed: u64, k: u64) {
    match fill {
        Fill::F32 => {
            for (i, c) in out.chunks_exact_mut(4).enumerate() {
                c.copy_from_slice(&unit_f32(element_hash(seed, k, i as u64)).to_le_bytes());
            }
        }
        Fill::Bytes => {
            for (i, c) in out.chunks_mut(8).enumerate() {
                let h = element_hash(seed, k, i as u64).to_le_bytes();
                c.copy_from_slice(&h[..c.len()]);
            }
        }
    }
}

/// Writes the poison pattern over `bytes` (the pattern is anchored at byte 0 of the slice;
/// arena ranges start at multiples of 4 in practice, so f32 elements read as NaN).
pub fn poison(bytes: &mut [u8]) {
    let p = POISON_WORD.to_le_bytes();
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = p[i & 3];
    }
}

/// The seeded generator: the bytes of an input or weight tensor, a function of the seed and
/// the tensor's name only (so every run, on every device, loads the same data).
///
/// f32 tensors are uniform in a range that keeps deep networks finite: weights of rank ≥ 2
/// in ±√(3 / fan_in) (fan_in = product of all dims but the first), rank-1 weights (biases,
/// norm scales, running variances) in [0.5, 1.5), inputs in [−1, 1). Other dtypes: random
/// bytes.
pub fn generate(out: &mut [u8], fill: Fill, seed: u64, name: &str, weight_shape: Option<&[u64]>) {
    let s = mix64(seed ^ fnv1a(name));
    match fill {
        Fill::F32 => {
            let (lo, hi) = match weight_shape {
                Some(shape) if shape.len() >= 2 => {
                    let fan_in: u64 = shape[1..].iter().product::<u64>().max(1);
                    let a = (3.0 / fan_in as f64).sqrt() as f32;
                    (-a, a)
                }
                Some(_) => (0.5, 1.5),
                None => (-1.0, 1.0),
            };
            for (i, c) in out.chunks_exact_mut(4).enumerate() {
                let u = (unit_f32(element_hash(s, 0, i as u64)) + 1.0) * 0.5;
                c.copy_from_slice(&(lo + (hi - lo) * u).to_le_bytes());
            }
        }
        Fill::Bytes => mix_fill(out, Fill::Bytes, s, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_changes_when_any_single_byte_changes() {
        let base: Vec<u8> = (0..37u8).collect();
        let c = checksum(&base);
        for i in 0..base.len() {
            let mut b = base.clone();
            b[i] ^= 0x10;
            assert_ne!(checksum(&b), c, "byte {i}");
        }
        // swapping two words changes it too (the terms are position-dependent)
        let mut b = base.clone();
        b.swap(0, 8);
        assert_ne!(checksum(&b), c);
    }

    #[test]
    fn mixed_f32_outputs_are_finite_and_in_the_unit_range() {
        let mut out = vec![0u8; 4096];
        mix_fill(&mut out, Fill::F32, 42, 1);
        for c in out.chunks_exact(4) {
            let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            assert!((-1.0..1.0).contains(&x), "{x}");
        }
    }

    #[test]
    fn poison_reads_as_nan() {
        let mut b = [0u8; 8];
        poison(&mut b);
        assert!(f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_nan());
    }

    #[test]
    fn generated_data_depends_on_the_seed_and_the_name_only() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        generate(&mut a, Fill::F32, 1, "x", None);
        generate(&mut b, Fill::F32, 1, "x", None);
        assert_eq!(a, b);
        generate(&mut b, Fill::F32, 2, "x", None);
        assert_ne!(a, b);
        generate(&mut b, Fill::F32, 1, "y", None);
        assert_ne!(a, b);
    }
}
