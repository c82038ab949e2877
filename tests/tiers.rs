//! Tiered plans (`memplan plan --tiers`): the sample graph and zoo inference graphs planned
//! with every tier at 64, 256 and 512 bytes pass the validator and the independent Python
//! checker, reproduce the reference run on the CPU executor, keep their tier regions apart and
//! every offset on its tier's alignment. Zoo graphs carry no workspaces, so each is also
//! planned with im2col workspaces on its k×k convolutions (k > 1) to fill the temporaries
//! region. Without ../shared the zoo graphs and the Python checks are skipped (see
//! tests/support/shared.rs).
//!
//! Runtime: about a minute on two shared cores (the executor runs dominate).

#[path = "support/check_plan.rs"]
mod check_plan;

use check_plan::{python_check, shared};
use memplan::graph::Graph;
use memplan::plan::{Instruction, Plan};
use memplan::tiers::{plan_tiered, TierAlignment};
use memplan::{validate, OrderMode, PlanOptions, Strategy};
use memplan_executor::{execute, ExecOptions, KernelMode};
use std::path::{Path, PathBuf};

fn sample_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/resnet_block.train.json")
}

fn load(path: &Path) -> Graph {
    Graph::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn zoo(name: &str) -> Option<Graph> {
    shared::zoo_path(name).map(|p| load(&p))
}

fn opts() -> PlanOptions {
    PlanOptions {
        order: OrderMode::Auto,
        strategy: Strategy::Heuristic,
        time_limit: None,
        ..PlanOptions::default()
    }
}

/// `graph` with an im2col workspace on every conv the model covers (conv_algo's
/// (C_in/groups)·Kh·Kw × N·Ho·Wo f32 elements; none for 1×1 stride-1 unpadded convs).
fn with_im2col(graph: &Graph) -> Graph {
    memplan::conv_algo::with_algo(
        &memplan::cost::DeviceProfile::h200(),
        graph,
        memplan::conv_algo::ConvAlgo::Im2col,
    )
}

/// Every structural property of a tiered plan of `g` at alignment `a` for every tier.
fn assert_tiered(g: &Graph, p: &Plan, a: u64, tag: &str) {
    validate(g, p, None).unwrap_or_else(|v| panic!("{tag}: {v}"));
    let [w, act, tmp] = &p.stats.tiers[..] else {
        panic!("{tag}: three tiers expected: {:?}", p.stats.tiers)
    };
    assert_eq!(
        [w.tier.as_str(), act.tier.as_str(), tmp.tier.as_str()],
        ["persistent", "activations", "temporaries"]
    );
    // Weights in their own region; the arena regions adjacent, not overlapping.
    assert_eq!(
        (w.region.as_str(), w.offset, w.bytes),
        ("weights", 0, p.weights_bytes)
    );
    assert_eq!((act.offset, tmp.offset), (0, act.bytes), "{tag}");
    assert_eq!(p.arena_bytes, act.bytes + tmp.bytes, "{tag}");
    let floor = |t: u64| t.max(a);
    for s in &p.weights {
        let t = g.tensor(g.tensor_by_name(&s.tensor).unwrap());
        assert_eq!(
            s.offset % floor(t.alignment),
            0,
            "{tag}: weight {}",
            s.tensor
        );
        assert!(s.offset + t.size <= w.bytes, "{tag}: weight {}", s.tensor);
    }
    let max_ws = g.ops.iter().map(|o| o.workspace).max().unwrap_or(0);
    assert_eq!(tmp.peak_bytes, max_ws, "{tag}");
    for i in &p.instructions {
        match i {
            Instruction::Alloc { tensor, offset, .. } => {
                let t = g.tensor(g.tensor_by_name(tensor).unwrap());
                assert_eq!(offset % floor(t.alignment), 0, "{tag}: {tensor}");
                assert!(
                    offset + t.size <= act.bytes,
                    "{tag}: {tensor} in temporaries"
                );
            }
            Instruction::Exec {
                node,
                workspace_offset: Some(o),
                ..
            } => {
                assert_eq!(*o, tmp.offset, "{tag}: workspace of {node}");
                assert_eq!(o % floor(g.alignment), 0, "{tag}: workspace of {node}");
            }
            _ => {}
        }
    }
    for t in &p.stats.tiers {
        assert!(
            (0.0..1.0).contains(&t.fragmentation_at_peak),
            "{tag}: {t:?}"
        );
        assert!(t.peak_bytes <= t.bytes, "{tag}: {t:?}");
    }
}

fn assert_runs_equal(g: &Graph, p: &Plan, kernels: KernelMode, tag: &str) {
    let o = ExecOptions {
        kernels,
        seed: 3,
        ..ExecOptions::default()
    };
    let r = execute(g, p, &o).unwrap_or_else(|e| panic!("{tag}: {e}"));
    assert!(r.outputs_equal, "{tag}: {:?}", r.first_mismatch);
    assert_eq!(r.replay_peak_bytes, p.stats.peak_bytes, "{tag}");
}

#[test]
fn tiered_plans_of_the_sample_are_valid_aligned_and_reproduce_the_reference() {
    let g = load(&sample_path());
    assert!(g.ops.iter().any(|o| o.workspace > 0));
    let untiered = memplan::plan(&g, &opts()).unwrap();
    for a in [64, 256, 512] {
        let tag = format!("sample@{a}");
        let p = plan_tiered(&g, &opts(), &TierAlignment::uniform(a)).unwrap();
        assert_tiered(&g, &p, a, &tag);
        python_check(&g, &p, &tag);
        assert_runs_equal(&g, &p, KernelMode::Real, &tag);
        // Workspaces no longer share the activations' gaps: never below the untiered peak.
        assert!(p.stats.peak_bytes >= untiered.stats.peak_bytes, "{tag}");
    }
}

#[test]
fn tiered_plans_of_zoo_inference_graphs_are_valid_aligned_and_reproduce_the_reference() {
    for name in ["resnet50.1.inference", "vgg16.1.inference"] {
        let Some(g) = zoo(name) else {
            continue;
        };
        let gw = with_im2col(&g);
        assert!(gw.ops.iter().any(|o| o.workspace > 0), "{name}");
        for a in [64, 256, 512] {
            for (graph, what) in [(&g, "as exported"), (&gw, "im2col")] {
                // Real f32 kernels once per graph (as exported, 256 B); elsewhere the
                // byte-mixing kernels: cheaper, byte-exact and as sensitive to overlaps.
                let kernels = if a == 256 && what == "as exported" {
                    KernelMode::Real
                } else {
                    KernelMode::Mix
                };
                let tag = format!("{name} {what} @{a}");
                let p = plan_tiered(graph, &opts(), &TierAlignment::uniform(a)).unwrap();
                assert_tiered(graph, &p, a, &tag);
                python_check(graph, &p, &tag.replace(' ', "_"));
                // vgg16's 550 MB of weights make a run cost ~10 s on a shared CPU: it runs
                // once per variant (as exported at 256, im2col at 512).
                let vgg = name.starts_with("vgg16");
                if !vgg || (a == 256 && what == "as exported") || (a == 512 && what == "im2col") {
                    assert_runs_equal(graph, &p, kernels, &tag);
                }
            }
        }
    }
}

#[test]
fn mixed_tier_alignments_apply_per_tier() {
    // The sample at a 16-byte graph alignment, so every tier floor binds.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sample_path()).unwrap()).unwrap();
    v["alignment"] = 16.into();
    let g = Graph::parse(&v.to_string()).unwrap();
    let align = TierAlignment::parse("persistent=512,activations=64,temporaries=256").unwrap();
    let p = plan_tiered(&g, &opts(), &align).unwrap();
    validate(&g, &p, None).unwrap();
    let alignments: Vec<u64> = p.stats.tiers.iter().map(|t| t.alignment).collect();
    assert_eq!(alignments, [512, 64, 256]);
    assert!(p.weights.iter().all(|w| w.offset % 512 == 0));
    assert_eq!(p.stats.tiers[2].offset % 256, 0);
    python_check(&g, &p, "sample16-mixed");
    assert_runs_equal(&g, &p, KernelMode::Real, "sample16-mixed");
}

#[test]
fn the_activations_floor_is_its_own_alignment_not_the_largest_tier_alignment() {
    // x and h (100 B each) are live together at f: one at 0, the other at 100 rounded up to
    // the activations alignment.
    let g = Graph::parse(
        r#"{"format": "memplan-graph/1", "name": "two", "alignment": 1,
            "tensors": [{"name": "x", "size": 100, "kind": "input"},
                        {"name": "w", "size": 100, "kind": "weight"},
                        {"name": "h", "size": 100, "kind": "activation"},
                        {"name": "y", "size": 4, "kind": "output"}],
            "ops": [{"name": "f", "type": "relu", "inputs": ["x", "w"], "outputs": ["h"],
                     "workspace": 10},
                    {"name": "g", "type": "relu", "inputs": ["h"], "outputs": ["y"]}]}"#,
    )
    .unwrap();
    for (act, second, temporaries) in [(64, 128, 512), (256, 256, 512), (512, 512, 1024)] {
        let align = TierAlignment {
            activations: act,
            ..TierAlignment::uniform(512)
        };
        let p = plan_tiered(&g, &opts(), &align).unwrap();
        validate(&g, &p, None).unwrap();
        let mut offsets: Vec<u64> = p
            .instructions
            .iter()
            .filter_map(|i| match i {
                Instruction::Alloc { tensor, offset, .. } if tensor != "y" => Some(*offset),
                _ => None,
            })
            .collect();
        offsets.sort_unstable();
        assert_eq!(offsets, [0, second], "activations={act}");
        // The temporaries region starts on a 512-byte boundary above the activations.
        assert_eq!(p.stats.tiers[2].offset, temporaries, "activations={act}");
        assert_eq!(p.arena_bytes, temporaries + 512);
        python_check(&g, &p, &format!("two-{act}"));
    }
}

#[test]
fn plans_without_tier_fields_still_parse() {
    let text = r#"{"format": "memplan-plan/1", "graph": "g", "arena_bytes": 0,
                   "instructions": [], "stats": {"peak_bytes": 0}}"#;
    let p = Plan::parse(text).unwrap();
    assert!(p.stats.tiers.is_empty() && p.stats.fragmentation_at_peak.is_none());
    assert!(!p.to_json().contains("tiers"));
}
