//! Buffer lifetimes of an order: one forward pass gives each value's birth (its
//! producer's step, or step 0 for graph inputs), one backward pass its death (last reader's
//! step, or the end for graph outputs). Workspaces live only during their node's step. With
//! in-place merging on, an output takes its donor input's buffer when the donor dies at that
//! node. `O(n + e)`.

use super::{OrderProblem, Value};
use crate::problem::{Buffer, Lifetime, PlacementProblem};

/// Options of the lifetime analysis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LifetimeOptions {
    /// Honour in-place hints: an output takes its input's bytes when that input dies at the
    /// node, the output is no larger than the input and its alignment divides the alignment
    /// of the buffer (the chain's first value).
    pub inplace: bool,
}

/// The in-place size rule: `out` may take the bytes of `donor` when it fits in the donor's own
/// bytes (so a chain only shrinks) and its alignment divides `buffer_alignment`, the alignment
/// of the buffer's offset (the chain's first value's). Liveness (the donor dies at the node) is
/// checked by the caller.
pub fn inplace_fits(out: &Value, donor: &Value, buffer_alignment: u64) -> bool {
    out.size <= donor.size && out.alignment <= buffer_alignment
}

/// What a buffer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BufferOwner {
    /// Values sharing the buffer one after another (one value unless in-place merged), in
    /// order of birth; the first one's size is the buffer's size.
    Values(Vec<usize>),
    /// The workspace of a node.
    Workspace(usize),
}

/// The buffers an order induces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderLifetimes {
    /// Placement problem over the order's steps (`step = position in the order`).
    pub problem: PlacementProblem,
    /// What each buffer of `problem` holds.
    pub owners: Vec<BufferOwner>,
    /// Buffer of each value (`None`: the value is never reserved, e.g. an unread input).
    pub value_buffer: Vec<Option<usize>>,
    /// Buffer of each node's workspace (`None`: no workspace).
    pub workspace_buffer: Vec<Option<usize>>,
    /// Position of each node in the order.
    pub step_of: Vec<usize>,
}

/// Computes the buffers of a valid topological `order` (checked by the caller).
pub fn lifetimes(
    problem: &OrderProblem,
    order: &[usize],
    opts: &LifetimeOptions,
) -> OrderLifetimes {
    let n = order.len() as u64;
    let mut step_of = vec![0usize; problem.nodes.len()];
    for (s, &node) in order.iter().enumerate() {
        step_of[node] = s;
    }
    // Forward: birth; backward (max over readers): death, as `end = last step + 1`.
    let mut span: Vec<Option<(u64, u64)>> = problem
        .values
        .iter()
        .map(|v| {
            let birth = v.producer.map_or(0, |p| step_of[p] as u64);
            let last_read = v.consumers.iter().map(|&c| step_of[c] as u64 + 1).max();
            let end = if v.live_at_end {
                n
            } else if v.producer.is_none() {
                last_read? // a graph input nobody reads is never reserved
            } else {
                last_read.unwrap_or(birth + 1).max(birth + 1)
            };
            Some((birth, end.max(birth + 1)))
        })
        .collect();
    // In-place merging: `group[v]` is the value whose buffer v uses.
    let mut group: Vec<usize> = (0..problem.values.len()).collect();
    let mut donated = vec![false; problem.values.len()];
    if opts.inplace {
        for &node in order {
            let step = step_of[node] as u64;
            for &(out, inp) in &problem.nodes[node].inplace {
                let root = group[inp];
                let (Some((_, in_end)), Some((_, out_end))) = (span[inp], span[out]) else {
                    continue;
                };
                let values = &problem.values;
                let fits = inplace_fits(&values[out], &values[inp], values[root].alignment);
                let dies_here = in_end == step + 1 && !problem.values[inp].live_at_end;
                if fits && dies_here && !donated[inp] && group[out] == out && out != inp {
                    donated[inp] = true;
                    group[out] = root;
                    if let Some((_, root_end)) = span[root].as_mut() {
                        *root_end = (*root_end).max(out_end);
                    }
                }
            }
        }
    }
    let mut buffers = Vec::new();
    let mut owners = Vec::new();
    let mut value_buffer = vec![None; problem.values.len()];
    let mut workspace_buffer = vec![None; problem.nodes.len()];
    // Buffers in a deterministic order: values in birth order (ties by index), workspaces at
    // their step. Members of a merged group follow their root.
    let mut roots: Vec<usize> = (0..problem.values.len())
        .filter(|&v| group[v] == v && span[v].is_some())
        .collect();
    roots.sort_by_key(|&v| (span[v].map_or(0, |s| s.0), v));
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); problem.values.len()];
    for v in 0..problem.values.len() {
        if group[v] != v && span[v].is_some() {
            members[group[v]].push(v);
        }
    }
    for root in roots {
        let Some((start, end)) = span[root] else {
            continue;
        };
        let idx = buffers.len();
        let val = &problem.values[root];
        buffers.push(Buffer {
            lifetime: Lifetime::new(start, end),
            size: val.size,
            alignment: val.alignment,
        });
        let mut held = vec![root];
        let mut rest = std::mem::take(&mut members[root]);
        rest.sort_by_key(|&v| (span[v].map_or(0, |s| s.0), v));
        held.extend(rest);
        for &v in &held {
            value_buffer[v] = Some(idx);
        }
        owners.push(BufferOwner::Values(held));
    }
    for &node in order {
        let ws = problem.nodes[node].workspace;
        if ws > 0 {
            let step = step_of[node] as u64;
            workspace_buffer[node] = Some(buffers.len());
            buffers.push(Buffer {
                lifetime: Lifetime::new(step, step + 1),
                size: ws,
                alignment: problem.workspace_alignment,
            });
            owners.push(BufferOwner::Workspace(node));
        }
    }
    span.clear();
    OrderLifetimes {
        problem: PlacementProblem::new(buffers),
        owners,
        value_buffer,
        workspace_buffer,
        step_of,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::local_search::tests::value;
    use crate::order::Node;

    /// in -> a(relu, inplace) -> b -> out
    fn chain(inplace: bool) -> OrderProblem {
        OrderProblem {
            nodes: vec![
                Node {
                    inputs: vec![0],
                    outputs: vec![1],
                    workspace: 0,
                    inplace: if inplace { vec![(1, 0)] } else { vec![] },
                },
                Node {
                    inputs: vec![1],
                    outputs: vec![2],
                    workspace: 7,
                    inplace: vec![],
                },
            ],
            values: vec![
                value(100, None, vec![0], false),
                value(100, Some(0), vec![1], false),
                value(10, Some(1), vec![], true),
            ],
            workspace_alignment: 1,
        }
    }

    #[test]
    fn inputs_live_from_the_start_and_outputs_until_the_end() {
        let lt = lifetimes(&chain(false), &[0, 1], &LifetimeOptions::default());
        let life = |v: usize| lt.problem.buffers[lt.value_buffer[v].unwrap()].lifetime;
        assert_eq!(life(0), Lifetime::new(0, 1));
        assert_eq!(life(1), Lifetime::new(0, 2));
        assert_eq!(life(2), Lifetime::new(1, 2));
        let ws = lt.problem.buffers[lt.workspace_buffer[1].unwrap()];
        assert_eq!((ws.lifetime, ws.size), (Lifetime::new(1, 2), 7));
        assert_eq!(lt.problem.load(), 200);
    }

    #[test]
    fn inplace_output_takes_the_dying_input_buffer() {
        let p = chain(true);
        let off = lifetimes(&p, &[0, 1], &LifetimeOptions::default());
        let on = lifetimes(&p, &[0, 1], &LifetimeOptions { inplace: true });
        assert_eq!(off.problem.load(), 200);
        assert_eq!(on.problem.load(), 117);
        assert_eq!(on.value_buffer[0], on.value_buffer[1]);
        assert_eq!(
            on.owners[on.value_buffer[0].unwrap()],
            BufferOwner::Values(vec![0, 1])
        );
    }

    #[test]
    fn inplace_is_refused_when_the_input_is_read_later() {
        let mut p = chain(true);
        p.values[0].consumers = vec![0, 1];
        p.nodes[1].inputs = vec![0, 1];
        let on = lifetimes(&p, &[0, 1], &LifetimeOptions { inplace: true });
        assert_ne!(on.value_buffer[0], on.value_buffer[1]);
    }

    #[test]
    fn an_input_nobody_reads_gets_no_buffer() {
        let mut p = chain(false);
        p.values.push(value(5, None, vec![], false));
        let lt = lifetimes(&p, &[0, 1], &LifetimeOptions::default());
        assert_eq!(lt.value_buffer[3], None);
    }
}
