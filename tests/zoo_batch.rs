//! Black-box tests of the zoo batch and its reports (`memplan::zoo`).

use memplan::pipeline::{self, Control, PipelineOptions, Rewrite};
use memplan::zoo::determinism::without_timing;
use memplan::zoo::{run_zoo, GraphResult, ZooError, ZooOptions, ZooResults};
use memplan::PlanStatus;
use std::path::{Path, PathBuf};

#[path = "support/shared.rs"]
mod shared;

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/resnet_block.train.json")
}

/// The sample and, when ../shared is present, two small zoo graphs.
fn inputs() -> Vec<PathBuf> {
    let mut v = vec![sample()];
    for name in ["alexnet.64.train", "resnet18.1.inference"] {
        // Without it the batch runs on the sample only.
        v.extend(shared::zoo_path(name));
    }
    v
}

/// Results equal up to the last bit of their floats (JSON numbers need not round-trip exactly).
fn assert_same(a: &[GraphResult], b: &[GraphResult]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        let mut y2 = y.clone();
        for (f, g) in [
            (x.heuristic_seconds, &mut y2.heuristic_seconds),
            (x.full_seconds, &mut y2.full_seconds),
            (x.gap, &mut y2.gap),
            (x.savings_vs_naive, &mut y2.savings_vs_naive),
            (x.savings_vs_listed, &mut y2.savings_vs_listed),
            (x.fragmentation, &mut y2.fragmentation),
            (x.waste, &mut y2.waste),
        ] {
            assert!((f - *g).abs() <= 1e-12 * f.abs().max(1.0), "{f} vs {g}");
            *g = f;
        }
        assert_eq!(x, &y2);
    }
}

/// The default pipeline options (effort in work units) with a generous time cap, so that the
/// cap never binds even when parallel tests load the machine (the plans are then those of
/// the default options: tests/determinism.rs checks that the default cap does not bind).
fn defaults() -> ZooOptions {
    ZooOptions {
        pipeline: PipelineOptions {
            time_limit_s: 120.0,
            ..PipelineOptions::default()
        },
        jobs: 2,
        budgets: Vec::new(),
    }
}

/// The default pipeline options with a wall-clock cap of `secs`, two jobs.
fn opts(secs: f64) -> ZooOptions {
    ZooOptions {
        pipeline: PipelineOptions {
            time_limit_s: secs,
            ..PipelineOptions::default()
        },
        jobs: 2,
        budgets: Vec::new(),
    }
}

#[test]
fn a_batch_writes_consistent_results_and_a_self_contained_report_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let inputs = inputs();
    let mut events = 0;
    let o = defaults();
    let s = run_zoo(&inputs, out, &o, &mut |_| events += 1).unwrap();
    assert_eq!(s.results.len(), inputs.len());
    assert_eq!((s.planned, s.skipped), (inputs.len(), 0));
    assert!(events > 2 * inputs.len());

    let doc: ZooResults =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_same(&doc.results, &s.results);
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + inputs.len());
    // The resume key holds the pipeline options as every front end echoes them.
    let canonical = serde_json::to_string(&o.pipeline.echoed()).unwrap();
    for r in &doc.results {
        assert!(r.options.contains(&canonical), "{}", r.options);
        // Effort in work units decides the plan: the (generous) time cap does not bind.
        assert_ne!(r.full_status, PlanStatus::TimeLimit, "{r:?}");
        assert_eq!(
            r.full_status == PlanStatus::Optimal,
            r.full_peak_bytes == r.lower_bound_bytes,
            "{r:?}"
        );
        assert!(!r.rewritten, "{r:?}");
        assert!(r.lower_bound_bytes <= r.full_peak_bytes, "{r:?}");
        assert!(r.full_peak_bytes <= r.heuristic_peak_bytes, "{r:?}");
        assert!(r.heuristic_peak_bytes <= r.listed_peak_bytes, "{r:?}");
        assert!(r.listed_load_bytes <= r.listed_peak_bytes, "{r:?}");
        assert!(r.listed_load_bytes <= r.naive_bytes, "{r:?}");
        assert!((0.0..=1.0).contains(&r.gap) && (0.0..=1.0).contains(&r.fragmentation));
        assert!(r.pytorch_reserved_bytes >= r.listed_load_bytes, "{r:?}");
        assert!(csv.contains(&format!("{},", r.graph)));
        assert!(
            csv.contains(&format!(",{},", r.full_status.as_str())),
            "{csv}"
        );
        // Every saved plan is a valid plan of its graph.
        let g = memplan::Graph::parse(&std::fs::read_to_string(&r.file).unwrap()).unwrap();
        for f in r.plans.all() {
            let p = memplan::Plan::parse(&std::fs::read_to_string(out.join(f)).unwrap()).unwrap();
            assert!(p.rewritten_graph.is_none(), "{f}");
            memplan::validate(&g, &p, None).unwrap();
        }
        let p = memplan::Plan::parse(&std::fs::read_to_string(out.join(&r.plans.full)).unwrap())
            .unwrap();
        assert_eq!(p.stats.peak_bytes, r.full_peak_bytes);
        assert_eq!(p.stats.status, Some(r.full_status));
        // The zoo's full plan is the pipeline's plan for the same graph and options.
        let direct = pipeline::run(&g, &o.pipeline, &Control::default()).unwrap();
        assert_eq!(
            without_timing(&direct.plan),
            without_timing(&p),
            "{}",
            r.graph
        );
    }

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    // The bar chart, then a timeline and a layout per graph.
    assert_eq!(html.matches("<svg").count(), 1 + 2 * inputs.len());
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(!html.contains("<script") && !html.contains("<link"));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    // The full pipeline's column is labelled by what it holds, its status is a PlanStatus.
    assert!(md.contains("| heuristic | full pipeline | bound | gap | full pipeline status |"));
    assert!(
        html.contains("<th>full pipeline</th>") && html.contains("<th>full pipeline status</th>")
    );
    assert!(!html.contains("<th>optimal</th>"));
    for r in &doc.results {
        assert!(
            md.contains(&format!(" | {} | ", r.full_status.as_str())),
            "{md}"
        );
        assert!(
            html.contains(&format!("<h2>{}</h2>", r.graph)),
            "{}",
            r.graph
        );
        assert!(md.contains(&format!("## {}", r.graph)));
        assert!(html.contains(&format!("{}: live bytes per step", r.graph)));
        assert!(html.contains(&format!("{}: arena layout", r.graph)));
    }

    // The same graphs and options again: nothing is planned.
    let again = run_zoo(&inputs, out, &defaults(), &mut |_| {}).unwrap();
    assert_eq!((again.planned, again.skipped), (0, inputs.len()));
    assert_same(&again.results, &s.results);

    // A copy elsewhere has the same content hash: skipped, reported at its new place.
    let moved = dir.path().join("moved.json");
    std::fs::copy(&inputs[0], &moved).unwrap();
    let m = run_zoo(std::slice::from_ref(&moved), out, &defaults(), &mut |_| {}).unwrap();
    assert_eq!((m.planned, m.skipped), (0, 1));
    assert_eq!(m.results[0].file, moved.display().to_string());

    // Other options: everything is planned again.
    let other = run_zoo(&inputs[..1], out, &opts(5.0), &mut |_| {}).unwrap();
    assert_eq!((other.planned, other.skipped), (1, 0));
    let mut effort = defaults();
    effort.pipeline.effort = 0;
    let other = run_zoo(&inputs[..1], out, &effort, &mut |_| {}).unwrap();
    assert_eq!((other.planned, other.skipped), (1, 0));
}

#[test]
fn rewritten_plans_carry_their_graph_and_check_against_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let mut o = defaults();
    o.pipeline.rewrite = vec![Rewrite::Fuse];
    let s = run_zoo(&[sample()], out, &o, &mut |_| {}).unwrap();
    let r = &s.results[0];
    assert!(r.rewritten, "fusion changes the sample: {r:?}");
    assert!(r.options.contains(r#""rewrite":["fuse"]"#), "{}", r.options);
    let g = memplan::Graph::parse(&std::fs::read_to_string(sample()).unwrap()).unwrap();
    for f in r.plans.all() {
        let p = memplan::Plan::parse(&std::fs::read_to_string(out.join(f)).unwrap()).unwrap();
        assert!(p.rewritten_graph.is_some(), "{f}");
        // Checked against the original graph, as `memplan check ORIGINAL PLAN` does.
        let replay = pipeline::graph_for_plan(g.clone(), &p).unwrap();
        assert!(replay.ops.len() < g.ops.len(), "{f}");
        memplan::validate(&replay, &p, None).unwrap();
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("carry the rewritten graph"), "{md}");
    // The same batch without rewrites is other options: planned again.
    let plain = run_zoo(&[sample()], out, &defaults(), &mut |_| {}).unwrap();
    assert_eq!((plain.planned, plain.skipped), (1, 0));
    assert!(!plain.results[0].rewritten);
}

/// The `full=` JSON of a result's options, as `results.json` records it.
fn full_options(r: &GraphResult) -> serde_json::Value {
    let (_, full) = r.options.split_once(" full=").expect("a full= part");
    let json = full.split(" budgets=").next().unwrap();
    serde_json::from_str(json).unwrap()
}

#[test]
fn the_options_a_batch_records_plan_the_full_way_again_when_sent_back() {
    let g = memplan::Graph::parse(&std::fs::read_to_string(sample()).unwrap()).unwrap();
    for rewrite in [vec![], vec![Rewrite::Fuse], Rewrite::ALL.to_vec()] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = defaults();
        o.pipeline.rewrite = rewrite.clone();
        let s = run_zoo(&[sample()], dir.path(), &o, &mut |_| {}).unwrap();
        let r = &s.results[0];
        // Read back as the C API, Python and (with its richer requests) the HTTP service read
        // options: modes of rewrites not asked for would add them.
        let back = PipelineOptions::from_json(full_options(r)).unwrap();
        assert_eq!(
            back.normalised(),
            o.pipeline.normalised(),
            "{rewrite:?}: {}",
            r.options
        );
        let again = pipeline::run(&g, &back, &Control::default()).unwrap();
        let saved = std::fs::read_to_string(dir.path().join(&r.plans.full)).unwrap();
        assert_eq!(
            without_timing(&again.plan),
            without_timing(&memplan::Plan::parse(&saved).unwrap()),
            "{rewrite:?}"
        );
        // LOAD is of the graph the listed plan refers to: no placement of it is below.
        assert!(
            r.listed_load_bytes <= r.listed_peak_bytes,
            "{rewrite:?}: LOAD {} above the listed peak {}",
            r.listed_load_bytes,
            r.listed_peak_bytes
        );
    }
    // Tiling takes resnet18's listed peak far below the untiled graph's LOAD.
    if let Some(path) = shared::zoo_path("resnet18.1.inference") {
        let dir = tempfile::tempdir().unwrap();
        let mut o = defaults();
        o.pipeline.rewrite = Rewrite::ALL.to_vec();
        let r = &run_zoo(&[path], dir.path(), &o, &mut |_| {})
            .unwrap()
            .results[0];
        assert!(r.rewritten);
        assert!(
            r.listed_load_bytes <= r.listed_peak_bytes,
            "LOAD {} above the listed peak {}",
            r.listed_load_bytes,
            r.listed_peak_bytes
        );
    }
}

#[test]
fn options_that_cannot_be_combined_stop_the_batch_before_planning() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = defaults();
    o.pipeline.tiers = true;
    o.budgets = vec![60.0];
    let e = run_zoo(&[sample()], dir.path(), &o, &mut |_| {}).unwrap_err();
    assert!(matches!(e, ZooError::Options(_)), "{e}");
    assert!(e.to_string().contains("tiers and budget"), "{e}");
    assert!(!dir.path().join("results.json").exists());
}

#[test]
fn a_removed_plan_file_makes_its_graph_planned_again() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = vec![sample()];
    let s = run_zoo(&inputs, dir.path(), &opts(0.1), &mut |_| {}).unwrap();
    std::fs::remove_file(dir.path().join(&s.results[0].plans.full)).unwrap();
    let again = run_zoo(&inputs, dir.path(), &opts(0.1), &mut |_| {}).unwrap();
    assert_eq!((again.planned, again.skipped), (1, 0));
}

/// A second small graph: the sample under another name (so another content hash), written
/// to `dir/NAME.json`.
fn renamed_sample(dir: &Path, name: &str) -> PathBuf {
    let mut g = memplan::Graph::parse(&std::fs::read_to_string(sample()).unwrap()).unwrap();
    g.name = name.to_string();
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, g.to_json()).unwrap();
    path
}

#[test]
fn a_run_on_some_graphs_keeps_the_earlier_results_of_the_others_made_with_the_same_options() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let other = renamed_sample(dir.path(), "other_block");
    let both = vec![sample(), other.clone()];
    let first = run_zoo(&both, &out, &opts(0.1), &mut |_| {}).unwrap();
    assert_eq!(first.results.len(), 2);

    // The sample alone: skipped, and the other graph's result kept in every output.
    let s = run_zoo(&[sample()], &out, &opts(0.1), &mut |_| {}).unwrap();
    assert_eq!((s.planned, s.skipped, s.kept), (0, 1, 1), "{:?}", s.dropped);
    assert!(s.dropped.is_empty(), "{:?}", s.dropped);
    assert_same(&s.results, &first.results);
    let doc: ZooResults =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_same(&doc.results, &first.results);
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## other_block"), "{md}");

    // Its graph file changed: the earlier result is dropped, and the summary says why.
    let mut g = memplan::Graph::parse(&std::fs::read_to_string(&other).unwrap()).unwrap();
    g.name = "changed_block".into();
    std::fs::write(&other, g.to_json()).unwrap();
    let s = run_zoo(&[sample()], &out, &opts(0.1), &mut |_| {}).unwrap();
    assert_eq!((s.skipped, s.kept, s.results.len()), (1, 0, 1));
    assert_eq!(s.dropped.len(), 1, "{:?}", s.dropped);
    assert!(
        s.dropped[0].contains("other_block.json") && s.dropped[0].contains("changed"),
        "{:?}",
        s.dropped
    );

    // Results made with other options are not mixed with this run's.
    let again = run_zoo(&both, &out, &opts(0.1), &mut |_| {}).unwrap();
    assert_eq!((again.planned, again.skipped), (1, 1));
    let s = run_zoo(&[sample()], &out, &opts(0.2), &mut |_| {}).unwrap();
    assert_eq!((s.planned, s.kept, s.results.len()), (1, 0, 1));
    assert!(
        s.dropped.len() == 1 && s.dropped[0].contains("other options"),
        "{:?}",
        s.dropped
    );
}

#[test]
fn a_plan_file_edited_after_the_run_makes_its_graph_planned_again_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = vec![sample()];
    let s = run_zoo(&inputs, dir.path(), &opts(0.1), &mut |_| {}).unwrap();
    let full = dir.path().join(&s.results[0].plans.full);
    // A plan that is still valid JSON but no longer what results.json records.
    let mut plan = memplan::Plan::parse(&std::fs::read_to_string(&full).unwrap()).unwrap();
    plan.stats.peak_bytes += 1;
    std::fs::write(&full, plan.to_json()).unwrap();
    let again = run_zoo(&inputs, dir.path(), &opts(0.1), &mut |_| {}).unwrap();
    assert_eq!((again.planned, again.skipped), (1, 0));
    assert_eq!(again.dropped.len(), 1, "{:?}", again.dropped);
    assert!(
        again.dropped[0].contains("planned again") && again.dropped[0].contains("full.plan.json"),
        "{:?}",
        again.dropped
    );
    // The plan file is the new run's again: the next run skips the graph.
    let third = run_zoo(&inputs, dir.path(), &opts(0.1), &mut |_| {}).unwrap();
    assert_eq!(
        (third.planned, third.skipped),
        (0, 1),
        "{:?}",
        third.dropped
    );
    // A truncated plan file: planned again as well.
    std::fs::write(&full, "{").unwrap();
    let fourth = run_zoo(&inputs, dir.path(), &opts(0.1), &mut |_| {}).unwrap();
    assert_eq!((fourth.planned, fourth.skipped), (1, 0));
}

#[test]
fn every_broken_graph_of_a_batch_is_named_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first_broken.json");
    std::fs::write(&first, "{\"format\": \"memplan-graph/1\", \"tensors\": [").unwrap();
    let second = dir.path().join("second_broken.json");
    std::fs::write(&second, [0xff, 0xfe]).unwrap();
    let out = dir.path().join("out");
    let e = run_zoo(&[first, sample(), second], &out, &opts(0.1), &mut |_| {}).unwrap_err();
    assert!(matches!(e, ZooError::Graphs(ref v) if v.len() == 2), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("2 graph files are not valid graphs"),
        "{text}"
    );
    assert!(
        text.contains("first_broken.json: ") && text.contains("second_broken.json: not UTF-8"),
        "{text}"
    );
    assert!(!out.join("results.json").exists());
}

#[test]
fn a_missing_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let e = run_zoo(
        &[PathBuf::from("/nonexistent/zoo")],
        dir.path(),
        &opts(0.1),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(e, ZooError::Missing(_)));
    assert!(e.to_string().contains("/nonexistent/zoo"), "{e}");
}

#[test]
fn a_folder_without_graphs_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = run_zoo(&[empty], &dir.path().join("out"), &opts(0.1), &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("no graph files"), "{e}");
}

#[test]
fn a_broken_graph_stops_the_batch_before_any_planning_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.json");
    std::fs::write(&bad, "{\"format\": \"memplan-graph/1\", \"tensors\": [").unwrap();
    let out = dir.path().join("out");
    let e = run_zoo(&[sample(), bad.clone()], &out, &opts(0.1), &mut |_| {}).unwrap_err();
    assert!(matches!(e, ZooError::Graph { .. }));
    assert!(e.to_string().contains("broken.json"), "{e}");
    assert!(!out.join("results.json").exists());
}

#[test]
fn a_corrupt_results_file_is_reported_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("results.json"), "not json").unwrap();
    let e = run_zoo(&[sample()], dir.path(), &opts(0.1), &mut |_| {}).unwrap_err();
    assert!(matches!(e, ZooError::Results { .. }));
    assert!(e.to_string().contains("results.json"), "{e}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("results.json")).unwrap(),
        "not json"
    );
}

#[test]
fn zero_jobs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let o = ZooOptions {
        jobs: 0,
        ..opts(0.1)
    };
    let e = run_zoo(&[sample()], dir.path(), &o, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("--jobs"), "{e}");
}

#[test]
fn the_report_of_the_whole_shared_zoo_has_every_graph_with_well_formed_charts() {
    let Some(zoo) = shared::shared_path("zoo") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let s = run_zoo(&[zoo], dir.path(), &opts(0.1), &mut |_| {}).unwrap();
    assert!(s.results.len() >= 2);
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    let mut charts: Vec<String> = Vec::new();
    let mut rest = html.as_str();
    while let Some(i) = rest.find("<svg") {
        let j = rest[i..].find("</svg>").expect("every <svg> is closed") + i + 6;
        // Inline HTML5 SVG carries no namespace; add it to parse the chart as XML.
        let svg = rest[i..j].replacen("<svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"", 1);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
        let title = doc
            .descendants()
            .find(|n| n.has_tag_name("title"))
            .and_then(|n| n.text())
            .unwrap_or_default()
            .to_string();
        // Every rectangle and line lies within the chart.
        let w: f64 = doc
            .root_element()
            .attribute("width")
            .unwrap()
            .parse()
            .unwrap();
        let h: f64 = doc
            .root_element()
            .attribute("height")
            .unwrap()
            .parse()
            .unwrap();
        for n in doc.descendants().filter(|n| n.has_tag_name("rect")) {
            let a = |k: &str| n.attribute(k).unwrap().parse::<f64>().unwrap();
            assert!(a("x") >= 0.0 && a("x") + a("width") <= w + 0.5, "{title}");
            assert!(a("y") >= 0.0 && a("y") + a("height") <= h + 0.5, "{title}");
        }
        charts.push(title);
        rest = &rest[j..];
    }
    assert_eq!(charts.len(), 1 + 2 * s.results.len());
    for r in &s.results {
        assert!(charts.contains(&format!("{}: live bytes per step", r.graph)));
        assert!(charts.contains(&format!("{}: arena layout", r.graph)));
        // Only the bound is certain here: with a 0.1 s cap on a loaded machine the auto
        // strategy may run out of time before its heuristics match the heuristic strategy's
        // plan; a plan whose cap bound says so.
        assert!(r.lower_bound_bytes <= r.full_peak_bytes);
        assert!(r.lower_bound_bytes <= r.heuristic_peak_bytes);
        if r.full_peak_bytes > r.heuristic_peak_bytes {
            assert_eq!(r.full_status, PlanStatus::TimeLimit, "{r:?}");
        }
    }
    assert!(!html.contains("http://") && !html.contains("https://"));
}
