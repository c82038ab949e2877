//! Parallel plans: a single-stream plan spread over K streams with the events that keep its
//! memory safe (README "Parallel plans", seed 000 §2.1, seed 001 §3.2).
//!
//! Idea, in four steps:
//! 1. **Streams.** List scheduling over the single-stream plan's op order with the cost
//!    model ([`DeviceProfile::op_us`], one queue per stream): each op goes to the stream
//!    where it can start first (ties: the stream of its latest input, then the lowest id);
//!    an op's `stream` field pins it.
//! 2. **Conflicts under the partial order.** Happens-before is stream order plus the events
//!    that data dependencies need. Two buffers may share bytes only if every use of one
//!    happens before the other's first write; the rest conflict. This relation, not the
//!    `[start, end)` steps of one list, is what the placement must respect.
//! 3. **Candidates.** (a) the single-stream placement kept, with a *reuse* event wherever
//!    bytes change hands between streams (the same peak; branches serialise only where they
//!    reuse each other's bytes); (b) a placement of the conflict graph
//!    ([`memplan_solver::placement::conflict`]: greedy placers, then the HiGHS disjunctive
//!    model on the conflict pairs for relations of up to 1,500 pairs, 500 nodes, and the
//!    exact search for up to 64 buffers, 20,000 nodes), which needs no reuse
//!    event (most overlap, more memory). The candidate with the least modelled makespan whose peak is within the
//!    cap (a budget, or `stream_peak_ratio` × the single-stream peak) wins; (a) always fits.
//! 4. **Emission.** Every free moves to just before the next reservation of its bytes, onto
//!    the stream that writes them (stream 0 at the end), as `cudaFreeAsync` on the
//!    consumer's stream. Then every node waits for what it must follow (the writer of each
//!    input; the release of the bytes it writes; every user of a tensor before its free;
//!    every other user of an in-place donor before the op writing into it), skipping what
//!    stream order and earlier events already imply; an event is recorded right after each
//!    node some other stream waits for.
//!
//! Cost: `O(I · K)` for emission over `I` instructions and `K` streams, `O(B² · K)` for the
//! conflict relation of `B` buffers, plus the conflict placers. Deterministic.
//!
//! Scope: plans without tiers. Recomputes are ordinary execs (a recomputed tensor is a new
//! buffer). Spill copies run on a copy stream of their own (stream K): a `spill_out` follows
//! the tensor's writer and users, a `spill_in` its `spill_out` and the release of the bytes
//! it fills; a tensor back from the host is a new buffer.

use crate::cost::DeviceProfile;
use crate::graph::{Graph, TensorKind};
use crate::plan::{Instruction, Plan, StreamCandidate, StreamStat};
use memplan_solver::placement::conflict::{self, ConflictProblem};
use memplan_solver::{CancelToken, Limits, Placement};
use std::collections::HashMap;
use thiserror::Error;

/// How to spread a plan over streams.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamOptions {
    /// Streams to use (≥ 1; ops that name a larger stream raise it).
    pub streams: u32,
    /// The most arena bytes the parallel plan may take; the single-stream peak when lower.
    pub peak_cap: u64,
    /// The pipeline's stop flag (its wall-clock cap, a user's cancel): checked while the
    /// conflict relation is built (`O(n²)` pairs), before each candidate and inside the
    /// conflict placers; once raised, the best of the candidates built so far wins (the serial
    /// placement with reuse events is always built).
    pub stop: Option<CancelToken>,
}

/// Why a plan could not be spread over streams.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum StreamError {
    /// The plan spills, recomputes or uses tiers (not modelled on several streams).
    #[error("parallel plans: {0}")]
    Unsupported(String),
    /// The plan does not match the graph.
    #[error("parallel plans: the plan does not match the graph: {0}")]
    Mismatch(String),
}

/// One buffer of the serial plan: tensors sharing bytes in place (one `mem_id`), or a
/// workspace.
#[derive(Debug, Clone)]
struct Buf {
    size: u64,
    alignment: u64,
    /// Exec positions (in exec order) that touch it.
    touchers: Vec<usize>,
    /// Exec position of its first write.
    first: usize,
    /// Whether it holds a graph input / output.
    input: bool,
    output: bool,
}

/// What the serial plan says, resolved.
struct Serial<'g> {
    graph: &'g Graph,
    plan: &'g Plan,
    /// Op index of each exec, in order.
    execs: Vec<usize>,
    /// Buffer of each alloc instruction (by instruction index) and of each exec's
    /// workspace (by exec position).
    alloc_buf: Vec<Option<usize>>,
    ws_buf: Vec<Option<usize>>,
    bufs: Vec<Buf>,
    /// Serial offset of each buffer.
    offsets: Vec<u64>,
    /// Whether the plan spills (its copies then run on a copy stream of their own).
    spills: bool,
}

fn resolve<'g>(graph: &'g Graph, plan: &'g Plan) -> Result<Serial<'g>, StreamError> {
    if !plan.stats.tiers.is_empty() {
        return Err(StreamError::Unsupported(
            "a tiered plan keeps regions of its own; plan without tiers".into(),
        ));
    }
    let ids = graph.tensor_ids();
    let ops = graph.op_indices();
    let mismatch = |m: String| StreamError::Mismatch(m);
    let mut execs = Vec::new();
    let mut spills = false;
    // The current buffer of each tensor (a recomputed tensor gets a new one).
    let mut tensor_buf: Vec<Option<usize>> = vec![None; graph.tensors.len()];
    let mut alloc_buf: Vec<Option<usize>> = vec![None; plan.instructions.len()];
    let mut ws_buf = Vec::new();
    let mut bufs: Vec<Buf> = Vec::new();
    let mut offsets = Vec::new();
    for (i, ins) in plan.instructions.iter().enumerate() {
        match ins {
            Instruction::Alloc {
                tensor,
                offset,
                inplace_of,
                ..
            } => {
                let t = *ids
                    .get(tensor.as_str())
                    .ok_or_else(|| mismatch(format!("unknown tensor {tensor:?}")))?;
                let b = match inplace_of {
                    Some(d) => ids
                        .get(d.as_str())
                        .and_then(|d| tensor_buf[d.index()])
                        .ok_or_else(|| mismatch(format!("in-place donor {d:?} not allocated")))?,
                    None => {
                        bufs.push(Buf {
                            size: graph.tensor(t).size,
                            alignment: graph.tensor(t).alignment,
                            touchers: Vec::new(),
                            first: usize::MAX,
                            input: false,
                            output: false,
                        });
                        offsets.push(*offset);
                        bufs.len() - 1
                    }
                };
                tensor_buf[t.index()] = Some(b);
                alloc_buf[i] = Some(b);
                match graph.tensor(t).kind {
                    TensorKind::Input => bufs[b].input = true,
                    TensorKind::Output => bufs[b].output = true,
                    _ => {}
                }
            }
            Instruction::Exec {
                node,
                workspace_offset,
                ..
            } => {
                let k = *ops
                    .get(node.as_str())
                    .ok_or_else(|| mismatch(format!("unknown op {node:?}")))?;
                let e = execs.len();
                execs.push(k);
                let op = &graph.ops[k];
                for &t in op.inputs.iter().chain(&op.outputs) {
                    if let Some(b) = tensor_buf[t.index()] {
                        if bufs[b].touchers.last() != Some(&e) {
                            bufs[b].touchers.push(e);
                        }
                    }
                }
                for &t in &op.outputs {
                    if let Some(b) = tensor_buf[t.index()] {
                        bufs[b].first = bufs[b].first.min(e);
                    }
                }
                ws_buf.push(workspace_offset.map(|w| {
                    bufs.push(Buf {
                        size: op.workspace,
                        alignment: graph.alignment,
                        touchers: vec![e],
                        first: e,
                        input: false,
                        output: false,
                    });
                    offsets.push(w);
                    bufs.len() - 1
                }));
            }
            Instruction::SpillOut { .. } => spills = true,
            Instruction::SpillIn { tensor, offset, .. } => {
                // The tensor comes back in fresh bytes: a new buffer, written by the copy.
                spills = true;
                let t = *ids
                    .get(tensor.as_str())
                    .ok_or_else(|| mismatch(format!("unknown tensor {tensor:?}")))?;
                bufs.push(Buf {
                    size: graph.tensor(t).size,
                    alignment: graph.tensor(t).alignment,
                    touchers: Vec::new(),
                    first: execs.len(),
                    input: false,
                    output: graph.tensor(t).kind == TensorKind::Output,
                });
                offsets.push(*offset);
                tensor_buf[t.index()] = Some(bufs.len() - 1);
                alloc_buf[i] = Some(bufs.len() - 1);
            }
            Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. } => {
                return Err(StreamError::Unsupported(
                    "the plan already runs on several streams".into(),
                ));
            }
            Instruction::Free { .. } => {}
        }
    }
    // Graph inputs are written by the host before everything.
    for buf in &mut bufs {
        if buf.first == usize::MAX {
            buf.first = 0;
        }
    }
    Ok(Serial {
        graph,
        plan,
        execs,
        alloc_buf,
        ws_buf,
        spills,
        bufs,
        offsets,
    })
}

/// Step 1: a stream per exec (list scheduling, module doc).
fn assign(s: &Serial<'_>, profile: &DeviceProfile, k: u32) -> Vec<u32> {
    let g = s.graph;
    let mut finish: Vec<f64> = vec![0.0; g.ops.len()];
    let mut avail = vec![0f64; k as usize];
    let mut out = Vec::with_capacity(s.execs.len());
    for &op in &s.execs {
        let o = &g.ops[op];
        let (mut ready, mut last) = (0f64, None);
        for &t in &o.inputs {
            if let Some(p) = g.producer[t.index()] {
                let f = finish[p.index()];
                if last.is_none() || f > ready {
                    last = Some(p.index());
                }
                ready = ready.max(f);
            }
        }
        let pred_stream = last.and_then(|p| s.execs.iter().position(|&x| x == p).map(|e| out[e]));
        let st = match o.stream {
            Some(p) => p.min(k - 1),
            None => (0..k)
                .min_by(|&a, &b| {
                    let sa = ready.max(avail[a as usize]);
                    let sb = ready.max(avail[b as usize]);
                    sa.total_cmp(&sb)
                        .then((Some(b) == pred_stream).cmp(&(Some(a) == pred_stream)))
                        .then(a.cmp(&b))
                })
                .unwrap_or(0),
        };
        let start = ready.max(avail[st as usize]);
        let end = start + profile.op_us(g, o).max(0.0);
        avail[st as usize] = end;
        finish[op] = end;
        out.push(st);
    }
    out
}

/// A memory node of the emission: its stream and 1-based position on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    stream: u32,
    seq: u32,
}

/// Vector clocks of streams and nodes (the planner's own; the validator has its own).
struct Clocks {
    clock: Vec<Vec<u32>>,
}

impl Clocks {
    fn new(k: u32) -> Clocks {
        Clocks {
            clock: vec![vec![0; k as usize]; k as usize],
        }
    }
    fn before(&self, a: Node, stream: u32) -> bool {
        self.clock[stream as usize][a.stream as usize] >= a.seq
    }
    fn tick(&mut self, stream: u32) -> (Node, Vec<u32>) {
        let c = &mut self.clock[stream as usize];
        c[stream as usize] += 1;
        (
            Node {
                stream,
                seq: c[stream as usize],
            },
            c.clone(),
        )
    }
    fn merge(&mut self, stream: u32, snap: &[u32]) {
        for (c, &e) in self.clock[stream as usize].iter_mut().zip(snap) {
            *c = (*c).max(e);
        }
    }
}

/// One step of the emission before events: an instruction, its stream, and the nodes (by
/// index in the step list) it must follow.
struct Step {
    ins: Instruction,
    stream: u32,
    /// Indices of earlier memory steps it must follow.
    after: Vec<usize>,
    /// Whether it is a memory node (exec or free).
    node: bool,
}

/// Step 4: the instruction list of `s` with buffers at `offsets` and execs on `streams`,
/// frees moved and events added (module doc). Returns the plan and its event count.
fn emit(s: &Serial<'_>, streams: &[u32], offsets: &[u64], k: u32) -> (Vec<Instruction>, usize) {
    // Spill copies run on a stream of their own, after the compute streams.
    let copy = k;
    let k = if s.spills { k + 1 } else { k };
    let g = s.graph;
    let ids = g.tensor_ids();
    let ops = g.op_indices();
    let span = |b: usize| (offsets[b], offsets[b] + s.bufs[b].size);
    // The serial list with new offsets; execs numbered.
    let mut list: Vec<(Instruction, Option<usize>)> = Vec::new(); // (ins, exec position)
    let mut e = 0usize;
    for (i, ins) in s.plan.instructions.iter().enumerate() {
        let mut ins = ins.clone();
        let mut pos = None;
        match &mut ins {
            Instruction::SpillOut { stream, .. } => *stream = Some(copy),
            Instruction::SpillIn { stream, offset, .. } => {
                *stream = Some(copy);
                if let Some(b) = s.alloc_buf[i] {
                    *offset = offsets[b];
                }
            }
            Instruction::Alloc { offset, .. } => {
                if let Some(b) = s.alloc_buf[i] {
                    // In-place takers keep their offset relative to the donor's buffer.
                    let base = s.offsets[b];
                    *offset = offsets[b] + (*offset - base);
                }
            }
            Instruction::Exec {
                workspace_offset,
                stream,
                ..
            } => {
                if let Some(b) = s.ws_buf[e] {
                    *workspace_offset = Some(offsets[b]);
                }
                *stream = (streams[e] != 0).then_some(streams[e]);
                pos = Some(e);
                e += 1;
            }
            _ => {}
        }
        list.push((ins, pos));
    }
    // Frees of non-donors move to just before the next reservation of their bytes.
    let donors: std::collections::HashSet<String> = s
        .plan
        .instructions
        .iter()
        .filter_map(|i| match i {
            Instruction::Alloc {
                inplace_of: Some(d),
                ..
            } => Some(d.clone()),
            _ => None,
        })
        .collect();
    // Reservations after each index: (index, range, writer stream).
    let mut reservations: Vec<(usize, (u64, u64), u32)> = Vec::new();
    {
        // The stream of the exec that first writes each alloc's tensor.
        let mut writer_stream: Vec<u32> = vec![0; list.len()];
        let mut waiting: HashMap<&str, usize> = HashMap::new();
        for (i, (ins, pos)) in list.iter().enumerate() {
            match ins {
                Instruction::Alloc { tensor, .. } => {
                    waiting.insert(tensor.as_str(), i);
                }
                Instruction::Exec { node, .. } => {
                    if let (Some(&op), Some(p)) = (ops.get(node.as_str()), pos) {
                        for &t in &g.ops[op].outputs {
                            if let Some(a) = waiting.remove(g.tensor(t).name.as_str()) {
                                writer_stream[a] = streams[*p];
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for (i, (ins, pos)) in list.iter().enumerate() {
            match ins {
                Instruction::Alloc {
                    inplace_of: None, ..
                } => {
                    if let Some(b) = s.alloc_buf[i] {
                        reservations.push((i, span(b), writer_stream[i]));
                    }
                }
                Instruction::SpillIn { .. } => {
                    if let Some(b) = s.alloc_buf[i] {
                        reservations.push((i, span(b), copy));
                    }
                }
                Instruction::Exec { .. } => {
                    if let Some(b) = pos.and_then(|p| s.ws_buf[p]) {
                        reservations.push((i, span(b), streams[pos.unwrap_or(0)]));
                    }
                }
                _ => {}
            }
        }
    }
    // The free of each tensor: where it goes and on which stream.
    let mut moved: Vec<(usize, Instruction, u32)> = Vec::new(); // (insert before index)
    let mut keep = vec![true; list.len()];
    // The range each tensor holds now (its latest alloc).
    let mut held: HashMap<&str, (u64, u64)> = HashMap::new();
    for (i, (ins, _)) in list.iter().enumerate() {
        if let Instruction::Alloc { tensor, offset, .. }
        | Instruction::SpillIn { tensor, offset, .. } = ins
        {
            let size = ids.get(tensor.as_str()).map_or(0, |&t| g.tensor(t).size);
            held.insert(tensor.as_str(), (*offset, offset + size));
        }
        let Instruction::Free { tensor, .. } = ins else {
            continue;
        };
        let Some(&(lo, hi)) = held.get(tensor.as_str()) else {
            continue;
        };
        if donors.contains(tensor) {
            // A donor dies at its in-place op: freed right there, on that op's stream.
            let st = list[..i]
                .iter()
                .rev()
                .find_map(|(x, p)| match x {
                    Instruction::Exec { .. } => p.map(|p| streams[p]),
                    _ => None,
                })
                .unwrap_or(0);
            moved.push((i, ins.clone(), st));
        } else {
            // Before the next reservation of its bytes, and before the tensor's own next
            // alloc (a recompute allocates it again).
            let again = list[i + 1..].iter().position(
                |(x, _)| matches!(x, Instruction::Alloc { tensor: n, .. } if n == tensor),
            );
            let next = reservations.iter().find(|&&(j, (a, z), _)| {
                j > i && ((a < hi && lo < z) || again.is_some_and(|r| j >= i + 1 + r))
            });
            let next = match (next, again) {
                (Some(&(j, _, st)), Some(r)) if j > i + 1 + r => Some((i + 1 + r, st)),
                (Some(&(j, _, st)), _) => Some((j, st)),
                (None, Some(r)) => Some((i + 1 + r, 0)),
                (None, None) => None,
            };
            match next {
                Some((j, st)) => moved.push((j, ins.clone(), st)),
                None => moved.push((list.len(), ins.clone(), 0)),
            }
        }
        keep[i] = false;
    }
    moved.sort_by_key(|m| m.0);
    let mut ordered: Vec<(Instruction, Option<usize>, Option<u32>)> = Vec::new();
    let mut m = 0;
    for (i, (ins, pos)) in list.iter().enumerate() {
        while m < moved.len() && moved[m].0 == i {
            ordered.push((moved[m].1.clone(), None, Some(moved[m].2)));
            m += 1;
        }
        if keep[i] {
            ordered.push((ins.clone(), *pos, None));
        }
    }
    for mv in &moved[m..] {
        ordered.push((mv.1.clone(), None, Some(mv.2)));
    }
    // Requirements per step.
    let mut steps: Vec<Step> = Vec::with_capacity(ordered.len());
    let mut writer: HashMap<usize, usize> = HashMap::new(); // tensor index -> step
    let mut touched: HashMap<usize, Vec<usize>> = HashMap::new(); // tensor index -> steps
    let mut releases: Vec<((u64, u64), usize)> = Vec::new(); // bytes, step
    let mut pending: HashMap<usize, Vec<usize>> = HashMap::new(); // tensor -> release steps
    let mut donor_of: HashMap<usize, usize> = HashMap::new();
    let mut range_of: HashMap<usize, (u64, u64)> = HashMap::new();
    let mut spilled: HashMap<usize, usize> = HashMap::new(); // tensor -> its spill_out step
    let overlapping = |rel: &[((u64, u64), usize)], lo: u64, hi: u64| -> Vec<usize> {
        rel.iter()
            .filter(|((a, z), _)| *a < hi && lo < *z)
            .map(|&(_, st)| st)
            .collect()
    };
    for (ins, pos, fstream) in ordered {
        let idx = steps.len();
        match &ins {
            Instruction::Alloc {
                tensor,
                offset,
                inplace_of,
                ..
            } => {
                if let Some(&t) = ids.get(tensor.as_str()) {
                    let hi = offset + g.tensor(t).size;
                    match inplace_of.as_deref().and_then(|d| ids.get(d)) {
                        Some(d) => {
                            donor_of.insert(t.index(), d.index());
                        }
                        None => {
                            pending.insert(t.index(), overlapping(&releases, *offset, hi));
                        }
                    }
                    touched.insert(t.index(), Vec::new());
                    range_of.insert(t.index(), (*offset, hi));
                }
                steps.push(Step {
                    ins,
                    stream: 0,
                    after: Vec::new(),
                    node: false,
                });
            }
            Instruction::Exec {
                node,
                workspace_offset,
                ..
            } => {
                let p = pos.unwrap_or(0);
                let op = &g.ops[*ops.get(node.as_str()).unwrap_or(&0)];
                let mut after = Vec::new();
                for &t in &op.inputs {
                    if let Some(&w) = writer.get(&t.index()) {
                        after.push(w);
                    }
                }
                for &t in &op.outputs {
                    after.extend(pending.remove(&t.index()).unwrap_or_default());
                    if let Some(d) = donor_of.get(&t.index()) {
                        after.extend(touched.get(d).cloned().unwrap_or_default());
                    }
                }
                if let Some(w) = workspace_offset {
                    let hi = w + op.workspace;
                    after.extend(overlapping(&releases, *w, hi));
                    cut(&mut releases, *w, hi);
                    releases.push(((*w, hi), idx));
                }
                for &t in op.inputs.iter().chain(&op.outputs) {
                    if g.tensor(t).kind != TensorKind::Weight {
                        touched.entry(t.index()).or_default().push(idx);
                    }
                }
                for &t in &op.outputs {
                    writer.insert(t.index(), idx);
                    // Its bytes are written now: later writers follow this op instead.
                    if let Some(&(lo, hi)) = range_of.get(&t.index()) {
                        if !donor_of.contains_key(&t.index()) {
                            cut(&mut releases, lo, hi);
                        }
                    }
                }
                steps.push(Step {
                    ins,
                    stream: streams[p],
                    after,
                    node: true,
                });
            }
            Instruction::Free { tensor, .. } => {
                let st = fstream.unwrap_or(0);
                let mut after = Vec::new();
                let mut ins = ins.clone();
                if let Instruction::Free { stream, .. } = &mut ins {
                    *stream = (st != 0).then_some(st);
                }
                if let Some(&t) = ids.get(tensor.as_str()) {
                    after.extend(touched.remove(&t.index()).unwrap_or_default());
                    // The tensor's range (bytes an in-place taker still holds are written
                    // by the taker's producer, which follows the donor's users anyway).
                    if let Some(&r) = range_of.get(&t.index()) {
                        releases.push((r, idx));
                    }
                }
                steps.push(Step {
                    ins,
                    stream: st,
                    after,
                    node: true,
                });
            }
            Instruction::SpillOut { tensor, .. } => {
                // After the writer (it copies the data) and every use (it releases the bytes).
                let mut after = Vec::new();
                if let Some(&t) = ids.get(tensor.as_str()) {
                    after.extend(writer.get(&t.index()).copied());
                    after.extend(touched.remove(&t.index()).unwrap_or_default());
                    if let Some(&r) = range_of.get(&t.index()) {
                        releases.push((r, idx));
                    }
                    spilled.insert(t.index(), idx);
                }
                steps.push(Step {
                    ins,
                    stream: copy,
                    after,
                    node: true,
                });
            }
            Instruction::SpillIn { tensor, offset, .. } => {
                // After the copy out it reads back and the release of the bytes it fills.
                let mut after = Vec::new();
                if let Some(&t) = ids.get(tensor.as_str()) {
                    let hi = offset + g.tensor(t).size;
                    after.extend(spilled.get(&t.index()).copied());
                    after.extend(overlapping(&releases, *offset, hi));
                    cut(&mut releases, *offset, hi);
                    range_of.insert(t.index(), (*offset, hi));
                    writer.insert(t.index(), idx);
                    touched.insert(t.index(), vec![idx]);
                    donor_of.remove(&t.index());
                }
                steps.push(Step {
                    ins,
                    stream: copy,
                    after,
                    node: true,
                });
            }
            _ => steps.push(Step {
                ins,
                stream: 0,
                after: Vec::new(),
                node: false,
            }),
        }
    }
    // Pass 1: clocks, and which nodes are waited for.
    let mut clocks = Clocks::new(k);
    let mut nodes: Vec<Option<(Node, Vec<u32>)>> = vec![None; steps.len()];
    let mut waits: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    let mut recorded = vec![false; steps.len()];
    for i in 0..steps.len() {
        if !steps[i].node {
            continue;
        }
        let st = steps[i].stream;
        // Per stream, only the latest node needs a wait.
        let mut latest: HashMap<u32, usize> = HashMap::new();
        for &a in &steps[i].after {
            if let Some((n, _)) = &nodes[a] {
                if n.stream != st && !clocks.before(*n, st) {
                    let e = latest.entry(n.stream).or_insert(a);
                    if nodes[*e].as_ref().is_some_and(|(m, _)| m.seq < n.seq) {
                        *e = a;
                    }
                }
            }
        }
        // Latest first: its snapshot often covers the others.
        let mut ws: Vec<usize> = latest.into_values().collect();
        ws.sort_unstable_by(|a, b| b.cmp(a));
        for &a in &ws {
            if let Some((n, snap)) = &nodes[a] {
                if !clocks.before(*n, st) {
                    let snap = snap.clone();
                    clocks.merge(st, &snap);
                    recorded[a] = true;
                    waits[i].push(a);
                }
            }
        }
        nodes[i] = Some(clocks.tick(st));
    }
    // Pass 2: the instructions.
    let mut event_of: HashMap<usize, u64> = HashMap::new();
    let mut next_event = 1u64;
    let mut out = Vec::with_capacity(steps.len() * 2);
    for (i, step) in steps.into_iter().enumerate() {
        for a in &waits[i] {
            if let Some(&ev) = event_of.get(a) {
                out.push(Instruction::WaitEvent {
                    event: ev,
                    stream: step.stream,
                });
            }
        }
        out.push(step.ins);
        if recorded[i] {
            event_of.insert(i, next_event);
            out.push(Instruction::RecordEvent {
                event: next_event,
                stream: nodes[i].as_ref().map_or(0, |(n, _)| n.stream),
            });
            next_event += 1;
        }
    }
    (out, (next_event - 1) as usize)
}

/// The stats' form of the candidates weighed.
fn candidates(scored: &[(String, u64, f64)]) -> Vec<StreamCandidate> {
    scored
        .iter()
        .map(|(name, peak, makespan)| StreamCandidate {
            name: name.clone(),
            peak_bytes: *peak,
            makespan_us: *makespan,
        })
        .collect()
}

/// Removes the bytes `[lo, hi)` from the released ranges (records partly inside are split).
fn cut(releases: &mut Vec<((u64, u64), usize)>, lo: u64, hi: u64) {
    let mut kept = Vec::with_capacity(releases.len());
    for &((a, z), st) in releases.iter() {
        if z <= lo || hi <= a {
            kept.push(((a, z), st));
            continue;
        }
        if a < lo {
            kept.push(((a, lo), st));
        }
        if hi < z {
            kept.push(((hi, z), st));
        }
    }
    *releases = kept;
}

/// The modelled makespan of a plan (µs): each stream a queue, ops taking
/// [`DeviceProfile::op_us`], spills the link time, events free; a single-stream plan's is the
/// sum of its op and copy times.
pub fn makespan_us(graph: &Graph, plan: &Plan, profile: &DeviceProfile) -> f64 {
    let ops = graph.op_indices();
    let ids = graph.tensor_ids();
    let size = |n: &str| ids.get(n).map_or(0, |&t| graph.tensor(t).size);
    let mut t: HashMap<u32, f64> = HashMap::new();
    let mut ev: HashMap<u64, f64> = HashMap::new();
    for ins in &plan.instructions {
        let s = ins.stream();
        let now = t.get(&s).copied().unwrap_or(0.0);
        let d = match ins {
            Instruction::Exec { node, .. } => ops
                .get(node.as_str())
                .map_or(0.0, |&k| profile.op_us(graph, &graph.ops[k]).max(0.0)),
            Instruction::SpillOut { tensor, .. } => profile.d2h_us(size(tensor)),
            Instruction::SpillIn { tensor, .. } => profile.h2d_us(size(tensor)),
            Instruction::RecordEvent { event, .. } => {
                ev.insert(*event, now);
                0.0
            }
            Instruction::WaitEvent { event, .. } => {
                let e = ev.get(event).copied().unwrap_or(0.0);
                t.insert(s, now.max(e));
                0.0
            }
            _ => 0.0,
        };
        if d > 0.0 {
            t.insert(s, now + d);
        }
    }
    t.values().copied().fold(0.0, f64::max)
}

/// The conflict relation of step 2: buffers `a` and `b` conflict unless every toucher of one
/// happens before the other's first write under data-dependency events. `O(n²)` pairs for
/// `n` buffers, so `None` once `stopped` says so (asked every 64 buffers).
fn conflicts(
    s: &Serial<'_>,
    streams: &[u32],
    k: u32,
    stopped: impl Fn() -> bool,
) -> Option<ConflictProblem> {
    let g = s.graph;
    let n = s.execs.len();
    // Clocks of the execs under data-dependency waits only.
    let mut clocks = Clocks::new(k);
    let mut node: Vec<(Node, Vec<u32>)> = Vec::with_capacity(n);
    let mut pos_of: HashMap<usize, usize> = HashMap::new();
    for (e, &op) in s.execs.iter().enumerate() {
        let st = streams[e];
        for &t in &g.ops[op].inputs {
            if let Some(p) = g.producer[t.index()].and_then(|p| pos_of.get(&p.index())) {
                let (nd, snap) = node[*p].clone();
                if !clocks.before(nd, st) {
                    clocks.merge(st, &snap);
                }
            }
        }
        node.push(clocks.tick(st));
        pos_of.insert(op, e);
    }
    let bufs = &s.bufs;
    let mut pr = ConflictProblem::new(
        bufs.iter().map(|b| b.size).collect(),
        bufs.iter().map(|b| b.alignment.max(1)).collect(),
    );
    // need[b][stream] = the latest toucher seq per stream.
    let need: Vec<Vec<u32>> = bufs
        .iter()
        .map(|b| {
            let mut v = vec![0u32; k as usize];
            for &x in &b.touchers {
                let (nd, _) = &node[x];
                v[nd.stream as usize] = v[nd.stream as usize].max(nd.seq);
            }
            v
        })
        .collect();
    let last: Vec<usize> = bufs
        .iter()
        .map(|b| b.touchers.iter().copied().max().unwrap_or(b.first))
        .collect();
    let inputs: Vec<bool> = bufs.iter().map(|b| b.input).collect();
    let outputs: Vec<bool> = bufs.iter().map(|b| b.output).collect();
    // A buffer `a` may give its bytes to `b` when every toucher of `a` happens before b's
    // first write (graph inputs never take released bytes; outputs never give theirs).
    let gives = |a: usize, b: usize| -> bool {
        if outputs[a] || inputs[b] || bufs[b].first <= last[a] {
            return false;
        }
        let (_, snap) = &node[bufs[b].first];
        need[a].iter().zip(snap).all(|(&nd, &c)| c >= nd)
    };
    for a in 0..bufs.len() {
        if a % 64 == 0 && stopped() {
            return None;
        }
        for b in a + 1..bufs.len() {
            if !gives(a, b) && !gives(b, a) {
                pr.add_conflict(a, b);
            }
        }
    }
    pr.normalise();
    Some(pr)
}

/// The candidates beyond the serial placement (module doc, step 2): the serial placement
/// repaired under the serial peak and under `cap`, then the conflict portfolio, its HiGHS model
/// and, on small relations, the exact search; each stops early on `limits`' stop flag.
fn improve(
    s: &Serial<'_>,
    pr: &ConflictProblem,
    serial_peak: u64,
    cap: u64,
    limits: &Limits,
    make: &impl Fn(&[u64]) -> (Plan, usize),
    cands: &mut Vec<(String, Plan, usize)>,
) {
    // (c) the serial placement repaired under the cap: buffers whose sharing would
    // serialise streams move to gaps that keep the peak within the cap.
    let by_first: Vec<usize> = {
        let mut o: Vec<usize> = (0..s.bufs.len()).collect();
        o.sort_by_key(|&b| (s.bufs[b].first, b));
        o
    };
    let by_size: Vec<usize> = {
        let mut o: Vec<usize> = (0..s.bufs.len()).collect();
        o.sort_by_key(|&b| (s.bufs[b].size, b));
        o
    };
    let start = Placement {
        offsets: s.offsets.clone(),
    };
    let mut caps = vec![serial_peak];
    if cap > serial_peak {
        caps.push(cap);
    }
    for c in caps {
        for (name, order) in [
            ("repaired-by-time", &by_first),
            ("repaired-by-size", &by_size),
        ] {
            if limits.is_cancelled() {
                break;
            }
            let r = conflict::repair(pr, &start, c, order);
            if r != start {
                let (p, ev) = make(&r.offsets);
                let name = if c == serial_peak {
                    name.to_string()
                } else {
                    format!("{name}-to-cap")
                };
                cands.push((name, p, ev));
            }
        }
    }
    let portfolio = if limits.is_cancelled() {
        None
    } else {
        conflict::portfolio(
            pr,
            Some(&Placement {
                offsets: s.offsets.clone(),
            }),
            limits,
        )
        .ok()
    };
    if let Some(r) = portfolio {
        // The HiGHS model on the conflict pairs, warm-started from the best heuristic
        // (small relations only; node-capped, so deterministic unless the clock binds).
        let r = match (!limits.is_cancelled())
            .then(|| {
                conflict::place_ilp(
                    pr,
                    &r.placement,
                    &conflict::ConflictIlpOptions::default(),
                    limits,
                )
            })
            .and_then(Result::ok)
        {
            Some(better) if better.peak < r.peak => better,
            _ => r,
        };
        // Then the exact search on small relations (node-capped).
        let r = if pr.sizes.len() <= EXACT_MAX_BUFFERS && !limits.is_cancelled() {
            match conflict::exact(pr, &r.placement, EXACT_NODES, limits) {
                Ok((better, _, _)) if better.peak < r.peak => better,
                _ => r,
            }
        } else {
            r
        };
        if r.method != "given" && r.peak <= cap {
            let (p, ev) = make(&r.placement.offsets);
            let name = match r.method {
                "conflict-ilp" | "conflict-exact" => r.method,
                _ => "conflict-placement",
            };
            cands.push((name.into(), p, ev));
        }
    }
}

/// Conflict relations of at most this many buffers also get the exact search.
const EXACT_MAX_BUFFERS: usize = 64;

/// The exact search's node cap (deterministic effort).
const EXACT_NODES: u64 = 20_000;

/// Spreads the single-stream `plan` of `graph` over streams (module doc). A plan with one
/// stream and no pinned op comes back unchanged with no stats.
pub fn parallelise(
    graph: &Graph,
    plan: &Plan,
    profile: &DeviceProfile,
    opts: &StreamOptions,
) -> Result<(Plan, Option<StreamStat>), StreamError> {
    let pinned = graph.ops.iter().filter_map(|o| o.stream).max();
    let k = opts.streams.max(pinned.map_or(1, |p| p + 1)).max(1);
    if k == 1 {
        return Ok((plan.clone(), None));
    }
    let s = resolve(graph, plan)?;
    if s.spills && k >= crate::plan::MAX_STREAMS {
        return Err(StreamError::Unsupported(format!(
            "{k} compute streams leave no copy stream for the plan's spills (at most {} \
             streams)",
            crate::plan::MAX_STREAMS
        )));
    }
    let streams = assign(&s, profile, k);
    let serial_makespan = makespan_us(graph, plan, profile);
    let serial_peak = plan.stats.peak_bytes;
    let cap = opts.peak_cap.max(serial_peak);
    let mut cands: Vec<(String, Plan, usize)> = Vec::new();
    let make = |offsets: &[u64]| -> (Plan, usize) {
        let (ins, events) = emit(&s, &streams, offsets, k);
        let mut p = plan.clone();
        p.instructions = ins;
        let peak = s
            .bufs
            .iter()
            .zip(offsets)
            .map(|(b, o)| o + b.size)
            .max()
            .unwrap_or(0);
        p.arena_bytes = peak;
        p.stats.peak_bytes = peak;
        (p, events)
    };
    let (p, ev) = make(&s.offsets);
    cands.push(("serial-placement".into(), p, ev));
    let limits = Limits {
        cancel: opts.stop.clone(),
        ..Limits::UNLIMITED
    };
    let stopped = || limits.is_cancelled();
    // Once the pipeline's stop flag is up, the serial placement (valid under the streams'
    // events by construction) is the only candidate: no conflict relation is built.
    if let Some(pr) = conflicts(&s, &streams, k, stopped) {
        improve(&s, &pr, serial_peak, cap, &limits, &make, &mut cands);
    }
    let scored: Vec<(String, u64, f64)> = cands
        .iter()
        .map(|(n, p, _)| {
            (
                n.clone(),
                p.stats.peak_bytes,
                makespan_us(graph, p, profile),
            )
        })
        .collect();
    // Least makespan, then least peak, then fewest events; the single-stream plan when no
    // candidate is faster (unless ops name their streams: then the plan honours them).
    let best = (0..cands.len())
        .filter(|&i| scored[i].1 <= cap && (scored[i].2 < serial_makespan || pinned.is_some()))
        .min_by(|&a, &b| {
            scored[a]
                .2
                .total_cmp(&scored[b].2)
                .then(scored[a].1.cmp(&scored[b].1))
                .then(cands[a].2.cmp(&cands[b].2))
                .then(a.cmp(&b))
        });
    let Some(best) = best else {
        let mut out = plan.clone();
        out.stats.streams = Some(Box::new(StreamStat {
            streams: 1,
            makespan_us: serial_makespan,
            serial_makespan_us: serial_makespan,
            serial_peak_bytes: serial_peak,
            peak_cap_bytes: cap,
            events: 0,
            candidate: "single-stream".into(),
            candidates: candidates(&scored),
        }));
        let stat = out.stats.streams.clone().map(|b| *b);
        return Ok((out, stat));
    };
    let (name, mut out, events) = cands.swap_remove(best);
    let stat = StreamStat {
        streams: k,
        makespan_us: scored[best].2,
        serial_makespan_us: serial_makespan,
        serial_peak_bytes: serial_peak,
        peak_cap_bytes: cap,
        events,
        candidate: name,
        candidates: candidates(&scored),
    };
    // The single-stream bounds still hold: the listed order is one order of the graph.
    let (peak, lb) = (out.stats.peak_bytes, out.stats.lower_bound_bytes);
    if out.stats.gap.is_some() {
        out.stats.gap = Some(crate::plan::PlanStats::gap_of(peak, lb));
    }
    Ok((out, Some(stat)))
}
