//! The fusion pass on zoo inference graphs, black box: the fused graph plans, validates and
//! executes on the CPU with outputs equal to its reference, computes the original graph's
//! outputs bit for bit (`executor::equivalence`), and its planned peak is no larger than
//! the unfused graph's. (The CLI side is in cli/tests/fusion_cli.rs.)

use memplan::graph::Graph;
use memplan::passes::fuse::Fuse;
use memplan::passes::Pass;
use memplan::{plan, validate, OrderMode, PlanOptions, Strategy};
use memplan_executor::{equivalence, execute, ExecOptions, KernelMode};

#[path = "support/shared.rs"]
mod shared;

/// The zoo graph, or `None` when ../shared is missing (see `shared::skip`).
fn zoo(name: &str) -> Option<Graph> {
    let p = shared::zoo_path(name)?;
    Some(Graph::parse(&std::fs::read_to_string(p).unwrap()).unwrap())
}

fn heuristic() -> PlanOptions {
    PlanOptions {
        order: OrderMode::Auto,
        strategy: Strategy::Heuristic,
        time_limit: None,
        ..PlanOptions::default()
    }
}

fn opts(kernels: KernelMode) -> ExecOptions {
    ExecOptions {
        kernels,
        seed: 11,
        ..ExecOptions::default()
    }
}

fn check_model(name: &str) {
    let Some(g) = zoo(name) else {
        return;
    };
    let out = Fuse::default().run(&g).unwrap();
    let f = out.graph;
    assert!(f.ops.len() < g.ops.len(), "{name}: nothing fused");
    assert!(
        out.report.arena_tensor_bytes_after < out.report.arena_tensor_bytes_before,
        "{name}: {:?}",
        out.report
    );
    assert!(f.ops.iter().any(|o| o.fused.is_some()));
    // the written graph reads back identically
    assert_eq!(Graph::parse(&f.to_json()).unwrap(), f);
    for mode in [KernelMode::Real, KernelMode::Mix] {
        let eq = equivalence(&g, &f, &opts(mode), 0.0).unwrap();
        assert!(
            eq.outputs_equal && eq.outputs_compared > 0,
            "{name} {mode:?}: {:?}",
            eq.first_mismatch
        );
    }
    let pf = plan(&f, &heuristic()).unwrap();
    validate(&f, &pf, None).unwrap();
    let report = execute(&f, &pf, &opts(KernelMode::Real)).unwrap();
    assert!(report.outputs_equal, "{name}: {:?}", report.first_mismatch);
    assert!(report.kernels.get("fused").copied().unwrap_or(0) > 0);
    let pg = plan(&g, &heuristic()).unwrap();
    assert!(
        pf.stats.peak_bytes <= pg.stats.peak_bytes,
        "{name}: fused peak {} > unfused {}",
        pf.stats.peak_bytes,
        pg.stats.peak_bytes
    );
}

#[test]
fn resnet18_inference_fuses_and_computes_the_same_outputs() {
    check_model("resnet18.1.inference");
}

#[test]
fn mobilenet_v2_inference_fuses_and_computes_the_same_outputs() {
    check_model("mobilenet_v2.1.inference");
}

#[test]
fn resnet50_inference_fuses_and_computes_the_same_outputs() {
    check_model("resnet50.1.inference");
}
