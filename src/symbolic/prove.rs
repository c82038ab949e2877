//! A proof that a symbolic plan's layout is valid at **every** binding in range, read off the
//! plan document alone (issue 17, point 4: "proves it where the rule allows").
//!
//! # Idea
//!
//! Sampled bindings ([`super::check`]) catch a bad plan where they look. The layout rule
//! itself allows more: an instantiated offset is the longest path in the stacking DAG, so
//! two buffers reserved at the same time never share a byte at any binding as soon as one of
//! them reaches the other through `below` edges (the argument of [`super::plan`]'s module
//! doc, step 2). Everything else the validator checks depends only on the instruction
//! sequence, the alignments and which sizes are positive, which do not change with the
//! binding. So, per template (the top level and every piece), this module checks:
//!
//! 1. every weight's and buffer's size expression **is** the graph's expression for that
//!    tensor or op workspace (equal canonical polynomials), so instantiation computes the
//!    graph's sizes;
//! 2. every buffer is reserved over one interval of the instruction stream (an `alloc` …
//!    `free` of a tensor, or the one `exec` of a workspace): lifetimes are half-open
//!    `[start, end)` in instruction indices;
//! 3. for every two buffers whose lifetimes overlap, one reaches the other in the `below`
//!    DAG.
//!
//! With one validator replay per template (the check's piece ends), these make the plan valid
//! at every binding of the template's range. Anything else (a buffer reserved twice, a size
//! that is not the graph's, two overlapping buffers the DAG does not order) leaves the plan
//! unproved, with the culprit named, and the sampled check decides.
//!
//! The proof reads the plan document and the graph only: it shares no code with the planner
//! that wrote the plan.
//!
//! # Complexity
//!
//! Per template of `n` buffers with `e` stacking edges and `p` overlapping pairs:
//! `O(n·e / 64)` for the reachability bit sets, `O(n log n + p)` for the sweep.

use super::expr::Poly;
use super::plan::{BufferTemplate, Step, WeightTemplate};
use super::{SymbolicError, SymbolicGraph, SymbolicPlan};
use std::collections::HashMap;

/// The outcome of [`prove_layout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// Valid at every binding in range, given one valid replay per template.
    Proved {
        /// Templates proved (the top level and the pieces).
        templates: usize,
        /// Overlapping buffer pairs found ordered by the stacking DAG, over all templates.
        pairs: usize,
    },
    /// The rule does not allow a proof; the reason names the template and the culprit.
    NotProved(String),
}

/// One template of the document, with its name for messages.
struct Template<'a> {
    label: String,
    weights: &'a [WeightTemplate],
    buffers: &'a [BufferTemplate],
    instructions: &'a [Step],
}

/// Proves `plan`'s layout valid at every binding in range for `graph` (module doc), or says
/// why it cannot. Errors only when the graph cannot be instantiated at its min corner.
pub fn prove_layout(graph: &SymbolicGraph, plan: &SymbolicPlan) -> Result<Proof, SymbolicError> {
    let names = graph.instantiate(&graph.min_corner())?;
    let tensor_poly: HashMap<&str, &Poly> = names
        .tensors
        .iter()
        .zip(&graph.sizes)
        .map(|(t, p)| (t.name.as_str(), p))
        .collect();
    let workspace_poly: HashMap<&str, &Poly> = names
        .ops
        .iter()
        .zip(&graph.workspaces)
        .map(|(o, p)| (o.name.as_str(), p))
        .collect();
    let doc = plan.doc();
    let mut templates = vec![Template {
        label: "the top-level template".into(),
        weights: &doc.weights,
        buffers: &doc.buffers,
        instructions: &doc.instructions,
    }];
    if let Some(split) = &doc.split {
        for p in &split.pieces {
            templates.push(Template {
                label: format!(
                    "the piece {}={}..{}",
                    split.symbol, p.range.min, p.range.max
                ),
                weights: &p.weights,
                buffers: &p.buffers,
                instructions: &p.instructions,
            });
        }
    }
    let mut pairs = 0;
    for t in &templates {
        match prove_template(t, &tensor_poly, &workspace_poly) {
            Ok(n) => pairs += n,
            Err(reason) => return Ok(Proof::NotProved(format!("{}: {reason}", t.label))),
        }
    }
    Ok(Proof::Proved {
        templates: templates.len(),
        pairs,
    })
}

/// Steps 1–3 of the module doc for one template; the number of overlapping pairs, or why not.
fn prove_template(
    t: &Template<'_>,
    tensor_poly: &HashMap<&str, &Poly>,
    workspace_poly: &HashMap<&str, &Poly>,
) -> Result<usize, String> {
    // 1. Sizes are the graph's.
    for w in t.weights {
        match tensor_poly.get(w.tensor.as_str()) {
            Some(p) if **p == w.size => {}
            Some(p) => {
                return Err(format!(
                    "weight {:?} has size {} in the plan but {} in the graph",
                    w.tensor, w.size, p
                ))
            }
            None => return Err(format!("weight {:?} is not a graph tensor", w.tensor)),
        }
    }
    let n = t.buffers.len();
    for (i, b) in t.buffers.iter().enumerate() {
        let (what, graph_size) = match (&b.tensor, &b.workspace_of) {
            (Some(name), _) => (
                format!("tensor {name:?}"),
                tensor_poly.get(name.as_str()).copied(),
            ),
            (None, Some(op)) => (
                format!("op {op:?}'s workspace"),
                workspace_poly.get(op.as_str()).copied(),
            ),
            (None, None) => return Err(format!("buffer {i} names neither a tensor nor an op")),
        };
        match graph_size {
            Some(p) if *p == b.size => {}
            Some(p) => {
                return Err(format!(
                    "buffer {i} ({what}) has size {} in the plan but {p} in the graph",
                    b.size
                ))
            }
            None => return Err(format!("buffer {i} ({what}) is not in the graph")),
        }
        if let Some(&u) = b.below.iter().find(|&&u| u as usize >= i) {
            return Err(format!(
                "buffer {i} lists buffer {u}, not an earlier one, below it"
            ));
        }
    }
    // 2. One lifetime per buffer, [start, end) in instruction indices.
    let len = t.instructions.len();
    let mut start: Vec<Option<usize>> = vec![None; n];
    let mut end: Vec<Option<usize>> = vec![None; n];
    let index = |b: u32| -> Result<usize, String> {
        let b = b as usize;
        if b < n {
            Ok(b)
        } else {
            Err(format!("an instruction names buffer {b} of {n}"))
        }
    };
    for (k, step) in t.instructions.iter().enumerate() {
        let (b, s, e) = match step {
            Step::Alloc { buffer, .. } => (index(*buffer)?, Some(k), None),
            Step::Free { buffer, .. } => (index(*buffer)?, None, Some(k)),
            Step::Exec {
                workspace_buffer: Some(buffer),
                ..
            } => (index(*buffer)?, Some(k), Some(k + 1)),
            Step::Exec { .. } => continue,
        };
        if let Some(s) = s {
            if start[b].is_some() {
                return Err(format!(
                    "buffer {b} is reserved twice (instruction {k}): its lifetime is not one interval"
                ));
            }
            start[b] = Some(s);
        }
        if let Some(e) = e {
            if end[b].is_some() || start[b].is_none() {
                return Err(format!(
                    "buffer {b} is released at instruction {k} without being reserved once before"
                ));
            }
            end[b] = Some(e);
        }
    }
    // 3. Reachability in the stacking DAG (below edges point to earlier buffers), as bit sets.
    let words = n.div_ceil(64);
    let mut reach = vec![0u64; n * words];
    for i in 0..n {
        for &u in &t.buffers[i].below {
            let u = u as usize;
            let (lo, hi) = reach.split_at_mut(i * words);
            let row = &mut hi[..words];
            row[u / 64] |= 1 << (u % 64);
            for (a, b) in row.iter_mut().zip(&lo[u * words..(u + 1) * words]) {
                *a |= *b;
            }
        }
    }
    let reaches = |hi: usize, lo: usize| reach[hi * words + lo / 64] >> (lo % 64) & 1 == 1;
    let mut events: Vec<(usize, usize)> = (0..n).filter_map(|b| start[b].map(|s| (s, b))).collect();
    events.sort_unstable();
    // Sweep: buffers still reserved when each one starts.
    let mut active: Vec<usize> = Vec::new();
    let mut pairs = 0;
    for (s, b) in events {
        active.retain(|&u| end[u].unwrap_or(len) > s);
        for &u in &active {
            let ordered = if u < b { reaches(b, u) } else { reaches(u, b) };
            if !ordered {
                let name = |i: usize| {
                    let x = &t.buffers[i];
                    x.tensor.clone().map_or_else(
                        || {
                            format!(
                                "op {:?}'s workspace",
                                x.workspace_of.as_deref().unwrap_or("")
                            )
                        },
                        |t| format!("tensor {t:?}"),
                    )
                };
                return Err(format!(
                    "buffers {u} ({}) and {b} ({}) are reserved at the same time but neither \
                     lies below the other in the stacking DAG",
                    name(u),
                    name(b)
                ));
            }
            pairs += 1;
        }
        if end[b].is_none_or(|e| e > s) {
            active.push(b);
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::PipelineOptions;
    use crate::symbolic::plan_symbolic;

    fn graph() -> SymbolicGraph {
        SymbolicGraph::parse(
            r#"{"format": "memplan-graph/1", "name": "g", "alignment": 64,
              "symbols": {"B": {"min": 1, "max": 16}},
              "tensors": [
                {"name": "w", "size": 4096, "kind": "weight"},
                {"name": "x", "size": "100*B", "kind": "input"},
                {"name": "h", "size": "300*B", "kind": "activation"},
                {"name": "k", "size": "50 + 20*B", "kind": "activation"},
                {"name": "y", "size": "100*B", "kind": "output"}],
              "ops": [
                {"name": "a", "type": "matmul", "inputs": ["x", "w"], "outputs": ["h"],
                 "workspace": "64*B"},
                {"name": "b", "type": "relu", "inputs": ["h"], "outputs": ["k"]},
                {"name": "c", "type": "add", "inputs": ["k", "h"], "outputs": ["y"]}]}"#,
        )
        .unwrap()
    }

    fn plan(g: &SymbolicGraph) -> SymbolicPlan {
        let opts = PipelineOptions {
            effort: 0,
            ..PipelineOptions::default()
        };
        plan_symbolic(g, &opts).unwrap()
    }

    #[test]
    fn a_plan_from_the_planner_is_proved_valid_at_every_binding() {
        let g = graph();
        match prove_layout(&g, &plan(&g)).unwrap() {
            Proof::Proved { templates, pairs } => {
                assert_eq!(templates, 1);
                assert!(pairs >= 3, "{pairs}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_removed_stacking_edge_leaves_the_plan_unproved_naming_both_buffers() {
        let g = graph();
        let mut doc = plan(&g).doc().clone();
        let i = doc
            .buffers
            .iter()
            .position(|b| !b.below.is_empty())
            .expect("some buffer lies above another");
        doc.buffers[i].below.clear();
        let p = SymbolicPlan::from_doc(doc).unwrap();
        match prove_layout(&g, &p).unwrap() {
            Proof::NotProved(why) => {
                assert!(why.contains("neither lies below the other"), "{why}");
                assert!(why.starts_with("the top-level template"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_size_that_is_not_the_graphs_leaves_the_plan_unproved_naming_the_tensor() {
        let g = graph();
        let mut doc = plan(&g).doc().clone();
        let i = doc
            .buffers
            .iter()
            .position(|b| b.tensor.as_deref() == Some("h"))
            .unwrap();
        doc.buffers[i].size = Poly::parse("299*B").unwrap();
        let p = SymbolicPlan::from_doc(doc).unwrap();
        match prove_layout(&g, &p).unwrap() {
            Proof::NotProved(why) => {
                assert!(
                    why.contains("tensor \"h\"") && why.contains("299*B"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
