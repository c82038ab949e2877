//! Independent replay checker of a plan against its graph (docs/FORMATS.md §2 semantics). It uses
//! only the graph and plan types and the op semantics ([`crate::ops::may_recompute`]) — never
//! a solver — and reports the first violation with the instruction index and the tensors or
//! op involved.
//!
//! Recomputes: an op executed a second time must be one that may run twice
//! ([`crate::ops::may_recompute`]); re-running dropout, another random op, an op that
//! mutates an input or one flagged `"recompute": false` is a violation naming the op.
//!
//! The validator tracks who owns every reserved byte. Graph inputs hold their data from their
//! first `alloc` only: freed, their data is gone (docs/FORMATS.md §2).
//!
//! Extension honoured, `alloc T ... inplace_of D` (in-place sharing): T may take D's bytes when
//! T's producer P declares the pair `[output, input]` (T, D), D is reserved and valid and gives
//! its bytes to no other tensor, T starts at D's offset and fits inside D's range. D must die
//! at P: when P runs, D's bytes become T's (D is no longer valid) and D must be freed before
//! the next `exec`. Until D is freed, no exec may write D's bytes (re-running D's producer
//! would overwrite T), and D cannot be spilled while T is reserved in its bytes. The shared
//! bytes count once in `max_live`.
//!
//! Parallel plans (streams and events): the plan must be valid in its listed order (one
//! linearisation of its streams), and then the happens-before rules of `streams` hold:
//! every reuse of bytes, free and spill is ordered after the uses it must follow by stream
//! order or events, whatever the streams' relative speed.
//!
//! Layout: [`validate`] runs the plan-level checks, then a small loop hands each instruction
//! to its handler on the replay state (one handler per kind: `alloc`, `spill_in`, `free`,
//! `spill_out`, `exec`, with the workspace check apart), then the end-of-plan checks.

mod streams;

use crate::graph::{Graph, TensorId, TensorKind};
use crate::plan::{Instruction, Plan, PLAN_FORMAT};
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// What a plan breaks.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ViolationKind {
    /// Wrong `format`.
    #[error("format is {0:?}, expected \"{PLAN_FORMAT}\"")]
    Format(String),
    /// The plan names another graph.
    #[error("the plan is for graph {plan:?}, not {graph:?}")]
    GraphName {
        /// The plan's `graph`.
        plan: String,
        /// The graph's `name`.
        graph: String,
    },
    /// A name that is not a tensor / op of the graph.
    #[error("unknown {what} {name:?}")]
    Unknown {
        /// "tensor" or "op".
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A weight is missing from, misplaced in, or overlapping in the weights region.
    #[error("weights region: {0}")]
    Weights(String),
    /// A weight appears in an instruction.
    #[error("weight {0:?} appears in an instruction (weights live in their own region)")]
    WeightInArena(String),
    /// An offset is not a multiple of the required alignment.
    #[error("{what} offset {offset} is not a multiple of its alignment {alignment}")]
    Misaligned {
        /// Tensor or workspace.
        what: String,
        /// The offset.
        offset: u64,
        /// The alignment.
        alignment: u64,
    },
    /// A range overlaps a reserved range.
    #[error("{what} [{lo}, {hi}) overlaps reserved tensor {other:?}")]
    Overlap {
        /// Tensor or workspace being reserved.
        what: String,
        /// Range start.
        lo: u64,
        /// Range end.
        hi: u64,
        /// The tensor already there.
        other: String,
    },
    /// A tensor is reserved while already reserved.
    #[error("tensor {0:?} is reserved twice")]
    DoubleAlloc(String),
    /// A free/spill of a tensor that is not reserved.
    #[error("tensor {0:?} is not reserved")]
    NotReserved(String),
    /// An exec input is not valid (never written, freed, spilled, or donated in place).
    #[error("op {op:?} reads {tensor:?}, which does not hold valid data")]
    InputNotValid {
        /// The op.
        op: String,
        /// The tensor.
        tensor: String,
    },
    /// An exec operand is not reserved.
    #[error("op {op:?} uses {tensor:?}, which is not reserved")]
    OperandNotReserved {
        /// The op.
        op: String,
        /// The tensor.
        tensor: String,
    },
    /// A workspace offset is missing or given where none is needed.
    #[error("op {op:?}: {message}")]
    Workspace {
        /// The op.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// An in-place alloc that the graph or the state does not allow.
    #[error("tensor {tensor:?} cannot take the bytes of {donor:?} in place: {reason}")]
    BadInplace {
        /// The tensor allocated.
        tensor: String,
        /// The donor named.
        donor: String,
        /// Why not.
        reason: String,
    },
    /// A spill that breaks the host pool rules.
    #[error("host pool: {0}")]
    Host(String),
    /// An op never runs.
    #[error("op {0:?} is never executed")]
    NotExecuted(String),
    /// An op that may not run twice (random, stateful or `"recompute": false`,
    /// [`crate::ops::may_recompute`]) is executed again.
    #[error(
        "op {op:?} ({op_type}) is executed a second time, but it may not be recomputed \
         (random or stateful op, or \"recompute\": false): a recompute would change the results"
    )]
    ForbiddenRecompute {
        /// The op.
        op: String,
        /// Its type.
        op_type: String,
    },
    /// A graph output is not reserved and valid at the end.
    #[error("output {0:?} is not resident and valid at the end")]
    OutputMissing(String),
    /// Byte arithmetic overflow.
    #[error("{0} overflows u64")]
    Overflow(String),
    /// The plan's declared sizes disagree with the replay.
    #[error("{0}")]
    Stats(String),
    /// Parallel plans: two instructions on different streams that touch the same bytes are
    /// not ordered by stream order or events.
    #[error("{0}")]
    Unordered(Box<Unordered>),
    /// Parallel plans: a stream id out of range, an event recorded twice or waited for
    /// before it is recorded, a graph input placed over bytes a stream released.
    #[error("streams: {0}")]
    Streams(String),
    /// The replayed peak exceeds the budget.
    #[error("peak {peak} is over the budget of {budget} bytes")]
    OverBudget {
        /// Replayed peak.
        peak: u64,
        /// The budget.
        budget: u64,
    },
}

/// Two instructions of a parallel plan on different streams that touch the same bytes and
/// that neither stream order nor events order ([`ViolationKind::Unordered`]).
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error(
    "{later} on stream {later_stream} may run before {earlier} (instruction \
     {earlier_instruction}, stream {earlier_stream}) has finished: {why}; no event orders \
     them (record an event on stream {earlier_stream} after it and wait for it on stream \
     {later_stream} before)"
)]
pub struct Unordered {
    /// The instruction that must finish first, in words (`op "x"`, `the free of "t"`).
    pub earlier: String,
    /// Its stream.
    pub earlier_stream: u32,
    /// Its index in `instructions`.
    pub earlier_instruction: usize,
    /// The instruction that may overtake it.
    pub later: String,
    /// Its stream.
    pub later_stream: u32,
    /// What they share (the tensor and how).
    pub why: String,
}

/// A violation, at an instruction index when it is about one.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{}{kind}", .instruction.map(|i| format!("instruction {i}: ")).unwrap_or_default())]
pub struct Violation {
    /// Index in `instructions`, if the violation is about one.
    pub instruction: Option<usize>,
    /// What is wrong.
    pub kind: ViolationKind,
}

/// Figures of a valid plan's replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replay {
    /// Largest `offset + size` reserved (bytes).
    pub peak: u64,
    /// Largest sum of reserved bytes at one time, workspaces included (bytes).
    pub max_live: u64,
    /// Largest host-pool end (bytes).
    pub host_peak: u64,
    /// Number of exec instructions (recomputes included).
    pub execs: usize,
    /// Number of spill_out instructions.
    pub spills: usize,
}

#[derive(Default, Clone, Copy)]
struct State {
    range: Option<(u64, u64)>,
    valid: bool,
    host: Option<(u64, u64)>,
    /// On an in-place taker whose bytes its donor still reserves: the donor (its bytes are
    /// counted with the donor's in the live total).
    donor: Option<TensorId>,
    /// On a donor while an in-place taker holds part of its bytes: the taker.
    taker: Option<TensorId>,
    /// A graph input that was reserved once already (its data is gone once freed).
    input_used: bool,
}

/// Reserved byte ranges: start → (end, owner); ranges may nest only for in-place pairs.
#[derive(Default)]
struct Ranges {
    map: BTreeMap<(u64, u32), u64>,
    longest: u64,
}

impl Ranges {
    /// Owners of reserved ranges intersecting `[lo, hi)`, lowest start first.
    fn overlapping(&self, lo: u64, hi: u64) -> Vec<u32> {
        let floor = lo.saturating_sub(self.longest);
        self.map
            .range((floor, 0)..(hi, 0))
            .filter(|(_, &end)| end > lo)
            .map(|(&(_, t), _)| t)
            .collect()
    }
    fn insert(&mut self, lo: u64, hi: u64, t: u32) {
        self.longest = self.longest.max(hi - lo);
        self.map.insert((lo, t), hi);
    }
    fn remove(&mut self, lo: u64, t: u32) {
        self.map.remove(&(lo, t));
    }
}

/// Replays `plan` against `graph`; `budget` (bytes), when given, bounds the peak.
///
/// The plan-level checks (format, graph name, weights region) come first; then the walk over
/// the instructions, one handler per instruction kind, stops at the first
/// violation; then the end-of-plan checks (donors, ops run, outputs, stats, budget).
pub fn validate(graph: &Graph, plan: &Plan, budget: Option<u64>) -> Result<Replay, Violation> {
    let global = |kind: ViolationKind| Violation {
        instruction: None,
        kind,
    };
    if plan.format != PLAN_FORMAT {
        return Err(global(ViolationKind::Format(plan.format.clone())));
    }
    if plan.graph != graph.name {
        return Err(global(ViolationKind::GraphName {
            plan: plan.graph.clone(),
            graph: graph.name.clone(),
        }));
    }
    let tensor_ids = graph.tensor_ids();
    check_weights(graph, plan, &tensor_ids).map_err(global)?;
    let mut rp = Replayer::new(graph, tensor_ids);
    for (i, ins) in plan.instructions.iter().enumerate() {
        rp.at = i;
        rp.step(ins).map_err(|kind| Violation {
            instruction: Some(i),
            kind,
        })?;
    }
    let replay = rp.finish(plan, budget).map_err(global)?;
    streams::check(graph, plan).map_err(|(i, kind)| Violation {
        instruction: Some(i),
        kind,
    })?;
    Ok(replay)
}

/// The replay's state while walking the instructions: who owns every reserved arena and
/// host byte, which ops ran, the live total and the figures so far.
struct Replayer<'g> {
    graph: &'g Graph,
    tensor_ids: HashMap<&'g str, TensorId>,
    op_ids: HashMap<&'g str, usize>,
    st: Vec<State>,
    ranges: Ranges,
    host: Ranges,
    ran: Vec<bool>,
    r: Replay,
    live: u64,
    /// (donor, taker, op) of in-place writes whose donor must be freed before the next exec.
    donated: Vec<(TensorId, TensorId, usize)>,
    /// The instruction being replayed.
    at: usize,
    /// Where the arena peak was first reached: `instruction I (what)`, for messages.
    peak_by: String,
    /// Where the host pool's peak was first reached, likewise.
    host_peak_by: String,
}

impl<'g> Replayer<'g> {
    fn new(graph: &'g Graph, tensor_ids: HashMap<&'g str, TensorId>) -> Replayer<'g> {
        Replayer {
            graph,
            tensor_ids,
            op_ids: graph.op_indices(),
            st: vec![State::default(); graph.tensors.len()],
            ranges: Ranges::default(),
            host: Ranges::default(),
            ran: vec![false; graph.ops.len()],
            r: Replay::default(),
            live: 0,
            donated: Vec::new(),
            at: 0,
            peak_by: String::new(),
            host_peak_by: String::new(),
        }
    }

    /// Raises the arena peak to `hi` if higher, noting `what` reached it.
    fn reach(&mut self, hi: u64, what: impl FnOnce() -> String) {
        if hi > self.r.peak {
            self.r.peak = hi;
            self.peak_by = format!("instruction {} ({})", self.at, what());
        }
    }

    fn tname(&self, t: TensorId) -> String {
        self.graph.tensor(t).name.clone()
    }

    /// The arena tensor named `name` (a weight is an error).
    fn lookup(&self, name: &str) -> Result<TensorId, ViolationKind> {
        let t = *self
            .tensor_ids
            .get(name)
            .ok_or_else(|| ViolationKind::Unknown {
                what: "tensor",
                name: name.to_string(),
            })?;
        if self.graph.tensor(t).kind == TensorKind::Weight {
            return Err(ViolationKind::WeightInArena(name.to_string()));
        }
        Ok(t)
    }

    /// Replays one instruction, then updates the peak and the live maximum.
    fn step(&mut self, ins: &Instruction) -> Result<(), ViolationKind> {
        match ins {
            Instruction::Alloc {
                tensor,
                offset,
                inplace_of,
                ..
            } => self.alloc(tensor, *offset, inplace_of.as_deref())?,
            Instruction::SpillIn { tensor, offset, .. } => self.spill_in(tensor, *offset)?,
            Instruction::Free { tensor, .. } => self.free(tensor)?,
            Instruction::SpillOut {
                tensor,
                host_offset,
                ..
            } => self.spill_out(tensor, *host_offset)?,
            Instruction::Exec {
                node,
                workspace_offset,
                ..
            } => self.exec(node, *workspace_offset)?,
            // Stream order is checked apart ([`streams`]): in the listed order, events are
            // no-ops.
            Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. } => {}
        }
        if let Some((_, hi)) = ins_range(ins, &self.st, &self.tensor_ids) {
            self.reach(hi, || match ins {
                Instruction::SpillIn { tensor, .. } => format!("spill_in of {tensor:?}"),
                Instruction::Alloc { tensor, .. } => format!("alloc of {tensor:?}"),
                _ => "a reservation".to_string(),
            });
        }
        self.r.max_live = self.r.max_live.max(self.live);
        Ok(())
    }

    /// `alloc tensor offset [inplace_of donor]`.
    fn alloc(
        &mut self,
        tensor: &str,
        offset: u64,
        inplace_of: Option<&str>,
    ) -> Result<(), ViolationKind> {
        let graph = self.graph;
        let t = self.lookup(tensor)?;
        let donor = match inplace_of {
            Some(d) => Some(self.lookup(d)?),
            None => None,
        };
        if let Some(d) = donor {
            check_inplace(graph, &self.st, t, d, offset)?;
        }
        reserve(graph, &mut self.st, &mut self.ranges, t, offset, donor)?;
        match donor {
            // The taker's bytes are the donor's: counted once, with the donor.
            Some(d) => {
                self.st[t.index()].donor = Some(d);
                self.st[d.index()].taker = Some(t);
            }
            None => self.live = self.live.saturating_add(graph.tensor(t).size),
        }
        if graph.tensor(t).kind == TensorKind::Input {
            // An input holds its data from its first alloc only.
            let s = &mut self.st[t.index()];
            s.valid = !s.input_used;
            s.input_used = true;
        }
        Ok(())
    }

    /// `spill_in tensor offset`: back from its host range.
    fn spill_in(&mut self, tensor: &str, offset: u64) -> Result<(), ViolationKind> {
        let t = self.lookup(tensor)?;
        let Some((hlo, _)) = self.st[t.index()].host.take() else {
            return Err(ViolationKind::Host(format!(
                "spill_in of {tensor:?}, which is not on the host"
            )));
        };
        self.host.remove(hlo, t.0);
        reserve(self.graph, &mut self.st, &mut self.ranges, t, offset, None)?;
        self.live = self.live.saturating_add(self.graph.tensor(t).size);
        self.st[t.index()].valid = true;
        Ok(())
    }

    /// `free tensor`.
    fn free(&mut self, tensor: &str) -> Result<(), ViolationKind> {
        let t = self.lookup(tensor)?;
        if self.st[t.index()].range.is_none() {
            return Err(ViolationKind::NotReserved(tensor.to_string()));
        }
        release(
            self.graph,
            &mut self.st,
            &mut self.ranges,
            &mut self.live,
            t,
        );
        Ok(())
    }

    /// `spill_out tensor host_offset`: to the host pool, its arena range released.
    fn spill_out(&mut self, tensor: &str, host_offset: u64) -> Result<(), ViolationKind> {
        let graph = self.graph;
        let t = self.lookup(tensor)?;
        let s = self.st[t.index()];
        if s.range.is_none() || !s.valid {
            return Err(ViolationKind::Host(format!(
                "spill_out of {tensor:?}, which is not reserved and valid"
            )));
        }
        if let Some(x) = s.taker {
            return Err(ViolationKind::BadInplace {
                tensor: self.tname(x),
                donor: tensor.to_string(),
                reason: "the donor is spilled while its in-place taker is reserved \
                         in its bytes"
                    .into(),
            });
        }
        let hhi = host_offset
            .checked_add(graph.tensor(t).size)
            .ok_or_else(|| ViolationKind::Overflow(format!("host offset of {tensor:?}")))?;
        if let Some(&o) = self.host.overlapping(host_offset, hhi).first() {
            return Err(ViolationKind::Host(format!(
                "host range of {tensor:?} overlaps {:?}",
                graph.tensors[o as usize].name
            )));
        }
        // A tensor spilled again (re-allocated, not spilled in) gives back its
        // earlier host range.
        if let Some((old, _)) = s.host {
            self.host.remove(old, t.0);
        }
        self.host.insert(host_offset, hhi, t.0);
        if hhi > self.r.host_peak {
            self.r.host_peak = hhi;
            self.host_peak_by = format!("instruction {} (spill_out of {tensor:?})", self.at);
        }
        self.r.spills += 1;
        release(graph, &mut self.st, &mut self.ranges, &mut self.live, t);
        self.st[t.index()].host = Some((host_offset, hhi));
        Ok(())
    }

    /// `exec node [workspace_offset]`: donors of earlier in-place writes are gone, operands
    /// are reserved (inputs valid), the workspace fits; outputs become valid.
    fn exec(&mut self, node: &str, workspace_offset: Option<u64>) -> Result<(), ViolationKind> {
        let graph = self.graph;
        let k = *self
            .op_ids
            .get(node)
            .ok_or_else(|| ViolationKind::Unknown {
                what: "op",
                name: node.to_string(),
            })?;
        let op = &graph.ops[k];
        // A second exec is a recompute: only for ops whose second run writes the same bytes.
        if self.ran[k] && !crate::ops::may_recompute(op) {
            return Err(ViolationKind::ForbiddenRecompute {
                op: op.name.clone(),
                op_type: op.op_type.clone(),
            });
        }
        // A donor dies at its in-place op: freed before the next exec.
        for (d, t, p) in std::mem::take(&mut self.donated) {
            if self.st[d.index()].range.is_some() {
                return Err(ViolationKind::BadInplace {
                    tensor: self.tname(t),
                    donor: self.tname(d),
                    reason: format!(
                        "the donor is still reserved when op {:?} runs; a donor must \
                         die at the in-place op {:?} (freed before the next exec)",
                        op.name, graph.ops[p].name
                    ),
                });
            }
        }
        for &t in &op.inputs {
            if graph.tensor(t).kind == TensorKind::Weight {
                continue;
            }
            let s = self.st[t.index()];
            if s.range.is_none() {
                return Err(ViolationKind::OperandNotReserved {
                    op: op.name.clone(),
                    tensor: self.tname(t),
                });
            }
            if !s.valid {
                return Err(ViolationKind::InputNotValid {
                    op: op.name.clone(),
                    tensor: self.tname(t),
                });
            }
        }
        for &t in &op.outputs {
            if self.st[t.index()].range.is_none() {
                return Err(ViolationKind::OperandNotReserved {
                    op: op.name.clone(),
                    tensor: self.tname(t),
                });
            }
        }
        let workspace = self.workspace(k, workspace_offset)?;
        self.r.max_live = self.r.max_live.max(self.live.saturating_add(workspace));
        // No exec writes bytes that hold another tensor's data: outputs and workspaces
        // overlap no reservation except an in-place donor, whose bytes become t's here,
        // and a donor is freed before the next exec, so nothing can write it later.
        for &t in &op.outputs {
            if let Some(d) = self.st[t.index()].donor {
                if self.st[d.index()].valid {
                    // The in-place write: the donor's bytes now hold t.
                    self.st[d.index()].valid = false;
                    self.donated.push((d, t, k));
                }
            }
        }
        for &t in &op.outputs {
            self.st[t.index()].valid = true;
        }
        self.ran[k] = true;
        self.r.execs += 1;
        Ok(())
    }

    /// Checks op `k`'s workspace at `workspace_offset` (given exactly when the op has one,
    /// aligned, overlapping no reservation) and counts it in the peak; returns its bytes
    /// (0 without one).
    fn workspace(&mut self, k: usize, workspace_offset: Option<u64>) -> Result<u64, ViolationKind> {
        let graph = self.graph;
        let op = &graph.ops[k];
        match (op.workspace, workspace_offset) {
            (0, None) => Ok(0),
            (0, Some(_)) => Err(ViolationKind::Workspace {
                op: op.name.clone(),
                message: "workspace_offset given but the op has no workspace".into(),
            }),
            (_, None) => Err(ViolationKind::Workspace {
                op: op.name.clone(),
                message: format!(
                    "needs workspace_offset for its {} workspace bytes",
                    op.workspace
                ),
            }),
            (w, Some(off)) => {
                if off % graph.alignment != 0 {
                    return Err(ViolationKind::Misaligned {
                        what: format!("workspace of {:?}", op.name),
                        offset: off,
                        alignment: graph.alignment,
                    });
                }
                let hi = off.checked_add(w).ok_or_else(|| {
                    ViolationKind::Overflow(format!("workspace of {:?}", op.name))
                })?;
                if let Some(&o) = self.ranges.overlapping(off, hi).first() {
                    return Err(ViolationKind::Overlap {
                        what: format!("workspace of {:?}", op.name),
                        lo: off,
                        hi,
                        other: graph.tensors[o as usize].name.clone(),
                    });
                }
                self.reach(hi, || format!("workspace of {:?}", op.name));
                Ok(w)
            }
        }
    }

    /// The end-of-plan checks: every donor freed, every op run, every output reserved and
    /// valid, the plan's figures equal to the replay's, the peak within `budget`.
    fn finish(self, plan: &Plan, budget: Option<u64>) -> Result<Replay, ViolationKind> {
        let graph = self.graph;
        let (st, r) = (&self.st, self.r);
        let (peak_by, host_peak_by) = (&self.peak_by, &self.host_peak_by);
        if let Some(&(d, t, p)) = self
            .donated
            .iter()
            .find(|(d, ..)| st[d.index()].range.is_some())
        {
            return Err(ViolationKind::BadInplace {
                tensor: self.tname(t),
                donor: self.tname(d),
                reason: format!(
                    "the donor is still reserved at the end; a donor must die at the in-place op {:?}",
                    graph.ops[p].name
                ),
            });
        }
        if let Some(k) = self.ran.iter().position(|&x| !x) {
            return Err(ViolationKind::NotExecuted(graph.ops[k].name.clone()));
        }
        for (i, t) in graph.tensors.iter().enumerate() {
            if t.kind == TensorKind::Output && !(st[i].range.is_some() && st[i].valid) {
                return Err(ViolationKind::OutputMissing(t.name.clone()));
            }
        }
        if plan.arena_bytes < r.peak {
            return Err(ViolationKind::Stats(format!(
                "arena_bytes {} is below the replayed peak {}, reached at {peak_by}",
                plan.arena_bytes, r.peak
            )));
        }
        if plan.stats.peak_bytes != r.peak {
            return Err(ViolationKind::Stats(format!(
                "stats.peak_bytes {} differs from the replayed peak {}{}",
                plan.stats.peak_bytes,
                r.peak,
                if r.peak > 0 {
                    format!(", reached at {peak_by}")
                } else {
                    String::new()
                }
            )));
        }
        if r.host_peak > plan.host_bytes {
            return Err(ViolationKind::Stats(format!(
                "host_bytes {} is below the host pool's peak {}, reached at {host_peak_by}",
                plan.host_bytes, r.host_peak
            )));
        }
        if let Some(budget) = budget {
            if r.peak > budget {
                return Err(ViolationKind::OverBudget {
                    peak: r.peak,
                    budget,
                });
            }
        }
        Ok(r)
    }
}

/// The range an alloc / spill_in just reserved (for the peak).
fn ins_range(ins: &Instruction, st: &[State], ids: &HashMap<&str, TensorId>) -> Option<(u64, u64)> {
    match ins {
        Instruction::Alloc { tensor, .. } | Instruction::SpillIn { tensor, .. } => {
            ids.get(tensor.as_str()).and_then(|t| st[t.index()].range)
        }
        _ => None,
    }
}

/// Releases `t`'s arena range (free or spill_out). An in-place taker still inside it becomes
/// an ordinary reservation (counted on its own from now on); a donor still holding `t` forgets
/// it.
fn release(graph: &Graph, st: &mut [State], ranges: &mut Ranges, live: &mut u64, t: TensorId) {
    let s = st[t.index()];
    if let Some((lo, _)) = s.range {
        ranges.remove(lo, t.0);
    }
    match s.donor {
        Some(d) => st[d.index()].taker = None,
        None => *live = live.saturating_sub(graph.tensor(t).size),
    }
    if let Some(x) = s.taker {
        st[x.index()].donor = None;
        *live = live.saturating_add(graph.tensor(x).size);
    }
    let me = &mut st[t.index()];
    me.range = None;
    me.valid = false;
    me.donor = None;
    me.taker = None;
}

/// Reserves `t` at `offset`: alignment, overflow, no double reservation, no overlap except
/// with `donor` (an in-place donor, already checked).
fn reserve(
    graph: &Graph,
    st: &mut [State],
    ranges: &mut Ranges,
    t: TensorId,
    offset: u64,
    donor: Option<TensorId>,
) -> Result<(), ViolationKind> {
    let tensor = graph.tensor(t);
    if st[t.index()].range.is_some() {
        return Err(ViolationKind::DoubleAlloc(tensor.name.clone()));
    }
    if offset % tensor.alignment != 0 {
        return Err(ViolationKind::Misaligned {
            what: format!("tensor {:?}", tensor.name),
            offset,
            alignment: tensor.alignment,
        });
    }
    let hi = offset
        .checked_add(tensor.size)
        .ok_or_else(|| ViolationKind::Overflow(format!("offset + size of {:?}", tensor.name)))?;
    if let Some(&o) = ranges
        .overlapping(offset, hi)
        .iter()
        .find(|&&o| Some(TensorId(o)) != donor)
    {
        return Err(ViolationKind::Overlap {
            what: format!("tensor {:?}", tensor.name),
            lo: offset,
            hi,
            other: graph.tensors[o as usize].name.clone(),
        });
    }
    ranges.insert(offset, hi, t.0);
    st[t.index()].range = Some((offset, hi));
    Ok(())
}

/// An in-place alloc of `t` into `d` at `offset` is allowed when t's producer declares the
/// pair, d is reserved and valid (not yet donated), and t fits inside d's range.
fn check_inplace(
    graph: &Graph,
    st: &[State],
    t: TensorId,
    d: TensorId,
    offset: u64,
) -> Result<(), ViolationKind> {
    let bad = |reason: String| ViolationKind::BadInplace {
        tensor: graph.tensor(t).name.clone(),
        donor: graph.tensor(d).name.clone(),
        reason,
    };
    let Some(p) = graph.producer[t.index()] else {
        return Err(bad("it has no producer".into()));
    };
    let op = &graph.ops[p.index()];
    let declared = op
        .inplace
        .iter()
        .any(|&(o, i)| op.outputs.get(o) == Some(&t) && op.inputs.get(i) == Some(&d));
    if !declared {
        return Err(bad(format!(
            "op {:?} declares no such inplace pair",
            op.name
        )));
    }
    let s = st[d.index()];
    let Some((lo, hi)) = s.range.filter(|_| s.valid) else {
        return Err(bad("the donor is not reserved and valid".into()));
    };
    if let Some(x) = s.taker {
        return Err(bad(format!(
            "the donor already gives its bytes to {:?}",
            graph.tensor(x).name
        )));
    }
    if s.donor.is_some() {
        return Err(bad(
            "the donor's own bytes are still shared with its donor".into()
        ));
    }
    if offset != lo {
        return Err(bad(format!(
            "offset {offset} is not the donor's offset {lo} (in place means the same address)"
        )));
    }
    let end = offset.saturating_add(graph.tensor(t).size);
    if end > hi {
        return Err(bad(format!(
            "[{offset}, {end}) is not inside the donor's [{lo}, {hi})"
        )));
    }
    Ok(())
}

fn check_weights(
    graph: &Graph,
    plan: &Plan,
    ids: &HashMap<&str, TensorId>,
) -> Result<(), ViolationKind> {
    let mut placed = vec![None; graph.tensors.len()];
    let mut spans = Vec::new();
    for (i, w) in plan.weights.iter().enumerate() {
        let t = *ids.get(w.tensor.as_str()).ok_or_else(|| {
            ViolationKind::Weights(format!(
                "weights[{i}] names {:?}, which is no tensor of the graph",
                w.tensor
            ))
        })?;
        let tensor = graph.tensor(t);
        if tensor.kind != TensorKind::Weight {
            return Err(ViolationKind::Weights(format!(
                "{:?} is not a weight",
                w.tensor
            )));
        }
        if w.offset % tensor.alignment != 0 {
            return Err(ViolationKind::Misaligned {
                what: format!("weight {:?}", w.tensor),
                offset: w.offset,
                alignment: tensor.alignment,
            });
        }
        let end = w.offset.checked_add(tensor.size).ok_or_else(|| {
            ViolationKind::Overflow(format!("weight {:?} offset + size", w.tensor))
        })?;
        if end > plan.weights_bytes {
            return Err(ViolationKind::Weights(format!(
                "weight {:?} ends at {end}, past weights_bytes {}",
                w.tensor, plan.weights_bytes
            )));
        }
        if placed[t.index()].replace(w.offset).is_some() {
            return Err(ViolationKind::Weights(format!(
                "weight {:?} is placed twice",
                w.tensor
            )));
        }
        spans.push((w.offset, end, t));
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(ViolationKind::Weights(format!(
                "weights {:?} and {:?} overlap",
                graph.tensor(pair[0].2).name,
                graph.tensor(pair[1].2).name
            )));
        }
    }
    for op in &graph.ops {
        for &t in &op.inputs {
            if graph.tensor(t).kind == TensorKind::Weight && placed[t.index()].is_none() {
                return Err(ViolationKind::Weights(format!(
                    "weight {:?} read by op {:?} is not placed",
                    graph.tensor(t).name,
                    op.name
                )));
            }
        }
    }
    Ok(())
}
