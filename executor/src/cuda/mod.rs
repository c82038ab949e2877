//! The GPU backend (feature `cuda`): cudarc with dynamic loading of the CUDA libraries.
//!
//! - The arena is **one** device allocation of `arena_bytes`, the weights region one of
//!   `weights_bytes`; the spill pool is one pinned (page-locked, device-mapped) host
//!   allocation of `host_bytes`.
//! - Kernels are compiled with NVRTC from `kernels.cu` (poison, checksum + fold + fill =
//!   the mixing kernel; unary and broadcasting binary element-wise ops; direct conv2d, one
//!   output element per thread; batch norm with running or batch statistics; max / average
//!   and adaptive average pooling; softmax; sum / mean; concat, slice_rows, pad); matrix
//!   products use cuBLAS (`sgemm_strided_batched`, row-major through the transposed
//!   column-major view). Every kernel is deterministic (no atomics in float sums; sums run
//!   in the CPU's order where it has one), so a run equals its isolated run bit for bit.
//!   A fused op runs its members in sequence on the buffers the CPU uses (in place where
//!   the CPU runs in place, private buffers in per-stream scratch). A conv2d ignores the
//!   algorithm the graph chose (its workspace is poisoned around it, as on the CPU).
//! - Parallel plans: each plan stream is a CUDA stream, `record_event` / `wait_event` are
//!   CUDA events on them (`set_stream` switches the stream work is issued on); graph
//!   inputs are uploaded and synchronised before the streams start. Everything an op uses
//!   besides its plan ranges is per stream (a `Lane`): the checksum / seed slots of the
//!   mixing kernel, the staging buffer and the cuBLAS handle, so ops running at once on two
//!   streams share no scratch memory (one shared set raced on an H200: outputs differed).
//! - Two streams: compute, and copy for spills. `spill_out` waits (event) for the compute
//!   work issued so far, copies device → pinned host and poisons the arena range on the copy
//!   stream; `spill_in` waits for the compute stream (so the target range's previous readers
//!   are done), copies host → device and poisons the host range. Each copy records an event;
//!   the compute stream waits on it only before it next touches an overlapping range, so
//!   copies overlap compute. Frees are poison kernels on the compute stream, hence complete
//!   after every earlier consumer.
//! - Proof: the plan run is compared bit for bit with a GPU run of the isolated plan
//!   (every tensor in its own never-reused range, [`super::reference::isolated_plan`]) and
//!   with a second run of the plan (whose step time, on a warm device, is the one reported);
//!   it is also compared with the CPU reference: bit for bit with `--kernels mix`, within
//!   1e-4 relative otherwise (mixing kernels downstream of float math hash the float bits,
//!   so such outputs cannot agree across devices; the report says so).
//!
//! Every missing library is probed before use (cudarc would panic): a machine without a
//! GPU gets [`ExecError::Device`].

use super::data::{self, Fill};
use super::kernels::fused::{Buf, FusedKernel};
use super::kernels::{Bcast, Binary, Kernel, KernelMode, Unary};
use super::replay::{self, Backend, Loc, Span, Step};
use super::{compare, reference, DeviceMemory, ExecError, ExecOptions, ExecReport};
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{
    result as drv, sys, CudaContext, CudaEvent, CudaFunction, CudaStream, DeviceRepr, LaunchConfig,
    PushKernelArg,
};
use memplan::graph::Graph;
use memplan::plan::Plan;
use std::sync::Arc;
use std::time::Instant;

const SOURCE: &str = include_str!("kernels.cu");
const THREADS: u32 = 256;

fn dev<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> ExecError + '_ {
    move |e| ExecError::Device(format!("{what}: {e:?}"))
}

/// Checks that the driver, NVRTC and cuBLAS libraries load and a device exists.
pub fn probe() -> Result<(), ExecError> {
    // SAFETY: these only try to dlopen the libraries; nothing is called through them.
    let (driver, nvrtc, cublas) = unsafe {
        (
            sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            blas_sys::is_culib_present(),
        )
    };
    let missing: Vec<&str> = [
        ("libcuda", driver),
        ("libnvrtc", nvrtc),
        ("libcublas", cublas),
    ]
    .iter()
    .filter(|(_, ok)| !ok)
    .map(|(n, _)| *n)
    .collect();
    if !missing.is_empty() {
        return Err(ExecError::Device(format!(
            "no usable CUDA installation: {} not found (needs an NVIDIA driver and the CUDA 13 runtime libraries)",
            missing.join(", ")
        )));
    }
    drv::init().map_err(dev("cuInit"))?;
    let n = CudaContext::device_count().map_err(dev("device count"))?;
    if n < 1 {
        return Err(ExecError::Device("no CUDA device found".into()));
    }
    Ok(())
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct BcastArg {
    rank: u64,
    dims: [u64; 8],
    sa: [u64; 8],
    sb: [u64; 8],
    flat_a: i32,
    flat_b: i32,
}
// SAFETY: plain repr(C) data matching `struct Bcast` in kernels.cu, passed by value.
unsafe impl DeviceRepr for BcastArg {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ConvArg {
    n: u64,
    c: u64,
    h: u64,
    w: u64,
    o: u64,
    kh: u64,
    kw: u64,
    oh: u64,
    ow: u64,
    sh: u64,
    sw: u64,
    ph: u64,
    pw: u64,
    dh: u64,
    dw: u64,
    groups: u64,
}
// SAFETY: plain repr(C) data matching `struct ConvArg` in kernels.cu, passed by value.
unsafe impl DeviceRepr for ConvArg {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PoolArg {
    planes: u64,
    h: u64,
    w: u64,
    oh: u64,
    ow: u64,
    kh: u64,
    kw: u64,
    sh: u64,
    sw: u64,
    ph: u64,
    pw: u64,
    max: i32,
    count_include_pad: i32,
    indices: i32,
}
// SAFETY: plain repr(C) data matching `struct PoolArg` in kernels.cu, passed by value.
unsafe impl DeviceRepr for PoolArg {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ReduceArg {
    rank: u64,
    dims: [u64; 8],
    red: [i32; 8],
}
// SAFETY: plain repr(C) data matching `struct ReduceArg` in kernels.cu, passed by value.
unsafe impl DeviceRepr for ReduceArg {}

struct Funcs {
    poison: CudaFunction,
    checksum: CudaFunction,
    set_u64: CudaFunction,
    fold: CudaFunction,
    mix_fill: CudaFunction,
    unary: CudaFunction,
    binary: CudaFunction,
    add_bias_rows: CudaFunction,
    pad2d: CudaFunction,
    slice_rows: CudaFunction,
    concat_part: CudaFunction,
    conv2d: CudaFunction,
    bn_stats: CudaFunction,
    bn_running: CudaFunction,
    bn_apply: CudaFunction,
    pool2d: CudaFunction,
    adaptive_avg: CudaFunction,
    softmax_rows: CudaFunction,
    reduce_dims: CudaFunction,
}

/// A device buffer grown on demand (its bytes count as extra); freed by its [`Lane`].
#[derive(Default)]
struct Grown {
    ptr: sys::CUdeviceptr,
    /// Bytes at `ptr`.
    len: usize,
}

impl Grown {
    /// The buffer, at least `n` bytes: a smaller one is freed once `stream` (the only one
    /// that uses it) is done with it, and a new one allocated.
    fn ensure(
        &mut self,
        stream: &CudaStream,
        n: usize,
        what: &str,
    ) -> Result<sys::CUdeviceptr, ExecError> {
        if n > self.len {
            if self.ptr != 0 {
                stream.synchronize().map_err(dev("synchronize"))?;
                // SAFETY: allocated by malloc_sync; no work uses it after the sync.
                unsafe { drv::free_sync(self.ptr) }.map_err(dev("free scratch"))?;
                self.ptr = 0;
                self.len = 0;
            }
            // SAFETY: plain device allocation; freed in Lane's Drop.
            self.ptr = unsafe { drv::malloc_sync(n) }.map_err(|_| ExecError::OutOfMemory {
                what: format!("device {what}"),
                bytes: n as u64,
            })?;
            self.len = n;
        }
        Ok(self.ptr)
    }
}

/// One CUDA stream and the scratch only work on it uses.
struct Lane {
    stream: Arc<CudaStream>,
    /// cuBLAS handle bound to `stream` (its workspace is the handle's: not shared).
    blas: blas_sys::cublasHandle_t,
    /// Two u64 on the device: [checksum, seed] of the op being mixed.
    sums: sys::CUdeviceptr,
    /// Staging for outputs that overlap inputs.
    stage: Grown,
    /// Kernel temporaries (batch-norm statistics without statistics outputs).
    tmp: Grown,
    /// Private buffers of a fused op.
    private: Grown,
    /// Copies of a fused member's inputs that share a buffer with its output.
    copies: Grown,
}

impl Lane {
    fn new(stream: Arc<CudaStream>) -> Result<Self, ExecError> {
        let blas = blas::create_handle().map_err(dev("cuBLAS handle"))?;
        let mut lane = Lane {
            stream,
            blas,
            sums: 0,
            stage: Grown::default(),
            tmp: Grown::default(),
            private: Grown::default(),
            copies: Grown::default(),
        };
        // SAFETY: the handle and stream are live; cuBLAS then issues on this stream.
        unsafe { blas::set_stream(lane.blas, lane.stream.cu_stream() as _) }
            .map_err(dev("cuBLAS stream"))?;
        // SAFETY: plain device allocation; freed in Drop.
        lane.sums = unsafe { drv::malloc_sync(16) }.map_err(|_| ExecError::OutOfMemory {
            what: "device checksum slots".into(),
            bytes: 16,
        })?;
        Ok(lane)
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        // Errors cannot be reported from Drop; the context is torn down right after anyway.
        let _ = self.stream.synchronize();
        // SAFETY: each pointer was allocated for this lane and is freed once, after its
        // stream's work completed.
        unsafe {
            for p in [
                self.sums,
                self.stage.ptr,
                self.tmp.ptr,
                self.private.ptr,
                self.copies.ptr,
            ] {
                if p != 0 {
                    let _ = drv::free_sync(p);
                }
            }
            let _ = blas::destroy_handle(self.blas);
        }
    }
}

/// Device memory and streams of one plan run.
pub struct GpuBackend {
    /// The current stream (`lanes[cur].stream`).
    compute: Arc<CudaStream>,
    copy: Arc<CudaStream>,
    f: Funcs,
    arena: sys::CUdeviceptr,
    arena_len: usize,
    weights: sys::CUdeviceptr,
    host: *mut u8,
    host_dev: sys::CUdeviceptr,
    host_len: usize,
    /// Host bytes of input loads, alive until `finish`.
    uploads: Vec<Vec<u8>>,
    /// Copy-stream events not yet waited for by the compute stream, by arena range.
    pending: Vec<(Span, CudaEvent)>,
    /// One lane per plan stream (lane 0 for a sequential plan); `cur` is the current one
    /// ([`Backend::set_stream`]).
    lanes: Vec<Lane>,
    cur: usize,
    /// Parallel plans: the CUDA event of each recorded plan event.
    events: std::collections::HashMap<u64, CudaEvent>,
    /// Whether the current work is the host's (graph inputs: synchronised at once).
    host_work: bool,
    ctx: Arc<CudaContext>,
}

fn overlaps(a: Span, b: Span) -> bool {
    a.0 < b.1 && b.0 < a.1
}

fn grid(n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(u64::from(THREADS)).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl GpuBackend {
    fn new(ctx: &Arc<CudaContext>, plan: &Plan, f: Funcs) -> Result<Self, ExecError> {
        let compute = ctx.new_stream().map_err(dev("stream"))?;
        let copy = ctx.new_stream().map_err(dev("copy stream"))?;
        let lane = Lane::new(compute.clone())?;
        let len = |b: u64, what: &str| {
            usize::try_from(b).map_err(|_| ExecError::OutOfMemory {
                what: what.into(),
                bytes: b,
            })
        };
        let arena_len = len(plan.arena_bytes, "arena")?;
        let weights_len = len(plan.weights_bytes, "weights region")?;
        let host_len = len(plan.host_bytes, "host spill pool")?;
        let alloc = |n: usize, what: &str| -> Result<sys::CUdeviceptr, ExecError> {
            // SAFETY: plain device allocation; freed in Drop.
            unsafe { drv::malloc_sync(n.max(1)) }.map_err(|_| ExecError::OutOfMemory {
                what: format!("device {what}"),
                bytes: n as u64,
            })
        };
        let mut b = GpuBackend {
            lanes: vec![lane],
            cur: 0,
            events: std::collections::HashMap::new(),
            host_work: false,
            ctx: ctx.clone(),
            compute,
            copy,
            f,
            arena: 0,
            arena_len,
            weights: 0,
            host: std::ptr::null_mut(),
            host_dev: 0,
            host_len,
            uploads: Vec::new(),
            pending: Vec::new(),
        };
        b.arena = alloc(arena_len, "arena")?;
        b.weights = alloc(weights_len, "weights region")?;
        // SAFETY: pinned, device-mapped host allocation of host_len bytes; freed in Drop.
        let host = unsafe { drv::malloc_host(host_len.max(1), sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .map_err(|_| ExecError::OutOfMemory {
                what: "pinned host spill pool".into(),
                bytes: host_len as u64,
            })?;
        b.host = host.cast();
        let mut dptr: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP just above.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, host, 0) }
            .result()
            .map_err(dev("host pool device pointer"))?;
        b.host_dev = dptr;
        b.poison_raw(b.arena, arena_len as u64, false)?;
        b.poison_raw(b.weights, weights_len as u64, false)?;
        b.poison_raw(b.host_dev, host_len as u64, false)?;
        Ok(b)
    }

    fn poison_raw(&self, ptr: sys::CUdeviceptr, n: u64, on_copy: bool) -> Result<(), ExecError> {
        if n == 0 {
            return Ok(());
        }
        let stream = if on_copy { &self.copy } else { &self.compute };
        let mut l = stream.launch_builder(&self.f.poison);
        l.arg(&ptr).arg(&n);
        // SAFETY: the kernel writes p[0..n), a range inside an allocation we own (checked
        // by the replay against the region sizes).
        unsafe { l.launch(grid(n)) }.map_err(dev("poison"))?;
        Ok(())
    }

    /// Makes the compute stream wait for pending copies that touch any of `spans`.
    fn settle(&mut self, spans: &[Span]) -> Result<(), ExecError> {
        let mut keep = Vec::with_capacity(self.pending.len());
        for (s, ev) in self.pending.drain(..) {
            if spans.iter().any(|&x| overlaps(x, s)) {
                self.compute.wait(&ev).map_err(dev("stream wait"))?;
            } else {
                keep.push((s, ev));
            }
        }
        self.pending = keep;
        Ok(())
    }

    fn loc_ptr(&self, l: &Loc) -> (sys::CUdeviceptr, u64) {
        match *l {
            Loc::Arena((lo, hi)) => (self.arena + lo, hi - lo),
            Loc::Weights((lo, hi)) => (self.weights + lo, hi - lo),
        }
    }

    /// The mixing seed of the op on the device (`sums[1]`).
    fn seed(&self, name: &str, inputs: &[(sys::CUdeviceptr, u64)]) -> Result<(), ExecError> {
        let s = &self.compute;
        let sums = self.lanes[self.cur].sums;
        let (sum, seed) = (sums, sums + 8);
        let h = data::fnv1a(name);
        let zero = 0u64;
        let mut l = s.launch_builder(&self.f.set_u64);
        l.arg(&seed).arg(&h);
        // SAFETY: writes one u64 inside `sums`.
        unsafe { l.launch(grid(1)) }.map_err(dev("seed"))?;
        for &(p, n) in inputs {
            let mut l = s.launch_builder(&self.f.set_u64);
            l.arg(&sum).arg(&zero);
            // SAFETY: as above.
            unsafe { l.launch(grid(1)) }.map_err(dev("checksum reset"))?;
            let mut l = s.launch_builder(&self.f.checksum);
            l.arg(&p).arg(&n).arg(&sum);
            // SAFETY: reads p[0..n) inside a region we own, adds into `sums`.
            unsafe { l.launch(grid(n.div_ceil(8))) }.map_err(dev("checksum"))?;
            let mut l = s.launch_builder(&self.f.fold);
            l.arg(&seed).arg(&sum).arg(&n);
            // SAFETY: reads and writes `sums`.
            unsafe { l.launch(grid(1)) }.map_err(dev("fold"))?;
        }
        Ok(())
    }

    /// Runs `kernel` on device operands: the mixing fill for the outputs it does not
    /// compute, then its real kernel; a fused op runs its members in sequence.
    fn run_kernel(
        &mut self,
        kernel: &Kernel,
        name: &str,
        ins: &[(sys::CUdeviceptr, u64)],
        outs: &[(sys::CUdeviceptr, u64)],
        fills: &[Fill],
    ) -> Result<(), ExecError> {
        if let Kernel::Fused(f) = kernel {
            return self.run_fused(f, name, ins, outs);
        }
        let computed = kernel.computed_outputs().min(outs.len());
        if computed < outs.len() {
            self.seed(name, ins)?;
            for (k, &(p, n)) in outs.iter().enumerate().skip(computed) {
                let as_f32: i32 = (fills.get(k) == Some(&Fill::F32)).into();
                let kk = k as u64;
                let seed = self.lanes[self.cur].sums + 8;
                let units = if as_f32 == 1 { n / 4 } else { n.div_ceil(8) };
                let mut l = self.compute.launch_builder(&self.f.mix_fill);
                l.arg(&p).arg(&n).arg(&seed).arg(&kk).arg(&as_f32);
                // SAFETY: writes out[0..n) inside a region we own; reads `sums`.
                unsafe { l.launch(grid(units)) }.map_err(dev("mix fill"))?;
            }
        }
        if computed > 0 {
            self.run_real(kernel, ins, outs, name)?;
        }
        Ok(())
    }

    /// A fused op: its members in sequence on the buffers [`FusedKernel`] assigns (the
    /// op's inputs and outputs, private buffers in the lane's scratch). A member whose
    /// output shares a buffer with an input runs in place when the CPU would (element-wise
    /// kernels; every GPU kernel reads element `i` before it writes it), else it reads a
    /// copy of that input, as on the CPU.
    fn run_fused(
        &mut self,
        f: &FusedKernel,
        name: &str,
        ins: &[(sys::CUdeviceptr, u64)],
        outs: &[(sys::CUdeviceptr, u64)],
    ) -> Result<(), ExecError> {
        let err = |message: String| ExecError::Kernel {
            op: name.into(),
            message,
        };
        if outs.len() != f.outputs {
            return Err(err(format!(
                "fused op has {} outputs, the kernel expects {}",
                outs.len(),
                f.outputs
            )));
        }
        let padded = |n: u64| n.div_ceil(256) * 256;
        let total: u64 = f.buffers.iter().map(|&b| padded(b)).sum();
        let mut at = if total > 0 {
            let lane = &mut self.lanes[self.cur];
            lane.private
                .ensure(&lane.stream, total as usize, "fused op's private buffers")?
        } else {
            0
        };
        let mut private = Vec::with_capacity(f.buffers.len());
        for &b in &f.buffers {
            private.push((at, b));
            at += padded(b);
        }
        let buf = |b: Buf| match b {
            Buf::Input(i) => ins.get(i).copied(),
            Buf::Output(k) => outs.get(k).copied(),
            Buf::Private(j) => private.get(j).copied(),
        };
        for step in &f.steps {
            let member = |m: &str| err(format!("member {:?}: {m}", step.name));
            let mut souts = Vec::with_capacity(step.outputs.len());
            for &b in &step.outputs {
                if matches!(b, Buf::Input(_)) {
                    return Err(member("writes an input of its fused op"));
                }
                souts.push(buf(b).ok_or_else(|| member("output buffer missing"))?);
            }
            let mut sins = Vec::with_capacity(step.inputs.len());
            for &b in &step.inputs {
                sins.push(buf(b).ok_or_else(|| member("input buffer missing"))?);
            }
            let aliased: Vec<usize> = (0..step.inputs.len())
                .filter(|&i| step.outputs.contains(&step.inputs[i]))
                .collect();
            let in_place = step.outputs.len() == 1
                && !aliased.is_empty()
                && aliased
                    .iter()
                    .all(|&i| super::kernels::in_place_ok(&step.kernel, i));
            if in_place && matches!(step.kernel, Kernel::Copy { .. }) {
                continue; // a copy onto itself
            }
            if !in_place && !aliased.is_empty() {
                let need: u64 = aliased.iter().map(|&i| padded(sins[i].1)).sum();
                let lane = &mut self.lanes[self.cur];
                let mut at =
                    lane.copies
                        .ensure(&lane.stream, need as usize, "fused op's input copies")?;
                for &i in &aliased {
                    // SAFETY: both ranges are ours and hold sins[i].1 bytes; the copy
                    // buffer was sized for every aliased input.
                    unsafe {
                        drv::memcpy_dtod_async(
                            at,
                            sins[i].0,
                            sins[i].1 as usize,
                            self.compute.cu_stream(),
                        )
                    }
                    .map_err(dev("fused input copy"))?;
                    sins[i].0 = at;
                    at += padded(sins[i].1);
                }
            }
            self.run_kernel(&step.kernel, &step.name, &sins, &souts, &step.fills)?;
        }
        Ok(())
    }

    /// Scratch bytes beyond the plan's regions: staging buffers, temporaries and checksum
    /// slots.
    fn extra_bytes(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| (l.stage.len + l.tmp.len + l.private.len + l.copies.len) as u64 + 16)
            .sum()
    }

    fn f32_ptr(p: sys::CUdeviceptr, what: &str) -> Result<sys::CUdeviceptr, ExecError> {
        if p % 4 != 0 {
            return Err(ExecError::Device(format!(
                "{what}: f32 operand at a device address not aligned to 4 bytes (use --kernels mix)"
            )));
        }
        Ok(p)
    }

    fn run_real(
        &mut self,
        kernel: &Kernel,
        ins: &[(sys::CUdeviceptr, u64)],
        outs: &[(sys::CUdeviceptr, u64)],
        name: &str,
    ) -> Result<(), ExecError> {
        let out = *outs.first().ok_or_else(|| ExecError::Kernel {
            op: name.into(),
            message: "no output".into(),
        })?;
        let stream = self.compute.clone();
        let s = &stream;
        let sizes = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(ExecError::Kernel {
                    op: name.into(),
                    message: format!("{what} do not match the kernel"),
                })
            }
        };
        let u = |v: usize| v as u64;
        let input = |i: usize| {
            ins.get(i).copied().ok_or_else(|| ExecError::Kernel {
                op: name.into(),
                message: format!("missing input {i}"),
            })
        };
        match kernel {
            Kernel::Copy { src } => {
                let (p, n) = input(*src)?;
                // SAFETY: both ranges lie in regions we own and have n bytes (same size,
                // checked at selection); they do not overlap (staging otherwise).
                unsafe { drv::memcpy_dtod_async(out.0, p, n.min(out.1) as usize, s.cu_stream()) }
                    .map_err(dev("copy"))?;
            }
            Kernel::Unary(u) => {
                let (x, n) = input(0)?;
                let (op, a, b): (i32, f32, f32) = match *u {
                    Unary::Relu => (0, 0.0, 0.0),
                    Unary::Sigmoid => (1, 0.0, 0.0),
                    Unary::Silu => (2, 0.0, 0.0),
                    Unary::Gelu => (3, 0.0, 0.0),
                    Unary::Hardtanh(lo, hi) => (4, lo, hi),
                    Unary::Tanh => (5, 0.0, 0.0),
                    Unary::Neg => (6, 0.0, 0.0),
                };
                let (x, y) = (Self::f32_ptr(x, name)?, Self::f32_ptr(out.0, name)?);
                let elems = (n / 4).min(out.1 / 4);
                let mut l = s.launch_builder(&self.f.unary);
                l.arg(&x).arg(&y).arg(&elems).arg(&op).arg(&a).arg(&b);
                // SAFETY: reads x[0..elems) and writes y[0..elems), both inside owned regions.
                unsafe { l.launch(grid(elems)) }.map_err(dev("unary"))?;
            }
            Kernel::Binary { f, dims, a, b } => {
                if dims.len() > 8 {
                    return Err(ExecError::Device(format!(
                        "{name}: rank above 8 on the GPU"
                    )));
                }
                let mut arg = BcastArg {
                    rank: dims.len() as u64,
                    ..BcastArg::default()
                };
                for (i, &d) in dims.iter().enumerate() {
                    arg.dims[i] = d as u64;
                }
                match a {
                    Bcast::Flat => arg.flat_a = 1,
                    Bcast::Strides(st) => st
                        .iter()
                        .enumerate()
                        .for_each(|(i, &v)| arg.sa[i] = v as u64),
                }
                match b {
                    Bcast::Flat => arg.flat_b = 1,
                    Bcast::Strides(st) => st
                        .iter()
                        .enumerate()
                        .for_each(|(i, &v)| arg.sb[i] = v as u64),
                }
                let op: i32 = match f {
                    Binary::Add => 0,
                    Binary::Sub => 1,
                    Binary::Mul => 2,
                    Binary::Div => 3,
                };
                let (pa, pb) = (
                    Self::f32_ptr(input(0)?.0, name)?,
                    Self::f32_ptr(input(1)?.0, name)?,
                );
                let y = Self::f32_ptr(out.0, name)?;
                let n: u64 = dims.iter().map(|&d| d as u64).product();
                let mut l = s.launch_builder(&self.f.binary);
                l.arg(&pa).arg(&pb).arg(&y).arg(&n).arg(&op).arg(&arg);
                // SAFETY: index maps were derived from the operands' shapes at selection, so
                // every read is inside its operand; y has n elements.
                unsafe { l.launch(grid(n)) }.map_err(dev("binary"))?;
            }
            Kernel::Matmul(m) => {
                let (pa, pb) = (
                    Self::f32_ptr(input(m.a)?.0, name)?,
                    Self::f32_ptr(input(m.b)?.0, name)?,
                );
                let y = Self::f32_ptr(out.0, name)?;
                let (alpha, beta) = (1.0f32, 0.0f32);
                let (op_b, ldb) = if m.b_trans {
                    (blas_sys::cublasOperation_t::CUBLAS_OP_T, m.k)
                } else {
                    (blas_sys::cublasOperation_t::CUBLAS_OP_N, m.n)
                };
                let int = |v: usize| {
                    i32::try_from(v).map_err(|_| {
                        ExecError::Device(format!("{name}: matrix too large for cuBLAS"))
                    })
                };
                // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ.
                // SAFETY: pointers and extents come from the shapes checked at selection;
                // alpha/beta are host scalars living across the call.
                unsafe {
                    blas::sgemm_strided_batched(
                        self.lanes[self.cur].blas,
                        op_b,
                        blas_sys::cublasOperation_t::CUBLAS_OP_N,
                        int(m.n)?,
                        int(m.m)?,
                        int(m.k)?,
                        &alpha,
                        pb as *const f32,
                        int(ldb)?,
                        m.b_batch_stride as i64,
                        pa as *const f32,
                        int(m.k)?,
                        (m.m * m.k) as i64,
                        &beta,
                        y as *mut f32,
                        int(m.n)?,
                        (m.m * m.n) as i64,
                        int(m.batch)?,
                    )
                }
                .map_err(dev("cuBLAS sgemm"))?;
                if let Some(bi) = m.bias {
                    let bias = Self::f32_ptr(input(bi)?.0, name)?;
                    let rows = (m.batch * m.m) as u64;
                    let n = m.n as u64;
                    let mut l = s.launch_builder(&self.f.add_bias_rows);
                    l.arg(&y).arg(&bias).arg(&rows).arg(&n);
                    // SAFETY: y has rows·n elements, bias n.
                    unsafe { l.launch(grid(rows * n)) }.map_err(dev("bias"))?;
                }
            }
            Kernel::Pad(p) => {
                let (x, n) = input(0)?;
                let (oh, ow) = (p.h + p.top + p.bottom, p.w + p.left + p.right);
                sizes(
                    n == u(p.planes * p.h * p.w * 4) && out.1 == u(p.planes * oh * ow * 4),
                    "pad sizes",
                )?;
                let (x, y) = (Self::f32_ptr(x, name)?, Self::f32_ptr(out.0, name)?);
                let mut l = s.launch_builder(&self.f.pad2d);
                let (planes, h, w, top, left, oh, ow) = (
                    u(p.planes),
                    u(p.h),
                    u(p.w),
                    u(p.top),
                    u(p.left),
                    u(oh),
                    u(ow),
                );
                l.arg(&x)
                    .arg(&y)
                    .arg(&planes)
                    .arg(&h)
                    .arg(&w)
                    .arg(&top)
                    .arg(&left);
                l.arg(&oh).arg(&ow).arg(&p.value);
                // SAFETY: sizes checked above: reads x[0..planes·h·w), writes y[0..planes·oh·ow).
                unsafe { l.launch(grid(planes * oh * ow)) }.map_err(dev("pad"))?;
            }
            Kernel::SliceRows {
                outer,
                rows_in,
                start,
                rows,
                row_bytes,
            } => {
                let (x, n) = input(0)?;
                let (inb, outb) = (u(rows_in * row_bytes), u(rows * row_bytes));
                let (outer, from) = (u(*outer), u(start * row_bytes));
                sizes(
                    n == outer * inb && out.1 == outer * outb,
                    "slice_rows sizes",
                )?;
                let mut l = s.launch_builder(&self.f.slice_rows);
                l.arg(&x)
                    .arg(&out.0)
                    .arg(&outer)
                    .arg(&inb)
                    .arg(&outb)
                    .arg(&from);
                // SAFETY: sizes checked above (from + outb <= inb by selection).
                unsafe { l.launch(grid(outer * outb)) }.map_err(dev("slice_rows"))?;
            }
            Kernel::Concat { outer, inner } => {
                let total: u64 = inner.iter().map(|&v| u(v)).sum();
                let outer = u(*outer);
                sizes(out.1 == outer * total * 4, "concat output size")?;
                let y = Self::f32_ptr(out.0, name)?;
                let mut off = 0u64;
                for (j, &nj) in inner.iter().enumerate() {
                    let (p, len) = input(j)?;
                    let nj = u(nj);
                    sizes(len == outer * nj * 4, "concat input sizes")?;
                    let p = Self::f32_ptr(p, name)?;
                    let mut l = s.launch_builder(&self.f.concat_part);
                    l.arg(&p).arg(&y).arg(&outer).arg(&nj).arg(&total).arg(&off);
                    // SAFETY: input j has outer·nj elements, y outer·total, off + nj <= total.
                    unsafe { l.launch(grid(outer * nj)) }.map_err(dev("concat"))?;
                    off += nj;
                }
            }
            Kernel::Conv2d(c) => {
                let ((x, nx), (w, nw)) = (input(0)?, input(1)?);
                sizes(
                    c.groups > 0 && c.c % c.groups == 0 && c.o % c.groups == 0,
                    "conv2d groups",
                )?;
                sizes(
                    nx == u(c.n * c.c * c.h * c.w * 4)
                        && nw == u(c.o * c.col_rows() * 4)
                        && out.1 == u(c.n * c.o * c.oh * c.ow * 4),
                    "conv2d sizes",
                )?;
                let bias: sys::CUdeviceptr = match c.bias {
                    Some(bi) => {
                        let (b, nb) = input(bi)?;
                        sizes(nb == u(c.o * 4), "conv2d bias size")?;
                        Self::f32_ptr(b, name)?
                    }
                    None => 0,
                };
                let (x, w, y) = (
                    Self::f32_ptr(x, name)?,
                    Self::f32_ptr(w, name)?,
                    Self::f32_ptr(out.0, name)?,
                );
                let arg = ConvArg {
                    n: u(c.n),
                    c: u(c.c),
                    h: u(c.h),
                    w: u(c.w),
                    o: u(c.o),
                    kh: u(c.kh),
                    kw: u(c.kw),
                    oh: u(c.oh),
                    ow: u(c.ow),
                    sh: u(c.stride.0),
                    sw: u(c.stride.1),
                    ph: u(c.pad.0),
                    pw: u(c.pad.1),
                    dh: u(c.dilation.0),
                    dw: u(c.dilation.1),
                    groups: u(c.groups),
                };
                let mut l = s.launch_builder(&self.f.conv2d);
                l.arg(&x).arg(&w).arg(&bias).arg(&y).arg(&arg);
                // SAFETY: sizes checked above; every read index stays inside x, w and bias,
                // every write inside y.
                unsafe { l.launch(grid(out.1 / 4)) }.map_err(dev("conv2d"))?;
            }
            Kernel::BatchNorm {
                n,
                c,
                spatial,
                eps,
                batch_stats,
                stats_outputs,
            } => {
                let (x, nx) = input(0)?;
                let params = if *batch_stats { 3 } else { 5 };
                let mut p = Vec::with_capacity(params);
                for i in 0..params {
                    let (ptr, len) = input(i)?;
                    if i > 0 {
                        sizes(len == u(c * 4), "batch_norm sizes")?;
                    }
                    p.push(Self::f32_ptr(ptr, name)?);
                }
                sizes(
                    nx == u(n * c * spatial * 4) && out.1 == nx,
                    "batch_norm sizes",
                )?;
                let (mean, inv) = match (*stats_outputs, outs) {
                    (true, [_, m, v, ..]) => {
                        sizes(
                            m.1 == u(c * 4) && v.1 == u(c * 4),
                            "batch_norm statistics outputs",
                        )?;
                        (Self::f32_ptr(m.0, name)?, Self::f32_ptr(v.0, name)?)
                    }
                    (true, _) => {
                        sizes(false, "batch_norm statistics outputs")?;
                        (0, 0)
                    }
                    (false, _) => {
                        let lane = &mut self.lanes[self.cur];
                        let t = lane.tmp.ensure(&lane.stream, c * 8, "kernel temporaries")?;
                        (t, t + u(c * 4))
                    }
                };
                let (n, c, spatial) = (u(*n), u(*c), u(*spatial));
                let x = Self::f32_ptr(x, name)?;
                if *batch_stats {
                    let mut l = s.launch_builder(&self.f.bn_stats);
                    l.arg(&x)
                        .arg(&mean)
                        .arg(&inv)
                        .arg(&n)
                        .arg(&c)
                        .arg(&spatial)
                        .arg(eps);
                    // SAFETY: x has n·c·spatial elements; mean and inv c each.
                    unsafe { l.launch(grid(c)) }.map_err(dev("batch_norm stats"))?;
                } else {
                    let mut l = s.launch_builder(&self.f.bn_running);
                    l.arg(&p[3])
                        .arg(&p[4])
                        .arg(&mean)
                        .arg(&inv)
                        .arg(&c)
                        .arg(eps);
                    // SAFETY: the running statistics and mean / inv have c elements.
                    unsafe { l.launch(grid(c)) }.map_err(dev("batch_norm stats"))?;
                }
                let y = Self::f32_ptr(out.0, name)?;
                let mut l = s.launch_builder(&self.f.bn_apply);
                l.arg(&x).arg(&mean).arg(&inv).arg(&p[1]).arg(&p[2]).arg(&y);
                l.arg(&n).arg(&c).arg(&spatial);
                // SAFETY: x and y have n·c·spatial elements, the others c.
                unsafe { l.launch(grid(n * c * spatial)) }.map_err(dev("batch_norm"))?;
            }
            Kernel::Pool(p) => {
                let (x, nx) = input(0)?;
                let outn = u(p.planes * p.oh * p.ow);
                sizes(
                    nx == u(p.planes * p.h * p.w * 4) && out.1 == outn * 4,
                    "pool sizes",
                )?;
                let idx: sys::CUdeviceptr = match outs {
                    [_, i, ..] if p.max && p.indices => {
                        sizes(i.1 == outn * 8, "pool indices size")?;
                        i.0
                    }
                    _ => 0,
                };
                let arg = PoolArg {
                    planes: u(p.planes),
                    h: u(p.h),
                    w: u(p.w),
                    oh: u(p.oh),
                    ow: u(p.ow),
                    kh: u(p.kernel.0),
                    kw: u(p.kernel.1),
                    sh: u(p.stride.0),
                    sw: u(p.stride.1),
                    ph: u(p.pad.0),
                    pw: u(p.pad.1),
                    max: p.max.into(),
                    count_include_pad: p.count_include_pad.into(),
                    indices: i32::from(idx != 0),
                };
                let (x, y) = (Self::f32_ptr(x, name)?, Self::f32_ptr(out.0, name)?);
                let mut l = s.launch_builder(&self.f.pool2d);
                l.arg(&x).arg(&y).arg(&idx).arg(&arg);
                // SAFETY: sizes checked above; windows are clipped to the plane.
                unsafe { l.launch(grid(outn)) }.map_err(dev("pool"))?;
            }
            Kernel::AdaptiveAvgPool {
                planes,
                h,
                w,
                oh,
                ow,
            } => {
                let (x, nx) = input(0)?;
                sizes(
                    nx == u(planes * h * w * 4)
                        && out.1 == u(planes * oh * ow * 4)
                        && *oh > 0
                        && *ow > 0,
                    "adaptive pool sizes",
                )?;
                let (x, y) = (Self::f32_ptr(x, name)?, Self::f32_ptr(out.0, name)?);
                let (planes, h, w, oh, ow) = (u(*planes), u(*h), u(*w), u(*oh), u(*ow));
                let mut l = s.launch_builder(&self.f.adaptive_avg);
                l.arg(&x)
                    .arg(&y)
                    .arg(&planes)
                    .arg(&h)
                    .arg(&w)
                    .arg(&oh)
                    .arg(&ow);
                // SAFETY: sizes checked above; bins lie inside the plane.
                unsafe { l.launch(grid(planes * oh * ow)) }.map_err(dev("adaptive pool"))?;
            }
            Kernel::Softmax { rows, cols } => {
                let (x, nx) = input(0)?;
                sizes(nx == u(rows * cols * 4) && out.1 == nx, "softmax sizes")?;
                let (x, y) = (Self::f32_ptr(x, name)?, Self::f32_ptr(out.0, name)?);
                let (rows, cols) = (u(*rows), u(*cols));
                let mut l = s.launch_builder(&self.f.softmax_rows);
                l.arg(&x).arg(&y).arg(&rows).arg(&cols);
                // SAFETY: x and y have rows·cols elements.
                unsafe { l.launch(grid(rows)) }.map_err(dev("softmax"))?;
            }
            Kernel::Reduce { mean, dims, reduce } => {
                let (x, nx) = input(0)?;
                if dims.len() > 8 || reduce.len() != dims.len() {
                    return Err(ExecError::Device(format!(
                        "{name}: rank above 8 on the GPU"
                    )));
                }
                let n: u64 = dims.iter().map(|&d| u(d)).product();
                let out_n: u64 = dims
                    .iter()
                    .zip(reduce)
                    .map(|(&d, &r)| if r { 1 } else { u(d) })
                    .product();
                sizes(nx == n * 4 && out.1 == out_n * 4, "reduce sizes")?;
                let mut arg = ReduceArg {
                    rank: u(dims.len()),
                    ..ReduceArg::default()
                };
                for (i, (&d, &r)) in dims.iter().zip(reduce).enumerate() {
                    arg.dims[i] = u(d);
                    arg.red[i] = r.into();
                }
                let count = n / out_n.max(1);
                let mean = i32::from(*mean);
                let (x, y) = (Self::f32_ptr(x, name)?, Self::f32_ptr(out.0, name)?);
                let mut l = s.launch_builder(&self.f.reduce_dims);
                l.arg(&x)
                    .arg(&y)
                    .arg(&out_n)
                    .arg(&count)
                    .arg(&mean)
                    .arg(&arg);
                // SAFETY: every input offset is a valid multi-index of dims; y has out_n
                // elements.
                unsafe { l.launch(grid(out_n)) }.map_err(dev("reduce"))?;
            }
            other => {
                return Err(ExecError::Device(format!(
                    "{name}: kernel {} is not implemented on the GPU",
                    other.name()
                )))
            }
        }
        Ok(())
    }
}

impl Drop for GpuBackend {
    fn drop(&mut self) {
        // Errors cannot be reported from Drop; the context is torn down right after anyway.
        for l in &self.lanes {
            let _ = l.stream.synchronize();
        }
        let _ = self.copy.synchronize();
        // SAFETY: each pointer was allocated by this backend and is freed once (the lanes
        // free their own scratch when dropped).
        unsafe {
            for p in [self.arena, self.weights] {
                if p != 0 {
                    let _ = drv::free_sync(p);
                }
            }
            if !self.host.is_null() {
                let _ = drv::free_host(self.host.cast());
            }
        }
    }
}

impl Backend for GpuBackend {
    fn poison(&mut self, span: Span) -> Result<(), ExecError> {
        self.settle(&[span])?;
        self.poison_raw(self.arena + span.0, span.1 - span.0, false)
    }

    fn load(&mut self, span: Span, bytes: &[u8]) -> Result<(), ExecError> {
        self.settle(&[span])?;
        self.uploads.push(bytes.to_vec());
        let src = self.uploads.last().map(|v| v.as_slice()).unwrap_or(&[]);
        // SAFETY: the destination range is inside the arena; the source stays alive in
        // `uploads` until `finish` synchronises.
        unsafe { drv::memcpy_htod_async(self.arena + span.0, src, self.compute.cu_stream()) }
            .map_err(dev("input upload"))?;
        if self.host_work && self.lanes.len() > 1 {
            // Host work precedes everything issued later on any stream.
            self.compute.synchronize().map_err(dev("synchronize"))?;
        }
        Ok(())
    }

    fn set_stream(&mut self, stream: Option<u32>) -> Result<(), ExecError> {
        self.host_work = stream.is_none();
        let s = stream.unwrap_or(0) as usize;
        while self.lanes.len() <= s {
            let st = self.ctx.new_stream().map_err(dev("stream"))?;
            self.lanes.push(Lane::new(st)?);
        }
        self.cur = s;
        self.compute = self.lanes[s].stream.clone();
        Ok(())
    }

    fn record_event(&mut self, event: u64) -> Result<(), ExecError> {
        let ev = self.compute.record_event(None).map_err(dev("event"))?;
        self.events.insert(event, ev);
        Ok(())
    }

    fn wait_event(&mut self, event: u64) -> Result<(), ExecError> {
        let ev = self
            .events
            .get(&event)
            .ok_or_else(|| ExecError::Device(format!("event {event} was never recorded")))?;
        self.compute.wait(ev).map_err(dev("stream wait"))
    }

    fn exec(&mut self, step: &Step<'_>) -> Result<(), ExecError> {
        let mut spans: Vec<Span> = step.outputs.clone();
        spans.extend(step.inputs.iter().filter_map(|l| match l {
            Loc::Arena(s) => Some(*s),
            Loc::Weights(_) => None,
        }));
        spans.extend(step.workspace);
        self.settle(&spans)?;
        if let Some(ws) = step.workspace {
            self.poison_raw(self.arena + ws.0, ws.1 - ws.0, false)?;
        }
        let ins: Vec<(sys::CUdeviceptr, u64)> =
            step.inputs.iter().map(|l| self.loc_ptr(l)).collect();
        // Outputs overlapping an input or each other are computed in staging and copied.
        let arena_ins: Vec<Span> = step
            .inputs
            .iter()
            .filter_map(|l| match l {
                Loc::Arena(s) => Some(*s),
                Loc::Weights(_) => None,
            })
            .collect();
        let clash = step.outputs.iter().enumerate().any(|(k, &o)| {
            arena_ins.iter().any(|&i| overlaps(i, o))
                || step
                    .outputs
                    .iter()
                    .enumerate()
                    .any(|(j, &p)| j != k && overlaps(o, p))
        });
        let mut outs: Vec<(sys::CUdeviceptr, u64)> = step
            .outputs
            .iter()
            .map(|&(lo, hi)| (self.arena + lo, hi - lo))
            .collect();
        if clash {
            let total: u64 = outs.iter().map(|o| o.1.div_ceil(256) * 256).sum();
            let lane = &mut self.lanes[self.cur];
            let mut at = lane
                .stage
                .ensure(&lane.stream, total as usize, "staging buffer")?;
            for o in outs.iter_mut() {
                o.0 = at;
                at += o.1.div_ceil(256) * 256;
            }
        }
        self.run_kernel(step.kernel, step.name, &ins, &outs, &step.fills)?;
        if clash {
            for (o, &(lo, hi)) in outs.iter().zip(&step.outputs) {
                // SAFETY: staging → arena copy of the output's n bytes, both owned.
                unsafe {
                    drv::memcpy_dtod_async(
                        self.arena + lo,
                        o.0,
                        (hi - lo) as usize,
                        self.compute.cu_stream(),
                    )
                }
                .map_err(dev("staging copy"))?;
            }
        }
        if let Some(ws) = step.workspace {
            self.poison_raw(self.arena + ws.0, ws.1 - ws.0, false)?;
        }
        Ok(())
    }

    fn spill_out(&mut self, span: Span, host: u64) -> Result<(), ExecError> {
        let ready = self.compute.record_event(None).map_err(dev("event"))?;
        self.copy.wait(&ready).map_err(dev("stream wait"))?;
        let n = (span.1 - span.0) as usize;
        let h = host as usize;
        if h + n > self.host_len {
            return Err(ExecError::Device("host range outside the pool".into()));
        }
        // SAFETY: [h, h+n) lies inside the pinned pool (checked above and by the replay);
        // the pool outlives every copy (Drop synchronises first).
        let dst = unsafe { std::slice::from_raw_parts_mut(self.host.add(h), n) };
        // SAFETY: source range inside the arena; destination pinned, so truly async.
        unsafe { drv::memcpy_dtoh_async(dst, self.arena + span.0, self.copy.cu_stream()) }
            .map_err(dev("spill out"))?;
        self.poison_raw(self.arena + span.0, n as u64, true)?;
        let done = self.copy.record_event(None).map_err(dev("event"))?;
        self.pending.push((span, done));
        Ok(())
    }

    fn spill_in(&mut self, host: u64, span: Span) -> Result<(), ExecError> {
        let ready = self.compute.record_event(None).map_err(dev("event"))?;
        self.copy.wait(&ready).map_err(dev("stream wait"))?;
        let n = (span.1 - span.0) as usize;
        let h = host as usize;
        if h + n > self.host_len {
            return Err(ExecError::Device("host range outside the pool".into()));
        }
        // SAFETY: as in spill_out.
        let src = unsafe { std::slice::from_raw_parts(self.host.add(h), n) };
        // SAFETY: destination inside the arena, source pinned host memory we own.
        unsafe { drv::memcpy_htod_async(self.arena + span.0, src, self.copy.cu_stream()) }
            .map_err(dev("spill in"))?;
        self.poison_raw(self.host_dev + host, n as u64, true)?;
        let done = self.copy.record_event(None).map_err(dev("event"))?;
        self.pending.push((span, done));
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ExecError> {
        self.compute.join(&self.copy).map_err(dev("join"))?;
        self.pending.clear();
        for l in &self.lanes {
            l.stream.synchronize().map_err(dev("synchronize"))?;
        }
        self.compute.synchronize().map_err(dev("synchronize"))?;
        self.copy.synchronize().map_err(dev("synchronize"))?;
        self.uploads.clear();
        Ok(())
    }

    fn read(&mut self, span: Span) -> Result<Vec<u8>, ExecError> {
        let mut v = vec![0u8; (span.1 - span.0) as usize];
        if span.1 as usize > self.arena_len {
            return Err(ExecError::Device("read outside the arena".into()));
        }
        // SAFETY: the range is inside the arena and all work has completed (finish).
        unsafe { drv::memcpy_dtoh_sync(&mut v, self.arena + span.0) }.map_err(dev("read back"))?;
        Ok(v)
    }
}

/// Compiles `kernels.cu` with NVRTC as a run does (needs only the NVRTC library, no GPU:
/// a CI machine checks the CUDA source this way). The error carries NVRTC's log.
pub fn compile_kernels() -> Result<cudarc::nvrtc::Ptx, ExecError> {
    // SAFETY: this only tries to dlopen the library; nothing is called through it.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(ExecError::Device(
            "libnvrtc not found (the CUDA 13 NVRTC library)".into(),
        ));
    }
    cudarc::nvrtc::compile_ptx_with_opts(
        SOURCE,
        cudarc::nvrtc::CompileOptions {
            // no FMA contraction: keeps the element-wise kernels closest to the CPU's
            fmad: Some(false),
            ..Default::default()
        },
    )
    .map_err(dev("NVRTC compile"))
}

fn funcs(ctx: &Arc<CudaContext>) -> Result<Funcs, ExecError> {
    let ptx = compile_kernels()?;
    let m = ctx.load_module(ptx).map_err(dev("load module"))?;
    let f = |n: &str| m.load_function(n).map_err(dev("load function"));
    Ok(Funcs {
        poison: f("poison")?,
        checksum: f("checksum")?,
        set_u64: f("set_u64")?,
        fold: f("fold")?,
        mix_fill: f("mix_fill")?,
        unary: f("unary")?,
        binary: f("binary")?,
        add_bias_rows: f("add_bias_rows")?,
        pad2d: f("pad2d")?,
        slice_rows: f("slice_rows")?,
        concat_part: f("concat_part")?,
        conv2d: f("conv2d")?,
        bn_stats: f("bn_stats")?,
        bn_running: f("bn_running")?,
        bn_apply: f("bn_apply")?,
        pool2d: f("pool2d")?,
        adaptive_avg: f("adaptive_avg")?,
        softmax_rows: f("softmax_rows")?,
        reduce_dims: f("reduce_dims")?,
    })
}

struct GpuRun {
    outputs: Vec<(memplan::TensorId, Vec<u8>)>,
    counts: replay::Counts,
    step_ms: f64,
    taken: u64,
    extra: u64,
}

fn run_once(
    ctx: &Arc<CudaContext>,
    graph: &Graph,
    plan: &Plan,
    kernels: &[Kernel],
    src: &data::Source<'_>,
) -> Result<GpuRun, ExecError> {
    let spans = replay::weight_spans(graph, plan)?;
    let (free_before, _) = ctx.mem_get_info().map_err(dev("memory info"))?;
    let mut b = GpuBackend::new(ctx, plan, funcs(ctx)?)?;
    b.compute.synchronize().map_err(dev("synchronize"))?;
    let (free_after, _) = ctx.mem_get_info().map_err(dev("memory info"))?;
    let mut region = vec![0u8; plan.weights_bytes as usize];
    data::poison(&mut region);
    super::load_weights(graph, &spans, src, &mut region)?;
    // SAFETY: the weights allocation has weights_bytes bytes.
    unsafe { drv::memcpy_htod_sync(b.weights, &region) }.map_err(dev("weights upload"))?;
    drop(region);
    let fill = replay::fills(graph);
    let mut gen = |t: memplan::TensorId| reference::initial(graph, t, src, fill[t.index()]);
    let start = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(dev("event"))?;
    let end = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(dev("event"))?;
    start.record(&b.compute).map_err(dev("event"))?;
    let (counts, resident) = replay::replay(graph, plan, kernels, &spans, &mut gen, &mut b)?;
    end.record(&b.compute).map_err(dev("event"))?;
    end.synchronize().map_err(dev("event"))?;
    let step_ms = f64::from(start.elapsed_ms(&end).map_err(dev("event"))?);
    let mut outputs = Vec::new();
    for (t, span) in replay::final_outputs(graph, &resident)? {
        outputs.push((t, b.read(span)?));
    }
    Ok(GpuRun {
        outputs,
        counts,
        step_ms,
        taken: free_before.saturating_sub(free_after) as u64,
        extra: b.extra_bytes(),
    })
}

/// Runs `plan` on GPU 0 and compares it with its isolated-plan run and the CPU reference.
pub fn execute(graph: &Graph, plan: &Plan, opts: &ExecOptions) -> Result<ExecReport, ExecError> {
    let started = Instant::now();
    probe()?;
    let ctx = CudaContext::new(0).map_err(dev("context"))?;
    // We order work ourselves with explicit events on raw pointers.
    // SAFETY: no cudarc-managed slices are shared across streams in this module.
    unsafe { ctx.disable_event_tracking() };
    let name = ctx.name().unwrap_or_else(|_| "GPU".into());
    let (free_ctx, _) = ctx.mem_get_info().map_err(dev("memory info"))?;
    let kernels: Vec<Kernel> = super::kernels::select_all(graph, opts.kernels);
    let _probe_module = funcs(&ctx)?;
    let (free_setup, _) = ctx.mem_get_info().map_err(dev("memory info"))?;
    super::check_options(graph, &kernels, opts)?;
    let src = opts.source();
    // The first run of the plan is measured for memory (a later run may reuse the driver's
    // cached allocations); a second one, once the device is warm (lazy module loading,
    // cuBLAS's first call), gives the step time and must reproduce the first bit for bit.
    let run = run_once(&ctx, graph, plan, &kernels, &src)?;
    let isolated = reference::isolated_plan(graph);
    let iso = run_once(&ctx, graph, &isolated, &kernels, &src)?;
    let warm = run_once(&ctx, graph, plan, &kernels, &src)?;
    let by_tensor = |outputs: Vec<(memplan::TensorId, Vec<u8>)>| {
        let mut v: Vec<Option<Vec<u8>>> = vec![None; graph.tensors.len()];
        for (t, b) in outputs {
            v[t.index()] = Some(b);
        }
        v
    };
    let iso_ref = by_tensor(iso.outputs);
    let (mut first_mismatch, _) = compare(graph, &run.outputs, &iso_ref, 0.0);
    let (warm_mismatch, _) = compare(graph, &warm.outputs, &by_tensor(run.outputs.clone()), 0.0);
    if first_mismatch.is_none() {
        first_mismatch = warm_mismatch.clone();
    }
    let cpu = reference::run_with(graph, &kernels, &src)?;
    let tol = if opts.kernels == KernelMode::Mix {
        0.0
    } else {
        1e-4
    };
    let (cpu_mismatch, nonfinite) = compare(graph, &run.outputs, &cpu.outputs, tol);
    let mut notes = vec![match &cpu_mismatch {
        None => format!(
            "equal to the CPU reference ({})",
            if tol == 0.0 {
                "bitwise".to_string()
            } else {
                format!("within {tol:e} relative")
            }
        ),
        Some(m) => format!(
            "differs from the CPU reference at output {:?} ({} bytes){}",
            m.tensor,
            m.differing_bytes,
            if tol > 0.0 {
                "; with real kernels, mixing kernels downstream of float math hash device-specific bits — compare devices with --kernels mix"
            } else {
                ""
            }
        ),
    }];
    if let Some(m) = &warm_mismatch {
        notes.push(format!(
            "a second run of the plan differed from the first at output {:?}: the GPU run is not deterministic",
            m.tensor
        ));
    }
    let gpu_real = kernels.iter().filter(|k| k.is_float_math()).count();
    notes.push(format!("{gpu_real} ops ran real kernels on the GPU"));
    let device_memory = DeviceMemory {
        free_before_context: free_ctx as u64,
        free_before_setup: free_setup as u64,
        free_after_setup: (free_setup as u64).saturating_sub(run.taken),
        taken_by_buffers: run.taken,
        taken_by_context: (free_ctx as u64).saturating_sub(free_setup as u64),
        extra_bytes: run.extra,
    };
    let mut report = ExecReport::assemble(
        graph,
        plan,
        super::Run {
            device: format!("cuda ({name})"),
            outputs_compared: run.outputs.len(),
            first_mismatch,
            allocated: [plan.arena_bytes, plan.weights_bytes, plan.host_bytes],
            counts: &run.counts,
            scratch_bytes: run.extra,
            step_ms: warm.step_ms,
            kernels: &kernels,
            reference: &cpu,
            reference_nonfinite: nonfinite,
            started,
        },
    );
    report.device_memory = Some(device_memory);
    report.notes = notes;
    report.supplied_tensors = super::supplied_count(opts);
    report.output_values = run
        .outputs
        .iter()
        .map(|(t, bytes)| (graph.tensor(*t).name.clone(), bytes.clone()))
        .collect();
    Ok(report)
}
