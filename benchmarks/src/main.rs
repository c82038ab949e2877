//! Benchmark tables over the shared model zoo, allocation traces and hard placement instances.
//!
//! Run: `cargo run --release -p memplan-benchmarks -- [SHARED_DIR] [--time-limit S]
//! [--effort K] [--only zoo|traces|order|budget|fusion|conv-algos|tiers|tiling|determinism|latency|mutations|bound|exact-suite|symbolic|streams]`
//! (SHARED_DIR defaults to `../shared`). Every graph is planned through the one planning
//! pipeline ([`memplan::pipeline::run`]) with [`PipelineOptions`]: the defaults (effort in
//! deterministic work units, [`memplan::pipeline::DEFAULT_TIME_LIMIT_S`] as a wall-clock cap),
//! with `--effort K` and `--time-limit S` (the cap; also each trace instance's time limit,
//! default 1 s there) when given, and each table's order, strategy, rewrites, budget or tiers.
//!
//! - **zoo** (`SHARED_DIR/zoo/*.json`): ops, tensors, LOAD of the listed order, the
//!   order-independent bound; with the heuristics only: the peak with the listed order (and
//!   its ratio to LOAD), the peak with `--order auto` (and its ratio to the bound), and the
//!   planning time of each; with the exact placement search (strategy auto, listed order):
//!   the peak over LOAD, the placement status and the time.
//! - **traces** (`SHARED_DIR/bench/traces/*.csv`, `SHARED_DIR/bench/minimalloc/*.csv`):
//!   buffers, LOAD, the heuristic portfolio's peak and best member, then the exact search:
//!   status, final peak, proven lower bound, seconds. Files named `NAME.CAPACITY.csv` are fitted
//!   to that capacity; the others are minimised.
//!
//! - **order** (`SHARED_DIR/zoo/*.json` and `SHARED_DIR/bench/checkmate/*.json`; not part of
//!   the default run): LOAD of the listed order, the order-independent bound, the heuristic
//!   plan's peak (`--order auto --strategy heuristic`), the `--strategy auto` plan's peak (order
//!   program + exact placement), its proven bound, gap, the order program's mode (whole /
//!   windows, models improved), seconds, and the cut below the listed order's peak.
//!
//! - **bound** (`SHARED_DIR/zoo/*.json`; not part of the default run): the default plan's
//!   peak (`memplan plan` defaults), the per-node order bound, the min-cut order bound
//!   ([`memplan_solver::order::mincut`], steps ranked by the listed order) with its time, steps
//!   flowed and whether it settled every step, the bound the plan reports (ranked by the plan's
//!   own order, max with the order program's proof) and the gap between the peak and it.
//!
//! - **budget** (`SHARED_DIR/zoo/*.train.json` and `SHARED_DIR/bench/checkmate/*.json`; not
//!   part of the default run): budgets of 80 %, 60 % and 40 % of LOAD of the listed order, on
//!   the listed order; per strategy (`sweep`, `ilp`, `chen`, `spill-all`): feasible, peak, bytes
//!   spilled out, recompute GFLOP, modelled overhead % and seconds (H200 cost model).
//!
//! - **fusion** (`--only fusion [--graphs DIR]`; not part of the default run): see
//!   [`fusion`].
//! - **conv-algos** (`--only conv-algos [--graphs DIR]`): conv algorithm choice, see
//!   `conv_algos.rs`.
//! - **tiers** (`SHARED_DIR/zoo/*.inference.json` and a few training graphs; not part of the
//!   default run): untiered vs tiered peak, per-tier bytes and fragmentation at peak, with and
//!   without im2col workspaces (see `tiers.rs`).
//! - **tiling** (`--only tiling`): see `tiling.rs` (spatial tiling at 224², 512², 1024²).
//! - **determinism** (`--only determinism`; not part of the default run): every zoo graph
//!   planned twice with `PipelineOptions::default()`, the second time while spinning threads
//!   keep every core busy; per graph: ops, peak, status, idle and loaded ms, whether the plans
//!   are byte-identical timing fields aside (`memplan::zoo::determinism::without_timing`),
//!   and a summary (see `determinism.rs`).
//! - **latency** (`--only latency`): the heuristic strategy on densenet121.16.train with
//!   `--order auto` and `--order given` (median of 10 runs, ms), then the default pipeline's
//!   time per zoo graph (see `determinism.rs`).
//! - **exact-suite** (`--only exact-suite [--count N] [--first-seed S] [--configs A,B]
//!   [--keep F] [--aligned F] [--capacity-factor F] [--write DIR]`; not part of the default
//!   run): the exact search on generated hard
//!   placement instances with known answers and the six challenging ones (see
//!   `exact_suite.rs`).
//! - **streams** (`--only streams`; not part of the default run): parallel plans with 1, 2
//!   and 4 streams, and under a budget equal to the single-stream peak, on googlenet and
//!   inception_v3 inference and googlenet training: peak, modelled makespan, events (see
//!   `streams.rs`).
//! - **symbolic** (`--only symbolic [--graphs DIR]`; not part of the default run): one plan
//!   for batch 1..=64 of resnet50 and vit_b_16 against per-batch plans, instantiation time,
//!   P99 utilisation alone and with dynamic batching (see `symbolic.rs`).
//! - **mutations** (`--only mutations [--mutants N]`; not part of the default run): N (default
//!   10,000) seeded mutations of valid plans through the validator, check_plan.py and the
//!   executor: accepted, accepted-and-corrupt, disagreements (see `mutations.rs`).
//!
//! Every zoo plan is replayed by the validator and every placement re-checked; a failure
//! aborts the run.

mod conv_algos;
mod determinism;
mod exact_suite;
mod fusion;
mod mutations;
mod streams;
mod symbolic;

use anyhow::{bail, Context, Result};
use memplan::graph::Graph;
use memplan::pipeline::{self, Control, PipelineOptions, PipelineResult};
use memplan::planner::{graph_stats, OrderMode, Strategy};
use memplan_solver::placement::step as place;
use memplan_solver::{csv, Limits, PlacementProblem};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod tiers;
mod tiling;

/// Plans `graph` through the pipeline and validates the plan against the graph it refers to
/// (the rewritten one, when a rewrite changed it) with `budget` as the capacity.
pub(crate) fn plan_checked(
    graph: &Graph,
    options: &PipelineOptions,
    budget: Option<u64>,
) -> Result<PipelineResult> {
    let r = pipeline::run(graph, options, &Control::default())
        .with_context(|| format!("planning {}", graph.name))?;
    if let Err(v) = memplan::validate(&r.graph, &r.plan, budget) {
        bail!("{}: invalid plan: {v}", graph.name);
    }
    Ok(r)
}

fn main() -> Result<()> {
    let mut shared = PathBuf::from("../shared");
    let mut time_limit: Option<f64> = None;
    let mut effort: Option<u64> = None;
    let mut only: Option<String> = None;
    let mut extra_graphs: Option<PathBuf> = None;
    let mut mutants = mutations::DEFAULT_MUTANTS;
    let mut suite = exact_suite::SuiteArgs {
        count: exact_suite::DEFAULT_COUNT,
        first_seed: 1,
        time_limit: Duration::from_secs_f64(exact_suite::DEFAULT_TIME_LIMIT_S),
        configs: exact_suite::DEFAULT_CONFIGS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        write: None,
        keep: None,
        aligned: None,
        capacity_factor: None,
        class: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--time-limit" => {
                time_limit = Some(args.next().context("--time-limit needs seconds")?.parse()?);
            }
            "--effort" => {
                effort = Some(args.next().context("--effort needs a number")?.parse()?);
            }
            "--graphs" => {
                extra_graphs = Some(PathBuf::from(
                    args.next().context("--graphs needs a directory")?,
                ))
            }
            "--only" => only = Some(args.next().context("--only needs a table's name")?),
            "--mutants" => {
                mutants = args.next().context("--mutants needs a number")?.parse()?;
            }
            "--count" => suite.count = args.next().context("--count needs a number")?.parse()?,
            "--first-seed" => {
                suite.first_seed = args
                    .next()
                    .context("--first-seed needs a number")?
                    .parse()?
            }
            "--configs" => {
                suite.configs = args
                    .next()
                    .context("--configs needs a comma-separated list")?
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect()
            }
            "--keep" => {
                suite.keep = Some(
                    args.next()
                        .context("--keep needs a fraction in (0, 1]")?
                        .parse()
                        .context("--keep needs a fraction in (0, 1]")?,
                )
            }
            "--aligned" => {
                suite.aligned = Some(
                    args.next()
                        .context("--aligned needs a fraction in [0, 1]")?
                        .parse()
                        .context("--aligned needs a fraction in [0, 1]")?,
                )
            }
            "--capacity-factor" => {
                suite.capacity_factor = Some(
                    args.next()
                        .context("--capacity-factor needs a factor ≥ 1")?
                        .parse()
                        .context("--capacity-factor needs a factor ≥ 1")?,
                )
            }
            "--class" => {
                suite.class = Some(
                    args.next()
                        .context("--class needs a buffer count")?
                        .parse()
                        .context("--class needs a buffer count")?,
                )
            }
            "--write" => {
                suite.write = Some(PathBuf::from(
                    args.next().context("--write needs a directory")?,
                ))
            }
            "-h" | "--help" => {
                println!(
                    "usage: memplan-benchmarks [SHARED_DIR] [--time-limit S] [--effort K] [--only zoo|traces|order|budget|fusion|conv-algos|tiers|tiling|determinism|latency|mutations|bound|exact-suite|symbolic|streams] [--graphs DIR] [--mutants N] [--count N] [--first-seed S] [--configs A,B] [--class B] [--keep F] [--aligned F] [--capacity-factor F] [--write DIR]"
                );
                return Ok(());
            }
            other => shared = PathBuf::from(other),
        }
    }
    // The pipeline options every table starts from.
    let mut base = PipelineOptions::default();
    if let Some(s) = time_limit {
        base.time_limit_s = s;
    }
    if let Some(k) = effort {
        base.effort = k;
    }
    base.check().context("--time-limit / --effort")?;
    // Trace instances are placement problems, not graphs: they keep a plain time limit.
    let tl = Duration::try_from_secs_f64(time_limit.unwrap_or(1.0))
        .context("--time-limit must be a non-negative number")?;
    if only.as_deref().is_none_or(|o| o == "zoo") {
        zoo_table(&shared.join("zoo"), &base)?;
        println!();
    }
    if only.as_deref() == Some("determinism") {
        return determinism::determinism(&shared.join("zoo"), &base);
    }
    if only.as_deref() == Some("exact-suite") {
        if let Some(s) = time_limit {
            suite.time_limit = Duration::try_from_secs_f64(s)
                .context("--time-limit must be a non-negative number")?;
        }
        return exact_suite::run(&shared, &suite);
    }
    if only.as_deref() == Some("mutations") {
        return mutations::run(&shared, mutants);
    }
    if only.as_deref() == Some("latency") {
        return determinism::latency(&shared.join("zoo"), &base);
    }
    if only.as_deref() == Some("conv-algos") {
        return conv_algos::run(&shared.join("zoo"), extra_graphs.as_deref(), &base);
    }
    if only.as_deref() == Some("budget") {
        let mut graphs: Vec<PathBuf> = files(&shared.join("zoo"), "json")?
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(".train."))
            .collect();
        graphs.extend(files_or_empty(&shared.join("bench/checkmate"), "json"));
        budget_table(&graphs, &base)?;
        return Ok(());
    }
    if only.as_deref() == Some("streams") {
        return streams::run(&streams::graphs(&shared), &base);
    }
    if only.as_deref() == Some("symbolic") {
        return symbolic::run(&symbolic::graphs(extra_graphs.as_deref())?);
    }
    if only.as_deref() == Some("fusion") {
        let graphs = fusion::graphs(&shared.join("zoo"), extra_graphs.as_deref())?;
        return fusion::run(&graphs, &base);
    }
    if only.as_deref() == Some("tiers") {
        return tiers::run(&shared, &base);
    }
    if only.as_deref() == Some("tiling") {
        return tiling::run(&shared, &base);
    }
    if only.as_deref() == Some("bound") {
        return bound_table(&shared.join("zoo"), &base);
    }
    if only.as_deref() == Some("order") {
        let mut graphs = files(&shared.join("zoo"), "json")?;
        graphs.extend(files_or_empty(&shared.join("bench/checkmate"), "json"));
        order_table(&graphs, &base)?;
        return Ok(());
    }
    if only.as_deref().is_none_or(|o| o == "traces") {
        let mut files = files(&shared.join("bench/traces"), "csv")?;
        files.extend(files_or_empty(&shared.join("bench/minimalloc"), "csv"));
        trace_table(&files, tl)?;
    }
    Ok(())
}

fn files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    Ok(v)
}

fn files_or_empty(dir: &Path, ext: &str) -> Vec<PathBuf> {
    files(dir, ext).unwrap_or_default()
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn budget_table(graphs: &[PathBuf], base: &PipelineOptions) -> Result<()> {
    use memplan::budget::{BudgetError, BudgetSpec};
    use memplan::pipeline::PipelineError;
    let strategies = ["sweep", "ilp", "chen", "spill-all", "joint"];
    // (sequential best overhead, joint overhead) per case where both fit.
    let mut pairs: Vec<(String, f64, f64)> = Vec::new();
    print!("| graph | budget | LOAD MiB | budget MiB |");
    for s in strategies {
        print!(" {s}: fits | peak MiB | spilled MiB | recompute GFLOP | overhead % | s |");
    }
    println!();
    println!(
        "|---|---:|---:|---:|{}",
        "---|---:|---:|---:|---:|---:|".repeat(strategies.len())
    );
    for path in graphs {
        let g = Graph::parse(&std::fs::read_to_string(path)?)
            .with_context(|| path.display().to_string())?;
        let s = graph_stats(&g)?;
        for pct in [80u64, 60, 40] {
            let budget = s.listed_load * pct / 100;
            print!(
                "| {} | {pct}% | {:.1} | {:.1} |",
                g.name,
                mib(s.listed_load),
                mib(budget)
            );
            let mut sequential: Option<f64> = None;
            let mut joint: Option<f64> = None;
            for name in strategies {
                // The listed order (order given, heuristic placement), under the budget.
                let opts = PipelineOptions {
                    order: OrderMode::Given,
                    strategy: Strategy::Heuristic,
                    budget: Some(BudgetSpec::Bytes(budget)),
                    spill_strategy: name.into(),
                    ..base.clone()
                };
                let t0 = Instant::now();
                let r = pipeline::run(&g, &opts, &Control::default());
                let secs = t0.elapsed().as_secs_f64();
                match r {
                    Ok(r) => {
                        let p = &r.plan;
                        if let Err(v) = memplan::validate(&r.graph, p, Some(budget)) {
                            bail!("{}: invalid budgeted plan: {v}", g.name);
                        }
                        let b = p.stats.budget.clone().unwrap_or_default();
                        if name == "joint" {
                            joint = Some(b.overhead_pct);
                        } else {
                            sequential =
                                Some(sequential.map_or(b.overhead_pct, |x| x.min(b.overhead_pct)));
                        }
                        print!(
                            " {} | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} |",
                            if p.stats.status == Some(memplan::PlanStatus::TimeLimit) {
                                "yes (time_limit)"
                            } else {
                                "yes"
                            },
                            mib(p.stats.peak_bytes),
                            mib(b.spilled_out_bytes),
                            b.recompute_flops / 1e9,
                            b.overhead_pct,
                            secs
                        );
                    }
                    Err(PipelineError::Budget(BudgetError::Infeasible { reached, .. })) => {
                        print!(" no | ({:.1}) | - | - | - | {secs:.2} |", mib(reached));
                    }
                    // The wall-clock cap bound before any plan fitted (status time_limit).
                    Err(PipelineError::Budget(BudgetError::Cancelled { reached, .. })) => {
                        print!(
                            " time_limit | ({}) | - | - | - | {secs:.2} |",
                            reached.map_or("-".to_string(), |r| format!("{:.1}", mib(r)))
                        );
                    }
                    Err(e) => bail!("{}: {e}", g.name),
                }
            }
            println!();
            if let (Some(sq), Some(j)) = (sequential, joint) {
                pairs.push((format!("{} {pct}%", g.name), sq, j));
            }
        }
    }
    // The joint program against the best sequential strategy (on the same listed order).
    let paying: Vec<&(String, f64, f64)> = pairs.iter().filter(|p| p.1 > 0.01).collect();
    let lower = paying.iter().filter(|p| p.2 < p.1 - 0.01).count();
    let higher: Vec<&String> = pairs
        .iter()
        .filter(|p| p.2 > p.1 + 1e-9)
        .map(|p| &p.0)
        .collect();
    println!();
    println!(
        "joint vs sequential best: {} cases fit; the sequential best pays overhead in {}; the \
         joint program is lower in {lower} of them ({:.0} %), higher in {} {:?}",
        pairs.len(),
        paying.len(),
        100.0 * lower as f64 / paying.len().max(1) as f64,
        higher.len(),
        higher
    );
    for (case, sq, j) in &pairs {
        if *j < sq - 0.01 {
            println!("- {case}: {sq:.2} % → {j:.2} %");
        }
    }
    Ok(())
}

fn order_table(graphs: &[PathBuf], base: &PipelineOptions) -> Result<()> {
    println!("| graph | ops | LOAD(listed) MiB | order bound MiB | heuristic peak MiB | ILP peak MiB | ILP bound MiB | gap | ILP mode | s | cut vs listed |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    let (mut within, mut total) = (0, 0);
    for path in graphs {
        let g = Graph::parse(&std::fs::read_to_string(path)?)
            .with_context(|| path.display().to_string())?;
        let s = graph_stats(&g)?;
        let run = |order, strategy| -> Result<memplan::Plan> {
            let opts = PipelineOptions {
                order,
                strategy,
                ..base.clone()
            };
            Ok(plan_checked(&g, &opts, None)?.plan)
        };
        let listed = run(OrderMode::Given, Strategy::Heuristic)?;
        let heur = run(OrderMode::Auto, Strategy::Heuristic)?;
        let t0 = Instant::now();
        let ilp = run(OrderMode::Auto, Strategy::Auto)?;
        let secs = t0.elapsed().as_secs_f64();
        if ilp.stats.peak_bytes > heur.stats.peak_bytes {
            bail!("{}: auto plan worse than the heuristic one", g.name);
        }
        let st = &ilp.stats;
        let gap = st.gap.unwrap_or(0.0);
        total += 1;
        if ratio(st.peak_bytes, st.lower_bound_bytes) <= 1.02 {
            within += 1;
        }
        let mode = st.order_ilp.as_ref().map_or("-".to_string(), |o| {
            format!(
                "{} {} ({}/{})",
                if o.whole { "whole" } else { "windows" },
                o.status,
                o.improved,
                o.models
            )
        });
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}% | {} | {:.1} | {:.1}% |",
            g.name,
            s.ops,
            mib(s.listed_load),
            mib(s.order_lower_bound),
            mib(heur.stats.peak_bytes),
            mib(st.peak_bytes),
            mib(st.lower_bound_bytes),
            gap * 100.0,
            mode,
            secs,
            100.0 * (1.0 - ratio(st.peak_bytes, listed.stats.peak_bytes)),
        );
    }
    println!();
    println!("peak <= 1.02 x proven bound: {within} of {total} graphs");
    Ok(())
}

fn bound_table(dir: &Path, base: &PipelineOptions) -> Result<()> {
    use memplan_solver::order::{bound, mincut, LifetimeOptions};
    println!("| graph | ops | peak MiB | per-node bound MiB | min-cut bound MiB | bound ms | flows | settled | plan's bound MiB | gap % |");
    println!("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    let (mut within, mut total) = (0, 0);
    for path in files(dir, "json")? {
        let g = Graph::parse(&std::fs::read_to_string(&path)?)
            .with_context(|| path.display().to_string())?;
        let r = plan_checked(&g, base, None)?;
        let problem = r.graph.order_problem();
        let lopts = LifetimeOptions {
            inplace: base.inplace,
        };
        let old = bound::per_node_bound(&problem, &lopts);
        let t0 = Instant::now();
        let cut = mincut::min_cut_bound(&problem, &lopts, None, old, mincut::DEFAULT_WORK);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let st = &r.plan.stats;
        let reported = st.lower_bound_bytes.max(cut.bytes.min(st.peak_bytes));
        let gap = 100.0 * (ratio(st.peak_bytes, reported) - 1.0);
        total += 1;
        if gap <= 2.0 {
            within += 1;
        }
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {:.1} | {:.2} |",
            g.name,
            problem.nodes.len(),
            mib(st.peak_bytes),
            mib(old),
            mib(cut.bytes),
            ms,
            cut.flows,
            if cut.complete { "yes" } else { "no" },
            mib(st.lower_bound_bytes),
            gap,
        );
    }
    println!("\ngap <= 2 %: {within} of {total} graphs");
    Ok(())
}

fn zoo_table(dir: &Path, base: &PipelineOptions) -> Result<()> {
    println!("| graph | ops | tensors | LOAD(listed) MiB | order bound MiB | LOAD/bound | peak(listed) MiB | peak/LOAD | peak(auto) MiB | auto/bound | auto order | listed ms | auto ms | exact peak/LOAD | exact status | exact ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|");
    let (mut worst_listed, mut worst_name) = (0.0f64, String::new());
    for path in files(dir, "json")? {
        let g = Graph::parse(&std::fs::read_to_string(&path)?)
            .with_context(|| path.display().to_string())?;
        let s = graph_stats(&g)?;
        let run = |order, strategy| -> Result<(memplan::Plan, f64)> {
            let opts = PipelineOptions {
                order,
                strategy,
                inplace: false,
                ..base.clone()
            };
            let t0 = Instant::now();
            let r = plan_checked(&g, &opts, None)?;
            Ok((r.plan, t0.elapsed().as_secs_f64() * 1e3))
        };
        let (given, given_ms) = run(OrderMode::Given, Strategy::Heuristic)?;
        let (auto, auto_ms) = run(OrderMode::Auto, Strategy::Heuristic)?;
        let (exact, exact_ms) = run(OrderMode::Given, Strategy::Auto)?;
        let r = ratio(given.stats.peak_bytes, s.listed_load);
        if r > worst_listed {
            worst_listed = r;
            worst_name = g.name.clone();
        }
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.3} | {:.1} | {:.4} | {:.1} | {:.3} | {} | {:.1} | {:.1} | {:.4} | {} | {:.1} |",
            g.name,
            s.ops,
            s.tensors,
            mib(s.listed_load),
            mib(s.order_lower_bound),
            ratio(s.listed_load, s.order_lower_bound),
            mib(given.stats.peak_bytes),
            r,
            mib(auto.stats.peak_bytes),
            ratio(auto.stats.peak_bytes, s.order_lower_bound),
            auto.stats.order_method.as_deref().unwrap_or("-"),
            given_ms,
            auto_ms,
            ratio(exact.stats.peak_bytes, s.listed_load),
            exact.stats.placement_status.as_deref().unwrap_or("-"),
            exact_ms
        );
    }
    println!("\nworst heuristic peak(listed)/LOAD: {worst_listed:.4} ({worst_name})");
    Ok(())
}

/// The capacity in a `NAME.CAPACITY.csv` file name, if any.
fn capacity_in_name(path: &Path) -> Option<u64> {
    let stem = path.file_stem()?.to_string_lossy().to_string();
    stem.rsplit_once('.').and_then(|(_, c)| c.parse().ok())
}

fn trace_table(paths: &[PathBuf], tl: Duration) -> Result<()> {
    println!("| instance | buffers | LOAD | capacity | heuristic peak/LOAD | best heuristic | exact status | final peak/LOAD | lower bound/LOAD | nodes | s |");
    println!("|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|");
    for path in paths {
        let parsed = csv::parse(&std::fs::read_to_string(path)?, 1)
            .with_context(|| path.display().to_string())?;
        let capacity = capacity_in_name(path);
        let problem = PlacementProblem {
            buffers: parsed.problem.buffers,
            capacity,
        };
        let load = problem.load();
        let t0 = Instant::now();
        let heur = place::heuristics(&problem, &Limits::with_time(tl))?;
        let out = place::refine(
            &problem,
            &heur,
            &Limits::with_time(tl.saturating_sub(t0.elapsed())),
        )?;
        let secs = t0.elapsed().as_secs_f64();
        let peak = PlacementProblem::new(problem.buffers.clone()).check(&out.placement)?;
        if peak != out.stats.objective {
            bail!(
                "{}: reported peak {} but the placement reaches {peak}",
                path.display(),
                out.stats.objective
            );
        }
        println!(
            "| {} | {} | {} | {} | {:.4} | {} | {} | {:.4} | {:.4} | {} | {:.2} |",
            path.file_name().unwrap_or_default().to_string_lossy(),
            problem.buffers.len(),
            load,
            capacity.map_or("-".to_string(), |c| c.to_string()),
            ratio(heur.stats.objective, load),
            heur.method,
            out.exact
                .map_or(out.stats.status.to_string(), |e| format!("{:?}", e.status)
                    .to_lowercase()),
            ratio(peak, load),
            ratio(out.stats.lower_bound, load),
            out.exact.map_or(0, |e| e.nodes),
            secs
        );
    }
    Ok(())
}
