//! One hand-corrupted plan per validator error kind ([`memplan::ViolationKind`]), on a tiny
//! graph with a workspace, two weights and in-place hints; shared by
//! `tests/validator_kinds.rs` (the validator's kind, check_plan.py's verdict) and
//! `cli/tests/check_kinds.rs` (`memplan check` exits 1). Uses memplan and serde_json only.
#![allow(dead_code)]

use memplan::graph::Graph;
use memplan::plan::{Instruction, Plan};
use memplan::ViolationKind;
use serde_json::json;

/// The tiny graph: `conv` (workspace 500) → `relu` (may run in place of `a`) → `scale` (may
/// run in place of `b`, but `head` reads `b` too; flagged `"recompute": false`) → `head`,
/// which also reads the input `x`.
pub fn graph() -> Graph {
    let g = json!({
        "format": "memplan-graph/1",
        "name": "kinds",
        "alignment": 64,
        "tensors": [
            {"name": "x", "size": 1000, "kind": "input"},
            {"name": "w", "size": 64, "kind": "weight"},
            {"name": "w2", "size": 64, "kind": "weight"},
            {"name": "a", "size": 1000, "kind": "activation"},
            {"name": "b", "size": 1000, "kind": "activation"},
            {"name": "c", "size": 1000, "kind": "activation"},
            {"name": "y", "size": 100, "kind": "output"}
        ],
        "ops": [
            {"name": "conv", "type": "conv", "inputs": ["x", "w"], "outputs": ["a"], "workspace": 500},
            {"name": "relu", "type": "relu", "inputs": ["a"], "outputs": ["b"], "inplace": [[0, 0]]},
            {"name": "scale", "type": "mul", "inputs": ["b"], "outputs": ["c"], "inplace": [[0, 0]],
             "recompute": false},
            {"name": "head", "type": "head", "inputs": ["c", "b", "x", "w2"], "outputs": ["y"]}
        ]
    });
    Graph::parse(&g.to_string()).expect("the tiny graph parses")
}

fn plan_of(instructions: serde_json::Value, host_bytes: u64) -> Plan {
    let p = json!({
        "format": "memplan-plan/1",
        "graph": "kinds",
        "arena_bytes": 3172,
        "weights_bytes": 128,
        "host_bytes": host_bytes,
        "weights": [{"tensor": "w", "offset": 0}, {"tensor": "w2", "offset": 64}],
        "instructions": instructions,
        "stats": {"peak_bytes": 3172}
    });
    serde_json::from_value(p).expect("a plan")
}

/// A valid plan without sharing (peak 3172).
pub fn plain() -> Plan {
    plan_of(
        json!([
            {"op": "alloc", "tensor": "x", "offset": 0},
            {"op": "alloc", "tensor": "a", "offset": 1024},
            {"op": "exec", "node": "conv", "workspace_offset": 2048},
            {"op": "alloc", "tensor": "b", "offset": 2048},
            {"op": "exec", "node": "relu", "workspace_offset": null},
            {"op": "free", "tensor": "a"},
            {"op": "alloc", "tensor": "c", "offset": 1024},
            {"op": "exec", "node": "scale", "workspace_offset": null},
            {"op": "alloc", "tensor": "y", "offset": 3072},
            {"op": "exec", "node": "head", "workspace_offset": null},
            {"op": "free", "tensor": "b"},
            {"op": "free", "tensor": "c"},
            {"op": "free", "tensor": "x"}
        ]),
        0,
    )
}

/// A valid plan where `b` takes `a`'s bytes in place (peak 3172).
pub fn inplace() -> Plan {
    plan_of(
        json!([
            {"op": "alloc", "tensor": "x", "offset": 0},
            {"op": "alloc", "tensor": "a", "offset": 1024},
            {"op": "exec", "node": "conv", "workspace_offset": 2048},
            {"op": "alloc", "tensor": "b", "offset": 1024, "inplace_of": "a"},
            {"op": "exec", "node": "relu", "workspace_offset": null},
            {"op": "free", "tensor": "a"},
            {"op": "alloc", "tensor": "c", "offset": 2048},
            {"op": "exec", "node": "scale", "workspace_offset": null},
            {"op": "alloc", "tensor": "y", "offset": 3072},
            {"op": "exec", "node": "head", "workspace_offset": null},
            {"op": "free", "tensor": "b"},
            {"op": "free", "tensor": "c"},
            {"op": "free", "tensor": "x"}
        ]),
        0,
    )
}

/// A valid plan that spills `a`, allocates it again while its first copy is on the host,
/// recomputes and spills it again elsewhere in the pool, then spills `x` into the pool range
/// `a`'s first copy had (free again by then: check_plan.py keeps one host range per tensor).
pub fn spilled_twice() -> Plan {
    plan_of(
        json!([
            {"op": "alloc", "tensor": "x", "offset": 0},
            {"op": "alloc", "tensor": "a", "offset": 1024},
            {"op": "exec", "node": "conv", "workspace_offset": 2048},
            {"op": "spill_out", "tensor": "a", "host_offset": 0},
            {"op": "alloc", "tensor": "a", "offset": 1024},
            {"op": "exec", "node": "conv", "workspace_offset": 2048},
            {"op": "spill_out", "tensor": "a", "host_offset": 1024},
            {"op": "spill_out", "tensor": "x", "host_offset": 0},
            {"op": "spill_in", "tensor": "x", "offset": 0},
            {"op": "spill_in", "tensor": "a", "offset": 1024},
            {"op": "alloc", "tensor": "b", "offset": 2048},
            {"op": "exec", "node": "relu", "workspace_offset": null},
            {"op": "free", "tensor": "a"},
            {"op": "alloc", "tensor": "c", "offset": 1024},
            {"op": "exec", "node": "scale", "workspace_offset": null},
            {"op": "alloc", "tensor": "y", "offset": 3072},
            {"op": "exec", "node": "head", "workspace_offset": null},
            {"op": "free", "tensor": "b"},
            {"op": "free", "tensor": "c"},
            {"op": "free", "tensor": "x"}
        ]),
        2024,
    )
}

/// A valid plan on two streams: `scale` runs on stream 1, ordered after `relu` (and the
/// free of `a`, whose bytes `c` reuses) by event 1; `head` waits for event 2 after `scale`.
pub fn parallel() -> Plan {
    plan_of(
        json!([
            {"op": "alloc", "tensor": "x", "offset": 0},
            {"op": "alloc", "tensor": "a", "offset": 1024},
            {"op": "exec", "node": "conv", "workspace_offset": 2048},
            {"op": "alloc", "tensor": "b", "offset": 2048},
            {"op": "exec", "node": "relu", "workspace_offset": null},
            {"op": "free", "tensor": "a"},
            {"op": "record_event", "event": 1, "stream": 0},
            {"op": "wait_event", "event": 1, "stream": 1},
            {"op": "alloc", "tensor": "c", "offset": 1024},
            {"op": "exec", "node": "scale", "workspace_offset": null, "stream": 1},
            {"op": "record_event", "event": 2, "stream": 1},
            {"op": "wait_event", "event": 2, "stream": 0},
            {"op": "alloc", "tensor": "y", "offset": 3072},
            {"op": "exec", "node": "head", "workspace_offset": null},
            {"op": "free", "tensor": "b"},
            {"op": "free", "tensor": "c"},
            {"op": "free", "tensor": "x"}
        ]),
        0,
    )
}

/// An instruction from its JSON.
pub fn ins(v: serde_json::Value) -> Instruction {
    serde_json::from_value(v).expect("an instruction")
}

/// Index of the first instruction `show`n as `text` (e.g. `"exec relu"`, `"free a"`).
pub fn at(p: &Plan, text: &str) -> usize {
    p.instructions
        .iter()
        .position(|i| shown(i) == text)
        .unwrap_or_else(|| panic!("no instruction {text:?}"))
}

fn shown(i: &Instruction) -> String {
    match i {
        Instruction::Alloc { tensor, .. } => format!("alloc {tensor}"),
        Instruction::Exec { node, .. } => format!("exec {node}"),
        Instruction::Free { tensor, .. } => format!("free {tensor}"),
        Instruction::SpillOut { tensor, .. } => format!("spill_out {tensor}"),
        Instruction::SpillIn { tensor, .. } => format!("spill_in {tensor}"),
        Instruction::RecordEvent { event, stream } => format!("record_event {event} {stream}"),
        Instruction::WaitEvent { event, stream } => format!("wait_event {event} {stream}"),
    }
}

/// A corrupted plan and what it must give.
pub struct Case {
    /// Test-readable name.
    pub name: &'static str,
    /// The [`ViolationKind`] variant the validator must report ([`variant`]).
    pub kind: &'static str,
    /// The plan.
    pub plan: Plan,
    /// The budget to check against.
    pub budget: Option<u64>,
    /// Whether check_plan.py must reject it (false: it must accept it — the rule is the
    /// project's own; only the graph name and undeclared in-place pairs).
    pub python_rejects: bool,
}

/// The name of a [`ViolationKind`] variant. Exhaustive on purpose: a new variant does not
/// compile here until [`cases`] has a plan for it.
pub fn variant(k: &ViolationKind) -> &'static str {
    match k {
        ViolationKind::Format(_) => "Format",
        ViolationKind::GraphName { .. } => "GraphName",
        ViolationKind::Unknown { .. } => "Unknown",
        ViolationKind::Weights(_) => "Weights",
        ViolationKind::WeightInArena(_) => "WeightInArena",
        ViolationKind::Misaligned { .. } => "Misaligned",
        ViolationKind::Overlap { .. } => "Overlap",
        ViolationKind::DoubleAlloc(_) => "DoubleAlloc",
        ViolationKind::NotReserved(_) => "NotReserved",
        ViolationKind::InputNotValid { .. } => "InputNotValid",
        ViolationKind::OperandNotReserved { .. } => "OperandNotReserved",
        ViolationKind::Workspace { .. } => "Workspace",
        ViolationKind::BadInplace { .. } => "BadInplace",
        ViolationKind::Host(_) => "Host",
        ViolationKind::NotExecuted(_) => "NotExecuted",
        ViolationKind::ForbiddenRecompute { .. } => "ForbiddenRecompute",
        ViolationKind::OutputMissing(_) => "OutputMissing",
        ViolationKind::Overflow(_) => "Overflow",
        ViolationKind::Stats(_) => "Stats",
        ViolationKind::OverBudget { .. } => "OverBudget",
        ViolationKind::Unordered(_) => "Unordered",
        ViolationKind::Streams(_) => "Streams",
    }
}

/// Every variant name (keep in step with [`variant`]).
pub const VARIANTS: [&str; 22] = [
    "Format",
    "GraphName",
    "Unknown",
    "Weights",
    "WeightInArena",
    "Misaligned",
    "Overlap",
    "DoubleAlloc",
    "NotReserved",
    "InputNotValid",
    "OperandNotReserved",
    "Workspace",
    "BadInplace",
    "Host",
    "NotExecuted",
    "ForbiddenRecompute",
    "OutputMissing",
    "Overflow",
    "Stats",
    "OverBudget",
    "Unordered",
    "Streams",
];

fn case(name: &'static str, kind: &'static str, plan: Plan) -> Case {
    Case {
        name,
        kind,
        plan,
        budget: None,
        python_rejects: true,
    }
}

fn offset(p: &mut Plan, i: usize, to: u64) {
    if let Instruction::Alloc { offset, .. } = &mut p.instructions[i] {
        *offset = to;
    }
}

/// Every corrupted plan, at least one per variant.
pub fn cases() -> Vec<Case> {
    let base = plain();
    let mut v = plan_and_name_cases(&base);
    v.extend(placement_cases(&base));
    v.extend(read_cases(&base));
    v.extend(inplace_cases(&base));
    v.extend(host_and_end_cases(&base));
    v.extend(stream_cases(&parallel()));
    v
}

/// Parallel plans: a missing event, a stream without events, an event never recorded.
fn stream_cases(base: &Plan) -> Vec<Case> {
    let edit = |f: &dyn Fn(&mut Plan)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    vec![
        case(
            "head reads c while scale may still write it (event 2 deleted)",
            "Unordered",
            edit(&|p| {
                let i = at(p, "wait_event 2 0");
                p.instructions.remove(i);
            }),
        ),
        case(
            "c takes the bytes of a before a's free is ordered before scale (event 1 deleted)",
            "Unordered",
            edit(&|p| {
                let i = at(p, "wait_event 1 1");
                p.instructions.remove(i);
            }),
        ),
        Case {
            // check_plan.py knows no streams: without events the plan is serial to it.
            python_rejects: false,
            ..case(
                "scale on stream 1 without any event",
                "Unordered",
                edit(&|p| {
                    p.instructions.retain(|i| {
                        !matches!(
                            i,
                            Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. }
                        )
                    })
                }),
            )
        },
        case(
            "a wait for an event never recorded",
            "Streams",
            edit(&|p| {
                let i = at(p, "wait_event 1 1");
                p.instructions[i] = ins(json!({"op": "wait_event", "event": 9, "stream": 1}));
            }),
        ),
        case(
            "an event recorded twice",
            "Streams",
            edit(&|p| {
                let i = at(p, "record_event 2 1");
                p.instructions[i] = ins(json!({"op": "record_event", "event": 1, "stream": 1}));
            }),
        ),
    ]
}

/// The plan as a whole and its names: format, graph name, unknown names, the weights region.
fn plan_and_name_cases(base: &Plan) -> Vec<Case> {
    let mut v = Vec::new();
    let edit = |f: &dyn Fn(&mut Plan)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    v.push(case(
        "a plan of another format",
        "Format",
        edit(&|p| p.format = "memplan-plan/2".into()),
    ));
    v.push(Case {
        python_rejects: false, // check_plan.py does not compare names
        ..case(
            "a plan for another graph",
            "GraphName",
            edit(&|p| p.graph = "resnet18".into()),
        )
    });
    v.push(case(
        "an exec of an unknown op",
        "Unknown",
        edit(&|p| {
            let i = at(p, "exec relu");
            p.instructions[i] =
                ins(json!({"op": "exec", "node": "nope", "workspace_offset": null}));
        }),
    ));
    v.push(case(
        "a free of an unknown tensor",
        "Unknown",
        edit(&|p| {
            let i = at(p, "free b");
            p.instructions[i] = ins(json!({"op": "free", "tensor": "nope"}));
        }),
    ));
    v.push(case(
        "a weight read by an op but not placed",
        "Weights",
        edit(&|p| p.weights.retain(|w| w.tensor != "w2")),
    ));
    v.push(case(
        "two weights overlapping",
        "Weights",
        edit(&|p| p.weights[1].offset = 0),
    ));
    v.push(case(
        "a weight allocated in the arena",
        "WeightInArena",
        edit(&|p| {
            p.instructions.insert(
                0,
                ins(json!({"op": "alloc", "tensor": "w", "offset": 2048})),
            )
        }),
    ));
    v
}

/// Placements: alignment, overlaps, double allocs and frees.
fn placement_cases(base: &Plan) -> Vec<Case> {
    let mut v = Vec::new();
    let edit = |f: &dyn Fn(&mut Plan)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    v.push(case(
        "an offset off the tensor's alignment",
        "Misaligned",
        edit(&|p| offset(p, 1, 1056)),
    ));
    v.push(case(
        "a workspace off the alignment",
        "Misaligned",
        edit(&|p| {
            let i = at(p, "exec conv");
            p.instructions[i] =
                ins(json!({"op": "exec", "node": "conv", "workspace_offset": 2080}));
        }),
    ));
    v.push(case(
        "a tensor on a live one",
        "Overlap",
        edit(&|p| offset(p, 1, 512)),
    ));
    v.push(case(
        "a workspace on a live tensor",
        "Overlap",
        edit(&|p| {
            let i = at(p, "exec conv");
            p.instructions[i] =
                ins(json!({"op": "exec", "node": "conv", "workspace_offset": 1024}));
        }),
    ));
    v.push(case(
        "a tensor allocated twice",
        "DoubleAlloc",
        edit(&|p| {
            p.instructions.insert(
                1,
                ins(json!({"op": "alloc", "tensor": "x", "offset": 4096})),
            )
        }),
    ));
    v.push(case(
        "a tensor freed twice",
        "NotReserved",
        edit(&|p| {
            let i = at(p, "free a");
            p.instructions
                .insert(i + 1, ins(json!({"op": "free", "tensor": "a"})));
        }),
    ));
    v
}

/// What an exec reads and its workspace.
fn read_cases(base: &Plan) -> Vec<Case> {
    let mut v = Vec::new();
    let edit = |f: &dyn Fn(&mut Plan)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    v.push(case(
        "an op that reads a tensor before it is written",
        "InputNotValid",
        edit(&|p| {
            p.instructions.insert(
                2,
                ins(json!({"op": "exec", "node": "relu", "workspace_offset": null})),
            )
        }),
    ));
    v.push(case(
        "an input freed and allocated again before a later reader",
        "InputNotValid",
        edit(&|p| {
            let i = at(p, "exec conv");
            p.instructions.splice(
                i + 1..i + 1,
                [
                    ins(json!({"op": "free", "tensor": "x"})),
                    ins(json!({"op": "alloc", "tensor": "x", "offset": 0})),
                ],
            );
        }),
    ));
    v.push(case(
        "an op that reads a freed tensor",
        "OperandNotReserved",
        edit(&|p| {
            let f = at(p, "free x");
            let x = p.instructions.remove(f);
            let h = at(p, "exec head");
            p.instructions.insert(h, x);
        }),
    ));
    v.push(case(
        "an op without its workspace offset",
        "Workspace",
        edit(&|p| {
            let i = at(p, "exec conv");
            p.instructions[i] =
                ins(json!({"op": "exec", "node": "conv", "workspace_offset": null}));
        }),
    ));
    v.push(case(
        "a workspace offset for an op without workspace",
        "Workspace",
        edit(&|p| {
            let i = at(p, "exec relu");
            p.instructions[i] = ins(json!({"op": "exec", "node": "relu", "workspace_offset": 0}));
        }),
    ));
    v
}

/// In-place sharing (`inplace_of`).
fn inplace_cases(base: &Plan) -> Vec<Case> {
    let mut v = Vec::new();
    let edit = |f: &dyn Fn(&mut Plan)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    v.push(Case {
        python_rejects: false, // no overlap: check_plan.py ignores inplace_of
        ..case(
            "an inplace_of that the producer does not declare",
            "BadInplace",
            edit(&|p| {
                p.instructions[1] =
                    ins(json!({"op": "alloc", "tensor": "a", "offset": 1024, "inplace_of": "x"}))
            }),
        )
    });
    let inplace_edit = |f: &dyn Fn(&mut Plan)| {
        let mut p = inplace();
        f(&mut p);
        p
    };
    v.push(case(
        "an in-place donor still reserved at the next exec",
        "BadInplace",
        inplace_edit(&|p| {
            let f = at(p, "free a");
            let free = p.instructions.remove(f);
            let e = at(p, "exec scale");
            p.instructions.insert(e + 1, free);
        }),
    ));
    v.push(case(
        "an in-place donor that a later op still reads",
        "BadInplace",
        inplace_edit(&|p| {
            let i = at(p, "alloc c");
            p.instructions[i] =
                ins(json!({"op": "alloc", "tensor": "c", "offset": 1024, "inplace_of": "b"}));
        }),
    ));
    v.push(case(
        "an in-place alloc off the donor's offset",
        "BadInplace",
        inplace_edit(&|p| {
            let i = at(p, "alloc b");
            p.instructions[i] =
                ins(json!({"op": "alloc", "tensor": "b", "offset": 1088, "inplace_of": "a"}));
        }),
    ));
    v
}

/// The host pool, the end of the plan, overflow, the plan's figures and the budget.
fn host_and_end_cases(base: &Plan) -> Vec<Case> {
    let mut v = Vec::new();
    let edit = |f: &dyn Fn(&mut Plan)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    v.push(case(
        "two spilled tensors overlapping in the host pool",
        "Host",
        edit(&|p| {
            p.host_bytes = 2000;
            let i = at(p, "free a");
            p.instructions.splice(
                i + 1..i + 1,
                [
                    ins(json!({"op": "spill_out", "tensor": "x", "host_offset": 0})),
                    ins(json!({"op": "spill_out", "tensor": "b", "host_offset": 512})),
                    ins(json!({"op": "spill_in", "tensor": "x", "offset": 0})),
                    ins(json!({"op": "spill_in", "tensor": "b", "offset": 2048})),
                ],
            );
        }),
    ));
    v.push(case(
        "a spill_in of a tensor not on the host",
        "Host",
        edit(&|p| {
            let i = at(p, "free a");
            p.instructions[i] = ins(json!({"op": "spill_in", "tensor": "a", "offset": 1024}));
        }),
    ));
    v.push(case(
        "an op never executed",
        "NotExecuted",
        edit(&|p| {
            let i = at(p, "exec head");
            p.instructions.remove(i);
        }),
    ));
    v.push(Case {
        python_rejects: false, // check_plan.py knows no `recompute` flag
        ..case(
            "an op flagged \"recompute\": false executed a second time",
            "ForbiddenRecompute",
            edit(&|p| {
                let i = at(p, "exec scale");
                p.instructions.insert(
                    i + 1,
                    ins(json!({"op": "exec", "node": "scale", "workspace_offset": null})),
                );
            }),
        )
    });
    v.push(case(
        "an output freed before the end",
        "OutputMissing",
        edit(&|p| {
            p.instructions
                .push(ins(json!({"op": "free", "tensor": "y"})))
        }),
    ));
    v.push(case(
        "an offset whose end overflows",
        "Overflow",
        edit(&|p| offset(p, 1, u64::MAX - 63)),
    ));
    v.push(case(
        "a stats.peak_bytes that is not the replayed peak",
        "Stats",
        edit(&|p| p.stats.peak_bytes = 3171),
    ));
    v.push(case(
        "an arena_bytes below the peak",
        "Stats",
        edit(&|p| p.arena_bytes = 3100),
    ));
    v.push(case(
        "a host_bytes below the host pool's peak",
        "Stats",
        edit(&|p| {
            let i = at(p, "free a");
            p.instructions[i] = ins(json!({"op": "spill_out", "tensor": "a", "host_offset": 64}));
        }),
    ));
    v.push(Case {
        budget: Some(3000),
        ..case("a peak over the budget", "OverBudget", base.clone())
    });
    v
}
