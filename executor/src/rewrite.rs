//! Plan rewriting that inserts spill and recompute round trips into a valid plan, so the
//! executors' spill and recompute paths can be exercised (and proven) on any graph before a
//! budgeted planner produces such plans. The result stays valid (docs/FORMATS.md §2):
//!
//! - **recompute**: for an op `P` with a single output `T`, whose inputs all stay resident
//!   until `T`'s second read: `free T` right after the first read, then `alloc T` at a fresh
//!   offset and `exec P` again (with a fresh workspace, if it has one) right before the
//!   second read;
//! - **spill**: for a tensor read by two execs with other execs between them and nothing
//!   else touching it: `spill_out T` after the first read (host offsets are never reused),
//!   `spill_in T` at a fresh offset right before the second.
//!
//! Fresh offsets are bump-allocated above the original arena, so a returning tensor always
//! lands at a different offset; `arena_bytes`, `stats.peak_bytes` and `host_bytes` are
//! updated. Tensors involved in in-place sharing are left alone, and so are recompute
//! candidates whose producer reads a tensor another recompute frees early (or the reverse). Every `every`-th eligible
//! candidate is rewritten (0 disables a kind), in instruction order, deterministically.

use memplan::graph::{Graph, TensorId, TensorKind};
use memplan::plan::{Instruction, Plan};
use std::collections::{BTreeSet, HashMap};

/// Which round trips to insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewriteOptions {
    /// Rewrite every n-th recompute candidate (0: none).
    pub recompute_every: usize,
    /// Rewrite every n-th spill candidate (0: none).
    pub spill_every: usize,
}

impl Default for RewriteOptions {
    fn default() -> Self {
        RewriteOptions {
            recompute_every: 2,
            spill_every: 2,
        }
    }
}

/// What a rewrite inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RewriteStats {
    /// Recomputes inserted.
    pub recomputes: usize,
    /// Spill round trips inserted.
    pub spills: usize,
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a).saturating_mul(a)
}

struct Ctx<'g> {
    graph: &'g Graph,
    ids: HashMap<&'g str, TensorId>,
    ops: HashMap<&'g str, usize>,
    skip: BTreeSet<TensorId>,
}

impl<'g> Ctx<'g> {
    fn new(graph: &'g Graph, plan: &Plan) -> Self {
        let ids = graph.tensor_ids();
        let mut skip = BTreeSet::new();
        for ins in &plan.instructions {
            if let Instruction::Alloc {
                tensor,
                inplace_of: Some(d),
                ..
            } = ins
            {
                for n in [tensor, d] {
                    if let Some(&t) = ids.get(n.as_str()) {
                        skip.insert(t);
                    }
                }
            }
        }
        Ctx {
            graph,
            ids,
            ops: graph.op_indices(),
            skip,
        }
    }

    /// Tensors an instruction touches: (reads, others).
    fn touches(&self, ins: &Instruction) -> (Vec<TensorId>, Vec<TensorId>) {
        match ins {
            Instruction::Exec { node, .. } => match self.ops.get(node.as_str()) {
                Some(&k) => {
                    let op = &self.graph.ops[k];
                    (op.inputs.clone(), op.outputs.clone())
                }
                None => (Vec::new(), Vec::new()),
            },
            Instruction::Alloc { tensor, .. }
            | Instruction::Free { tensor, .. }
            | Instruction::SpillOut { tensor, .. }
            | Instruction::SpillIn { tensor, .. } => (
                Vec::new(),
                self.ids.get(tensor.as_str()).copied().into_iter().collect(),
            ),
            Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. } => {
                (Vec::new(), Vec::new())
            }
        }
    }
}

/// Inserts recompute and spill round trips into a valid `plan` (see the module doc). A
/// parallel plan ([`Plan::is_parallel`]) is returned unchanged: a round trip inserted in the
/// listed order would need events of its own.
pub fn rewrite(graph: &Graph, plan: &Plan, opts: RewriteOptions) -> (Plan, RewriteStats) {
    let mut out = plan.clone();
    let mut stats = RewriteStats::default();
    if plan.is_parallel() {
        return (out, stats);
    }
    let mut cursor = plan.arena_bytes;
    if opts.recompute_every > 0 {
        stats.recomputes = recompute(graph, &mut out, opts.recompute_every, &mut cursor);
    }
    if opts.spill_every > 0 {
        stats.spills = spill(graph, &mut out, opts.spill_every, &mut cursor);
    }
    if cursor > plan.arena_bytes {
        out.arena_bytes = cursor;
        out.stats.peak_bytes = cursor;
    }
    (out, stats)
}

fn recompute(graph: &Graph, plan: &mut Plan, every: usize, cursor: &mut u64) -> usize {
    let ctx = Ctx::new(graph, plan);
    let mut seen = 0usize;
    let mut done = 0usize;
    // Each candidate is (tensor, producer exec index, first read, second read); found on the
    // original stream, applied back to front so indices stay valid.
    let mut edits: Vec<(TensorId, usize, usize, usize)> = Vec::new();
    let mut taken: BTreeSet<TensorId> = BTreeSet::new();
    // Inputs of the producers already chosen: they must stay resident for the re-exec, so
    // they are never freed early themselves.
    let mut pinned: BTreeSet<TensorId> = BTreeSet::new();
    for (e, ins) in plan.instructions.iter().enumerate() {
        let Instruction::Exec { node, .. } = ins else {
            continue;
        };
        let Some(&k) = ctx.ops.get(node.as_str()) else {
            continue;
        };
        let op = &graph.ops[k];
        let [t] = op.outputs[..] else { continue };
        if graph.tensor(t).kind != TensorKind::Activation
            || ctx.skip.contains(&t)
            || taken.contains(&t)
            || pinned.contains(&t)
        {
            continue;
        }
        let inputs: Vec<TensorId> = op
            .inputs
            .iter()
            .copied()
            .filter(|&x| graph.tensor(x).kind != TensorKind::Weight)
            .collect();
        // An input freed early by another recompute would not be there for this re-exec.
        if inputs
            .iter()
            .any(|x| ctx.skip.contains(x) || taken.contains(x))
        {
            continue;
        }
        // First two reads of t after e; nothing may touch t or free/spill P's inputs
        // before the second read (inputs must stay valid for the recompute).
        let mut reads = Vec::new();
        let mut ok = true;
        for (j, later) in plan.instructions.iter().enumerate().skip(e + 1) {
            let (r, w) = ctx.touches(later);
            if r.contains(&t) {
                reads.push(j);
                if reads.len() == 2 {
                    break;
                }
                continue;
            }
            let is_exec = matches!(later, Instruction::Exec { .. });
            if w.contains(&t) || (!is_exec && w.iter().any(|x| inputs.contains(x))) {
                ok = false;
                break;
            }
        }
        if !ok || reads.len() < 2 || reads[1] == reads[0] + 1 {
            continue;
        }
        seen += 1;
        if seen % every == 0 {
            edits.push((t, e, reads[0], reads[1]));
            taken.insert(t);
            pinned.extend(inputs.iter().copied());
        }
    }
    // Apply back to front (by second-read index) so earlier indices stay valid; edits may
    // interleave, so apply insertions at the larger index first per edit, sorted overall.
    let mut inserts: Vec<(usize, u8, Vec<Instruction>)> = Vec::new();
    for &(t, e, r1, r2) in &edits {
        let tensor = graph.tensor(t);
        let off = align_up(*cursor, tensor.alignment);
        *cursor = off + tensor.size;
        let Instruction::Exec { node, algo, .. } = &plan.instructions[e] else {
            continue;
        };
        let ws = match graph
            .ops
            .iter()
            .find(|o| &o.name == node)
            .map(|o| o.workspace)
        {
            Some(w) if w > 0 => {
                let at = align_up(*cursor, graph.alignment);
                *cursor = at + w;
                Some(at)
            }
            _ => None,
        };
        inserts.push((
            r1 + 1,
            0,
            vec![Instruction::Free {
                stream: None,
                tensor: tensor.name.clone(),
            }],
        ));
        inserts.push((
            r2,
            1,
            vec![
                Instruction::Alloc {
                    tensor: tensor.name.clone(),
                    offset: off,
                    mem_id: None,
                    inplace_of: None,
                },
                Instruction::Exec {
                    stream: None,
                    node: node.clone(),
                    workspace_offset: ws,
                    algo: algo.clone(),
                },
            ],
        ));
        done += 1;
    }
    apply(plan, inserts);
    done
}

fn spill(graph: &Graph, plan: &mut Plan, every: usize, cursor: &mut u64) -> usize {
    let ctx = Ctx::new(graph, plan);
    let mut last: HashMap<TensorId, (usize, bool)> = HashMap::new(); // last touch: (index, was a read)
    let mut candidates: Vec<(usize, usize, TensorId)> = Vec::new();
    for (j, ins) in plan.instructions.iter().enumerate() {
        let (r, w) = ctx.touches(ins);
        let mut r: Vec<TensorId> = r
            .into_iter()
            .filter(|&t| graph.tensor(t).kind != TensorKind::Weight)
            .collect();
        r.sort_unstable();
        r.dedup();
        for &t in &r {
            if let Some(&(i, true)) = last.get(&t) {
                let between_execs = plan.instructions[i + 1..j]
                    .iter()
                    .any(|x| matches!(x, Instruction::Exec { .. }));
                if between_execs && !ctx.skip.contains(&t) && !w.contains(&t) {
                    candidates.push((i, j, t));
                }
            }
        }
        for &t in &w {
            last.insert(t, (j, false));
        }
        for &t in &r {
            if !w.contains(&t) {
                last.insert(t, (j, true));
            }
        }
    }
    let mut host_cursor = plan.host_bytes;
    let mut inserts = Vec::new();
    let mut done = 0;
    let mut used: BTreeSet<TensorId> = BTreeSet::new();
    for (n, &(i, j, t)) in candidates.iter().enumerate() {
        // one round trip per tensor keeps the stream simple to reason about
        if (n + 1) % every != 0 || !used.insert(t) {
            continue;
        }
        let tensor = graph.tensor(t);
        let off = align_up(*cursor, tensor.alignment);
        *cursor = off + tensor.size;
        let host = host_cursor;
        host_cursor += tensor.size;
        inserts.push((
            i + 1,
            0,
            vec![Instruction::SpillOut {
                stream: None,
                tensor: tensor.name.clone(),
                host_offset: host,
            }],
        ));
        inserts.push((
            j,
            1,
            vec![Instruction::SpillIn {
                stream: None,
                tensor: tensor.name.clone(),
                offset: off,
                mem_id: None,
            }],
        ));
        done += 1;
    }
    plan.host_bytes = host_cursor;
    apply(plan, inserts);
    done
}

/// Inserts instruction groups before the given indices (stable: at one index, frees and
/// spill-outs (rank 0) go before allocs and spill-ins (rank 1)).
fn apply(plan: &mut Plan, mut inserts: Vec<(usize, u8, Vec<Instruction>)>) {
    inserts.sort_by_key(|(at, rank, _)| (*at, *rank));
    let mut out = Vec::with_capacity(plan.instructions.len() + inserts.len() * 2);
    let mut it = inserts.into_iter().peekable();
    for (j, ins) in plan.instructions.drain(..).enumerate() {
        while let Some((at, _, _)) = it.peek() {
            if *at != j {
                break;
            }
            if let Some((_, _, group)) = it.next() {
                out.extend(group);
            }
        }
        out.push(ins);
    }
    for (_, _, group) in it {
        out.extend(group);
    }
    plan.instructions = out;
}
