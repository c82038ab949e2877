//! Plans for the shared model zoo pass the independent Python checker
//! (`../shared/tools/check_plan.py`) and our validator, and `--order auto` never loses to the
//! listed order. Skips (with a message) when ../shared is not present.

use memplan::graph::Graph;
use memplan::{plan, validate, OrderMode, PlanOptions, Strategy};
use std::path::{Path, PathBuf};
use std::process::Command;

fn shared() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    if p.join("zoo").is_dir() {
        Some(p)
    } else {
        eprintln!("skipping: {} not found", p.display());
        None
    }
}

fn zoo_graphs(shared: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(shared.join("zoo"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    v.sort();
    v
}

fn python_check(shared: &Path, graph: &Path, plan_text: &str, tag: &str) -> serde_json::Value {
    let name = graph.file_stem().unwrap().to_string_lossy().to_string();
    let out = std::env::temp_dir().join(format!(
        "memplan-zoo-{}-{name}-{tag}.json",
        std::process::id()
    ));
    std::fs::write(&out, plan_text).unwrap();
    let r = Command::new("python3")
        .arg(shared.join("tools/check_plan.py"))
        .arg(graph)
        .arg(&out)
        .output()
        .expect("python3 runs");
    let _ = std::fs::remove_file(&out);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap_or_else(|_| {
        panic!(
            "check_plan.py output for {name}: {}",
            String::from_utf8_lossy(&r.stderr)
        )
    });
    assert_eq!(v["valid"], true, "{name} ({tag}): {}", v["error"]);
    v
}

#[test]
fn every_zoo_plan_passes_check_plan_py_and_auto_never_loses_to_listed() {
    let Some(shared) = shared() else { return };
    let graphs = zoo_graphs(&shared);
    assert!(
        graphs.len() >= 10,
        "expected the zoo, found {}",
        graphs.len()
    );
    for path in graphs {
        let g = Graph::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let heuristic = |order| PlanOptions {
            order,
            strategy: Strategy::Heuristic,
            ..Default::default()
        };
        let given = plan(&g, &heuristic(OrderMode::Given)).unwrap();
        let auto = plan(&g, &heuristic(OrderMode::Auto)).unwrap();
        let exact = plan(&g, &PlanOptions::default()).unwrap();
        assert!(
            exact.stats.peak_bytes <= auto.stats.peak_bytes,
            "{}: exact search made it worse",
            g.name
        );
        for (tag, p) in [("given", &given), ("auto", &auto), ("exact", &exact)] {
            let ours = validate(&g, p, None).unwrap_or_else(|v| panic!("{} {tag}: {v}", g.name));
            let theirs = python_check(&shared, &path, &p.to_json(), tag);
            assert_eq!(theirs["peak"].as_u64(), Some(ours.peak), "{} {tag}", g.name);
            assert!(
                p.stats.peak_bytes >= p.stats.load_bytes.unwrap(),
                "{} {tag}: peak below LOAD",
                g.name
            );
            assert!(
                p.stats.peak_bytes >= p.stats.lower_bound_bytes,
                "{} {tag}: peak below bound",
                g.name
            );
        }
        assert!(
            auto.stats.peak_bytes <= given.stats.peak_bytes,
            "{}: auto {} > given {}",
            g.name,
            auto.stats.peak_bytes,
            given.stats.peak_bytes
        );
    }
}

#[test]
fn stats_agree_with_the_python_baseline_and_bound() {
    let Some(shared) = shared() else { return };
    for name in [
        "alexnet.64.train",
        "vgg16.16.train",
        "resnet18.1.inference",
        "mobilenet_v2.32.train",
    ] {
        let path = shared.join(format!("zoo/{name}.json"));
        let g = Graph::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let s = memplan::planner::graph_stats(&g).unwrap();
        let run = |tool: &str| -> serde_json::Value {
            let r = Command::new("python3")
                .arg(shared.join("tools").join(tool))
                .arg(&path)
                .output()
                .unwrap();
            serde_json::from_slice(&r.stdout).unwrap()
        };
        let base = run("baseline.py");
        assert_eq!(base["naive"].as_u64(), Some(s.naive_bytes), "{name} naive");
        // Python rounds every size up to its alignment; ours counts exact bytes, so ours is
        // never larger and differs by at most one alignment unit per live tensor.
        let py_load = base["load"].as_u64().unwrap();
        assert!(
            s.listed_load <= py_load && s.listed_load as f64 >= py_load as f64 * 0.99,
            "{name} load"
        );
        let py_bound = run("order_lower_bound.py")["order_lower_bound"]
            .as_u64()
            .unwrap();
        assert!(
            s.order_lower_bound <= py_bound && s.order_lower_bound as f64 >= py_bound as f64 * 0.99,
            "{name} bound {} vs python {py_bound}",
            s.order_lower_bound
        );
    }
}
