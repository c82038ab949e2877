//! Cost model of a device for budgeted plans: how long an op, a recompute and a host
//! transfer take.
//!
//! - An op takes its measured `time_us` when the graph gives one, else
//!   `max(flops / throughput, bytes touched / memory bandwidth)` (a roofline), where the
//!   throughput is the dense fp32 figure when the op writes an `f32`/`f64` tensor (or no dtype
//!   is given) and the dense 16-bit tensor-core figure otherwise, and the bytes touched are the
//!   sizes of its inputs and outputs.
//! - A transfer of `b` bytes takes `b / link bandwidth` in its direction (device→host for
//!   `spill_out`, host→device for `spill_in`); each direction is its own copy stream.
//! - Copies overlap compute, so only the part of a transfer that compute cannot hide counts as
//!   overhead; `crate::budget` simulates the streams over an instruction stream.
//!
//! Defaults ([`DeviceProfile::h200`]): an H200-class GPU — 989 TFLOP/s bf16 dense, 67 TFLOP/s
//! fp32, 4.8 TB/s HBM3e, 55 GB/s effective PCIe Gen5 x16 per direction.

use crate::graph::{Graph, Op};
use crate::ops::{
    applies, choice_of, modelled_conv, workspace_bytes, workspace_elems_chunked, Conv2d, ConvAlgo,
};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A device's figures (the JSON device-profile file has these fields; any may be left out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceProfile {
    /// Name shown in the stats.
    pub name: String,
    /// Dense 16-bit (bf16/fp16) throughput, FLOP/s.
    pub half_flops_per_s: f64,
    /// Dense fp32 throughput, FLOP/s.
    pub fp32_flops_per_s: f64,
    /// Device memory bandwidth, bytes/s.
    pub memory_bytes_per_s: f64,
    /// Host→device link bandwidth (spill_in), bytes/s.
    pub h2d_bytes_per_s: f64,
    /// Device→host link bandwidth (spill_out), bytes/s.
    pub d2h_bytes_per_s: f64,
}

impl Default for DeviceProfile {
    fn default() -> Self {
        DeviceProfile::h200()
    }
}

/// A device profile that cannot be used.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum CostError {
    /// The profile file is not valid JSON or has unknown fields.
    #[error("device profile JSON error: {0}")]
    Json(String),
    /// A figure is not a positive finite number.
    #[error("device profile field {field} is {value}, expected a positive finite number")]
    Figure {
        /// The field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
}

impl DeviceProfile {
    /// An H200-class GPU (the default figures, see the module doc).
    pub fn h200() -> Self {
        DeviceProfile {
            name: "h200".into(),
            half_flops_per_s: 989e12,
            fp32_flops_per_s: 67e12,
            memory_bytes_per_s: 4.8e12,
            h2d_bytes_per_s: 55e9,
            d2h_bytes_per_s: 55e9,
        }
    }

    /// Reads a JSON profile (missing fields keep the H200 figures) and checks it.
    pub fn from_json(text: &str) -> Result<Self, CostError> {
        let p: DeviceProfile =
            serde_json::from_str(text).map_err(|e| CostError::Json(e.to_string()))?;
        p.check()?;
        Ok(p)
    }

    /// Every figure must be positive and finite.
    pub fn check(&self) -> Result<(), CostError> {
        for (field, value) in [
            ("half_flops_per_s", self.half_flops_per_s),
            ("fp32_flops_per_s", self.fp32_flops_per_s),
            ("memory_bytes_per_s", self.memory_bytes_per_s),
            ("h2d_bytes_per_s", self.h2d_bytes_per_s),
            ("d2h_bytes_per_s", self.d2h_bytes_per_s),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(CostError::Figure { field, value });
            }
        }
        Ok(())
    }

    /// Modelled run time of `op` in microseconds (see the module doc).
    /// A conv whose `attrs.algo` names an algorithm takes that algorithm's modelled time
    /// ([`crate::conv_algo`]).
    pub fn op_us(&self, graph: &Graph, op: &Op) -> f64 {
        if let Some(t) = chosen_us(self, graph, op) {
            return t;
        }
        if let Some(t) = op.time_us {
            return t;
        }
        let wide = op.outputs.iter().all(|&t| {
            matches!(
                graph.tensor(t).dtype.as_deref(),
                None | Some("f32") | Some("f64") | Some("float32") | Some("float64")
            )
        });
        let throughput = if wide {
            self.fp32_flops_per_s
        } else {
            self.half_flops_per_s
        };
        let bytes: u64 = op
            .inputs
            .iter()
            .chain(&op.outputs)
            .map(|&t| graph.tensor(t).size)
            .sum();
        let compute = op.flops.unwrap_or(0.0) / throughput;
        let memory = bytes as f64 / self.memory_bytes_per_s;
        compute.max(memory) * 1e6
    }

    /// Microseconds to copy `bytes` device→host.
    pub fn d2h_us(&self, bytes: u64) -> f64 {
        bytes as f64 / self.d2h_bytes_per_s * 1e6
    }

    /// Microseconds to copy `bytes` host→device.
    pub fn h2d_us(&self, bytes: u64) -> f64 {
        bytes as f64 / self.h2d_bytes_per_s * 1e6
    }
}

/// Op types cheap to recompute for the memory they free (elementwise, normalisation,
/// pooling, casts): the budget heuristic recomputes only these. Random ops such as dropout
/// are not cheap to recompute at any price (a second run draws a new mask): whether an op
/// may be recomputed at all is [`crate::ops::may_recompute`], checked before this list.
pub const CHEAP_OPS: [&str; 13] = [
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "batch_norm",
    "layer_norm",
    "add",
    "mul",
    "pool",
    "cast",
    "to_copy",
    "hardtanh",
];

/// Whether an op type is one of [`CHEAP_OPS`] (substring match, so `max_pool2d`, `add_`,
/// `aten::relu` count; backward ops, matmuls and convolutions never do).
pub fn is_cheap(op_type: &str) -> bool {
    let t = op_type.to_ascii_lowercase();
    let heavy = [
        "backward",
        "matmul",
        "mm",
        "conv",
        "linear",
        "attention",
        "embedding",
    ];
    !heavy.iter().any(|h| t.contains(h)) && CHEAP_OPS.iter().any(|c| t.contains(c))
}

// Conv algorithm timings (the speed model of `crate::conv_algo`'s module doc).

/// Share of the fp32/16-bit peak a blocked GEMM reaches (im2col, Winograd's products).
pub const GEMM_EFFICIENCY: f64 = 0.75;
/// Share of the peak a workspace-free direct convolution reaches (assumption, module doc).
pub const DIRECT_EFFICIENCY: f64 = 0.40;
/// Modelled cost of each extra chunk of a chunked im2col / Winograd run (µs): launching the
/// chunk's two or three kernels from a captured CUDA graph (well under 1 µs each; assumption,
/// rounded up). Chunking moves no extra bytes: each chunk's part is written and read once.
pub const CHUNK_US: f64 = 1.0;

/// The op's flops: the graph's, else `2·N·K·Ho·Wo·cg·Kh·Kw`.
fn flops(op: &Op, c: &Conv2d) -> f64 {
    op.flops.unwrap_or_else(|| {
        2.0 * (c.n * c.o * c.oh * c.ow) as f64 * (c.c / c.groups * c.kh * c.kw) as f64
    })
}

/// Modelled time of `algo` on the conv `op` from the roofline figures alone (module doc).
fn model_us(
    profile: &DeviceProfile,
    graph: &Graph,
    op: &Op,
    c: &Conv2d,
    algo: ConvAlgo,
    chunks: u32,
) -> f64 {
    let wide = op.outputs.iter().all(|&t| {
        matches!(
            graph.tensor(t).dtype.as_deref(),
            None | Some("f32") | Some("f64") | Some("float32") | Some("float64")
        )
    });
    let peak = if wide {
        profile.fp32_flops_per_s
    } else {
        profile.half_flops_per_s
    };
    let io: u64 = op
        .inputs
        .iter()
        .chain(&op.outputs)
        .map(|&t| graph.tensor(t).size)
        .sum();
    let io_s = io as f64 / profile.memory_bytes_per_s;
    let f = flops(op, c);
    // Chunks move the same bytes in total: the unchunked workspace's.
    let ws = workspace_bytes(c, algo).unwrap_or(0) as f64;
    let traffic = 2.0 * ws / profile.memory_bytes_per_s;
    let chunking = f64::from(chunks.max(1) - 1) * CHUNK_US * 1e-6;
    let s = match algo {
        ConvAlgo::Direct => (f / (DIRECT_EFFICIENCY * peak)).max(io_s),
        ConvAlgo::Im2col | ConvAlgo::WinogradF2 | ConvAlgo::WinogradF4 => {
            (f / (algo.multiply_reduction() * GEMM_EFFICIENCY * peak)).max(io_s)
                + traffic
                + chunking
        }
    };
    s * 1e6
}

/// Modelled time (µs) of `algo` on the conv `op`; with a measured `time_us`, that time is the
/// fastest algorithm's and the others are scaled by the model's ratio.
pub fn algo_us(
    profile: &DeviceProfile,
    graph: &Graph,
    op: &Op,
    c: &Conv2d,
    algo: ConvAlgo,
    chunks: u32,
) -> f64 {
    let us = model_us(profile, graph, op, c, algo, chunks);
    match op.time_us {
        Some(t) => {
            let best = ConvAlgo::ALL
                .into_iter()
                .filter(|&a| applies(c, a))
                .map(|a| model_us(profile, graph, op, c, a, 1))
                .fold(f64::INFINITY, f64::min);
            if best > 0.0 && best.is_finite() {
                t * us / best
            } else {
                t
            }
        }
        None => us,
    }
}

/// The modelled time of an op whose `algo` attribute names a modelled algorithm
/// ([`DeviceProfile::op_us`] uses it), `None` for every other op.
pub fn chosen_us(profile: &DeviceProfile, graph: &Graph, op: &Op) -> Option<f64> {
    let (algo, chunks) = choice_of(op)?;
    let c = modelled_conv(graph, op)?;
    workspace_elems_chunked(&c, algo, chunks)?;
    Some(algo_us(profile, graph, op, &c, algo, chunks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(op: &str) -> Graph {
        Graph::parse(&format!(
            r#"{{"format": "memplan-graph/1", "name": "g",
                "tensors": [{{"name": "x", "size": 4800000, "kind": "input"}},
                            {{"name": "y", "size": 4800000, "kind": "output"}}],
                "ops": [{op}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_measured_time_wins_over_the_roofline() {
        let g = graph(r#"{"name": "a", "inputs": ["x"], "outputs": ["y"], "time_us": 7.5}"#);
        assert_eq!(DeviceProfile::h200().op_us(&g, &g.ops[0]), 7.5);
    }

    #[test]
    fn the_roofline_takes_the_slower_of_compute_and_memory() {
        // 9.6 MB at 4.8 TB/s = 2 us; 67e6 flops at 67 TFLOP/s = 1 us.
        let g = graph(r#"{"name": "a", "inputs": ["x"], "outputs": ["y"], "flops": 67e6}"#);
        let p = DeviceProfile::h200();
        assert!((p.op_us(&g, &g.ops[0]) - 2.0).abs() < 1e-9);
        let g = graph(r#"{"name": "a", "inputs": ["x"], "outputs": ["y"], "flops": 670e6}"#);
        assert!((p.op_us(&g, &g.ops[0]) - 10.0).abs() < 1e-9);
        assert!((p.h2d_us(55_000) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_profile_file_overrides_some_figures_and_rejects_bad_ones() {
        let p = DeviceProfile::from_json(r#"{"h2d_bytes_per_s": 25e9}"#).unwrap();
        assert_eq!(p.h2d_bytes_per_s, 25e9);
        assert_eq!(p.d2h_bytes_per_s, 55e9);
        let e = DeviceProfile::from_json(r#"{"d2h_bytes_per_s": 0}"#).unwrap_err();
        assert!(e.to_string().contains("d2h_bytes_per_s"), "{e}");
        assert!(DeviceProfile::from_json(r#"{"link": 1}"#).is_err());
    }

    #[test]
    fn cheap_ops_are_elementwise_and_never_backward() {
        assert!(is_cheap("relu") && is_cheap("max_pool2d") && is_cheap("batch_norm"));
        assert!(!is_cheap("conv2d") && !is_cheap("threshold_backward"));
        assert!(!is_cheap("matmul") && !is_cheap("addmm"));
    }

    #[test]
    fn dropout_is_not_on_the_cheap_list() {
        assert!(!is_cheap("dropout") && !is_cheap("native_dropout"));
    }
}
