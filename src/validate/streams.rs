//! Happens-before check of a parallel plan (streams and events, README "Parallel plans").
//!
//! Idea: every instruction that touches memory (`exec`, `free`, `spill_out`, `spill_in`)
//! is a node on its stream; `record_event` snapshots the stream's vector clock and
//! `wait_event` merges a snapshot into the waiting stream's clock. Node `a` (stream `s`,
//! `a.seq`-th node of `s`) happens before node `b` iff `clock(b)[s] ≥ a.seq` — stream order
//! plus events, nothing else (the listed order of two streams orders nothing).
//!
//! Rules, each reported naming the tensor, both instructions and the missing event:
//! - **read after write**: the last writer of every tensor an exec reads (or a `spill_out`
//!   copies) happens before it; graph inputs are written by the host before any stream runs;
//! - **release after use**: every exec that touched a tensor since its reservation (and a
//!   `spill_in` that wrote it) happens before its `free` / `spill_out`;
//! - **reuse after release**: a release of bytes happens before the next write of those
//!   bytes: the first exec (or `spill_in`) writing a tensor reserved over them, or an exec's
//!   workspace over them; a `spill_in` copy happens after the `spill_out` copy it reads;
//! - **in place**: every other exec that touched a donor happens before the op writing its
//!   taker into the donor's bytes;
//! - a graph input (loaded by the host) may not reuse bytes a stream released.
//!
//! Structure: an event is recorded once and waited for only after its record in the
//! listed order; stream ids are below [`MAX_STREAMS`].
//!
//! Cost: `O(I · K)` for `I` instructions and `K` streams, plus the release records a write
//! overlaps (each split at most once per write). Runs only on a plan that passed the
//! listed-order replay (names, ranges and validity are known good).

use super::ViolationKind;
use crate::graph::{Graph, TensorId, TensorKind};
use crate::plan::{Instruction, Plan, MAX_STREAMS};
use std::collections::HashMap;

/// A node: its stream, its 1-based position on the stream, its instruction index.
#[derive(Debug, Clone, Copy)]
struct Node {
    stream: u32,
    seq: u32,
    ins: usize,
}

/// Bytes `[lo, hi)` released by a node, to be ordered before their next writer.
#[derive(Debug, Clone, Copy)]
struct Release {
    lo: u64,
    hi: u64,
    node: Node,
    /// The tensor released (`None` for a workspace).
    tensor: Option<TensorId>,
}

#[derive(Default, Clone)]
struct TensorState {
    range: Option<(u64, u64)>,
    /// Last writer (`None`: the host, or never written).
    writer: Option<Node>,
    /// Execs that touched it since its reservation.
    touched: Vec<Node>,
    /// Releases under its reservation, to order before its first writer.
    pending: Vec<Release>,
    /// Its in-place donor / taker while they share bytes.
    donor: Option<TensorId>,
    taker: Option<TensorId>,
    /// The spill_out whose host copy it will come back from.
    host_writer: Option<Node>,
}

struct Checker<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    /// Each stream's clock.
    clock: Vec<Vec<u32>>,
    events: HashMap<u64, Vec<u32>>,
    st: Vec<TensorState>,
    releases: Vec<Release>,
}

/// Checks the happens-before rules of a parallel plan; a plan on one stream without events
/// passes at once. Returns the instruction index and the violation.
pub(super) fn check(graph: &Graph, plan: &Plan) -> Result<(), (usize, ViolationKind)> {
    if !plan.is_parallel() {
        return Ok(());
    }
    let k = plan
        .instructions
        .iter()
        .map(|i| i.stream())
        .max()
        .unwrap_or(0);
    if let Some(i) = plan
        .instructions
        .iter()
        .position(|i| i.stream() >= MAX_STREAMS)
    {
        return Err((
            i,
            ViolationKind::Streams(format!(
                "stream {k} is out of range (stream ids are below {MAX_STREAMS})"
            )),
        ));
    }
    let n = k as usize + 1;
    let mut c = Checker {
        graph,
        plan,
        clock: vec![vec![0; n]; n],
        events: HashMap::new(),
        st: vec![TensorState::default(); graph.tensors.len()],
        releases: Vec::new(),
    };
    let ids = graph.tensor_ids();
    let ops = graph.op_indices();
    let tid = |name: &str| ids.get(name).copied();
    for (i, ins) in plan.instructions.iter().enumerate() {
        let r = match ins {
            Instruction::RecordEvent { event, stream } => c.record(*event, *stream),
            Instruction::WaitEvent { event, stream } => c.wait(*event, *stream),
            Instruction::Alloc {
                tensor,
                offset,
                inplace_of,
                ..
            } => match tid(tensor) {
                Some(t) => c.alloc(t, *offset, inplace_of.as_deref().and_then(tid)),
                None => Ok(()),
            },
            Instruction::Exec {
                node,
                workspace_offset,
                ..
            } => match ops.get(node.as_str()) {
                Some(&op) => {
                    let n = c.node(ins.stream(), i);
                    c.exec(op, *workspace_offset, n)
                }
                None => Ok(()),
            },
            Instruction::Free { tensor, .. } => match tid(tensor) {
                Some(t) => {
                    let n = c.node(ins.stream(), i);
                    c.release(t, n, false)
                }
                None => Ok(()),
            },
            Instruction::SpillOut { tensor, .. } => match tid(tensor) {
                Some(t) => {
                    let n = c.node(ins.stream(), i);
                    c.release(t, n, true)
                }
                None => Ok(()),
            },
            Instruction::SpillIn { tensor, offset, .. } => match tid(tensor) {
                Some(t) => {
                    let n = c.node(ins.stream(), i);
                    c.spill_in(t, *offset, n)
                }
                None => Ok(()),
            },
        };
        r.map_err(|kind| (i, kind))?;
    }
    Ok(())
}

impl Checker<'_> {
    /// A new node on `stream` at instruction `ins`.
    fn node(&mut self, stream: u32, ins: usize) -> Node {
        let c = &mut self.clock[stream as usize][stream as usize];
        *c += 1;
        Node {
            stream,
            seq: *c,
            ins,
        }
    }

    /// Whether `a` happens before the latest node of `b`'s stream (`b` itself).
    fn before(&self, a: Node, b: Node) -> bool {
        self.clock[b.stream as usize][a.stream as usize] >= a.seq
    }

    /// The instruction of a node in words.
    fn what(&self, n: Node) -> String {
        match &self.plan.instructions[n.ins] {
            Instruction::Exec { node, .. } => format!("op {node:?}"),
            Instruction::Free { tensor, .. } => format!("the free of {tensor:?}"),
            Instruction::SpillOut { tensor, .. } => format!("the spill_out of {tensor:?}"),
            Instruction::SpillIn { tensor, .. } => format!("the spill_in of {tensor:?}"),
            _ => format!("instruction {}", n.ins),
        }
    }

    fn tname(&self, t: TensorId) -> String {
        self.graph.tensor(t).name.clone()
    }

    /// `earlier` must happen before `later`; `why` says what they share.
    fn order(&self, earlier: Node, later: Node, why: String) -> Result<(), ViolationKind> {
        if self.before(earlier, later) {
            return Ok(());
        }
        Err(ViolationKind::Unordered(Box::new(super::Unordered {
            earlier: self.what(earlier),
            earlier_stream: earlier.stream,
            earlier_instruction: earlier.ins,
            later: self.what(later),
            later_stream: later.stream,
            why,
        })))
    }

    fn record(&mut self, event: u64, stream: u32) -> Result<(), ViolationKind> {
        if self.events.contains_key(&event) {
            return Err(ViolationKind::Streams(format!(
                "event {event} is recorded twice (each event is recorded once)"
            )));
        }
        self.events
            .insert(event, self.clock[stream as usize].clone());
        Ok(())
    }

    fn wait(&mut self, event: u64, stream: u32) -> Result<(), ViolationKind> {
        let Some(snap) = self.events.get(&event) else {
            return Err(ViolationKind::Streams(format!(
                "stream {stream} waits for event {event}, which is not recorded before"
            )));
        };
        for (c, &e) in self.clock[stream as usize].iter_mut().zip(snap) {
            *c = (*c).max(e);
        }
        Ok(())
    }

    /// The releases overlapping `[lo, hi)`.
    fn overlapping(&self, lo: u64, hi: u64) -> Vec<Release> {
        self.releases
            .iter()
            .filter(|r| r.lo < hi && lo < r.hi)
            .copied()
            .collect()
    }

    /// Forgets the released bytes inside `[lo, hi)` (their next writer is ordered after
    /// them, and everything later after that writer's own release).
    fn prune(&mut self, lo: u64, hi: u64) {
        let mut kept = Vec::with_capacity(self.releases.len());
        for r in self.releases.drain(..) {
            if r.hi <= lo || hi <= r.lo {
                kept.push(r);
                continue;
            }
            if r.lo < lo {
                kept.push(Release { hi: lo, ..r });
            }
            if hi < r.hi {
                kept.push(Release { lo: hi, ..r });
            }
        }
        self.releases = kept;
    }

    /// The releases over `[lo, hi)` happen before `writer`, which writes `what`.
    fn reuse(&mut self, lo: u64, hi: u64, writer: Node, what: &str) -> Result<(), ViolationKind> {
        for r in self.overlapping(lo, hi) {
            let old = match r.tensor {
                Some(t) => format!("{:?}", self.tname(t)),
                None => "a workspace".to_string(),
            };
            self.order(
                r.node,
                writer,
                format!(
                    "{what} reuses bytes [{}, {}) of {old}",
                    r.lo.max(lo),
                    r.hi.min(hi)
                ),
            )?;
        }
        self.prune(lo, hi);
        Ok(())
    }

    fn alloc(
        &mut self,
        t: TensorId,
        offset: u64,
        donor: Option<TensorId>,
    ) -> Result<(), ViolationKind> {
        let size = self.graph.tensor(t).size;
        let range = (offset, offset.saturating_add(size));
        let pending = match donor {
            Some(_) => Vec::new(),
            None => self.overlapping(range.0, range.1),
        };
        if self.graph.tensor(t).kind == TensorKind::Input {
            if let Some(r) = pending.first() {
                return Err(ViolationKind::Streams(format!(
                    "graph input {:?} (loaded by the host) reuses bytes that {} released on \
                     stream {}; the host cannot wait for a stream",
                    self.tname(t),
                    self.what(r.node),
                    r.node.stream
                )));
            }
        }
        let s = &mut self.st[t.index()];
        s.range = Some(range);
        s.writer = None;
        s.touched.clear();
        s.pending = pending;
        s.donor = donor;
        if let Some(d) = donor {
            self.st[d.index()].taker = Some(t);
        }
        Ok(())
    }

    fn exec(
        &mut self,
        k: usize,
        workspace_offset: Option<u64>,
        n: Node,
    ) -> Result<(), ViolationKind> {
        let graph = self.graph;
        let op = &graph.ops[k];
        for &t in &op.inputs {
            if graph.tensor(t).kind == TensorKind::Weight {
                continue;
            }
            if let Some(w) = self.st[t.index()].writer {
                self.order(
                    w,
                    n,
                    format!("it reads {:?}, which it writes", self.tname(t)),
                )?;
            }
        }
        for &t in &op.outputs {
            let pending = std::mem::take(&mut self.st[t.index()].pending);
            let name = self.tname(t);
            for r in pending {
                let old = match r.tensor {
                    Some(o) => format!("{:?}", self.tname(o)),
                    None => "a workspace".to_string(),
                };
                self.order(r.node, n, format!("{name:?} reuses bytes of {old}"))?;
            }
            if let Some((lo, hi)) = self.st[t.index()].range {
                if self.st[t.index()].writer.is_none() {
                    self.prune(lo, hi);
                }
            }
            if let Some(d) = self.st[t.index()].donor {
                for &x in &self.st[d.index()].touched {
                    if x.ins != n.ins {
                        self.order(
                            x,
                            n,
                            format!(
                                "it writes {name:?} in place of {:?}, which {} touches",
                                self.tname(d),
                                self.what(x)
                            ),
                        )?;
                    }
                }
            }
        }
        if let Some(off) = workspace_offset {
            let hi = off.saturating_add(op.workspace);
            self.reuse(off, hi, n, &format!("the workspace of {:?}", op.name))?;
            self.releases.push(Release {
                lo: off,
                hi,
                node: n,
                tensor: None,
            });
        }
        for &t in op.inputs.iter().chain(&op.outputs) {
            if graph.tensor(t).kind != TensorKind::Weight {
                self.st[t.index()].touched.push(n);
            }
        }
        for &t in &op.outputs {
            self.st[t.index()].writer = Some(n);
        }
        Ok(())
    }

    /// `free` (or `spill_out` with `spill`) of `t` at node `n`.
    fn release(&mut self, t: TensorId, n: Node, spill: bool) -> Result<(), ViolationKind> {
        let name = self.tname(t);
        if spill {
            if let Some(w) = self.st[t.index()].writer {
                self.order(w, n, format!("it copies {name:?} to the host"))?;
            }
        }
        for &x in &self.st[t.index()].touched {
            self.order(
                x,
                n,
                format!("{} touches {name:?}, which it releases", self.what(x)),
            )?;
        }
        let s = &mut self.st[t.index()];
        let Some((lo, hi)) = s.range.take() else {
            return Ok(());
        };
        s.touched.clear();
        if spill {
            s.host_writer = Some(n);
        }
        if let Some(d) = s.donor.take() {
            self.st[d.index()].taker = None;
        }
        // Bytes an in-place taker still holds stay reserved: they are released with it.
        let held = self.st[t.index()]
            .taker
            .take()
            .and_then(|x| self.st[x.index()].range.map(|r| (x, r)));
        let mut parts = vec![(lo, hi)];
        if let Some((x, (a, b))) = held {
            parts = vec![(lo, a.max(lo).min(hi)), (b.min(hi).max(lo), hi)];
            self.st[x.index()].donor = None;
        }
        for (a, b) in parts {
            if a < b {
                self.releases.push(Release {
                    lo: a,
                    hi: b,
                    node: n,
                    tensor: Some(t),
                });
            }
        }
        Ok(())
    }

    fn spill_in(&mut self, t: TensorId, offset: u64, n: Node) -> Result<(), ViolationKind> {
        let name = self.tname(t);
        if let Some(w) = self.st[t.index()].host_writer {
            self.order(w, n, format!("it copies {name:?} back from the host"))?;
        }
        let hi = offset.saturating_add(self.graph.tensor(t).size);
        self.reuse(offset, hi, n, &format!("{name:?}"))?;
        let s = &mut self.st[t.index()];
        s.range = Some((offset, hi));
        s.writer = Some(n);
        s.touched = vec![n];
        s.pending.clear();
        s.donor = None;
        s.taker = None;
        Ok(())
    }
}
