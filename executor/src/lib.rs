//! Plan executors: run a plan's instruction stream on real memory and prove it by
//! comparing every graph output with a reference run in which every tensor has its own
//! allocation (a plan is correct only if running it gives the same outputs
//! as running without it).
//!
//! - [`data`]: seeded inputs and weights (or supplied values, [`ExecOptions::data`]), the
//!   poison pattern, the mixing hash;
//! - [`kernels`]: kernel selection (real f32 math where shapes allow, mixing otherwise) and
//!   the CPU kernels;
//! - [`replay`]: the device-independent instruction replay over a [`replay::Backend`];
//! - [`cpu`]: the CPU backend (one arena allocation, one weights allocation, one host pool);
//! - [`threads`]: the CPU backend of parallel plans (a thread per stream, real events,
//!   seeded schedule perturbation);
//! - [`reference`](mod@reference): the reference run;
//! - [`rewrite`]: inserts spill and recompute round trips into a valid plan (to exercise
//!   executors before a budgeted planner exists);
//! - `cuda` (feature `cuda`): the GPU backend (cudarc, NVRTC, cuBLAS).
//!
//! The executor does not call the validator: a wrong plan must be caught by its data
//! (poisoned freed memory, clobbered tensors, stale reads), which makes the run an
//! independent check. Only what memory safety needs is checked up front (ranges inside
//! their regions, operands resident), and reported as [`ExecError::BadPlan`].
#![deny(missing_docs)]

pub mod arena;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod data;
pub mod kernels;
pub mod reference;
pub mod replay;
pub mod rewrite;
pub mod threads;

pub use data::{Source, TensorValues};
pub use kernels::KernelMode;
use memplan::graph::{Graph, TensorKind};
use memplan::plan::Plan;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;

/// Where to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// Host memory, CPU kernels.
    #[default]
    Cpu,
    /// An NVIDIA GPU (feature `cuda`).
    Cuda,
}

/// Options of a run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOptions {
    /// Device.
    pub device: Device,
    /// Seed of the input and weight generator.
    pub seed: u64,
    /// Real kernels or mixing everywhere.
    pub kernels: KernelMode,
    /// Values for inputs and weights by tensor name, used instead of the generator by the
    /// plan's run and the reference run alike (every name must be an input or weight of
    /// the graph, with its exact size: else [`ExecError::Data`]). Tensors not named here
    /// are generated from `seed`.
    pub data: Option<Arc<TensorValues>>,
    /// Refuse to run ([`ExecError::MixedKernels`]) when an op would run the mixing kernel:
    /// with real data, a mixed op's output is a hash, not a value.
    pub require_real_kernels: bool,
    /// Parallel plans on the CPU: seeded random delays per task on every stream thread
    /// ([`threads::Perturb`]), so that a race the plan allows shows up. `None`: no delays.
    pub perturb: Option<threads::Perturb>,
}

impl ExecOptions {
    /// Where the initial bytes of inputs and weights come from.
    pub fn source(&self) -> Source<'_> {
        Source {
            seed: self.seed,
            values: self.data.as_deref(),
        }
    }
}

/// Why a run could not complete.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ExecError {
    /// The plan cannot be executed (a range outside its region, an operand not resident, ...).
    #[error("bad plan{}: {message}", .instruction.map(|i| format!(" at instruction {i}")).unwrap_or_default())]
    BadPlan {
        /// Instruction index, when the problem is about one.
        instruction: Option<usize>,
        /// What is wrong, naming the tensor or op.
        message: String,
    },
    /// A region could not be allocated.
    #[error("cannot allocate {bytes} bytes for the {what}")]
    OutOfMemory {
        /// Which region.
        what: String,
        /// Its size.
        bytes: u64,
    },
    /// Parallel plans: two tasks touching the same bytes overlapped in time on different
    /// streams (a missing event), as observed by the threaded CPU backend.
    #[error("race: {0}")]
    Race(String),
    /// A kernel failed (operand sizes that contradict the graph).
    #[error("kernel of op {op:?}: {message}")]
    Kernel {
        /// The op.
        op: String,
        /// What failed.
        message: String,
    },
    /// The device is not available or failed.
    #[error("device: {0}")]
    Device(String),
    /// A supplied value names no input or weight of the graph, or has the wrong size.
    #[error("data for tensor {tensor:?}: {message}")]
    Data {
        /// The tensor as named in the data.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// Real kernels were required and these ops would run the mixing kernel.
    #[error("{} ops have no real kernel and would run the mixing kernel (their outputs would be hashes, not values): {}", .ops.len(), .ops.join(", "))]
    MixedKernels {
        /// The ops, `name (type)`.
        ops: Vec<String>,
    },
}

/// Checks the supplied values against the graph: every name an input or weight, every size
/// the tensor's.
pub fn check_data(graph: &Graph, data: &TensorValues) -> Result<(), ExecError> {
    let ids = graph.tensor_ids();
    for (name, bytes) in data {
        let fail = |message: String| ExecError::Data {
            tensor: name.clone(),
            message,
        };
        let Some(&t) = ids.get(name.as_str()) else {
            return Err(fail(format!(
                "the graph {:?} has no tensor of that name",
                graph.name
            )));
        };
        let tensor = graph.tensor(t);
        if !matches!(tensor.kind, TensorKind::Input | TensorKind::Weight) {
            return Err(fail(format!(
                "it is an {} of the graph, computed by an op; only inputs and weights take data",
                match tensor.kind {
                    TensorKind::Output => "output",
                    _ => "activation",
                }
            )));
        }
        if bytes.len() as u64 != tensor.size {
            return Err(fail(format!(
                "{} bytes given, the graph tensor has {} bytes{}",
                bytes.len(),
                tensor.size,
                tensor
                    .shape
                    .as_ref()
                    .map(|s| format!(" ({} {s:?})", tensor.dtype.as_deref().unwrap_or("?")))
                    .unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// The ops whose kernel is the mixing kernel (a fused op when one of its members is), as
/// `name (type)`.
pub fn mixed_ops(graph: &Graph, kernels: &[kernels::Kernel]) -> Vec<String> {
    graph
        .ops
        .iter()
        .zip(kernels)
        .filter(|(_, k)| match k {
            kernels::Kernel::Mix => true,
            kernels::Kernel::Fused(f) => f.steps.iter().any(|s| s.kernel == kernels::Kernel::Mix),
            _ => false,
        })
        .map(|(op, _)| format!("{} ({})", op.name, op.op_type))
        .collect()
}

/// Checks the options' data against `graph` and, when real kernels are required, that no
/// op of `kernels` mixes.
fn check_options(
    graph: &Graph,
    kernels: &[kernels::Kernel],
    opts: &ExecOptions,
) -> Result<(), ExecError> {
    if let Some(data) = &opts.data {
        check_data(graph, data)?;
    }
    if opts.require_real_kernels {
        let ops = mixed_ops(graph, kernels);
        if !ops.is_empty() {
            return Err(ExecError::MixedKernels { ops });
        }
    }
    Ok(())
}

/// The first output that differs from the reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mismatch {
    /// Output tensor name.
    pub tensor: String,
    /// First differing byte.
    pub first_byte: u64,
    /// Number of differing bytes (f32 tensors: differing elements × 4).
    pub differing_bytes: u64,
    /// For f32 tensors: the element index, the plan's value and the reference's value.
    pub first_f32: Option<(u64, f32, f32)>,
}

/// Device memory figures of a GPU run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceMemory {
    /// Free device memory before the context was created (bytes).
    pub free_before_context: u64,
    /// Free device memory after the context and modules, before the plan's buffers.
    pub free_before_setup: u64,
    /// Free device memory after the arena and weights were allocated.
    pub free_after_setup: u64,
    /// `free_before_setup - free_after_setup`: what the plan's buffers took.
    pub taken_by_buffers: u64,
    /// `free_before_context - free_before_setup`: the CUDA context, modules and cuBLAS.
    pub taken_by_context: u64,
    /// Extra device memory outside the arena (cuBLAS workspace, staging).
    pub extra_bytes: u64,
}

/// The outcome of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecReport {
    /// Graph name.
    pub graph: String,
    /// `cpu` or `cuda` (with the device name).
    pub device: String,
    /// Every graph output equals the reference bit for bit (within `tolerance` where
    /// floating-point results cross devices).
    pub outputs_equal: bool,
    /// Graph outputs compared.
    pub outputs_compared: usize,
    /// The first differing output, if any.
    pub first_mismatch: Option<Mismatch>,
    /// Relative tolerance used (0 for bitwise).
    pub tolerance: f64,
    /// The plan's `arena_bytes`.
    pub plan_arena_bytes: u64,
    /// The plan's `weights_bytes`.
    pub plan_weights_bytes: u64,
    /// The plan's `host_bytes`.
    pub plan_host_bytes: u64,
    /// The plan's `stats.peak_bytes`.
    pub plan_peak_bytes: u64,
    /// Bytes allocated for the arena (one allocation).
    pub arena_allocated: u64,
    /// Bytes allocated for the weights region (one allocation).
    pub weights_allocated: u64,
    /// Bytes allocated for the host spill pool (one allocation).
    pub host_allocated: u64,
    /// Largest arena end reserved during the replay (must not exceed `arena_bytes`).
    pub replay_peak_bytes: u64,
    /// Largest host-pool end used.
    pub host_peak_bytes: u64,
    /// Kernel scratch and operand copies outside the plan's memory (bytes, peak).
    pub scratch_bytes: u64,
    /// Exec instructions run, recomputes included.
    pub execs: u64,
    /// Execs of ops that had already run.
    pub recomputes: u64,
    /// Ops in the graph.
    pub ops: usize,
    /// Ops per kernel (`conv2d`, `mix`, ...).
    pub kernels: BTreeMap<String, usize>,
    /// The ops that ran the mixing kernel (`name (type)`): their outputs are hashes, so with
    /// supplied data the outputs they reach are not values.
    pub mixed_ops: Vec<String>,
    /// Tensors whose initial bytes came from the supplied data (the rest were generated).
    pub supplied_tensors: usize,
    /// The plan run's graph outputs by name (bytes; f32 outputs as little-endian f32), in
    /// tensor order. Not serialised.
    #[serde(skip)]
    pub output_values: Vec<(String, Vec<u8>)>,
    /// spill_out instructions.
    pub spill_outs: u64,
    /// spill_in instructions.
    pub spill_ins: u64,
    /// Bytes copied to the host.
    pub spill_out_bytes: u64,
    /// Bytes copied back.
    pub spill_in_bytes: u64,
    /// Time of the instruction replay (ms; on a GPU, between events around the stream).
    pub step_ms: f64,
    /// Time of the reference run (ms).
    pub reference_ms: f64,
    /// Largest live bytes of the reference run.
    pub reference_peak_bytes: u64,
    /// Wall time of the whole run (ms).
    pub total_ms: f64,
    /// Non-finite f32 values among the reference outputs (such values weaken the check).
    pub reference_nonfinite: u64,
    /// GPU memory figures.
    pub device_memory: Option<DeviceMemory>,
    /// When the plan's graph is a rewrite (fusion, tiling) of an original graph: whether the
    /// rewritten graph computes the original's outputs ([`equivalence`]).
    pub original: Option<Equivalence>,
    /// Cross-device comparison notes (GPU runs).
    pub notes: Vec<String>,
}

/// Whether a rewritten graph computes an original graph's outputs: both reference runs, the
/// outputs matched by tensor name (a rewrite keeps the names of inputs, weights and outputs,
/// so both runs get the same generated data). With a plan run that equals the rewritten
/// graph's reference, this proves the plan reproduces the original graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Equivalence {
    /// The original graph's name.
    pub graph: String,
    /// Every original output equals the rewritten graph's output of the same name.
    pub outputs_equal: bool,
    /// Outputs compared (all of the original's).
    pub outputs_compared: usize,
    /// The first differing output (the rewritten graph's value against the original's).
    pub first_mismatch: Option<Mismatch>,
    /// Relative tolerance used (0: bitwise).
    pub tolerance: f64,
}

/// Runs the reference of `original` and of `rewritten` and compares every output of the
/// original with the rewritten graph's tensor of the same name (within `tol`, see
/// [`compare`]). An original output missing from the rewritten graph, or not an output there,
/// is a mismatch.
pub fn equivalence(
    original: &Graph,
    rewritten: &Graph,
    opts: &ExecOptions,
    tol: f64,
) -> Result<Equivalence, ExecError> {
    let want = reference::run_with(
        original,
        &kernels::select_all(original, opts.kernels),
        &opts.source(),
    )?;
    let got = reference::run_with(
        rewritten,
        &kernels::select_all(rewritten, opts.kernels),
        &opts.source(),
    )?;
    let ids = rewritten.tensor_ids();
    let mut outputs = Vec::new();
    for (i, t) in original.tensors.iter().enumerate() {
        if t.kind != TensorKind::Output {
            continue;
        }
        let bytes = ids
            .get(t.name.as_str())
            .and_then(|r| got.outputs.get(r.index()))
            .and_then(Option::clone)
            .unwrap_or_default();
        outputs.push((memplan::TensorId(i as u32), bytes));
    }
    let (first_mismatch, _) = compare(original, &outputs, &want.outputs, tol);
    Ok(Equivalence {
        graph: original.name.clone(),
        outputs_equal: first_mismatch.is_none(),
        outputs_compared: outputs.len(),
        first_mismatch,
        tolerance: tol,
    })
}

/// Runs `plan` on `opts.device` and compares its outputs with the reference.
pub fn execute(graph: &Graph, plan: &Plan, opts: &ExecOptions) -> Result<ExecReport, ExecError> {
    match opts.device {
        Device::Cpu => execute_cpu(graph, plan, opts),
        #[cfg(feature = "cuda")]
        Device::Cuda => cuda::execute(graph, plan, opts),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda => Err(ExecError::Device(
            "this memplan was built without the `cuda` feature (cargo build --release --features cuda)"
                .into(),
        )),
    }
}

/// Ops per kernel name.
fn kernel_counts(kernels: &[kernels::Kernel]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for k in kernels {
        *m.entry(k.name().to_string()).or_insert(0) += 1;
    }
    m
}

/// Writes every placed weight's initial bytes (supplied or generated) into the weights
/// region.
fn load_weights(
    graph: &Graph,
    spans: &[Option<replay::Span>],
    src: &Source<'_>,
    region: &mut [u8],
) -> Result<(), ExecError> {
    let fill = replay::fills(graph);
    for (i, s) in spans.iter().enumerate() {
        if let Some((lo, hi)) = *s {
            let bytes = reference::initial(graph, memplan::TensorId(i as u32), src, fill[i])?;
            region[lo as usize..hi as usize].copy_from_slice(&bytes);
        }
    }
    Ok(())
}

/// How many of the graph's tensors the options' data supplies.
fn supplied_count(opts: &ExecOptions) -> usize {
    opts.data.as_ref().map_or(0, |d| d.len())
}

fn execute_cpu(graph: &Graph, plan: &Plan, opts: &ExecOptions) -> Result<ExecReport, ExecError> {
    let started = Instant::now();
    let kernels = kernels::select_all(graph, opts.kernels);
    check_options(graph, &kernels, opts)?;
    let src = opts.source();
    let spans = replay::weight_spans(graph, plan)?;
    let fill = replay::fills(graph);
    let mut gen = |t: memplan::TensorId| reference::initial(graph, t, &src, fill[t.index()]);
    let step_start = Instant::now();
    let parallel = plan.is_parallel();
    let mut serial: Option<cpu::CpuBackend> = None;
    let mut threaded: Option<threads::ThreadedCpu> = None;
    let backend: &mut dyn replay::Backend = if parallel {
        threaded.insert(threads::ThreadedCpu::new(
            plan.arena_bytes,
            plan.weights_bytes,
            plan.host_bytes,
            |w| load_weights(graph, &spans, &src, w),
            opts.perturb,
        )?)
    } else {
        let b = serial.insert(cpu::CpuBackend::new(
            plan.arena_bytes,
            plan.weights_bytes,
            plan.host_bytes,
        )?);
        load_weights(graph, &spans, &src, b.weights.bytes_mut())?;
        b
    };
    let (counts, resident) = replay::replay(graph, plan, &kernels, &spans, &mut gen, backend)?;
    let step_ms = step_start.elapsed().as_secs_f64() * 1e3;
    let mut outputs = Vec::new();
    for (t, span) in replay::final_outputs(graph, &resident)? {
        outputs.push((t, backend.read(span)?));
    }
    let (allocated, scratch_bytes, streams) = match (&threaded, &serial) {
        (Some(t), _) => (t.allocated(), t.scratch_bytes(), t.streams()),
        (None, Some(c)) => (
            [
                c.arena.allocated(),
                c.weights.allocated(),
                c.host.allocated(),
            ],
            c.scratch.peak_bytes + c.copy_peak,
            1,
        ),
        (None, None) => ([0; 3], 0, 0),
    };
    let reference = reference::run_with(graph, &kernels, &src)?;
    let (first_mismatch, nonfinite) = compare(graph, &outputs, &reference.outputs, 0.0);
    let mut report = ExecReport::assemble(
        graph,
        plan,
        Run {
            device: "cpu".into(),
            outputs_compared: outputs.len(),
            first_mismatch,
            allocated,
            counts: &counts,
            scratch_bytes,
            step_ms,
            kernels: &kernels,
            reference: &reference,
            reference_nonfinite: nonfinite,
            started,
        },
    );
    report.supplied_tensors = supplied_count(opts);
    if parallel {
        report.notes.push(format!(
            "parallel plan: {streams} stream threads with real events{}",
            opts.perturb.map_or(String::new(), |p| format!(
                ", perturbed (seed {}, delays up to {} us)",
                p.seed, p.max_delay_us
            ))
        ));
    }
    report.output_values = outputs
        .into_iter()
        .map(|(t, bytes)| (graph.tensor(t).name.clone(), bytes))
        .collect();
    Ok(report)
}

/// What one backend's run measured, for [`ExecReport::assemble`].
struct Run<'a> {
    /// `cpu` or `cuda (NAME)`.
    device: String,
    /// Graph outputs compared.
    outputs_compared: usize,
    /// The first output that differs from the reference, if any.
    first_mismatch: Option<Mismatch>,
    /// Bytes allocated for the arena, the weights region and the host pool.
    allocated: [u64; 3],
    /// The replay's counters.
    counts: &'a replay::Counts,
    /// Kernel scratch and operand copies outside the plan's memory (bytes, peak).
    scratch_bytes: u64,
    /// Time of the replay (ms).
    step_ms: f64,
    /// The kernel each op ran.
    kernels: &'a [kernels::Kernel],
    /// The CPU reference run.
    reference: &'a reference::Reference,
    /// Non-finite f32 values in the reference's outputs.
    reference_nonfinite: u64,
    /// When the whole execution started (for `total_ms`).
    started: Instant,
}

impl ExecReport {
    /// The report of a run: the plan's figures, what the run measured and the comparison
    /// (bitwise: `tolerance` 0, no device memory, no notes; a backend sets those after).
    fn assemble(graph: &Graph, plan: &Plan, run: Run<'_>) -> ExecReport {
        let [arena_allocated, weights_allocated, host_allocated] = run.allocated;
        let c = run.counts;
        ExecReport {
            graph: graph.name.clone(),
            device: run.device,
            outputs_equal: run.first_mismatch.is_none(),
            outputs_compared: run.outputs_compared,
            first_mismatch: run.first_mismatch,
            tolerance: 0.0,
            plan_arena_bytes: plan.arena_bytes,
            plan_weights_bytes: plan.weights_bytes,
            plan_host_bytes: plan.host_bytes,
            plan_peak_bytes: plan.stats.peak_bytes,
            arena_allocated,
            weights_allocated,
            host_allocated,
            replay_peak_bytes: c.peak,
            host_peak_bytes: c.host_peak,
            scratch_bytes: run.scratch_bytes,
            execs: c.execs,
            recomputes: c.recomputes,
            ops: graph.ops.len(),
            kernels: kernel_counts(run.kernels),
            mixed_ops: mixed_ops(graph, run.kernels),
            supplied_tensors: 0,
            output_values: Vec::new(),
            spill_outs: c.spill_outs,
            spill_ins: c.spill_ins,
            spill_out_bytes: c.spill_out_bytes,
            spill_in_bytes: c.spill_in_bytes,
            step_ms: run.step_ms,
            reference_ms: run.reference.ms,
            reference_peak_bytes: run.reference.peak_bytes,
            total_ms: run.started.elapsed().as_secs_f64() * 1e3,
            reference_nonfinite: run.reference_nonfinite,
            device_memory: None,
            original: None,
            notes: Vec::new(),
        }
    }
}

/// Compares plan outputs with the reference's: bitwise when `tol == 0`, else f32 elements
/// within `tol` relative (|a − b| ≤ tol · max(1, |b|); NaN equals NaN). Returns the first
/// mismatch (outputs in tensor order) and the number of non-finite reference f32 values.
pub fn compare(
    graph: &Graph,
    outputs: &[(memplan::TensorId, Vec<u8>)],
    reference: &[Option<Vec<u8>>],
    tol: f64,
) -> (Option<Mismatch>, u64) {
    let fill = replay::fills(graph);
    let mut first = None;
    let mut nonfinite = 0u64;
    for (t, got) in outputs {
        let name = &graph.tensor(*t).name;
        let Some(want) = reference.get(t.index()).and_then(Option::as_ref) else {
            first.get_or_insert(Mismatch {
                tensor: name.clone(),
                first_byte: 0,
                differing_bytes: got.len() as u64,
                first_f32: None,
            });
            continue;
        };
        let is_f32 = fill[t.index()] == data::Fill::F32;
        if is_f32 {
            nonfinite += want
                .chunks_exact(4)
                .filter(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite())
                .count() as u64;
        }
        if first.is_some() {
            continue;
        }
        if got.len() != want.len() {
            first = Some(Mismatch {
                tensor: name.clone(),
                first_byte: got.len().min(want.len()) as u64,
                differing_bytes: got.len().abs_diff(want.len()) as u64,
                first_f32: None,
            });
            continue;
        }
        if is_f32 {
            let mut m: Option<Mismatch> = None;
            for (i, (a, b)) in got.chunks_exact(4).zip(want.chunks_exact(4)).enumerate() {
                let (x, y) = (
                    f32::from_le_bytes([a[0], a[1], a[2], a[3]]),
                    f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                );
                let same = if tol == 0.0 {
                    a == b
                } else {
                    (x.is_nan() && y.is_nan())
                        || x == y
                        || (f64::from(x) - f64::from(y)).abs() <= tol * f64::from(y).abs().max(1.0)
                };
                if !same {
                    let e = m.get_or_insert(Mismatch {
                        tensor: name.clone(),
                        first_byte: i as u64 * 4,
                        differing_bytes: 0,
                        first_f32: Some((i as u64, x, y)),
                    });
                    e.differing_bytes += 4;
                }
            }
            first = m;
        } else {
            let diff = got.iter().zip(want.iter()).filter(|(a, b)| a != b).count() as u64;
            if diff > 0 {
                let at = got
                    .iter()
                    .zip(want.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                first = Some(Mismatch {
                    tensor: name.clone(),
                    first_byte: at as u64,
                    differing_bytes: diff,
                    first_f32: None,
                });
            }
        }
    }
    (first, nonfinite)
}

/// Number of graph outputs (what a run compares).
pub fn output_count(graph: &Graph) -> usize {
    graph
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Output)
        .count()
}
