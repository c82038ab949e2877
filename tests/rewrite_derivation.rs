//! A plan that carries a rewritten graph records how it was derived (`rewrites`), and
//! `graph_for_plan` (what `memplan check ORIGINAL PLAN`, `POST /v1/check`, the zoo and Python
//! use) accepts the carried graph only when applying the records and the execs' conv
//! algorithms to ORIGINAL again gives exactly that graph. Black box: every rewrite under
//! every planning mode derives again; a carried graph edited after planning, records edited
//! or dropped, and records without a carried graph are each refused naming the culprit.

use memplan::budget::BudgetSpec;
use memplan::graph::Graph;
use memplan::passes::{replay, RewriteStep};
use memplan::pipeline::{self, graph_for_plan, Control, PipelineOptions, Rewrite};
use memplan::plan::TileRegionStep;
use memplan::{validate, Plan, Strategy};

#[path = "support/shared.rs"]
mod shared;

fn sample() -> Graph {
    Graph::parse(memplan::graph::SAMPLE_JSON).unwrap()
}

fn zoo(name: &str) -> Option<Graph> {
    let p = shared::zoo_path(name)?;
    Some(Graph::parse(&std::fs::read_to_string(p).unwrap()).unwrap())
}

/// The plan as a front end reads it back from its file.
fn reread(plan: &Plan) -> Plan {
    Plan::parse(&plan.to_json()).unwrap()
}

fn options(rewrite: &[Rewrite], tile: &str) -> PipelineOptions {
    PipelineOptions {
        strategy: Strategy::Heuristic,
        rewrite: rewrite.to_vec(),
        tile: tile.to_string(),
        ..PipelineOptions::default()
    }
}

/// A plan of `g` with `opts` whose carried graph the records derive again.
fn plan_that_derives(g: &Graph, opts: &PipelineOptions, what: &str) -> Plan {
    let r = pipeline::run(g, opts, &Control::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(r.rewritten, r.plan.rewritten_graph.is_some(), "{what}");
    let back = reread(&r.plan);
    let replayed = graph_for_plan(g.clone(), &back).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(replayed, r.graph, "{what}");
    validate(&replayed, &back, None).unwrap_or_else(|e| panic!("{what}: {e}"));
    // Against its own carried graph (`--graph-out`), as the README shows, it checks too.
    assert_eq!(
        graph_for_plan(r.graph.clone(), &back).unwrap_or_else(|e| panic!("{what}: {e}")),
        r.graph,
        "{what}"
    );
    // The records alone (conv algorithms aside) give the graph the passes made.
    let passes_only = replay(g, &back.rewrites).unwrap();
    assert_eq!(
        passes_only.ops.len(),
        r.graph.ops.len(),
        "{what}: the records give another op count"
    );
    back
}

#[test]
fn every_rewrite_under_every_planning_mode_records_steps_that_give_the_carried_graph_again() {
    let mut graphs = vec![("sample", sample())];
    graphs.extend(zoo("resnet18.1.inference").map(|g| ("resnet18", g)));
    for (name, g) in &graphs {
        let rewrites: [(&[Rewrite], &str); 5] = [
            (&[Rewrite::Fuse], "auto"),
            (&[Rewrite::Tile], "2"),
            (&[Rewrite::Tile], "auto"),
            (&[Rewrite::ConvAlgos], "auto"),
            (&Rewrite::ALL, "4"),
        ];
        for (rewrite, tile) in rewrites {
            let base = options(rewrite, tile);
            let modes = [
                ("plain", base.clone()),
                (
                    "budget",
                    PipelineOptions {
                        // Inference graphs often peak at one op's own need, below which no
                        // budget can go; the budget path is what this covers.
                        budget: Some(BudgetSpec::Percent(if *name == "sample" {
                            80.0
                        } else {
                            100.0
                        })),
                        ..base.clone()
                    },
                ),
                (
                    "tiers",
                    PipelineOptions {
                        tiers: true,
                        ..base.clone()
                    },
                ),
                (
                    "streams",
                    PipelineOptions {
                        streams: 2,
                        ..base.clone()
                    },
                ),
            ];
            for (mode, opts) in modes {
                let what = format!("{name}, rewrite {rewrite:?} tile {tile}, {mode}");
                let plan = plan_that_derives(g, &opts, &what);
                let tiled = plan
                    .rewrites
                    .iter()
                    .any(|s| matches!(s, RewriteStep::Tile { .. }));
                if *name == "resnet18" && rewrite.contains(&Rewrite::Tile) {
                    assert!(tiled, "{what}: resnet18 tiles");
                }
                if !rewrite.contains(&Rewrite::Tile) {
                    assert!(!tiled, "{what}");
                }
            }
        }
    }
}

/// A fused plan of the sample and the op the test edits (a fused op).
fn fused_sample_plan() -> (Graph, Plan, usize) {
    let g = sample();
    let plan = plan_that_derives(&g, &options(&[Rewrite::Fuse], "auto"), "fuse");
    assert_eq!(
        plan.rewrites,
        [RewriteStep::Fuse {
            fold_pad: true,
            chains: true
        }]
    );
    let carried = plan.rewritten_graph.as_ref().unwrap();
    let k = carried["ops"]
        .as_array()
        .unwrap()
        .iter()
        .position(|o| o.get("fused").is_some())
        .expect("the sample fuses");
    (g, plan, k)
}

fn refusal(g: &Graph, plan: &Plan) -> String {
    let err = graph_for_plan(g.clone(), &reread(plan)).unwrap_err();
    assert!(err.makes_plan_invalid(), "{err}");
    err.to_string()
}

#[test]
fn a_carried_graph_edited_after_planning_is_refused_naming_the_field() {
    let (g, mut plan, k) = fused_sample_plan();
    let doc = plan.rewritten_graph.as_mut().unwrap();
    let name = doc["ops"][k]["name"].as_str().unwrap().to_string();
    // Same interface, same tensors: only what a member computes changes.
    let member = &mut doc["ops"][k]["fused"][0];
    let was = member["type"].as_str().unwrap().to_string();
    member["type"] = serde_json::json!("sigmoid");
    let err = refusal(&g, &plan);
    assert!(
        err.contains(&format!(
            "ops[{k}] ({name:?}).fused[0] ({:?}).type: expected {was:?}, found \"sigmoid\"",
            plan.rewritten_graph.as_ref().unwrap()["ops"][k]["fused"][0]["name"]
                .as_str()
                .unwrap()
        )),
        "{err}"
    );
    assert!(err.contains("recorded rewrites (fuse)"), "{err}");
}

#[test]
fn a_carried_graph_without_records_is_refused_unless_nothing_but_conv_algorithms_changed() {
    let (g, mut plan, _) = fused_sample_plan();
    plan.rewrites.clear();
    let err = refusal(&g, &plan);
    assert!(err.contains("recorded rewrites (none)"), "{err}");
    // Conv algorithms alone need no record: the execs name them.
    let algos = plan_that_derives(&g, &options(&[Rewrite::ConvAlgos], "auto"), "algos");
    assert!(algos.rewrites.is_empty());
    if algos.rewritten_graph.is_some() {
        graph_for_plan(g.clone(), &algos).unwrap();
    }
}

#[test]
fn a_record_that_changes_nothing_is_refused_naming_it() {
    // An empty tiling after the fusion, or the fusion recorded twice: each step must have
    // changed the graph, as the pipeline records only those.
    let (g, plan, _) = fused_sample_plan();
    for extra in [
        RewriteStep::Tile { regions: vec![] },
        RewriteStep::Fuse {
            fold_pad: true,
            chains: true,
        },
    ] {
        let mut p = plan.clone();
        p.rewrites.push(extra.clone());
        let err = refusal(&g, &p);
        assert!(
            err.contains("recorded step 1 changes nothing in the graph it is applied to"),
            "{extra:?}: {err}"
        );
    }
}

#[test]
fn records_without_a_carried_graph_are_refused() {
    let (g, mut plan, _) = fused_sample_plan();
    plan.rewritten_graph = None;
    let err = refusal(&g, &plan);
    assert!(
        err.contains("records rewrites (fuse) but carries no rewritten_graph"),
        "{err}"
    );
}

#[test]
fn edited_tiling_records_are_refused_naming_the_region() {
    let Some(g) = zoo("resnet18.1.inference") else {
        return;
    };
    let plan = plan_that_derives(&g, &options(&[Rewrite::Tile], "2"), "tile 2");
    let regions = |p: &Plan| match &p.rewrites[0] {
        RewriteStep::Tile { regions } => regions.clone(),
        other => panic!("{other:?}"),
    };
    let first = regions(&plan)[0].clone();
    let with = |f: &dyn Fn(&mut TileRegionStep)| {
        let mut p = plan.clone();
        if let RewriteStep::Tile { regions } = &mut p.rewrites[0] {
            f(&mut regions[0]);
        }
        refusal(&g, &p)
    };
    // Another strip count gives another graph than the one carried.
    let err = with(&|r| r.strips = 3);
    assert!(
        err.contains("is not the graph its recorded rewrites (tile)"),
        "{err}"
    );
    // A region the graph does not have, or cannot cut, is named.
    let err = with(&|r| r.first_op = "no such op".into());
    assert!(
        err.contains(&format!(
            "recorded region 0 (\"no such op\"..{:?}, 2 strips) names op \"no such op\"",
            first.last_op
        )),
        "{err}"
    );
    let err = with(&|r| r.strips = 1_000_000);
    assert!(
        err.contains("cannot be cut into that many strips (its output ")
            && err.contains(" rows: 2 to "),
        "{err}"
    );
    let err = with(&|r| std::mem::swap(&mut r.first_op, &mut r.last_op));
    assert!(err.contains("recorded region 0"), "{err}");
    // A record of a pass memplan does not have is unreadable, naming where.
    let mut doc: serde_json::Value = serde_json::from_str(&plan.to_json()).unwrap();
    doc["rewrites"][0]["pass"] = serde_json::json!("swizzle");
    let e = Plan::parse(&doc.to_string()).unwrap_err().to_string();
    assert!(
        e.contains("rewrites[0].pass: unknown variant `swizzle`, expected `tile` or `fuse`"),
        "{e}"
    );
}

#[test]
fn a_plan_checked_against_its_own_rewritten_graph_needs_no_records() {
    let (_, mut plan, _) = fused_sample_plan();
    let carried = Graph::from_value(plan.rewritten_graph.as_ref().unwrap()).unwrap();
    plan.rewrites.clear();
    assert_eq!(graph_for_plan(carried.clone(), &plan).unwrap(), carried);
}

#[test]
fn checked_against_its_own_carried_graph_the_execs_conv_algorithms_must_be_the_graphs() {
    let Some(g) = zoo("resnet18.1.inference") else {
        return;
    };
    let plan = plan_that_derives(&g, &options(&[Rewrite::ConvAlgos], "auto"), "algos");
    let carried = Graph::from_value(plan.rewritten_graph.as_ref().unwrap()).unwrap();
    let k = plan
        .instructions
        .iter()
        .position(
            |i| matches!(i, memplan::Instruction::Exec { algo: Some(a), .. } if a != "direct"),
        )
        .expect("a conv runs another algorithm than direct");
    let with = |algo: &str| {
        let mut p = plan.clone();
        if let memplan::Instruction::Exec { algo: a, .. } = &mut p.instructions[k] {
            *a = Some(algo.to_string());
        }
        graph_for_plan(carried.clone(), &reread(&p)).unwrap_err()
    };
    let e = with("magic");
    assert!(e.makes_plan_invalid(), "{e}");
    assert!(e.to_string().contains("magic"), "{e}");
    // A known algorithm that applies, but not the one the carried graph runs.
    let e = with("direct");
    assert!(e.makes_plan_invalid(), "{e}");
    assert!(
        e.to_string()
            .contains("the conv algorithms its execs name are not the carried graph's: ops["),
        "{e}"
    );
    assert!(e.to_string().contains("found \"direct\""), "{e}");
    // Two execs of one conv (a recompute) naming two algorithms: both are named.
    let mut twice = plan.clone();
    let (node, first) = match &plan.instructions[k] {
        memplan::Instruction::Exec { node, algo, .. } => (node.clone(), algo.clone().unwrap()),
        _ => unreachable!(),
    };
    let mut again = plan.instructions[k].clone();
    if let memplan::Instruction::Exec { algo, .. } = &mut again {
        *algo = Some("direct".into());
    }
    twice.instructions.push(again);
    let e = graph_for_plan(g.clone(), &reread(&twice)).unwrap_err();
    assert!(e.makes_plan_invalid(), "{e}");
    assert_eq!(
        e.to_string(),
        format!("execs of {node:?} name different conv algorithms: {first:?}, then \"direct\"")
    );
}

#[test]
fn records_that_would_rewrite_the_graph_given_contradict_a_carried_graph_equal_to_it() {
    // A plain plan of the sample, carrying the sample itself and claiming it was fused.
    let g = sample();
    let mut plan = plan_that_derives(&g, &options(&[], "auto"), "plain");
    plan.rewritten_graph = Some(g.to_value());
    plan.rewrites = vec![RewriteStep::Fuse {
        fold_pad: true,
        chains: true,
    }];
    let err = refusal(&g, &plan);
    assert!(
        err.contains("its recorded rewrites (fuse) rewrite the graph given, yet the carried graph is that graph unchanged: ops["),
        "{err}"
    );
    // Records that change nothing here (no pads to fold, no chains to fuse) are no
    // contradiction.
    plan.rewrites = vec![RewriteStep::Fuse {
        fold_pad: false,
        chains: false,
    }];
    graph_for_plan(g.clone(), &reread(&plan)).unwrap();
}

#[test]
fn ops_out_of_order_in_a_carried_graph_are_named_both() {
    let (g, mut plan, _) = fused_sample_plan();
    let doc = plan.rewritten_graph.as_mut().unwrap();
    let ops = doc["ops"].as_array_mut().unwrap();
    let n = ops.len();
    let (a, b) = (
        ops[n - 2]["name"].as_str().unwrap().to_string(),
        ops[n - 1]["name"].as_str().unwrap().to_string(),
    );
    ops.swap(n - 2, n - 1);
    let err = refusal(&g, &plan);
    assert!(
        err.contains(&format!("ops[{}]: expected {a:?}, found {b:?}", n - 2)),
        "{err}"
    );
}
