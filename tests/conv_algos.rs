//! Conv algorithm choice end to end on resnet18 and vgg16 inference (../shared/zoo; see
//! tests/support/shared.rs when missing): every mode plans, validates, passes check_plan.py
//! against the graph with the chosen workspaces, and executes on the CPU with outputs bitwise
//! equal to the reference run of that graph (same algorithms) and within tolerance of the
//! original graph; the peaks order as min-memory = auto <= fastest; under a budget of 70 % of
//! the fastest plan's peak, `auto` fits by downgrading convs and reports the mix.

#[path = "support/check_plan.rs"]
mod check_plan;

use check_plan::{python_check, python_check_within, shared};
use memplan::budget::{self, schedule::Params, BudgetOptions, BudgetSpec};
use memplan::conv_algo::{self, ConvAlgoMode};
use memplan::cost::DeviceProfile;
use memplan::graph::Graph;
use memplan::{validate, PlanOptions, Strategy};
use memplan_executor::{equivalence, execute, ExecOptions, KernelMode};
use std::path::Path;

fn zoo(name: &str) -> Option<Graph> {
    let p = shared::zoo_path(name)?;
    Some(Graph::parse(&std::fs::read_to_string(p).unwrap()).unwrap())
}

fn opts() -> PlanOptions {
    PlanOptions {
        strategy: Strategy::Heuristic,
        time_limit: None,
        ..PlanOptions::default()
    }
}

fn exec_opts() -> ExecOptions {
    ExecOptions {
        kernels: KernelMode::Real,
        seed: 3,
        ..ExecOptions::default()
    }
}

fn check_modes(name: &str) {
    let Some(g) = zoo(name) else { return };
    let p = DeviceProfile::h200();
    let mut peaks = Vec::new();
    let mut times = Vec::new();
    for mode in [
        ConvAlgoMode::MinMemory,
        ConvAlgoMode::Auto,
        ConvAlgoMode::Fastest,
    ] {
        let c = conv_algo::choose_and_plan(&g, mode, &p, &opts()).unwrap();
        validate(&c.graph, &c.plan, None).unwrap();
        python_check(&c.graph, &c.plan, mode.name());
        // The plan names each conv's algorithm, and the graph is rebuilt from it.
        assert_eq!(
            conv_algo::graph_for_plan(&p, &g, &c.plan).unwrap(),
            c.graph,
            "{name} {}",
            mode.name()
        );
        let r = execute(&c.graph, &c.plan, &exec_opts()).unwrap();
        assert!(
            r.outputs_equal,
            "{name} {}: {:?}",
            mode.name(),
            r.first_mismatch
        );
        // Against the original graph's kernels: Winograd rounds differently (tolerance
        // documented in executor::kernels::conv_cpu). Only the fastest mode (the most
        // Winograd convs), as these CPU runs are slow.
        if mode == ConvAlgoMode::Fastest {
            let e = equivalence(&g, &c.graph, &exec_opts(), 1e-3).unwrap();
            assert!(e.outputs_equal, "{name}: {:?}", e.first_mismatch);
        }
        peaks.push(c.plan.stats.peak_bytes);
        times.push(conv_algo::total_us(&p, &c.graph));
    }
    let (min, auto, fast) = (peaks[0], peaks[1], peaks[2]);
    assert_eq!(auto, min, "{name}: auto keeps the min-memory peak");
    assert!(min <= auto && auto <= fast, "{name}: {peaks:?}");
    assert!(
        times[2] <= times[1] && times[1] < times[0],
        "{name}: modelled times {times:?}"
    );
}

#[test]
fn every_mode_plans_validates_and_runs_resnet18() {
    check_modes("resnet18.1.inference");
}

#[test]
fn every_mode_plans_validates_and_runs_vgg16() {
    check_modes("vgg16.1.inference");
}

fn budget_check(name: &str) {
    let Some(g) = zoo(name) else { return };
    let p = DeviceProfile::h200();
    let fast = conv_algo::with_choice(&g, &conv_algo::pick(&p, &g, true));
    let free = memplan::plan(&fast, &opts()).unwrap();
    let budget_bytes = free.stats.peak_bytes * 7 / 10;
    let params = Params {
        conv_downgrade: true,
        ..Params::default()
    };
    for strategy in ["sweep", "ilp"] {
        let plan = budget::plan_under_budget(
            &fast,
            BudgetSpec::Bytes(budget_bytes),
            &opts(),
            &BudgetOptions {
                strategy: strategy.into(),
                params,
                ..BudgetOptions::default()
            },
        )
        .unwrap();
        let chosen = conv_algo::graph_for_plan(&p, &fast, &plan).unwrap();
        validate(&chosen, &plan, Some(budget_bytes)).unwrap();
        python_check_within(&chosen, &plan, Some(budget_bytes), strategy);
        let b = plan.stats.budget.as_ref().unwrap();
        assert!(plan.stats.peak_bytes <= budget_bytes);
        assert!(b.algo_downgrades > 0, "{name} {strategy}: {b:?}");
        assert!(b.algo_downgrade_us > 0.0);
        let convs: usize = b.algo_mix.values().sum();
        assert_eq!(
            convs,
            g.ops.iter().filter(|o| o.op_type == "conv2d").count()
        );
        assert!(b.overhead_us >= b.algo_downgrade_us - 1e-9);
        let r = execute(&chosen, &plan, &exec_opts()).unwrap();
        assert!(r.outputs_equal, "{name} {strategy}: {:?}", r.first_mismatch);
    }
    // Without downgrades the fastest algorithms cannot fit: the workspace of one conv is
    // too large.
    let e = budget::plan_under_budget(
        &fast,
        BudgetSpec::Bytes(budget_bytes),
        &opts(),
        &BudgetOptions {
            strategy: "sweep".into(),
            ..BudgetOptions::default()
        },
    );
    assert!(e.is_err(), "{name}");
}

#[test]
fn auto_fits_seventy_percent_of_the_fastest_peak_by_downgrading_resnet18() {
    budget_check("resnet18.1.inference");
}

#[test]
fn auto_fits_seventy_percent_of_the_fastest_peak_by_downgrading_vgg16() {
    budget_check("vgg16.1.inference");
}

#[test]
fn old_plans_without_algo_fields_still_parse_and_plans_with_them_round_trip() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/resnet_block.train.json"),
    )
    .unwrap();
    let g = Graph::parse(&text).unwrap();
    let p = memplan::plan(&g, &opts()).unwrap();
    let json = p.to_json();
    assert!(!json.contains("\"algo\""));
    assert_eq!(
        memplan::Plan::parse(&json).unwrap().instructions,
        p.instructions
    );
    // The sample's convs carry explicit workspaces, which keep them out of the model
    // (algorithm "given"); without them every conv gets an algorithm.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut convs = 0;
    for op in v["ops"].as_array_mut().unwrap() {
        if op["type"] == "conv2d" {
            op.as_object_mut().unwrap().remove("workspace");
            convs += 1;
        }
    }
    assert!(convs > 0);
    let bare = Graph::parse(&v.to_string()).unwrap();
    let profile = DeviceProfile::h200();
    let c = conv_algo::choose_and_plan(&bare, ConvAlgoMode::Fastest, &profile, &opts()).unwrap();
    assert_ne!(
        c.graph, bare,
        "the fastest choice writes the algorithms into the graph"
    );
    let json = c.plan.to_json();
    let with_algo = c
        .plan
        .instructions
        .iter()
        .filter(|i| matches!(i, memplan::Instruction::Exec { algo: Some(_), .. }))
        .count();
    assert_eq!(with_algo, convs, "every conv's exec names its algorithm");
    assert_eq!(json.matches("\"algo\"").count(), convs, "{json}");
    let back = memplan::Plan::parse(&json).unwrap();
    assert_eq!(back.instructions, c.plan.instructions);
    // The graph the plan was made for is recovered from the parsed plan.
    assert_eq!(
        conv_algo::graph_for_plan(&profile, &bare, &back).unwrap(),
        c.graph
    );
}

#[test]
fn fused_convs_take_an_algorithm_and_run_it_inside_the_fused_op() {
    use memplan::passes::{fuse::Fuse, Pass};
    let Some(g) = zoo("resnet18.1.inference") else {
        return;
    };
    let fused = Fuse::default().run(&g).unwrap().graph;
    let fused_convs = fused
        .ops
        .iter()
        .filter(|o| o.op_type.starts_with("fused:conv2d"))
        .count();
    assert!(fused_convs > 10, "{fused_convs}");
    let p = DeviceProfile::h200();
    let c = conv_algo::choose_and_plan(&fused, ConvAlgoMode::Fastest, &p, &opts()).unwrap();
    // Every fused conv gets an algorithm; those with a workspace give it to the fused op.
    let mix = conv_algo::algo_mix(&c.graph);
    assert_eq!(mix.get("none"), None, "{mix:?}");
    assert!(
        c.graph
            .ops
            .iter()
            .any(|o| o.op_type.starts_with("fused:conv2d") && o.workspace > 0),
        "{mix:?}"
    );
    validate(&c.graph, &c.plan, None).unwrap();
    python_check(&c.graph, &c.plan, "fused");
    assert!(c
        .plan
        .instructions
        .iter()
        .any(|i| matches!(i, memplan::Instruction::Exec { node, algo: Some(_), .. } if node.contains('+'))));
    assert_eq!(
        conv_algo::graph_for_plan(&p, &fused, &c.plan).unwrap(),
        c.graph
    );
    let r = execute(&c.graph, &c.plan, &exec_opts()).unwrap();
    assert!(r.outputs_equal, "{:?}", r.first_mismatch);
    let e = equivalence(&g, &c.graph, &exec_opts(), 1e-3).unwrap();
    assert!(e.outputs_equal, "{:?}", e.first_mismatch);
}
