//! One module per `memplan` command; each takes its parsed arguments ([`crate::args`]) and
//! returns the process's exit code.

pub mod check;
pub mod import;
pub mod instantiate;
pub mod place;
pub mod plan;
pub mod reserve;
pub mod run;
pub mod serve;
pub mod stats;
pub mod zoo;
