//! Seeded plan mutations and the differential harness shared by `tests/validator_mutations.rs`
//! and the `--only mutations` benchmark (which includes this file with `#[path]`).
//!
//! [`mutant`] turns a valid plan into a single or double mutation of it (offsets, host
//! offsets, instruction order, deletions, duplicates, names, nodes, `inplace_of`,
//! workspaces, the plan's byte counts, weight entries, early frees, frees turned into spills,
//! recomputes, inputs freed and allocated again, the graph name, ...), deterministic for a
//! seed. [`differential`] runs each mutant through `memplan::validate::validate`, through
//! `../shared/tools/check_plan.py`'s `check()` ([`PyChecker`]: one Python process for all
//! mutants, see `check_many.py`) and, for accepted mutants, through the CPU executor
//! ([`Runner`]: mixing kernels, the reference run computed once per graph), and records every
//! disagreement and every accepted mutant whose run differs from the reference or that the
//! executor refuses. [`Kind::GraphName`] mutants must be rejected by the validator; for the
//! comparison with check_plan.py (which does not compare names) the validator's verdict on the
//! same plan under the right name is used. Mutants with an `inplace_of` are not compared.
#![allow(dead_code)]

use memplan::graph::{Graph, TensorId, TensorKind};
use memplan::pipeline::{self, Control, PipelineOptions};
use memplan::plan::{Instruction, Plan};
use memplan::{OrderMode, Strategy};
use memplan_executor::cpu::CpuBackend;
use memplan_executor::kernels::{self, Kernel, KernelMode};
use memplan_executor::replay::{self, Backend};
use memplan_executor::{compare, reference};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A small deterministic generator over the solver's SplitMix64.
pub struct Rng(memplan_solver::generate::SplitMix64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(memplan_solver::generate::SplitMix64::new(
            seed ^ 0x6a09_e667_f3bc_c909,
        ))
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }
    /// A random element.
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> Option<T> {
        (!v.is_empty()).then(|| v[self.below(v.len())])
    }
}

/// The mutation kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An alloc / spill_in offset set to another tensor's offset.
    OffsetToOther,
    /// An offset moved by ± the tensor's alignment.
    OffsetByAlignment,
    /// An offset off its alignment.
    OffsetMisaligned,
    /// A huge offset (past the arena, or overflowing).
    OffsetHuge,
    /// A spill_out's host offset changed.
    HostOffset,
    /// Two adjacent instructions swapped.
    SwapAdjacent,
    /// An instruction moved a few places earlier or later, or anywhere.
    Move,
    /// An instruction deleted.
    Delete,
    /// An instruction duplicated (right after, or later).
    Duplicate,
    /// An instruction's tensor renamed to another tensor, a weight or an unknown name.
    RetargetTensor,
    /// An exec's node changed.
    ChangeNode,
    /// `inplace_of` added to an alloc (mostly a declared pair at the donor's offset).
    AddInplace,
    /// `inplace_of` removed.
    RemoveInplace,
    /// `inplace_of` pointed at another tensor.
    RetargetInplace,
    /// An in-place alloc's offset moved inside / out of the donor.
    InplaceOffset,
    /// An exec's workspace offset changed, dropped or added.
    Workspace,
    /// `arena_bytes` changed.
    ArenaBytes,
    /// `stats.peak_bytes` changed.
    PeakBytes,
    /// `host_bytes` changed.
    HostBytes,
    /// `weights_bytes` changed.
    WeightsBytes,
    /// A weight entry removed.
    RemoveWeight,
    /// A weight entry duplicated.
    DuplicateWeight,
    /// A weight offset changed.
    WeightOffset,
    /// A free moved before the last exec that reads its tensor.
    FreeBeforeLastReader,
    /// A free turned into a spill_out (at the host pool's end, growing it or not, or at 0).
    FreeToSpill,
    /// A spill_out turned into a free.
    SpillToFree,
    /// A spill_in turned into an alloc, or an alloc into a spill_in.
    SpillInAlloc,
    /// A spill_out and spill_in of a tensor inserted before an exec that reads it (back at
    /// its offset or at the arena's end; host pool, arena and peak grown to fit).
    SpillRoundTrip,
    /// An exec run again later, with the frees of its operands moved after the rerun.
    Recompute,
    /// A graph input freed after a reader and allocated again (same offset) before a later one.
    ReallocInput,
    /// The plan's `graph` name changed.
    GraphName,
    /// An alloc's `mem_id` changed (informative only: must not matter).
    MemId,
    /// The plan's `format` changed.
    Format,
}

/// Every kind, in the order the mutator draws them from.
pub const KINDS: [Kind; 33] = [
    Kind::OffsetToOther,
    Kind::OffsetByAlignment,
    Kind::OffsetMisaligned,
    Kind::OffsetHuge,
    Kind::HostOffset,
    Kind::SwapAdjacent,
    Kind::Move,
    Kind::Delete,
    Kind::Duplicate,
    Kind::RetargetTensor,
    Kind::ChangeNode,
    Kind::AddInplace,
    Kind::RemoveInplace,
    Kind::RetargetInplace,
    Kind::InplaceOffset,
    Kind::Workspace,
    Kind::ArenaBytes,
    Kind::PeakBytes,
    Kind::HostBytes,
    Kind::WeightsBytes,
    Kind::RemoveWeight,
    Kind::DuplicateWeight,
    Kind::WeightOffset,
    Kind::FreeBeforeLastReader,
    Kind::FreeToSpill,
    Kind::SpillToFree,
    Kind::SpillInAlloc,
    Kind::SpillRoundTrip,
    Kind::Recompute,
    Kind::ReallocInput,
    Kind::GraphName,
    Kind::MemId,
    Kind::Format,
];

/// One line for an instruction, for mutant descriptions.
pub fn show(ins: &Instruction) -> String {
    match ins {
        Instruction::Alloc {
            tensor,
            offset,
            inplace_of,
            ..
        } => match inplace_of {
            Some(d) => format!("alloc {tensor} @{offset} inplace_of {d}"),
            None => format!("alloc {tensor} @{offset}"),
        },
        Instruction::Exec {
            node,
            workspace_offset,
            ..
        } => match workspace_offset {
            Some(w) => format!("exec {node} ws@{w}"),
            None => format!("exec {node}"),
        },
        Instruction::Free { tensor, .. } => format!("free {tensor}"),
        Instruction::SpillOut {
            tensor,
            host_offset,
            ..
        } => format!("spill_out {tensor} host@{host_offset}"),
        Instruction::SpillIn { tensor, offset, .. } => format!("spill_in {tensor} @{offset}"),
        Instruction::RecordEvent { event, stream } => format!("record_event {event} s{stream}"),
        Instruction::WaitEvent { event, stream } => format!("wait_event {event} s{stream}"),
    }
}

/// The tensor an instruction names, if any.
pub fn tensor_of(ins: &Instruction) -> Option<&str> {
    match ins {
        Instruction::Alloc { tensor, .. }
        | Instruction::Free { tensor, .. }
        | Instruction::SpillOut { tensor, .. }
        | Instruction::SpillIn { tensor, .. } => Some(tensor),
        Instruction::Exec { .. }
        | Instruction::RecordEvent { .. }
        | Instruction::WaitEvent { .. } => None,
    }
}

/// Whether any alloc of the plan names an in-place donor.
pub fn has_inplace(p: &Plan) -> bool {
    p.instructions.iter().any(|i| {
        matches!(
            i,
            Instruction::Alloc {
                inplace_of: Some(_),
                ..
            }
        )
    })
}

fn positions(p: &Plan, f: impl Fn(&Instruction) -> bool) -> Vec<usize> {
    (0..p.instructions.len())
        .filter(|&i| f(&p.instructions[i]))
        .collect()
}

fn is_placing(ins: &Instruction) -> bool {
    matches!(ins, Instruction::Alloc { .. } | Instruction::SpillIn { .. })
}

fn placed_offset(ins: &Instruction) -> Option<u64> {
    match ins {
        Instruction::Alloc { offset, .. } | Instruction::SpillIn { offset, .. } => Some(*offset),
        _ => None,
    }
}

fn set_offset(ins: &mut Instruction, to: u64) {
    if let Instruction::Alloc { offset, .. } | Instruction::SpillIn { offset, .. } = ins {
        *offset = to;
    }
}

fn alignment_of(g: &Graph, name: &str) -> u64 {
    g.tensor_by_name(name)
        .map_or(g.alignment, |t| g.tensor(t).alignment)
        .max(1)
}

fn size_of(g: &Graph, name: &str) -> u64 {
    g.tensor_by_name(name).map_or(1, |t| g.tensor(t).size)
}

/// Where `name` was last placed (alloc / spill_in) before instruction `before`.
fn last_offset(p: &Plan, name: &str, before: usize) -> Option<u64> {
    p.instructions[..before]
        .iter()
        .rev()
        .find(|i| is_placing(i) && tensor_of(i) == Some(name))
        .and_then(placed_offset)
}

fn reads(g: &Graph, ins: &Instruction, t: TensorId) -> bool {
    match ins {
        Instruction::Exec { node, .. } => g
            .ops
            .iter()
            .find(|o| &o.name == node)
            .is_some_and(|o| o.inputs.contains(&t)),
        _ => false,
    }
}

fn op_of<'g>(g: &'g Graph, ins: &Instruction) -> Option<&'g memplan::graph::Op> {
    match ins {
        Instruction::Exec { node, .. } => g.ops.iter().find(|o| &o.name == node),
        _ => None,
    }
}

/// Applies one mutation of `kind` to a copy of `p`; `None` when it does not apply.
pub fn apply(kind: Kind, g: &Graph, p: &Plan, rng: &mut Rng) -> Option<(Plan, String)> {
    let mut m = p.clone();
    let what = match kind {
        Kind::OffsetToOther
        | Kind::OffsetByAlignment
        | Kind::OffsetMisaligned
        | Kind::OffsetHuge
        | Kind::HostOffset => mutate_offsets(kind, g, p, &mut m, rng)?,
        Kind::SwapAdjacent | Kind::Move | Kind::Delete | Kind::Duplicate => {
            mutate_order(kind, g, p, &mut m, rng)?
        }
        Kind::RetargetTensor | Kind::ChangeNode => mutate_names(kind, g, p, &mut m, rng)?,
        Kind::AddInplace | Kind::RemoveInplace | Kind::RetargetInplace | Kind::InplaceOffset => {
            mutate_inplace(kind, g, p, &mut m, rng)?
        }
        Kind::Workspace
        | Kind::ArenaBytes
        | Kind::PeakBytes
        | Kind::HostBytes
        | Kind::WeightsBytes
        | Kind::RemoveWeight
        | Kind::DuplicateWeight
        | Kind::WeightOffset => mutate_figures(kind, g, p, &mut m, rng)?,
        Kind::FreeBeforeLastReader
        | Kind::FreeToSpill
        | Kind::SpillToFree
        | Kind::SpillInAlloc
        | Kind::SpillRoundTrip => mutate_frees_and_spills(kind, g, p, &mut m, rng)?,
        Kind::Recompute | Kind::ReallocInput => mutate_recomputes(kind, g, p, &mut m, rng)?,
        Kind::GraphName | Kind::MemId | Kind::Format => mutate_header(kind, g, p, &mut m, rng)?,
    };
    (m != *p).then_some((m, format!("{kind:?}: {what}")))
}

/// Offset mutations: arena offsets moved onto another tensor, by an alignment, off their alignment
/// or far out; host offsets changed. `m` is the copy of `p` to mutate; returns what was done.
fn mutate_offsets(kind: Kind, g: &Graph, p: &Plan, m: &mut Plan, rng: &mut Rng) -> Option<String> {
    Some(match kind {
        Kind::OffsetToOther => {
            let placing = positions(p, is_placing);
            let i = rng.pick(&placing)?;
            let from = placed_offset(&p.instructions[i])?;
            let others: Vec<u64> = placing
                .iter()
                .filter_map(|&j| placed_offset(&p.instructions[j]))
                .filter(|&o| o != from)
                .collect();
            let to = rng.pick(&others)?;
            set_offset(&mut m.instructions[i], to);
            format!(
                "#{i} {} -> @{to} (another tensor's offset)",
                show(&p.instructions[i])
            )
        }
        Kind::OffsetByAlignment => {
            let i = rng.pick(&positions(p, is_placing))?;
            let from = placed_offset(&p.instructions[i])?;
            let a = alignment_of(g, tensor_of(&p.instructions[i])?);
            let to = if rng.chance(1, 2) || from < a {
                from + a
            } else {
                from - a
            };
            set_offset(&mut m.instructions[i], to);
            format!("#{i} {} -> @{to}", show(&p.instructions[i]))
        }
        Kind::OffsetMisaligned => {
            let i = rng.pick(&positions(p, is_placing))?;
            let from = placed_offset(&p.instructions[i])?;
            let a = alignment_of(g, tensor_of(&p.instructions[i])?);
            if a < 2 {
                return None;
            }
            let to = from + [1, a / 2, a - 1][rng.below(3)].max(1);
            set_offset(&mut m.instructions[i], to);
            format!("#{i} {} -> @{to} (misaligned)", show(&p.instructions[i]))
        }
        Kind::OffsetHuge => {
            let i = rng.pick(&positions(p, is_placing))?;
            let name = tensor_of(&p.instructions[i])?;
            let a = alignment_of(g, name);
            let to = match rng.below(3) {
                0 => p.arena_bytes.div_ceil(a) * a,
                1 => 1u64 << 62,
                _ => u64::MAX - (a - 1), // aligned when `a` is a power of two: overflows
            };
            set_offset(&mut m.instructions[i], to);
            format!("#{i} {} -> @{to} (huge)", show(&p.instructions[i]))
        }
        Kind::HostOffset => {
            let spills = positions(p, |x| matches!(x, Instruction::SpillOut { .. }));
            let i = rng.pick(&spills)?;
            let Instruction::SpillOut {
                tensor,
                host_offset,
                ..
            } = &p.instructions[i]
            else {
                return None;
            };
            let others: Vec<u64> = spills
                .iter()
                .filter_map(|&j| match &p.instructions[j] {
                    Instruction::SpillOut { host_offset: h, .. } if h != host_offset => Some(*h),
                    _ => None,
                })
                .collect();
            let to = match rng.below(6) {
                0 => rng.pick(&others).unwrap_or(0),
                1 => host_offset + 1,
                2 => host_offset + size_of(g, tensor),
                3 => 0,
                4 => p.host_bytes,
                _ => u64::MAX - 7,
            };
            if to == *host_offset {
                return None;
            }
            if let Instruction::SpillOut { host_offset, .. } = &mut m.instructions[i] {
                *host_offset = to;
            }
            format!("#{i} {} -> host@{to}", show(&p.instructions[i]))
        }
        _ => return None,
    })
}

/// Instruction order mutations: swaps, moves, deletions, duplicates. `m` is the copy of `p` to
/// mutate; returns what was done.
fn mutate_order(kind: Kind, _g: &Graph, p: &Plan, m: &mut Plan, rng: &mut Rng) -> Option<String> {
    let n = p.instructions.len();
    Some(match kind {
        Kind::SwapAdjacent => {
            if n < 2 {
                return None;
            }
            let i = rng.below(n - 1);
            m.instructions.swap(i, i + 1);
            format!(
                "swap #{i} {} and #{} {}",
                show(&p.instructions[i]),
                i + 1,
                show(&p.instructions[i + 1])
            )
        }
        Kind::Move => {
            if n < 2 {
                return None;
            }
            let i = rng.below(n);
            let j = if rng.chance(1, 4) {
                rng.below(n)
            } else {
                let d = 1 + rng.below(8);
                if rng.chance(1, 2) {
                    i.saturating_sub(d)
                } else {
                    (i + d).min(n - 1)
                }
            };
            if i == j {
                return None;
            }
            let ins = m.instructions.remove(i);
            m.instructions.insert(j, ins);
            format!("move #{i} {} to #{j}", show(&p.instructions[i]))
        }
        Kind::Delete => {
            if n == 0 {
                return None;
            }
            let i = rng.below(n);
            m.instructions.remove(i);
            format!("delete #{i} {}", show(&p.instructions[i]))
        }
        Kind::Duplicate => {
            if n == 0 {
                return None;
            }
            let i = rng.below(n);
            let j = if rng.chance(1, 2) {
                i + 1
            } else {
                i + 1 + rng.below(n - i)
            };
            m.instructions.insert(j, p.instructions[i].clone());
            format!("duplicate #{i} {} at #{j}", show(&p.instructions[i]))
        }
        _ => return None,
    })
}

/// Name mutations: an instruction retargeted to another tensor, an exec to another op. `m` is the
/// copy of `p` to mutate; returns what was done.
fn mutate_names(kind: Kind, g: &Graph, p: &Plan, m: &mut Plan, rng: &mut Rng) -> Option<String> {
    Some(match kind {
        Kind::RetargetTensor => {
            let i = rng.pick(&positions(p, |x| tensor_of(x).is_some()))?;
            let from = tensor_of(&p.instructions[i])?.to_string();
            let to = match rng.below(8) {
                0 => "no_such_tensor".to_string(),
                1 => {
                    let w: Vec<usize> = (0..g.tensors.len())
                        .filter(|&t| g.tensors[t].kind == TensorKind::Weight)
                        .collect();
                    g.tensors[rng.pick(&w)?].name.clone()
                }
                2..=4 => {
                    // a tensor of the same size, when there is one
                    let s = size_of(g, &from);
                    let same: Vec<usize> = (0..g.tensors.len())
                        .filter(|&t| {
                            g.tensors[t].size == s
                                && g.tensors[t].kind != TensorKind::Weight
                                && g.tensors[t].name != from
                        })
                        .collect();
                    g.tensors[rng.pick(&same)?].name.clone()
                }
                _ => {
                    let any: Vec<usize> = (0..g.tensors.len())
                        .filter(|&t| g.tensors[t].kind != TensorKind::Weight)
                        .collect();
                    g.tensors[rng.pick(&any)?].name.clone()
                }
            };
            if to == from {
                return None;
            }
            match &mut m.instructions[i] {
                Instruction::Alloc { tensor, .. }
                | Instruction::Free { tensor, .. }
                | Instruction::SpillOut { tensor, .. }
                | Instruction::SpillIn { tensor, .. } => *tensor = to.clone(),
                Instruction::Exec { .. }
                | Instruction::RecordEvent { .. }
                | Instruction::WaitEvent { .. } => return None,
            }
            format!("#{i} {} -> tensor {to}", show(&p.instructions[i]))
        }
        Kind::ChangeNode => {
            let i = rng.pick(&positions(p, |x| matches!(x, Instruction::Exec { .. })))?;
            let to = if rng.chance(1, 8) {
                "no_such_op".to_string()
            } else {
                g.ops[rng.below(g.ops.len())].name.clone()
            };
            match &mut m.instructions[i] {
                Instruction::Exec { node, .. } if *node != to => *node = to.clone(),
                _ => return None,
            }
            format!("#{i} {} -> node {to}", show(&p.instructions[i]))
        }
        _ => return None,
    })
}

/// `inplace_of` mutations: added, removed, retargeted, an in-place alloc moved. `m` is the copy of
/// `p` to mutate; returns what was done.
fn mutate_inplace(kind: Kind, g: &Graph, p: &Plan, m: &mut Plan, rng: &mut Rng) -> Option<String> {
    Some(match kind {
        Kind::AddInplace => {
            let allocs = positions(p, |x| {
                matches!(
                    x,
                    Instruction::Alloc {
                        inplace_of: None,
                        ..
                    }
                )
            });
            // Allocs whose producer declares an in-place pair for the tensor.
            let declared: Vec<(usize, TensorId)> = allocs
                .iter()
                .filter_map(|&i| {
                    let t = g.tensor_by_name(tensor_of(&p.instructions[i])?)?;
                    let op = &g.ops[g.producer[t.index()]?.index()];
                    let &(_, k) = op
                        .inplace
                        .iter()
                        .find(|&&(o, _)| op.outputs.get(o) == Some(&t))?;
                    Some((i, *op.inputs.get(k)?))
                })
                .collect();
            let (i, d) = if !declared.is_empty() && rng.chance(4, 5) {
                declared[rng.below(declared.len())]
            } else {
                let i = rng.pick(&allocs)?;
                let t = g.tensor_by_name(tensor_of(&p.instructions[i])?)?;
                let op = &g.ops[g.producer[t.index()]?.index()];
                (i, rng.pick(&op.inputs)?)
            };
            let dname = g.tensor(d).name.clone();
            let at = last_offset(p, &dname, i);
            let keep = at.is_none() || rng.chance(1, 6);
            if let Instruction::Alloc {
                offset, inplace_of, ..
            } = &mut m.instructions[i]
            {
                *inplace_of = Some(dname.clone());
                if !keep {
                    *offset = at?;
                }
            }
            format!(
                "#{i} {} -> {}",
                show(&p.instructions[i]),
                show(&m.instructions[i])
            )
        }
        Kind::RemoveInplace => {
            let i = rng.pick(&positions(p, |x| {
                matches!(
                    x,
                    Instruction::Alloc {
                        inplace_of: Some(_),
                        ..
                    }
                )
            }))?;
            if let Instruction::Alloc { inplace_of, .. } = &mut m.instructions[i] {
                *inplace_of = None;
            }
            format!("#{i} {} -> no inplace_of", show(&p.instructions[i]))
        }
        Kind::RetargetInplace => {
            let i = rng.pick(&positions(p, |x| {
                matches!(
                    x,
                    Instruction::Alloc {
                        inplace_of: Some(_),
                        ..
                    }
                )
            }))?;
            let t = g.tensor_by_name(tensor_of(&p.instructions[i])?)?;
            let to = match (rng.below(3), g.producer[t.index()]) {
                (0 | 1, Some(op)) => g.tensor(rng.pick(&g.ops[op.index()].inputs)?).name.clone(),
                _ => g.tensors[rng.below(g.tensors.len())].name.clone(),
            };
            match &mut m.instructions[i] {
                Instruction::Alloc {
                    inplace_of: Some(d),
                    ..
                } if *d != to => *d = to.clone(),
                _ => return None,
            }
            format!("#{i} {} -> inplace_of {to}", show(&p.instructions[i]))
        }
        Kind::InplaceOffset => {
            let i = rng.pick(&positions(p, |x| {
                matches!(
                    x,
                    Instruction::Alloc {
                        inplace_of: Some(_),
                        ..
                    }
                )
            }))?;
            let from = placed_offset(&p.instructions[i])?;
            let a = alignment_of(g, tensor_of(&p.instructions[i])?);
            let to = if rng.chance(1, 2) || from < a {
                from + a
            } else {
                from - a
            };
            set_offset(&mut m.instructions[i], to);
            format!("#{i} {} -> @{to}", show(&p.instructions[i]))
        }
        _ => return None,
    })
}

/// Workspace, byte-count and weights-region mutations. `m` is the copy of `p` to mutate; returns
/// what was done.
fn mutate_figures(kind: Kind, g: &Graph, p: &Plan, m: &mut Plan, rng: &mut Rng) -> Option<String> {
    let ga = g.alignment.max(1);
    Some(match kind {
        Kind::Workspace => {
            let i = rng.pick(&positions(p, |x| matches!(x, Instruction::Exec { .. })))?;
            let offs: Vec<u64> = p.instructions.iter().filter_map(placed_offset).collect();
            let Instruction::Exec {
                workspace_offset, ..
            } = &mut m.instructions[i]
            else {
                return None;
            };
            let to = match *workspace_offset {
                Some(w) => match rng.below(5) {
                    0 => None,
                    1 => Some(w + ga),
                    2 if ga > 1 => Some(w + ga / 2),
                    3 if w >= ga => Some(w - ga),
                    _ => Some(rng.pick(&offs).unwrap_or(0)),
                },
                None => Some(if rng.chance(1, 2) {
                    0
                } else {
                    rng.pick(&offs).unwrap_or(0)
                }),
            };
            if to == *workspace_offset {
                return None;
            }
            *workspace_offset = to;
            format!(
                "#{i} {} -> workspace_offset {to:?}",
                show(&p.instructions[i])
            )
        }
        Kind::ArenaBytes => {
            let a = p.arena_bytes;
            let to = match rng.below(5) {
                0 => a.checked_sub(1)?,
                1 => a.checked_sub(ga)?,
                2 => a + ga,
                3 => a.saturating_mul(2),
                _ => u64::MAX,
            };
            m.arena_bytes = to;
            format!("arena_bytes {a} -> {to}")
        }
        Kind::PeakBytes => {
            let s = p.stats.peak_bytes;
            let to = match rng.below(4) {
                0 => s + 1,
                1 => s.checked_sub(1)?,
                2 => s + ga,
                _ => 0,
            };
            if to == s {
                return None;
            }
            m.stats.peak_bytes = to;
            format!("stats.peak_bytes {s} -> {to}")
        }
        Kind::HostBytes => {
            let h = p.host_bytes;
            let to = match rng.below(4) {
                0 => h.checked_sub(1)?,
                1 => 0,
                2 => h + ga,
                _ => u64::MAX,
            };
            if to == h {
                return None;
            }
            m.host_bytes = to;
            format!("host_bytes {h} -> {to}")
        }
        Kind::WeightsBytes => {
            let w = p.weights_bytes;
            let to = match rng.below(3) {
                0 => w.checked_sub(1)?,
                1 => w + ga,
                _ => 0,
            };
            if to == w {
                return None;
            }
            m.weights_bytes = to;
            format!("weights_bytes {w} -> {to}")
        }
        Kind::RemoveWeight => {
            if p.weights.is_empty() {
                return None;
            }
            let i = rng.below(p.weights.len());
            m.weights.remove(i);
            format!("remove weight entry {}", p.weights[i].tensor)
        }
        Kind::DuplicateWeight => {
            if p.weights.is_empty() {
                return None;
            }
            let i = rng.below(p.weights.len());
            let mut w = p.weights[i].clone();
            if rng.chance(1, 2) {
                // a second place, at the region's end (which grows)
                let a = alignment_of(g, &w.tensor);
                w.offset = p.weights_bytes.div_ceil(a) * a;
                m.weights_bytes = w.offset + size_of(g, &w.tensor);
            }
            let what = format!(
                "duplicate weight entry {} @{} (weights_bytes {})",
                w.tensor, w.offset, m.weights_bytes
            );
            m.weights.push(w);
            what
        }
        Kind::WeightOffset => {
            if p.weights.is_empty() {
                return None;
            }
            let i = rng.below(p.weights.len());
            let from = p.weights[i].offset;
            let to = match rng.below(3) {
                0 => p.weights[rng.below(p.weights.len())].offset,
                1 => from + 1,
                _ => p.weights_bytes,
            };
            if to == from {
                return None;
            }
            m.weights[i].offset = to;
            format!("weight {} @{from} -> @{to}", p.weights[i].tensor)
        }
        _ => return None,
    })
}

/// Lifetime mutations around frees and spills: early frees, frees turned into spills and back,
/// spill_ins turned into allocs, extra spill round trips. `m` is the copy of `p` to mutate; returns
/// what was done.
fn mutate_frees_and_spills(
    kind: Kind,
    g: &Graph,
    p: &Plan,
    m: &mut Plan,
    rng: &mut Rng,
) -> Option<String> {
    Some(match kind {
        Kind::FreeBeforeLastReader => {
            let frees = positions(p, |x| matches!(x, Instruction::Free { .. }));
            let f = rng.pick(&frees)?;
            let t = g.tensor_by_name(tensor_of(&p.instructions[f])?)?;
            let j = (0..f).rev().find(|&j| reads(g, &p.instructions[j], t))?;
            let ins = m.instructions.remove(f);
            m.instructions.insert(j, ins);
            format!(
                "move #{f} {} before its last reader #{j} {}",
                show(&p.instructions[f]),
                show(&p.instructions[j])
            )
        }
        Kind::FreeToSpill => {
            let f = rng.pick(&positions(p, |x| matches!(x, Instruction::Free { .. })))?;
            let name = tensor_of(&p.instructions[f])?.to_string();
            let size = size_of(g, &name);
            let (host_offset, grow) = match rng.below(3) {
                0 | 1 => (p.host_bytes, true),
                _ => (0, false),
            };
            if grow {
                m.host_bytes = p.host_bytes + size;
            }
            m.instructions[f] = Instruction::SpillOut {
                stream: None,
                tensor: name,
                host_offset,
            };
            format!(
                "#{f} {} -> {} (host_bytes {})",
                show(&p.instructions[f]),
                show(&m.instructions[f]),
                m.host_bytes
            )
        }
        Kind::SpillToFree => {
            let i = rng.pick(&positions(p, |x| matches!(x, Instruction::SpillOut { .. })))?;
            let tensor = tensor_of(&p.instructions[i])?.to_string();
            m.instructions[i] = Instruction::Free {
                stream: None,
                tensor,
            };
            format!("#{i} {} -> free", show(&p.instructions[i]))
        }
        Kind::SpillInAlloc => {
            let i = rng.pick(&positions(p, is_placing))?;
            m.instructions[i] = match &p.instructions[i] {
                Instruction::SpillIn {
                    tensor,
                    offset,
                    mem_id,
                    ..
                } => Instruction::Alloc {
                    tensor: tensor.clone(),
                    offset: *offset,
                    mem_id: *mem_id,
                    inplace_of: None,
                },
                Instruction::Alloc {
                    tensor,
                    offset,
                    mem_id,
                    ..
                } => Instruction::SpillIn {
                    stream: None,
                    tensor: tensor.clone(),
                    offset: *offset,
                    mem_id: *mem_id,
                },
                _ => return None,
            };
            format!(
                "#{i} {} -> {}",
                show(&p.instructions[i]),
                show(&m.instructions[i])
            )
        }
        Kind::SpillRoundTrip => {
            let execs = positions(p, |x| matches!(x, Instruction::Exec { .. }));
            let i = rng.pick(&execs)?;
            let op = op_of(g, &p.instructions[i])?;
            let ins: Vec<TensorId> = op
                .inputs
                .iter()
                .copied()
                .filter(|&t| g.tensor(t).kind != TensorKind::Weight)
                .collect();
            let t = rng.pick(&ins)?;
            let name = g.tensor(t).name.clone();
            let size = g.tensor(t).size;
            let from = last_offset(p, &name, i)?;
            let a = alignment_of(g, &name);
            let to = if rng.chance(1, 2) {
                from
            } else {
                p.arena_bytes.div_ceil(a) * a
            };
            let host_offset = p.host_bytes;
            m.host_bytes = p.host_bytes + size;
            if to + size > p.stats.peak_bytes {
                m.stats.peak_bytes = to + size;
                m.arena_bytes = m.arena_bytes.max(to + size);
            }
            m.instructions.insert(
                i,
                Instruction::SpillIn {
                    stream: None,
                    tensor: name.clone(),
                    offset: to,
                    mem_id: None,
                },
            );
            m.instructions.insert(
                i,
                Instruction::SpillOut {
                    stream: None,
                    tensor: name.clone(),
                    host_offset,
                },
            );
            format!(
                "before #{i} {}: spill_out {name} host@{host_offset}; spill_in {name} @{to}",
                show(&p.instructions[i])
            )
        }
        _ => return None,
    })
}

/// Recomputes and graph inputs freed and allocated again. `m` is the copy of `p` to mutate; returns
/// what was done.
fn mutate_recomputes(
    kind: Kind,
    g: &Graph,
    p: &Plan,
    m: &mut Plan,
    rng: &mut Rng,
) -> Option<String> {
    let n = p.instructions.len();
    Some(match kind {
        Kind::Recompute => {
            let execs = positions(p, |x| matches!(x, Instruction::Exec { .. }));
            let i = rng.pick(&execs)?;
            let op = op_of(g, &p.instructions[i])?;
            let later: Vec<usize> = execs.iter().copied().filter(|&q| q > i).take(4).collect();
            let q = rng.pick(&later)?;
            let operand = |x: &Instruction| {
                matches!(x, Instruction::Free { .. } | Instruction::SpillOut { .. })
                    && tensor_of(x)
                        .and_then(|nm| g.tensor_by_name(nm))
                        .is_some_and(|t| op.inputs.contains(&t) || op.outputs.contains(&t))
            };
            let moved: Vec<usize> = (i + 1..=q)
                .filter(|&k| operand(&p.instructions[k]))
                .collect();
            let mut out = Vec::with_capacity(n + 1);
            for (k, ins) in p.instructions.iter().enumerate() {
                if !moved.contains(&k) {
                    out.push(ins.clone());
                }
                if k == q {
                    out.push(p.instructions[i].clone());
                    out.extend(moved.iter().map(|&k| p.instructions[k].clone()));
                }
            }
            m.instructions = out;
            format!(
                "rerun #{i} {} after #{q} {}, moving {} frees after it",
                show(&p.instructions[i]),
                show(&p.instructions[q]),
                moved.len()
            )
        }
        Kind::ReallocInput => {
            let inputs: Vec<TensorId> = (0..g.tensors.len() as u32)
                .map(TensorId)
                .filter(|&t| g.tensor(t).kind == TensorKind::Input)
                .collect();
            let t = rng.pick(&inputs)?;
            let name = g.tensor(t).name.clone();
            let readers: Vec<usize> = positions(p, |x| reads(g, x, t));
            if readers.len() < 2 {
                return None;
            }
            let r = readers[rng.below(readers.len() - 1)];
            let offset = last_offset(p, &name, r)?;
            m.instructions.insert(
                r + 1,
                Instruction::Alloc {
                    tensor: name.clone(),
                    offset,
                    mem_id: None,
                    inplace_of: None,
                },
            );
            m.instructions.insert(
                r + 1,
                Instruction::Free {
                    stream: None,
                    tensor: name.clone(),
                },
            );
            format!(
                "after #{r} {}: free {name}; alloc {name} @{offset} (input freed and allocated again)",
                show(&p.instructions[r])
            )
        }
        _ => return None,
    })
}

/// Plan header mutations: graph name, `mem_id`s, format. `m` is the copy of `p` to mutate; returns
/// what was done.
fn mutate_header(kind: Kind, _g: &Graph, p: &Plan, m: &mut Plan, rng: &mut Rng) -> Option<String> {
    Some(match kind {
        Kind::GraphName => {
            m.graph = format!("{}.other", p.graph);
            format!("graph {} -> {}", p.graph, m.graph)
        }
        Kind::MemId => {
            let i = rng.pick(&positions(p, |x| matches!(x, Instruction::Alloc { .. })))?;
            if let Instruction::Alloc { mem_id, .. } = &mut m.instructions[i] {
                *mem_id = match mem_id {
                    Some(k) if rng.chance(1, 2) => Some(*k + 100_000),
                    Some(_) => None,
                    None => Some(7),
                };
            }
            format!("#{i} {} -> another mem_id", show(&p.instructions[i]))
        }
        Kind::Format => {
            m.format = "memplan-plan/0".into();
            "format -> memplan-plan/0".into()
        }
        _ => return None,
    })
}

/// A single (3 in 4) or double mutation of `p`, different from `p`.
pub fn mutant(g: &Graph, p: &Plan, rng: &mut Rng) -> Option<(Plan, String)> {
    let once = |base: &Plan, rng: &mut Rng| {
        (0..64).find_map(|_| apply(KINDS[rng.below(KINDS.len())], g, base, rng))
    };
    let (m, what) = once(p, rng)?;
    if rng.chance(1, 4) {
        if let Some((m2, what2)) = once(&m, rng) {
            if m2 != *p {
                return Some((m2, format!("{what} + {what2}")));
            }
        }
    }
    Some((m, what))
}

/// A verdict of check_plan.py.
#[derive(Debug, Clone)]
pub struct PyVerdict {
    /// The plan is valid.
    pub valid: bool,
    /// Why not.
    pub error: String,
    /// check() raised something other than its rejection (a checker bug).
    pub crash: bool,
}

/// One Python process running `check_plan.py`'s `check()` on plan after plan.
pub struct PyChecker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PyChecker {
    /// Starts the driver (`check_many.py`) on the checker in `tools` (the folder of
    /// check_plan.py).
    pub fn start(tools: &Path) -> Result<PyChecker, String> {
        if !tools.join("check_plan.py").is_file() {
            return Err(format!("{}: no check_plan.py", tools.display()));
        }
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(include_str!("check_many.py"))
            .arg(tools)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("python3: {e}"))?;
        let stdin = child.stdin.take().ok_or("python3: no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("python3: no stdout")?);
        Ok(PyChecker {
            child,
            stdin,
            stdout,
        })
    }

    /// The checker's verdict on `plan` against the graph file `graph_path`.
    pub fn check(
        &mut self,
        graph_path: &Path,
        plan: &Plan,
        budget: Option<u64>,
    ) -> Result<PyVerdict, String> {
        let path =
            serde_json::to_string(&graph_path.to_string_lossy()).map_err(|e| e.to_string())?;
        let plan = serde_json::to_string(plan).map_err(|e| e.to_string())?;
        let budget = budget.map_or("null".to_string(), |b| b.to_string());
        writeln!(
            self.stdin,
            "{{\"graph_path\":{path},\"budget\":{budget},\"plan\":{plan}}}"
        )
        .and_then(|()| self.stdin.flush())
        .map_err(|e| format!("writing to check_many.py: {e}"))?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| format!("reading from check_many.py: {e}"))?;
        let v: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| format!("check_many.py answered {line:?}: {e}"))?;
        Ok(PyVerdict {
            valid: v["valid"] == true,
            error: v["error"].as_str().unwrap_or_default().to_string(),
            crash: v["crash"] == true,
        })
    }
}

impl Drop for PyChecker {
    fn drop(&mut self) {
        // Closing stdin ends the driver's loop.
        let _ = self.stdin.flush();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a run of an accepted mutant showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every output equals the reference.
    Equal,
    /// An output differs (the plan corrupts data).
    Differs(String),
    /// The executor refused the plan (`ExecError`).
    Refused(String),
    /// Not run: a region is larger than the runner's cap.
    Skipped(String),
}

/// The CPU executor with mixing kernels on one graph, its reference outputs and generated
/// inputs and weights computed once.
pub struct Runner {
    kernels: Vec<Kernel>,
    reference: Vec<Option<Vec<u8>>>,
    data: Vec<Option<Vec<u8>>>,
    /// Largest region (arena, weights, host pool) a run may allocate (bytes).
    pub cap: u64,
}

impl Runner {
    /// Seed of the generated inputs and weights.
    pub const SEED: u64 = 11;

    /// A runner for `g` (mixing kernels: any changed input byte changes an op's outputs).
    pub fn new(g: &Graph) -> Result<Runner, String> {
        let kernels = kernels::select_all(g, KernelMode::Mix);
        let reference = reference::run(g, &kernels, Self::SEED)
            .map_err(|e| format!("{}: reference run: {e}", g.name))?
            .outputs;
        let fill = replay::fills(g);
        let data = (0..g.tensors.len())
            .map(|i| {
                matches!(g.tensors[i].kind, TensorKind::Input | TensorKind::Weight)
                    .then(|| reference::generated(g, TensorId(i as u32), Self::SEED, fill[i]))
                    .transpose()
            })
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: generated data: {e}", g.name))?;
        Ok(Runner {
            kernels,
            reference,
            data,
            cap: 1 << 30,
        })
    }

    /// Runs `plan` and compares its outputs with the reference. A region (arena, weights,
    /// host pool) larger than [`Runner::cap`] is cut down to what the plan places in it (the
    /// bytes above are never touched); a plan that places something above the cap is not run.
    pub fn run(&self, g: &Graph, plan: &Plan) -> RunOutcome {
        let mut plan = std::borrow::Cow::Borrowed(plan);
        let (arena, weights, host) = used_bytes(g, &plan);
        for (what, used, b) in [
            ("arena", arena, plan.arena_bytes),
            ("weights region", weights, plan.weights_bytes),
            ("host pool", host, plan.host_bytes),
        ] {
            if b <= self.cap {
                continue;
            }
            if used > self.cap {
                return RunOutcome::Skipped(format!("the plan uses {used} bytes of the {what}"));
            }
            let p = plan.to_mut();
            match what {
                "arena" => p.arena_bytes = used,
                "weights region" => p.weights_bytes = used,
                _ => p.host_bytes = used,
            }
        }
        match self.try_run(g, &plan) {
            Ok(None) => RunOutcome::Equal,
            Ok(Some(m)) => RunOutcome::Differs(m),
            Err(e) => RunOutcome::Refused(e.to_string()),
        }
    }

    fn try_run(
        &self,
        g: &Graph,
        plan: &Plan,
    ) -> Result<Option<String>, memplan_executor::ExecError> {
        let spans = replay::weight_spans(g, plan)?;
        let mut backend = CpuBackend::new(plan.arena_bytes, plan.weights_bytes, plan.host_bytes)?;
        for (i, s) in spans.iter().enumerate() {
            if let (Some((lo, hi)), Some(bytes)) = (*s, &self.data[i]) {
                backend.weights.bytes_mut()[lo as usize..hi as usize].copy_from_slice(bytes);
            }
        }
        let mut gen = |t: TensorId| Ok(self.data[t.index()].clone().unwrap_or_default());
        let (_, resident) = replay::replay(g, plan, &self.kernels, &spans, &mut gen, &mut backend)?;
        let mut outputs = Vec::new();
        for (t, span) in replay::final_outputs(g, &resident)? {
            outputs.push((t, Backend::read(&mut backend, span)?));
        }
        let (first, _) = compare(g, &outputs, &self.reference, 0.0);
        Ok(first.map(|m| {
            format!(
                "output {} differs from byte {} ({} bytes differ)",
                m.tensor, m.first_byte, m.differing_bytes
            )
        }))
    }
}

/// The largest end the plan places in the arena (tensors and workspaces), the weights region
/// and the host pool (saturating; unknown names ignored).
pub fn used_bytes(g: &Graph, p: &Plan) -> (u64, u64, u64) {
    let ids = g.tensor_ids();
    let size = |name: &str| ids.get(name).map_or(0, |&t| g.tensor(t).size);
    let ops = g.op_indices();
    let (mut arena, mut host) = (0u64, 0u64);
    for ins in &p.instructions {
        match ins {
            Instruction::Alloc { tensor, offset, .. }
            | Instruction::SpillIn { tensor, offset, .. } => {
                arena = arena.max(offset.saturating_add(size(tensor)));
            }
            Instruction::SpillOut {
                tensor,
                host_offset,
                ..
            } => host = host.max(host_offset.saturating_add(size(tensor))),
            Instruction::Exec {
                node,
                workspace_offset: Some(w),
                ..
            } => {
                let ws = ops.get(node.as_str()).map_or(0, |&k| g.ops[k].workspace);
                arena = arena.max(w.saturating_add(ws));
            }
            _ => {}
        }
    }
    let weights = p
        .weights
        .iter()
        .map(|w| w.offset.saturating_add(size(&w.tensor)))
        .max()
        .unwrap_or(0);
    (arena, weights, host)
}

/// A valid plan to mutate, with its graph (and the graph's file for check_plan.py).
pub struct Subject {
    /// `graph/variant`, e.g. `resnet18.1.inference/inplace`.
    pub label: String,
    /// The graph.
    pub graph: Graph,
    /// `graph` as a memplan-graph/1 file (what check_plan.py reads).
    pub graph_path: PathBuf,
    /// The plan.
    pub plan: Plan,
    /// The budget the plan was made for (both checkers get it).
    pub budget: Option<u64>,
    /// The executor for accepted mutants (none: no runs).
    pub runner: Option<Runner>,
    /// Run 1 in `every` accepted mutants (the 1st, the `every + 1`-th, ...; 0: none).
    pub every: usize,
    /// Also run every accepted mutant with an `inplace_of`.
    pub inplace_all: bool,
}

/// How a subject's plan is made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Variant {
    /// The listed order, heuristic placement.
    Plain,
    /// In-place hints honoured.
    Inplace,
    /// Under a budget of this percentage of the unconstrained peak (spills, recomputes).
    Budget(f64),
}

impl Variant {
    /// Short name for labels.
    pub fn name(self) -> String {
        match self {
            Variant::Plain => "plain".into(),
            Variant::Inplace => "inplace".into(),
            Variant::Budget(p) => format!("budget{p}%"),
        }
    }
}

/// A small copy of `g` (for cheap executor runs): every size and workspace divided by
/// `factor` (at least 4 bytes), shapes and dtypes dropped (the bytes are mixed, not computed),
/// named `NAME.mini`.
pub fn mini(g: &Graph, factor: u64) -> Result<Graph, String> {
    let mut m = g.clone();
    m.name = format!("{}.mini", g.name);
    for t in &mut m.tensors {
        t.size = (t.size / factor).div_ceil(4).max(1) * 4;
        t.shape = None;
        t.dtype = None;
    }
    for o in &mut m.ops {
        if o.workspace > 0 {
            o.workspace = (o.workspace / factor).div_ceil(4).max(1) * 4;
        }
    }
    m.rebuilt().map_err(|e| format!("{}: {e}", m.name))
}

/// Plans `g` (`variant`) through the pipeline (heuristics, listed order), writes the graph to
/// `dir` for check_plan.py, and checks that the validator and check_plan.py (when `py` is
/// given, and the plan has no `inplace_of`) accept the plan and, when mutants
/// are to run (`every > 0`: 1 in `every` accepted ones; `inplace_all`: every accepted one with
/// an `inplace_of`), that it runs equal to the reference.
pub fn subject(
    g: &Graph,
    variant: Variant,
    every: usize,
    inplace_all: bool,
    dir: &Path,
    py: Option<&mut PyChecker>,
) -> Result<Subject, String> {
    let mut opts = PipelineOptions {
        order: OrderMode::Given,
        strategy: Strategy::Heuristic,
        ..PipelineOptions::default()
    };
    match variant {
        Variant::Plain => {}
        Variant::Inplace => opts.inplace = true,
        Variant::Budget(pct) => {
            opts.budget = Some(memplan::budget::BudgetSpec::Percent(pct));
            opts.spill_strategy = "sweep".into();
        }
    }
    let label = format!("{}/{}", g.name, variant.name());
    let r = pipeline::run(g, &opts, &Control::default()).map_err(|e| format!("{label}: {e}"))?;
    let plan = r.plan;
    let budget = matches!(variant, Variant::Budget(_)).then_some(plan.stats.peak_bytes);
    let graph_path = dir.join(format!("{}.json", g.name));
    if !graph_path.exists() {
        std::fs::write(&graph_path, g.to_json())
            .map_err(|e| format!("{}: {e}", graph_path.display()))?;
    }
    memplan::validate(g, &plan, budget).map_err(|v| format!("{label}: invalid plan: {v}"))?;
    if let (Some(py), false) = (py, variant == Variant::Inplace && has_inplace(&plan)) {
        let v = py.check(&graph_path, &plan, budget)?;
        if !v.valid {
            return Err(format!(
                "{label}: check_plan.py rejects the plan: {}",
                v.error
            ));
        }
    }
    let runner = if every > 0 || inplace_all {
        let r = Runner::new(g)?;
        match r.run(g, &plan) {
            RunOutcome::Equal => {}
            other => return Err(format!("{label}: the plan's run: {other:?}")),
        }
        Some(r)
    } else {
        None
    };
    Ok(Subject {
        label,
        graph: g.clone(),
        graph_path,
        plan,
        budget,
        runner,
        every,
        inplace_all,
    })
}

/// Counts of a differential run.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Mutants made.
    pub mutants: usize,
    /// Of which double mutations.
    pub doubles: usize,
    /// Mutants with an `inplace_of`.
    pub inplace: usize,
    /// Accepted by the validator.
    pub accepted: usize,
    /// Rejected by the validator.
    pub rejected: usize,
    /// Accepted by check_plan.py.
    pub py_accepted: usize,
    /// Accepted mutants run by the executor.
    pub executed: usize,
    /// Accepted mutants run whose outputs differ from the reference.
    pub corrupt: usize,
    /// Accepted mutants not run (a region over the runner's cap).
    pub skipped: usize,
    /// Verdicts compared between the checkers (no `inplace_of`).
    pub compared: usize,
    /// Disagreements among them.
    pub disagreements: usize,
}

impl Tally {
    /// Adds another tally.
    pub fn add(&mut self, o: &Tally) {
        self.mutants += o.mutants;
        self.doubles += o.doubles;
        self.inplace += o.inplace;
        self.accepted += o.accepted;
        self.rejected += o.rejected;
        self.py_accepted += o.py_accepted;
        self.executed += o.executed;
        self.corrupt += o.corrupt;
        self.skipped += o.skipped;
        self.compared += o.compared;
        self.disagreements += o.disagreements;
    }
}

/// Something a mutant showed that the assertions forbid.
#[derive(Debug, Clone)]
pub struct Finding {
    /// `accepted-corrupt`, `accepted-refused` (the executor refused an accepted plan),
    /// `disagreement`, `graph-name-accepted`, `checker-crash`.
    pub class: &'static str,
    /// The subject's label.
    pub subject: String,
    /// The mutation.
    pub what: String,
    /// The verdicts / the run.
    pub detail: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}] {}: {} => {}",
            self.class, self.subject, self.what, self.detail
        )
    }
}

/// A plan checker under test: `Err(why)` rejects.
pub type Validator<'a> = &'a dyn Fn(&Graph, &Plan, Option<u64>) -> Result<(), String>;

/// The project's validator as a [`Validator`].
pub fn project_validator(g: &Graph, p: &Plan, budget: Option<u64>) -> Result<(), String> {
    memplan::validate(g, p, budget)
        .map(|_| ())
        .map_err(|v| v.to_string())
}

/// Runs `count` mutants of `s` (seeded by `seed`) through `validate` (normally
/// [`project_validator`]), check_plan.py (when `py` is given) and, when accepted, the executor
/// (`exec_all`: every accepted mutant; else as the subject says). Writes each finding's mutant
/// plan to `dump` when given.
pub fn differential(
    s: &Subject,
    validate: Validator<'_>,
    count: usize,
    seed: u64,
    exec_all: bool,
    mut py: Option<&mut PyChecker>,
    dump: Option<&Path>,
) -> Result<(Tally, Vec<Finding>), String> {
    let g = &s.graph;
    let mut rng = Rng::new(seed);
    let mut t = Tally::default();
    let mut findings = Vec::new();
    for k in 0..count {
        let Some((m, what)) = mutant(g, &s.plan, &mut rng) else {
            continue;
        };
        t.mutants += 1;
        t.doubles += usize::from(what.contains(" + "));
        let inplace = has_inplace(&m);
        t.inplace += usize::from(inplace);
        let verdict = validate(g, &m, s.budget);
        let mut found = |class: &'static str, detail: String| {
            if let Some(dir) = dump {
                let file = dir.join(format!(
                    "{}.{seed}.{k}.{class}.plan.json",
                    s.label.replace('/', ".")
                ));
                let _ = std::fs::write(file, m.to_json());
            }
            findings.push(Finding {
                class,
                subject: s.label.clone(),
                what: what.clone(),
                detail,
            });
        };
        // The graph-name rule is the project's own: check_plan.py is compared with the
        // validator's verdict on the same plan under the right name.
        let compared = if m.graph != g.name {
            if let Ok(r) = &verdict {
                found("graph-name-accepted", format!("validator accepted: {r:?}"));
            }
            let mut named = m.clone();
            named.graph = g.name.clone();
            validate(g, &named, s.budget)
        } else {
            verdict.clone()
        };
        let py_v = match py.as_deref_mut() {
            Some(py) => Some(py.check(&s.graph_path, &m, s.budget)?),
            None => None,
        };
        if let Some(py_v) = &py_v {
            t.py_accepted += usize::from(py_v.valid);
            if py_v.crash {
                found("checker-crash", py_v.error.clone());
            }
        }
        // check_plan.py does not know `inplace_of`: no comparison there.
        if let Some(py_v) = py_v.filter(|_| !inplace) {
            t.compared += 1;
            if py_v.valid != compared.is_ok() {
                t.disagreements += 1;
                found(
                    "disagreement",
                    format!(
                        "validator: {}; check_plan.py: {}",
                        compared
                            .as_ref()
                            .map_or_else(|v| format!("rejects ({v})"), |()| "accepts".into()),
                        if py_v.valid {
                            "accepts".to_string()
                        } else {
                            format!("rejects ({})", py_v.error)
                        }
                    ),
                );
            }
        }
        if verdict.is_err() {
            t.rejected += 1;
            continue;
        }
        t.accepted += 1;
        let Some(runner) = &s.runner else { continue };
        let sampled = exec_all
            || (inplace && s.inplace_all)
            || (s.every > 0 && (t.accepted - 1) % s.every == 0);
        if !sampled {
            continue;
        }
        match runner.run(g, &m) {
            RunOutcome::Equal => t.executed += 1,
            RunOutcome::Skipped(_) => t.skipped += 1,
            RunOutcome::Differs(d) => {
                t.executed += 1;
                t.corrupt += 1;
                found("accepted-corrupt", d);
            }
            RunOutcome::Refused(e) => {
                t.executed += 1;
                found("accepted-refused", e);
            }
        }
    }
    Ok((t, findings))
}

/// `SHARED/zoo/NAME.json`, parsed; `None` when the file is not there.
pub fn zoo_graph(shared: &Path, name: &str) -> Result<Option<Graph>, String> {
    let p = shared.join("zoo").join(format!("{name}.json"));
    match std::fs::read_to_string(&p) {
        Ok(text) => Graph::parse(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", p.display())),
        Err(_) => Ok(None),
    }
}
