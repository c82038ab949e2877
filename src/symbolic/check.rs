//! Checking a symbolic plan over its whole range: every corner of the symbols' box, the
//! plan's profile points (quartiles), both ends of every piece of a split plan, and seeded
//! pseudo-random bindings. Each binding's plan and graph are instantiated and replayed by the
//! independent validator ([`crate::validate`](mod@crate::validate)); the first invalid binding is reported with the
//! validator's message.
//!
//! The layout rule is valid for every binding by construction (the proof is in
//! [`super::plan`]'s module doc); this check does not rely on it, so a corrupted or
//! hand-edited symbolic plan is caught at the bindings it tries. Once every binding passes,
//! [`super::prove`] establishes, from the plan document alone, that the layout holds at every
//! binding in range, or names why it cannot ([`SymbolicCheck::proof`]).
//!
//! Complexity: (2^k corners, capped at [`MAX_CORNERS`], + points + pieces + samples) ×
//! (instantiation + one validator replay), for k symbols.

use super::prove::{prove_layout, Proof};
use super::{Binding, SymbolicError, SymbolicGraph, SymbolicPlan};
use crate::validate::Violation;
use memplan_solver::generate::SplitMix64;
use std::collections::BTreeSet;
use thiserror::Error;

/// The most corners tried (the first ones in binary order when there are more than 10
/// symbols).
pub const MAX_CORNERS: usize = 1024;

/// What [`check_symbolic`] tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolicCheck {
    /// Distinct bindings instantiated and validated.
    pub bindings: usize,
    /// The largest instantiated peak among them (bytes) and its binding. When the layout is
    /// proved, peaks are monotone within each template and every template's max corner is
    /// among the bindings: this is the largest peak over the whole range.
    pub worst_peak: (u64, Binding),
    /// Whether the layout is proved valid at every binding in range ([`super::prove`]); the
    /// proof's premise, one valid replay per template, is among the bindings checked.
    pub proof: Proof,
}

/// Why [`check_symbolic`] failed.
#[derive(Debug, Error)]
pub enum SymbolicCheckError {
    /// The plan or graph could not be instantiated at a binding.
    #[error("at {binding}: {source}")]
    Instantiate {
        /// The binding.
        binding: Binding,
        /// Why.
        source: Box<SymbolicError>,
    },
    /// The instantiated plan is invalid for the instantiated graph.
    #[error("at {binding}: {violation}")]
    Invalid {
        /// The binding.
        binding: Binding,
        /// The validator's first violation.
        violation: Box<Violation>,
    },
}

/// The bindings [`check_symbolic`] tries, without repeats (module doc).
pub fn check_points(plan: &SymbolicPlan, samples: usize, seed: u64) -> Vec<Binding> {
    let symbols: Vec<(String, u64, u64)> = plan
        .symbols()
        .iter()
        .map(|(s, r)| (s.clone(), r.min, r.max))
        .collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut push = |b: Binding| {
        if seen.insert(b.to_string()) {
            out.push(b);
        }
    };
    let corners = 1usize
        .checked_shl(symbols.len() as u32)
        .unwrap_or(usize::MAX)
        .min(MAX_CORNERS);
    for mask in 0..corners {
        push(Binding(
            symbols
                .iter()
                .enumerate()
                .map(|(i, (s, lo, hi))| (s.clone(), if mask >> i & 1 == 1 { *hi } else { *lo }))
                .collect(),
        ));
    }
    for b in plan.profile_points() {
        push(b);
    }
    if let Some(split) = &plan.doc().split {
        let base = Binding::min_corner(plan.symbols());
        for piece in &split.pieces {
            for v in [piece.range.min, piece.range.max, piece.range.max + 1] {
                push(base.clone().with(&split.symbol, v));
            }
        }
    }
    let mut rng = SplitMix64::new(seed);
    for _ in 0..samples {
        push(Binding(
            symbols
                .iter()
                .map(|(s, lo, hi)| {
                    let span = hi - lo;
                    let v = if span == u64::MAX {
                        rng.next_u64()
                    } else {
                        lo + rng.next_u64() % (span + 1)
                    };
                    (s.clone(), v)
                })
                .collect(),
        ));
    }
    // A piece's `max + 1` past the symbol's range is no binding: drop it.
    out.retain(|b| b.resolve(plan.symbols()).is_ok());
    out
}

/// Instantiates `plan` and `graph` at every binding of [`check_points`] and replays each with
/// the validator; the first failure names its binding.
pub fn check_symbolic(
    graph: &SymbolicGraph,
    plan: &SymbolicPlan,
    samples: usize,
    seed: u64,
) -> Result<SymbolicCheck, SymbolicCheckError> {
    let points = check_points(plan, samples, seed);
    let mut worst = (0u64, Binding::new());
    for b in &points {
        let at = |source| SymbolicCheckError::Instantiate {
            binding: b.clone(),
            source: Box::new(source),
        };
        let g = graph.instantiate(b).map_err(at)?;
        let p = plan.instantiate(b).map_err(at)?;
        let replay =
            crate::validate(&g, &p, None).map_err(|violation| SymbolicCheckError::Invalid {
                binding: b.clone(),
                violation: Box::new(violation),
            })?;
        if replay.peak >= worst.0 {
            worst = (replay.peak, b.clone());
        }
    }
    let proof = prove_layout(graph, plan).map_err(|source| SymbolicCheckError::Instantiate {
        binding: graph.min_corner(),
        source: Box::new(source),
    })?;
    Ok(SymbolicCheck {
        bindings: points.len(),
        worst_peak: worst,
        proof,
    })
}
