//! `memplan plan`: fills the pipeline options (`memplan::pipeline::PipelineOptions`) from the
//! flags, runs the pipeline, reports what it did on stderr and writes the plan (and, when
//! asked, the graph it refers to and a Chrome trace).

use crate::args::PlanArgs;
use crate::common::{bad, load_device_profile, load_graph, mib, read};
use crate::output::{check_outputs, given, write_out, write_with};
use anyhow::Result;
use memplan::budget::BudgetSpec;
use memplan::graph::Graph;
use memplan::pipeline::{self, PipelineOptions, Rewrite};
use memplan::planner::{OrderMode, Strategy};
use std::path::Path;
use std::process::ExitCode;

/// Runs `memplan plan`.
pub fn plan(a: PlanArgs) -> Result<ExitCode> {
    check_plan_outputs(&a)?;
    let original = if a.graph == "sample" {
        load_graph(&a.graph)?
    } else {
        let text = read(Path::new(&a.graph))?;
        if memplan::symbolic::declares_symbols(&text) {
            return plan_symbolic(&a, &text);
        }
        Graph::parse(&text).map_err(|e| bad(format!("{}: {e}", a.graph)))?
    };
    if a.max_ratio.is_some() || a.max_pieces.is_some() {
        return Err(bad(format!(
            "{}: --max-ratio and --max-pieces apply to symbolic graphs (with \"symbols\") only",
            a.graph
        )));
    }
    let opts = pipeline_options(&a)?;
    // An option's own error is the options', not the graph's (as over HTTP and in Python).
    opts.check().map_err(|e| bad(e.to_string()))?;
    let result = pipeline::run(&original, &opts, &pipeline::Control::default()).map_err(|e| {
        if e.is_bad_input() {
            bad(format!("{}: {e}", original.name))
        } else {
            anyhow::Error::new(e)
        }
    })?;
    report_plan(&original, &result);
    let text = format!("{}\n", result.plan.to_json());
    let graph_text = a
        .graph_out
        .as_ref()
        .map(|_| format!("{}\n", result.graph.to_json()));
    let trace_text = match &a.trace {
        Some(_) => Some(format!(
            "{}\n",
            memplan::trace::chrome_trace(&result.graph, &result.plan)?
        )),
        None => None,
    };
    // Every file at once: a failure to write one leaves the others as they were.
    let mut others: Vec<(&Path, &[u8])> = Vec::new();
    if let (Some(path), Some(t)) = (&a.graph_out, &graph_text) {
        others.push((path, t.as_bytes()));
    }
    if let (Some(path), Some(t)) = (&a.trace, &trace_text) {
        others.push((path, t.as_bytes()));
    }
    write_with(&a.output, &text, &others)?;
    Ok(ExitCode::SUCCESS)
}

/// Checks the output paths of `memplan plan` before any work ([`check_outputs`]): `-o`,
/// `--graph-out` and `--trace` must be distinct files, none of them the input graph or the
/// device profile, each in an existing folder.
fn check_plan_outputs(a: &PlanArgs) -> Result<()> {
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    if a.graph != "sample" {
        inputs.push(("the input graph", Path::new(&a.graph)));
    }
    if let Some(p) = &a.device_profile {
        inputs.push(("the --device-profile", p));
    }
    let outputs = given(&[
        ("-o", &a.output),
        ("--graph-out", &a.graph_out),
        ("--trace", &a.trace),
    ]);
    check_outputs(&inputs, &outputs)
}

/// `memplan plan` on a symbolic graph: one plan for the whole range of its symbols (the max
/// corner's order and stacking), written as memplan-symbolic-plan/1; stderr gets the
/// instantiated peak at the corners and a few points between, each against a plan made for
/// that binding alone.
fn plan_symbolic(a: &PlanArgs, text: &str) -> Result<ExitCode> {
    use memplan::symbolic::{plan_symbolic_with, SymbolicError, SymbolicGraph, SymbolicOptions};
    if a.graph_out.is_some() || a.trace.is_some() {
        return Err(bad(format!(
            "{}: --graph-out and --trace need a concrete graph; plan the symbolic graph, then \
             `memplan instantiate` it at a binding",
            a.graph
        )));
    }
    let graph = SymbolicGraph::parse(text).map_err(|e| bad(format!("{}: {e}", a.graph)))?;
    let corner = graph
        .instantiate(&graph.max_corner())
        .map_err(|e| bad(format!("{}: {e}", a.graph)))?;
    let opts = pipeline_options(a)?;
    opts.check().map_err(|e| bad(e.to_string()))?;
    let mut split = SymbolicOptions::default();
    if let Some(r) = a.max_ratio {
        split.max_ratio = r;
    }
    if let Some(n) = a.max_pieces {
        split.max_pieces = n;
    }
    let plan = plan_symbolic_with(&graph, &opts, &split).map_err(|e| match &e {
        SymbolicError::Pipeline { source, .. } if !source.is_bad_input() => anyhow::Error::new(e),
        _ => bad(format!("{}: {e}", corner.name)),
    })?;
    // The peak at the corners and a few points between, against a plan made for each alone.
    let profile = plan
        .peak_profile(&graph, &plan.profile_points(), &opts)
        .map_err(|e| anyhow::anyhow!("{}: {e}", corner.name))?;
    for p in &profile.points {
        eprintln!(
            "{}: at {}: peak {} B ({}); a plan for this binding alone: {} B (ratio {:.4}); LOAD \
             of the order {} B",
            corner.name,
            p.binding,
            p.peak_bytes,
            mib(p.peak_bytes),
            p.per_binding_bytes,
            p.ratio,
            p.load_bytes
        );
    }
    eprintln!(
        "{}: symbolic plan for {} ({} buffers, {} stacking edges); `memplan instantiate PLAN \
         SYMBOL=VALUE` writes the plan for one binding",
        corner.name,
        graph
            .symbols
            .iter()
            .map(|(s, r)| format!("{s} in [{}, {}]", r.min, r.max))
            .collect::<Vec<_>>()
            .join(", "),
        plan.doc().buffers.len(),
        plan.edges()
    );
    if let Some((symbol, ranges)) = plan.pieces() {
        eprintln!(
            "{}: {} pieces of {symbol}: {}",
            corner.name,
            ranges.len(),
            ranges
                .iter()
                .map(|r| format!("[{}, {}]", r.min, r.max))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    write_out(&a.output, &format!("{}\n", plan.to_json()))?;
    Ok(ExitCode::SUCCESS)
}

/// The pipeline options the flags of `memplan plan` give.
fn pipeline_options(a: &PlanArgs) -> Result<PipelineOptions> {
    let opt_err = |e: pipeline::PipelineError| bad(e.to_string());
    let mut rewrites = Rewrite::parse_list(&a.rewrite).map_err(opt_err)?;
    let mut opts = PipelineOptions::default();
    if a.no_fuse {
        rewrites.retain(|r| *r != Rewrite::Fuse);
    }
    if let Some(mode) = &a.conv_algos {
        opts.conv_algos = memplan::conv_algo::ConvAlgoMode::from_name(mode)
            .ok_or_else(|| bad(format!("unknown --conv-algos {mode}")))?;
    }
    if let Some(t) = &a.tile {
        opts.tile = t.clone();
    }
    opts.rewrite = rewrites;
    // A mode adds its rewrite, `off` takes it out: as the HTTP service and Python read them.
    opts.apply_given_modes(a.conv_algos.is_some(), a.tile.is_some());
    opts.tile_overhead_pct = a.tile_overhead;
    opts.order = OrderMode::from_name(&a.order)
        .ok_or_else(|| bad(format!("unknown --order {}", a.order)))?;
    opts.strategy = Strategy::from_name(&a.strategy)
        .ok_or_else(|| bad(format!("unknown --strategy {}", a.strategy)))?;
    opts.effort = a.effort;
    opts.time_limit_s = a.time_limit;
    opts.inplace = a.inplace;
    opts.budget = match &a.budget {
        Some(spec) => Some(BudgetSpec::parse(spec).map_err(|e| bad(format!("--budget: {e}")))?),
        None => None,
    };
    opts.spill_strategy = a.spill_strategy.clone();
    opts.tiers = a.tiers;
    opts.tier_alignment = a.tier_alignment.clone();
    opts.device_profile = match &a.device_profile {
        Some(path) => Some(load_device_profile(path)?),
        None => None,
    };
    opts.link_gbps = a.link_gbps;
    opts.streams = a.streams;
    opts.stream_peak_ratio = a.stream_peak_ratio;
    Ok(opts)
}

/// Prints what the pipeline did on stderr: each rewrite, the conv algorithms, the budget or
/// tier figures, and the one-line summary.
fn report_plan(original: &Graph, r: &memplan::PipelineResult) {
    for p in &r.passes {
        eprintln!(
            "{}: pass {}: ops {} -> {} ({} removed), tensors {} -> {}, arena tensor bytes {} -> {} ({} removed)",
            original.name,
            p.pass,
            p.ops_before,
            p.ops_after,
            p.ops_before as i64 - p.ops_after as i64,
            p.tensors_before,
            p.tensors_after,
            p.arena_tensor_bytes_before,
            p.arena_tensor_bytes_after,
            p.arena_tensor_bytes_before as i64 - p.arena_tensor_bytes_after as i64
        );
        for note in &p.notes {
            eprintln!("  {}: {note}", p.pass);
        }
    }
    let g = &r.graph;
    if let Some(c) = &r.conv_algos {
        eprintln!(
            "{}: conv algorithms ({}): {}",
            g.name,
            c.mode.name(),
            c.mix
                .iter()
                .map(|(a, n)| format!("{a} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if r.rewritten {
        eprintln!(
            "{}: the rewrites changed the graph; the plan carries it (rewritten_graph), so \
             `memplan check`/`run` work against the input graph (--graph-out writes it)",
            original.name
        );
    }
    let plan = &r.plan;
    let s = &plan.stats;
    if let Some(b) = &s.budget {
        if b.algo_downgrades > 0 {
            eprintln!(
                "{}: {} convs downgraded to fit, +{:.1} us modelled",
                g.name, b.algo_downgrades, b.algo_downgrade_us
            );
        }
        eprintln!(
            "{}: budget {} B ({}), peak {} B ({}) vs {} B unconstrained, strategy {}, spilled {} B out / {} B in ({} spills), host pool {} B, {} ops recomputed ({:.3e} flops), modelled step {:.1} us, overhead {:.1} us ({:.2}%)",
            g.name,
            b.budget_bytes,
            mib(b.budget_bytes),
            s.peak_bytes,
            mib(s.peak_bytes),
            b.unconstrained_peak_bytes,
            b.strategy,
            b.spilled_out_bytes,
            b.spilled_in_bytes,
            b.spills,
            plan.host_bytes,
            b.recomputed_ops,
            b.recompute_flops,
            b.step_us,
            b.overhead_us,
            b.overhead_pct,
        );
    }
    if !s.tiers.is_empty() {
        eprint!("{}", memplan::tiers::tier_table(&s.tiers));
    }
    if let Some(st) = &s.streams {
        eprintln!(
            "{}: {} streams ({}, {} events): modelled makespan {:.1} us vs {:.1} us on one stream ({:.2}x), peak {} B vs {} B on one stream (cap {} B)",
            g.name,
            st.streams,
            st.candidate,
            st.events,
            st.makespan_us,
            st.serial_makespan_us,
            st.serial_makespan_us / st.makespan_us.max(1e-9),
            s.peak_bytes,
            st.serial_peak_bytes,
            st.peak_cap_bytes
        );
    }
    eprintln!(
        "{}: {} ops, peak {} B ({}), lower bound {} B (gap {}), LOAD of order {} B, order {}, placement {} ({}), status {}, {:.1} ms",
        g.name,
        g.ops.len(),
        s.peak_bytes,
        mib(s.peak_bytes),
        s.lower_bound_bytes,
        s.gap.map_or("-".to_string(), |g| format!("{:.2}%", g * 100.0)),
        s.load_bytes.unwrap_or(0),
        s.order_method.as_deref().unwrap_or("-"),
        s.method,
        s.placement_status.as_deref().unwrap_or("-"),
        s.status.map_or("-", |st| st.as_str()),
        s.elapsed_ms
    );
    if let Some(f) = s.fragmentation_at_peak {
        eprintln!(
            "{}: arena fragmentation at peak {:.2}% (1 - largest free block / free bytes)",
            g.name,
            f * 100.0
        );
    }
}
