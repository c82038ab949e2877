//! Chrome-trace / Perfetto export of a plan (the JSON "Trace Event Format"): each exec is a
//! complete slice (`ph: X`) on the compute track, the arena's reserved bytes a counter track
//! (`ph: C`, updated at every alloc, free and workspace), and each spill a slice on a copy
//! track with a flow arrow (`ph: s` → `ph: f`) from its `spill_out` to the `spill_in` that
//! brings the tensor back. Time is simulated: an op lasts its `time_us` when the graph gives
//! one, else [`DEFAULT_OP_US`]; copies last [`COPY_US`]. Open the file in ui.perfetto.dev or
//! chrome://tracing. One pass over the instructions ([`arena_steps`], the walk shared with
//! the arena profile): O(I).

use crate::analysis::walk::{arena_steps, ArenaStep};
use crate::graph::Graph;
use crate::plan::Plan;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use thiserror::Error;

/// Duration of an op without `time_us` (µs).
pub const DEFAULT_OP_US: f64 = 10.0;
/// Duration of a spill copy (µs).
pub const COPY_US: f64 = 5.0;

const PID: u32 = 1;
const COMPUTE_TID: u32 = 1;
const COPY_TID: u32 = 2;

/// A plan naming a tensor or op its graph lacks.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("plan does not fit graph {graph}: unknown {what}")]
pub struct TraceError {
    /// The graph's name.
    pub graph: String,
    /// The unknown tensor or op.
    pub what: String,
}

/// The trace of `plan` (a validated plan of `graph`) as a Trace Event Format document.
pub fn chrome_trace(graph: &Graph, plan: &Plan) -> Result<Value, TraceError> {
    let unknown = |what: String| TraceError {
        graph: graph.name.clone(),
        what,
    };
    let size_of =
        |tensor: &str, size: Option<u64>| size.ok_or_else(|| unknown(format!("tensor {tensor}")));
    let mut events = vec![
        json!({"name": "process_name", "ph": "M", "pid": PID, "args": {"name": format!("memplan: {}", plan.graph)}}),
        json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": COMPUTE_TID, "args": {"name": "compute"}}),
        json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": COPY_TID, "args": {"name": "host copies"}}),
    ];
    let (mut now, mut live, mut flow) = (0.0f64, 0u64, 0u64);
    let counter = |ts: f64, live: u64| json!({"name": "arena", "ph": "C", "pid": PID, "ts": ts, "args": {"reserved_bytes": live}});
    // Tensor → flow id of its pending spill.
    let mut spilled: BTreeMap<&str, u64> = BTreeMap::new();
    for ins in arena_steps(graph, plan) {
        match ins {
            ArenaStep::Reserve {
                tensor,
                size,
                spill: false,
                ..
            } => {
                live += size_of(tensor, size)?;
                events.push(counter(now, live));
            }
            ArenaStep::Release {
                tensor,
                size,
                spill: false,
            } => {
                live = live.saturating_sub(size_of(tensor, size)?);
                events.push(counter(now, live));
            }
            ArenaStep::Exec {
                node,
                op,
                workspace_offset,
            } => {
                let i = op.ok_or_else(|| unknown(format!("op {node}")))?;
                let op = &graph.ops[i];
                let dur = op.time_us.filter(|t| *t > 0.0).unwrap_or(DEFAULT_OP_US);
                let ws = if workspace_offset.is_some() {
                    op.workspace
                } else {
                    0
                };
                if ws > 0 {
                    events.push(counter(now, live + ws));
                }
                events.push(json!({
                    "name": node, "cat": op.op_type, "ph": "X", "pid": PID, "tid": COMPUTE_TID,
                    "ts": now, "dur": dur,
                    "args": {"workspace_bytes": ws, "reserved_bytes": live + ws},
                }));
                now += dur;
                if ws > 0 {
                    events.push(counter(now, live));
                }
            }
            ArenaStep::Release {
                tensor,
                size,
                spill: true,
            } => {
                flow += 1;
                spilled.insert(tensor, flow);
                events.push(json!({"name": format!("spill_out {tensor}"), "cat": "spill", "ph": "X", "pid": PID, "tid": COPY_TID, "ts": now, "dur": COPY_US}));
                events.push(json!({"name": "spill", "cat": "spill", "ph": "s", "id": flow, "pid": PID, "tid": COPY_TID, "ts": now}));
                now += COPY_US;
                live = live.saturating_sub(size_of(tensor, size)?);
                events.push(counter(now, live));
            }
            ArenaStep::Reserve {
                tensor,
                size,
                spill: true,
                ..
            } => {
                live += size_of(tensor, size)?;
                events.push(counter(now, live));
                events.push(json!({"name": format!("spill_in {tensor}"), "cat": "spill", "ph": "X", "pid": PID, "tid": COPY_TID, "ts": now, "dur": COPY_US}));
                if let Some(id) = spilled.remove(tensor) {
                    events.push(json!({"name": "spill", "cat": "spill", "ph": "f", "bp": "e", "id": id, "pid": PID, "tid": COPY_TID, "ts": now}));
                }
                now += COPY_US;
            }
        }
    }
    Ok(json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "graph": plan.graph,
            "arena_bytes": plan.arena_bytes,
            "peak_bytes": plan.stats.peak_bytes,
            "note": format!("simulated time: time_us of each op, else {DEFAULT_OP_US} us"),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Instruction;
    use crate::planner::{plan, PlanOptions};

    #[test]
    fn the_trace_has_a_slice_per_exec_and_a_counter_that_peaks_at_the_replayed_max_live() {
        let g = Graph::parse(crate::graph::SAMPLE_JSON).unwrap();
        let p = plan(&g, &PlanOptions::default()).unwrap();
        let replay = crate::validate(&g, &p, None).unwrap();
        let t = chrome_trace(&g, &p).unwrap();
        let ev = t["traceEvents"].as_array().unwrap();
        let slices = ev.iter().filter(|e| e["ph"] == "X").count();
        assert_eq!(slices, g.ops.len());
        let max = ev
            .iter()
            .filter(|e| e["ph"] == "C")
            .map(|e| e["args"]["reserved_bytes"].as_u64().unwrap())
            .max()
            .unwrap();
        assert_eq!(max, replay.max_live);
        // Slices follow each other on the compute track.
        let ts: Vec<f64> = ev
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        assert!(ts.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn spills_become_copy_slices_joined_by_a_flow() {
        let g = Graph::parse(crate::graph::SAMPLE_JSON).unwrap();
        let mut p = plan(&g, &PlanOptions::default()).unwrap();
        let t = g
            .tensors
            .iter()
            .find(|t| g.in_arena(g.tensor_by_name(&t.name).unwrap()));
        let name = t.unwrap().name.clone();
        p.instructions.push(Instruction::SpillOut {
            stream: None,
            tensor: name.clone(),
            host_offset: 0,
        });
        p.instructions.push(Instruction::SpillIn {
            stream: None,
            tensor: name,
            offset: 0,
            mem_id: None,
        });
        let tr = chrome_trace(&g, &p).unwrap();
        let ev = tr["traceEvents"].as_array().unwrap();
        let s: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "s").collect();
        let f: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "f").collect();
        assert_eq!((s.len(), f.len()), (1, 1));
        assert_eq!(s[0]["id"], f[0]["id"]);
    }
}
