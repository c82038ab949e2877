//! The kernels that compute: CPU f32 math for every kernel that
//! [`memplan::ops::kernel::select`] can choose ([`cpu`]) and the CPU convolution algorithms
//! ([`conv_cpu`]). Kernel *selection* (which kernel an op runs, with every shape parameter
//! resolved) is op semantics and lives in the root crate's [`memplan::ops::kernel`]; it is
//! re-exported here so the backends name one module.

pub mod conv_cpu;
pub mod cpu;

pub use memplan::ops::kernel::*;
