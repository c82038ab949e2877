//! The op-order problem, graph-agnostic: nodes (ops) read and write values (tensors) of given
//! sizes; an order is a topological permutation of the nodes. Each order induces buffer
//! lifetimes ([`lifetimes()`]) and so a LOAD; order heuristics ([`Orderer`]) look for orders with
//! a low LOAD, and [`bound`] (with [`mincut`]) gives a LOAD lower bound that holds for every
//! order.

pub mod bound;
pub mod greedy;
pub mod lifetimes;
pub mod listed;
pub mod local_search;
pub mod mincut;
mod model;
pub mod program;

use crate::limits::{Limits, SolveStats};
use std::time::{Duration, Instant};
use thiserror::Error;

pub use lifetimes::{inplace_fits, lifetimes, BufferOwner, LifetimeOptions, OrderLifetimes};

/// A value (tensor) of the order problem. Values held outside the arena (weights) are not
/// values here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// Size in bytes (> 0).
    pub size: u64,
    /// Offset alignment in bytes (power of two).
    pub alignment: u64,
    /// The node that writes it; `None` for values valid before the first step (graph inputs).
    pub producer: Option<usize>,
    /// Nodes that read it, ascending, without repeats.
    pub consumers: Vec<usize>,
    /// Whether it must stay reserved until the end of the run (graph outputs).
    pub live_at_end: bool,
}

/// A node (op) of the order problem.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    /// Values read, without repeats.
    pub inputs: Vec<usize>,
    /// Values written (at least one).
    pub outputs: Vec<usize>,
    /// Scratch bytes reserved only while the node runs (0 for none).
    pub workspace: u64,
    /// `(output value, input value)` pairs: the output may take the input's bytes when that
    /// input's last read is this node (in-place ops).
    pub inplace: Vec<(usize, usize)>,
}

/// Nodes and values; node indices are the listed order's positions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OrderProblem {
    /// Nodes, indexed `0..n`.
    pub nodes: Vec<Node>,
    /// Values, indexed `0..m`.
    pub values: Vec<Value>,
    /// Alignment of workspace buffers (bytes, power of two).
    pub workspace_alignment: u64,
}

/// What is wrong with an order.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum OrderError {
    /// The order does not list every node exactly once.
    #[error("order is not a permutation of the {nodes} nodes (node {node} missing or repeated)")]
    NotPermutation {
        /// Number of nodes.
        nodes: usize,
        /// A node missing or repeated.
        node: usize,
    },
    /// A node runs before a producer of one of its inputs.
    #[error("node {node} runs before node {producer}, which produces one of its inputs")]
    NotTopological {
        /// The consumer that runs too early.
        node: usize,
        /// The producer that runs too late.
        producer: usize,
    },
    /// The nodes do not form a DAG; the listed nodes form a cycle.
    #[error("nodes form a cycle: {cycle:?}")]
    Cycle {
        /// Nodes on one cycle, in dependency order.
        cycle: Vec<usize>,
    },
}

impl OrderProblem {
    /// Direct predecessors of each node (producers of its inputs), ascending, no repeats.
    pub fn predecessors(&self) -> Vec<Vec<usize>> {
        self.nodes
            .iter()
            .map(|n| {
                let mut p: Vec<usize> = n
                    .inputs
                    .iter()
                    .filter_map(|&v| self.values[v].producer)
                    .collect();
                p.sort_unstable();
                p.dedup();
                p
            })
            .collect()
    }

    /// Direct successors of each node (consumers of its outputs), ascending, no repeats.
    pub fn successors(&self) -> Vec<Vec<usize>> {
        let mut succ = vec![Vec::new(); self.nodes.len()];
        for (i, preds) in self.predecessors().into_iter().enumerate() {
            for p in preds {
                succ[p].push(i);
            }
        }
        for s in &mut succ {
            s.sort_unstable();
            s.dedup();
        }
        succ
    }

    /// The topological order closest to the listed one: Kahn's algorithm always taking the
    /// ready node of smallest index. Equals `0..n` when the listed order is topological.
    /// Iterative (no recursion), `O((n + e) log n)`.
    pub fn listed_topological_order(&self) -> Result<Vec<usize>, OrderError> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let preds = self.predecessors();
        let succ = self.successors();
        let mut indeg: Vec<usize> = preds.iter().map(Vec::len).collect();
        let mut ready: BinaryHeap<Reverse<usize>> = indeg
            .iter()
            .enumerate()
            .filter(|(_, &d)| d == 0)
            .map(|(i, _)| Reverse(i))
            .collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &s in &succ[i] {
                indeg[s] -= 1;
                if indeg[s] == 0 {
                    ready.push(Reverse(s));
                }
            }
        }
        if order.len() == self.nodes.len() {
            return Ok(order);
        }
        Err(OrderError::Cycle {
            cycle: find_cycle(&preds, &indeg),
        })
    }

    /// Checks that `order` is a topological permutation of the nodes.
    pub fn check_order(&self, order: &[usize]) -> Result<(), OrderError> {
        let n = self.nodes.len();
        let mut pos = vec![usize::MAX; n];
        for (step, &node) in order.iter().enumerate() {
            if node >= n || pos[node] != usize::MAX {
                return Err(OrderError::NotPermutation { nodes: n, node });
            }
            pos[node] = step;
        }
        if order.len() != n {
            let node = pos.iter().position(|&p| p == usize::MAX).unwrap_or(0);
            return Err(OrderError::NotPermutation { nodes: n, node });
        }
        for (node, preds) in self.predecessors().iter().enumerate() {
            for &p in preds {
                if pos[p] > pos[node] {
                    return Err(OrderError::NotTopological { node, producer: p });
                }
            }
        }
        Ok(())
    }

    /// LOAD (max live bytes over steps, workspaces included) of a valid order.
    pub fn load(&self, order: &[usize], opts: &LifetimeOptions) -> u64 {
        lifetimes(self, order, opts).problem.load()
    }
}

/// Finds one cycle among the nodes left with positive in-degree after Kahn's algorithm:
/// walk predecessors that are still blocked until a node repeats. Iterative.
fn find_cycle(preds: &[Vec<usize>], indeg: &[usize]) -> Vec<usize> {
    let Some(start) = indeg.iter().position(|&d| d > 0) else {
        return Vec::new();
    };
    let mut seen_at = vec![usize::MAX; preds.len()];
    let mut path = Vec::new();
    let mut cur = start;
    loop {
        if seen_at[cur] != usize::MAX {
            let mut cycle = path[seen_at[cur]..].to_vec();
            cycle.reverse(); // path follows predecessors; report in dependency order
            return cycle;
        }
        seen_at[cur] = path.len();
        path.push(cur);
        match preds[cur].iter().find(|&&p| indeg[p] > 0) {
            Some(&p) => cur = p,
            None => return path, // unreachable for a true leftover set; return what we have
        }
    }
}

/// An order heuristic.
pub trait Orderer: Send + Sync {
    /// Stable short name.
    fn name(&self) -> &'static str;

    /// Returns a topological order. `incumbent` is the best order known so far (a valid
    /// topological order); improvers start from it, constructive heuristics may ignore it.
    /// Must be deterministic for the same input and a budget that does not expire.
    fn order(
        &self,
        problem: &OrderProblem,
        incumbent: &[usize],
        opts: &LifetimeOptions,
        limits: &Limits,
    ) -> Vec<usize>;
}

/// Every order heuristic, in the sequence [`best_order`] runs them.
pub fn registry() -> Vec<Box<dyn Orderer>> {
    vec![
        Box::new(listed::Listed),
        Box::new(greedy::GreedyList::default()),
        Box::new(local_search::LocalSearch::default()),
    ]
}

/// One order heuristic's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderMember {
    /// Heuristic name.
    pub name: &'static str,
    /// LOAD of its order.
    pub load: u64,
    /// Time it took.
    pub elapsed: Duration,
}

/// The best order found by [`best_order`].
#[derive(Debug, Clone)]
pub struct OrderResult {
    /// The order (a topological permutation of the nodes).
    pub order: Vec<usize>,
    /// Name of the heuristic that found it.
    pub method: &'static str,
    /// Per-heuristic figures, in registry order.
    pub members: Vec<OrderMember>,
    /// Objective = LOAD of the order; lower bound = the order-independent bound.
    pub stats: SolveStats,
}

/// Runs `orderers` in sequence, each seeing the best order so far as its incumbent, and keeps
/// the lowest LOAD (ties keep the earlier). The listed topological order is the first incumbent.
/// The budget is shared: each orderer gets what the previous ones left.
pub fn best_order(
    orderers: &[Box<dyn Orderer>],
    problem: &OrderProblem,
    opts: &LifetimeOptions,
    limits: &Limits,
) -> Result<OrderResult, OrderError> {
    let started = Instant::now();
    let mut best = problem.listed_topological_order()?;
    let mut best_load = problem.load(&best, opts);
    let mut method = "listed";
    let mut members = Vec::new();
    for o in orderers {
        let t0 = Instant::now();
        let remaining = limits.remaining_after(started.elapsed());
        let order = o.order(problem, &best, opts, &remaining);
        problem.check_order(&order)?;
        let load = problem.load(&order, opts);
        members.push(OrderMember {
            name: o.name(),
            load,
            elapsed: t0.elapsed(),
        });
        if load < best_load {
            best = order;
            best_load = load;
            method = o.name();
        }
    }
    let lower = bound::order_lower_bound_within(
        problem,
        opts,
        Some(&best),
        &limits.remaining_after(started.elapsed()),
    );
    debug_assert!(
        lower <= best_load,
        "order bound {lower} above an order's LOAD {best_load}"
    );
    Ok(OrderResult {
        order: best,
        method,
        members,
        stats: SolveStats::heuristic(best_load, lower, started.elapsed()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node i reads the value of each listed predecessor; each node writes one value.
    fn dag(preds: &[&[usize]]) -> OrderProblem {
        let n = preds.len();
        let mut values: Vec<Value> = (0..n)
            .map(|i| Value {
                size: 10 + i as u64,
                alignment: 1,
                producer: Some(i),
                consumers: Vec::new(),
                live_at_end: false,
            })
            .collect();
        let nodes = preds
            .iter()
            .enumerate()
            .map(|(i, ps)| {
                for &p in *ps {
                    values[p].consumers.push(i);
                }
                Node {
                    inputs: ps.to_vec(),
                    outputs: vec![i],
                    ..Node::default()
                }
            })
            .collect();
        OrderProblem {
            nodes,
            values,
            workspace_alignment: 1,
        }
    }

    #[test]
    fn a_topological_listed_order_is_kept_as_is() {
        let p = dag(&[&[], &[0], &[1], &[0, 2]]);
        assert_eq!(p.listed_topological_order().unwrap(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_non_topological_listed_order_is_repaired_staying_close_to_it() {
        // Node 0 reads node 2's value: 2 must move before 0; 1 stays first among the rest.
        let p = dag(&[&[2], &[], &[]]);
        assert_eq!(p.listed_topological_order().unwrap(), vec![1, 2, 0]);
    }

    #[test]
    fn a_cycle_is_reported_with_its_nodes_in_dependency_order() {
        let p = dag(&[&[], &[0, 3], &[1], &[2]]);
        match p.listed_topological_order() {
            Err(OrderError::Cycle { cycle }) => {
                assert_eq!(cycle.len(), 3);
                let mut sorted = cycle.clone();
                sorted.sort();
                assert_eq!(sorted, vec![1, 2, 3]);
                // each node is a predecessor of the next
                let preds = p.predecessors();
                for w in 0..cycle.len() {
                    let (a, b) = (cycle[w], cycle[(w + 1) % cycle.len()]);
                    assert!(preds[b].contains(&a), "{cycle:?}");
                }
            }
            other => panic!("expected a cycle, got {other:?}"),
        }
    }

    #[test]
    fn check_order_rejects_repeats_and_dependency_violations() {
        let p = dag(&[&[], &[0], &[1]]);
        assert!(p.check_order(&[0, 1, 2]).is_ok());
        assert_eq!(
            p.check_order(&[0, 0, 2]),
            Err(OrderError::NotPermutation { nodes: 3, node: 0 })
        );
        assert_eq!(
            p.check_order(&[0, 1]),
            Err(OrderError::NotPermutation { nodes: 3, node: 2 })
        );
        assert_eq!(
            p.check_order(&[0, 2, 1]),
            Err(OrderError::NotTopological {
                node: 2,
                producer: 1
            })
        );
    }

    #[test]
    fn best_order_never_returns_worse_than_the_listed_order() {
        // Two independent chains listed interleaved: finishing one chain first is better.
        let p = dag(&[&[], &[], &[0], &[1], &[2], &[3]]);
        let listed = p.listed_topological_order().unwrap();
        let opts = LifetimeOptions::default();
        let r = best_order(&registry(), &p, &opts, &Limits::UNLIMITED).unwrap();
        assert!(r.stats.objective <= p.load(&listed, &opts));
        assert!(r.stats.lower_bound <= r.stats.objective);
        assert_eq!(r.members.len(), registry().len());
    }
}
