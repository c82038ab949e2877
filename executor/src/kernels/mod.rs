//! The kernels that compute: CPU f32 math for every kernel that
//! [`memplan::ops::kernel::select`] can choose ([`cpu`]) and the CPU convolution algorithms
//! ([`conv_cpu`]). Kernel *selection* (which kernel an op runs, with every shape parameter
//! resolved) is op semantics and lives in the root crate's [`memplan::ops::kernel`]; it is
//! re-exported here so the backends name one module, with the rule both backends follow
//! when a fused member may run in place (`in_place_ok`).

pub mod conv_cpu;
pub mod cpu;

pub use memplan::ops::kernel::*;

/// Whether `kernel` can compute output 0 in the bytes of its input `i` (element-wise, each
/// element read before it is written, no broadcasting of that input).
pub(crate) fn in_place_ok(kernel: &Kernel, i: usize) -> bool {
    match kernel {
        Kernel::Unary(_) => i == 0,
        Kernel::Copy { src } => i == *src,
        Kernel::BatchNorm { stats_outputs, .. } => i == 0 && !stats_outputs,
        Kernel::Binary { a, b, .. } => *a == Bcast::Flat && *b == Bcast::Flat && i < 2,
        _ => false,
    }
}
