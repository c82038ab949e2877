//! The CPU executor proves plans by running them: heuristic, exact and rewritten plans
//! (spills and recomputes) of the sample, zoo graphs and random DAGs reproduce the
//! reference outputs bit for bit; corrupted plans (overlapping live tensors, an early free,
//! a spill_in onto a live tensor) that bypass the validator are caught.

#[path = "../../tests/support/graphs.rs"]
mod graphs;

use graphs::{arb_graph, MIXING};
use memplan::graph::Graph;
use memplan::plan::{Instruction, Plan};
use memplan::{plan, validate, OrderMode, PlanOptions, Strategy as Solvers};
use memplan_executor::rewrite::{rewrite, RewriteOptions};
use memplan_executor::{execute, ExecError, ExecOptions, KernelMode};
use proptest::prelude::*;
use std::collections::HashMap;

#[path = "../../tests/support/shared.rs"]
mod shared;

fn sample() -> Graph {
    Graph::parse(memplan::graph::SAMPLE_JSON).unwrap()
}

fn zoo(name: &str) -> Option<Graph> {
    let p = shared::zoo_path(name)?;
    Some(Graph::parse(&std::fs::read_to_string(p).unwrap()).unwrap())
}

fn heuristic(order: OrderMode) -> PlanOptions {
    PlanOptions {
        order,
        strategy: Solvers::Heuristic,
        time_limit: None,
        ..PlanOptions::default()
    }
}

/// The solving strategy with deterministic work caps (effort 1, no wall clock).
fn exact() -> PlanOptions {
    PlanOptions {
        order: OrderMode::Auto,
        strategy: Solvers::Auto,
        time_limit: None,
        effort: Some(1),
        ..PlanOptions::default()
    }
}

fn opts(kernels: KernelMode) -> ExecOptions {
    ExecOptions {
        kernels,
        seed: 7,
        ..ExecOptions::default()
    }
}

/// Runs `p` and asserts it is valid and reproduces the reference.
fn assert_runs_equal(g: &Graph, p: &Plan, kernels: KernelMode) -> memplan_executor::ExecReport {
    validate(g, p, None).unwrap_or_else(|v| panic!("{}: invalid plan: {v}", g.name));
    let r = execute(g, p, &opts(kernels)).unwrap_or_else(|e| panic!("{}: {e}", g.name));
    assert!(
        r.outputs_equal,
        "{}: outputs differ: {:?}",
        g.name, r.first_mismatch
    );
    assert_eq!(r.replay_peak_bytes, p.stats.peak_bytes);
    assert!(r.arena_allocated >= p.arena_bytes && r.arena_allocated < p.arena_bytes + 256);
    assert_eq!(r.outputs_compared, memplan_executor::output_count(g));
    r
}

/// Plans with spills (and recomputes, where the graph keeps a producer's inputs alive
/// long enough, as training graphs do) inserted; asserts some were.
fn with_round_trips(g: &Graph, p: &Plan) -> Plan {
    let (q, s) = rewrite(g, p, RewriteOptions::default());
    let training = g.name.contains("train");
    assert!(
        s.spills > 0 && (s.recomputes > 0 || !training),
        "{}: {s:?}",
        g.name
    );
    q
}

#[test]
fn heuristic_ilp_exact_inplace_and_rewritten_plans_of_the_sample_reproduce_the_reference() {
    let g = sample();
    for o in [
        heuristic(OrderMode::Given),
        heuristic(OrderMode::Auto),
        exact(),
        PlanOptions {
            strategy: Solvers::Ilp,
            ..exact()
        },
    ] {
        let p = plan(&g, &o).unwrap();
        assert_runs_equal(&g, &p, KernelMode::Real);
        let q = with_round_trips(&g, &p);
        let r = assert_runs_equal(&g, &q, KernelMode::Real);
        assert!(r.recomputes > 0 && r.spill_outs > 0 && r.spill_in_bytes == r.spill_out_bytes);
        assert!(r.host_allocated >= q.host_bytes && q.host_bytes > 0);
    }
    let p = plan(
        &g,
        &PlanOptions {
            inplace: true,
            ..heuristic(OrderMode::Auto)
        },
    )
    .unwrap();
    assert_runs_equal(&g, &p, KernelMode::Real);
    assert_runs_equal(&g, &p, KernelMode::Mix);
}

#[test]
fn zoo_inference_graphs_run_with_real_kernels_and_equal_outputs() {
    for name in [
        "resnet18.1.inference",
        "mobilenet_v2.1.inference",
        "densenet121.1.inference",
    ] {
        let Some(g) = zoo(name) else { continue };
        let p = plan(&g, &heuristic(OrderMode::Auto)).unwrap();
        let r = assert_runs_equal(&g, &p, KernelMode::Real);
        assert!(
            r.kernels.get("conv2d").copied().unwrap_or(0) > 0,
            "{name}: {r:?}"
        );
        assert_eq!(r.reference_nonfinite, 0, "{name}");
        assert_runs_equal(&g, &with_round_trips(&g, &p), KernelMode::Real);
    }
}

#[test]
fn a_zoo_training_graph_runs_with_spills_and_recomputes_in_mix_mode() {
    let Some(g) = zoo("alexnet.64.train") else {
        return;
    };
    let p = plan(&g, &heuristic(OrderMode::Given)).unwrap();
    let q = with_round_trips(&g, &p);
    let r = assert_runs_equal(&g, &q, KernelMode::Mix);
    assert_eq!(r.kernels.get("mix").copied(), Some(g.ops.len()));
}

/// For each instruction index, the tensors resident just before it, with their ranges.
fn residency(g: &Graph, p: &Plan) -> Vec<HashMap<String, (u64, u64)>> {
    let mut at: HashMap<String, (u64, u64)> = HashMap::new();
    let mut out = Vec::new();
    let size = |n: &str| g.tensor(g.tensor_by_name(n).unwrap()).size;
    for ins in &p.instructions {
        out.push(at.clone());
        match ins {
            Instruction::Alloc { tensor, offset, .. }
            | Instruction::SpillIn { tensor, offset, .. } => {
                at.insert(tensor.clone(), (*offset, offset + size(tensor)));
            }
            Instruction::Free { tensor, .. } | Instruction::SpillOut { tensor, .. } => {
                at.remove(tensor);
            }
            _ => {}
        }
    }
    out
}

/// Index of the first exec reading `t` at or after `from`.
fn next_read(g: &Graph, p: &Plan, t: &str, from: usize) -> Option<usize> {
    let id = g.tensor_by_name(t)?;
    (from..p.instructions.len()).find(|&j| match &p.instructions[j] {
        Instruction::Exec { node, .. } => g
            .ops
            .iter()
            .any(|o| &o.name == node && o.inputs.contains(&id)),
        _ => false,
    })
}

/// The run must fail or differ.
fn assert_detected(g: &Graph, p: &Plan, kernels: KernelMode, what: &str) {
    assert!(
        validate(g, p, None).is_err(),
        "{what}: the validator should reject it too"
    );
    match execute(g, p, &opts(kernels)) {
        Ok(r) => assert!(!r.outputs_equal, "{what}: not detected: {r:?}"),
        Err(e) => assert!(matches!(e, ExecError::BadPlan { .. }), "{what}: {e}"),
    }
}

/// Moves the first fresh alloc that lands while another tensor is resident (and read
/// later) onto that tensor's offset.
fn overlap_two_live_tensors(g: &Graph, p: &Plan) -> Plan {
    let res = residency(g, p);
    for (i, ins) in p.instructions.iter().enumerate() {
        let Instruction::Alloc {
            tensor,
            inplace_of: None,
            ..
        } = ins
        else {
            continue;
        };
        let mut live: Vec<(&String, &(u64, u64))> = res[i].iter().collect();
        live.sort();
        for (other, &(lo, _)) in live {
            let b = g.tensor(g.tensor_by_name(tensor).unwrap());
            let still_read = next_read(g, p, other, i).is_some();
            if still_read && lo % b.alignment == 0 && lo + b.size <= p.arena_bytes {
                let mut q = p.clone();
                if let Instruction::Alloc { offset, .. } = &mut q.instructions[i] {
                    *offset = lo;
                }
                return q;
            }
        }
    }
    panic!("no overlap candidate in {}", g.name);
}

#[test]
fn two_live_tensors_at_overlapping_offsets_make_the_outputs_differ() {
    let g = sample();
    let p = plan(&g, &heuristic(OrderMode::Given)).unwrap();
    let q = overlap_two_live_tensors(&g, &p);
    for k in [KernelMode::Real, KernelMode::Mix] {
        assert_detected(&g, &q, k, "overlap");
        let r = execute(&g, &q, &opts(k)).unwrap();
        assert!(r.first_mismatch.is_some());
    }
    if let Some(z) = zoo("resnet18.1.inference") {
        let p = plan(&z, &heuristic(OrderMode::Given)).unwrap();
        assert_detected(
            &z,
            &overlap_two_live_tensors(&z, &p),
            KernelMode::Real,
            "zoo overlap",
        );
    }
}

#[test]
fn an_early_free_is_reported_as_an_error_naming_the_tensor() {
    let g = sample();
    let p = plan(&g, &heuristic(OrderMode::Given)).unwrap();
    // Move the free of the first tensor with two reads to right after its first read.
    let res = residency(&g, &p);
    let (j, t) = p
        .instructions
        .iter()
        .enumerate()
        .find_map(|(j, ins)| match ins {
            Instruction::Free { tensor, .. } => {
                let first = next_read(&g, &p, tensor, 0)?;
                (next_read(&g, &p, tensor, first + 1)? < j && res[j].contains_key(tensor))
                    .then(|| (j, (tensor.clone(), first)))
            }
            _ => None,
        })
        .unwrap();
    let mut q = p.clone();
    let free = q.instructions.remove(j);
    q.instructions.insert(t.1 + 1, free);
    assert_detected(&g, &q, KernelMode::Real, "early free");
    let e = execute(&g, &q, &opts(KernelMode::Real)).unwrap_err();
    assert!(e.to_string().contains(&t.0), "{e}");
}

#[test]
fn a_spill_in_onto_a_live_tensor_makes_the_outputs_differ() {
    let g = sample();
    let p = with_round_trips(&g, &plan(&g, &heuristic(OrderMode::Given)).unwrap());
    let res = residency(&g, &p);
    let mut q = None;
    'find: for (i, ins) in p.instructions.iter().enumerate() {
        let Instruction::SpillIn { tensor, .. } = ins else {
            continue;
        };
        let b = g.tensor(g.tensor_by_name(tensor).unwrap());
        let mut live: Vec<_> = res[i].iter().collect();
        live.sort();
        for (other, &(lo, _)) in live {
            if next_read(&g, &p, other, i).is_some()
                && lo % b.alignment == 0
                && lo + b.size <= p.arena_bytes
            {
                let mut c = p.clone();
                if let Instruction::SpillIn { offset, .. } = &mut c.instructions[i] {
                    *offset = lo;
                }
                q = Some(c);
                break 'find;
            }
        }
    }
    let q = q.expect("a spill_in with a live tensor to land on");
    assert_detected(&g, &q, KernelMode::Mix, "wrong spill_in offset");
    assert_detected(&g, &q, KernelMode::Real, "wrong spill_in offset");
}

#[test]
fn ranges_outside_the_arena_and_unknown_names_are_clear_errors() {
    let g = sample();
    let p = plan(&g, &heuristic(OrderMode::Given)).unwrap();
    let mut q = p.clone();
    if let Some(Instruction::Alloc { offset, .. }) = q.instructions.first_mut() {
        *offset = p.arena_bytes.div_ceil(256) * 256; // past the end
    }
    let e = execute(&g, &q, &opts(KernelMode::Mix)).unwrap_err();
    assert!(
        matches!(
            e,
            ExecError::BadPlan {
                instruction: Some(0),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("does not fit arena_bytes"), "{e}");
    let mut q = p.clone();
    q.instructions.insert(
        0,
        Instruction::Exec {
            stream: None,
            node: "nope".into(),
            workspace_offset: None,
            algo: None,
        },
    );
    let e = execute(&g, &q, &opts(KernelMode::Mix)).unwrap_err();
    assert!(e.to_string().contains("unknown op \"nope\""), "{e}");
    // exec before alloc
    let mut q = p.clone();
    let first_exec = q
        .instructions
        .iter()
        .position(|i| matches!(i, Instruction::Exec { .. }))
        .unwrap();
    let ex = q.instructions.remove(first_exec);
    let Instruction::Exec { node, .. } = &ex else {
        unreachable!()
    };
    let node = node.clone();
    q.instructions.insert(0, ex);
    // Its first operand (the graph's input) is allocated by a later instruction.
    let op = g.ops.iter().find(|o| o.name == node).unwrap();
    let read = &g.tensor(op.inputs[0]).name;
    let e = execute(&g, &q, &opts(KernelMode::Mix)).unwrap_err();
    assert!(
        matches!(
            &e,
            ExecError::BadPlan { instruction: Some(0), message }
                if *message == format!("op {node:?} reads {read:?}, which is not resident")
        ),
        "{e}"
    );
}

#[test]
fn the_reference_depends_on_the_seed_and_nothing_else() {
    use memplan_executor::{kernels, reference};
    let g = sample();
    let k = kernels::select_all(&g, KernelMode::Real);
    let a = reference::run(&g, &k, 1).unwrap().outputs;
    let b = reference::run(&g, &k, 1).unwrap().outputs;
    let c = reference::run(&g, &k, 2).unwrap().outputs;
    assert_eq!(a, b);
    assert_ne!(a, c);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn plans_of_random_dags_with_and_without_round_trips_reproduce_the_reference(
        v in arb_graph(MIXING), inplace in any::<bool>()
    ) {
        let g = Graph::parse(&v.to_string()).unwrap();
        let p = plan(&g, &PlanOptions { inplace, ..heuristic(OrderMode::Auto) }).unwrap();
        assert_runs_equal(&g, &p, KernelMode::Mix);
        let (q, _) = rewrite(&g, &p, RewriteOptions { recompute_every: 1, spill_every: 1 });
        assert_runs_equal(&g, &q, KernelMode::Mix);
    }
}

#[test]
fn the_isolated_plan_is_valid_and_reproduces_the_reference() {
    let g = sample();
    let p = memplan_executor::reference::isolated_plan(&g);
    assert_runs_equal(&g, &p, KernelMode::Real);
}

#[test]
fn equivalence_accepts_an_identical_graph_and_catches_a_changed_op() {
    use memplan_executor::equivalence;
    let g = sample();
    let same = equivalence(&g, &g, &opts(KernelMode::Real), 0.0).unwrap();
    assert!(same.outputs_equal, "{same:?}");
    assert!(same.outputs_compared > 0);
    // Renaming an op that runs the mixing kernel changes its output's bytes (the mix seed
    // hashes the op name), and every output downstream of it.
    let mut changed = g.clone();
    let kernels = memplan_executor::kernels::select_all(&g, KernelMode::Real);
    let i = kernels
        .iter()
        .position(|k| k.name() == "mix")
        .expect("the sample has a mixing op");
    changed.ops[i].name.push_str("_renamed");
    let changed = changed.rebuilt().unwrap();
    let diff = equivalence(&g, &changed, &opts(KernelMode::Real), 0.0).unwrap();
    assert!(!diff.outputs_equal);
    assert!(diff.first_mismatch.is_some());
    // An output that the rewrite lost is a mismatch too.
    let mut lost = g.clone();
    let out = lost
        .tensors
        .iter()
        .position(|t| t.kind == memplan::TensorKind::Output)
        .unwrap();
    lost.tensors[out].name.push_str("_other");
    let lost = lost.rebuilt().unwrap();
    assert!(
        !equivalence(&g, &lost, &opts(KernelMode::Real), 0.0)
            .unwrap()
            .outputs_equal
    );
}
