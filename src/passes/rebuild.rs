//! Rebuilding a graph after a rewrite, shared by the passes: keep a subset of the original
//! tensors (renumbered in order), add new ones, and assemble the new op list into a
//! validated [`Graph`] with the original's name, alignment and metadata.

use super::PassError;
use crate::graph::{Graph, Op, Tensor, TensorId};

/// A graph being rebuilt from `graph`: the kept tensors (renumbered in their original
/// order), then the tensors a pass adds.
pub(super) struct Rebuild<'g> {
    graph: &'g Graph,
    tensors: Vec<Tensor>,
    new_id: Vec<Option<TensorId>>,
}

impl<'g> Rebuild<'g> {
    /// Starts from the tensors of `graph` for which `keep` holds, in order.
    pub(super) fn keeping(graph: &'g Graph, keep: impl Fn(TensorId) -> bool) -> Rebuild<'g> {
        let mut new_id: Vec<Option<TensorId>> = vec![None; graph.tensors.len()];
        let mut tensors: Vec<Tensor> = Vec::new();
        for (i, t) in graph.tensors.iter().enumerate() {
            if keep(TensorId(i as u32)) {
                new_id[i] = Some(TensorId(tensors.len() as u32));
                tensors.push(t.clone());
            }
        }
        Rebuild {
            graph,
            tensors,
            new_id,
        }
    }

    /// The new id of the original tensor `t`; `None` when it was dropped.
    pub(super) fn new_id(&self, t: TensorId) -> Option<TensorId> {
        self.new_id[t.index()]
    }

    /// Adds a new tensor; returns its id.
    pub(super) fn push(&mut self, tensor: Tensor) -> TensorId {
        self.tensors.push(tensor);
        TensorId(self.tensors.len() as u32 - 1)
    }

    /// A tensor of the new graph by its new id.
    pub(super) fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// The new graph with `ops` (new tensor ids), validated; a failure is pass `pass`'s
    /// [`PassError::Invalid`].
    pub(super) fn finish(self, ops: Vec<Op>, pass: &'static str) -> Result<Graph, PassError> {
        Graph {
            name: self.graph.name.clone(),
            alignment: self.graph.alignment,
            meta: self.graph.meta.clone(),
            tensors: self.tensors,
            ops,
            producer: Vec::new(),
        }
        .rebuilt()
        .map_err(|source| PassError::Invalid { pass, source })
    }
}
