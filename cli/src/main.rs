//! The `memplan` command line: plan, check, place, stats, run (execute a plan and compare with a
//! reference run), and serve (the HTTP service of the `memplan-api` crate).
//!
//! This binary lives in its own crate because `memplan-api` depends on the `memplan` library:
//! a `serve` command in the library's own package would make the two packages depend on each
//! other, which Cargo does not allow.

use anyhow::{Context, Result};
use clap::builder::PossibleValuesParser;
use clap::{Parser, Subcommand, ValueEnum};
use memplan::budget::{self, BudgetSpec};
use memplan::cost::DeviceProfile;
use memplan::graph::Graph;
use memplan::plan::Plan;
use memplan::planner::{OrderMode, Strategy};
use memplan_api::config;
use memplan_solver::place::{self, PlaceOptions};
use memplan_solver::{csv, Budget};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The sample graph bundled with the binary (ResNet-style block, training step).
const SAMPLE_GRAPH: &str = include_str!("../../samples/resnet_block.train.json");

#[derive(Parser)]
#[command(
    name = "memplan",
    version,
    about = "Memory plans for deep-learning computation graphs: op order, arena offsets, validation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// One value per run: the size of the `plan` variant (its many flags) does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Plan a graph: order, arena offsets, instruction stream (memplan-plan/1). Fills the
    /// pipeline options (`memplan::pipeline`) that the HTTP service and the zoo batch fill too.
    Plan {
        /// Graph file (memplan-graph/1 JSON); `sample` plans the bundled sample graph.
        graph: String,
        /// Write the plan here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Graph rewrites before planning, comma-separated: `fuse`, `conv-algos`, `tile`, `all`
        /// or `none` (the default: the graph is planned as given). When a rewrite changes the
        /// graph, the plan carries the rewritten graph (`rewritten_graph`), so `check` and
        /// `run` work against the input graph.
        #[arg(long, default_value = "none", value_name = "LIST")]
        rewrite: String,
        /// `given`: the listed order; `auto`: also try memory-aware reorderings, keep the best.
        #[arg(long, default_value = "auto", value_parser = order_names())]
        order: String,
        /// `heuristic`: heuristics only; `ilp`: heuristics, then the order integer program
        /// (HiGHS) with most of the work, then exact placement; `auto`: heuristics, the
        /// order program and exact placement, best plan wins.
        #[arg(long, default_value = "auto", value_parser = strategy_names())]
        strategy: String,
        /// Effort in deterministic work units: a multiplier of the solvers' work caps (search
        /// nodes, HiGHS branch-and-bound nodes). The same graph and options give the same
        /// plan on any machine unless --time-limit binds.
        #[arg(long, default_value_t = memplan::pipeline::DEFAULT_EFFORT)]
        effort: u64,
        /// Wall-clock cap in seconds for the whole run; when it binds, the plan's status is
        /// `time_limit`.
        #[arg(long, default_value_t = memplan::pipeline::DEFAULT_TIME_LIMIT_S)]
        time_limit: f64,
        /// Honour the graph's in-place hints (plans use the `inplace_of` alloc extension,
        /// which ../shared/tools/check_plan.py does not accept). Not with --budget.
        #[arg(long)]
        inplace: bool,
        /// Fit this arena budget: BYTES, or PCT% of the unconstrained plan's peak; the plan
        /// then spills to host and recomputes (exit 2 when no plan fits).
        #[arg(long, allow_hyphen_values = true)]
        budget: Option<String>,
        /// With --budget: `best` (every strategy, lowest modelled overhead wins), `sweep`
        /// (the heuristic), `ilp`, `chen` (sqrt(n) checkpointing) or `spill-all`.
        #[arg(long, default_value = "best", value_parser = spill_strategy_names())]
        spill_strategy: String,
        /// Device-profile JSON (conv algorithm times, tiling overhead, spills) (fields
        /// half_flops_per_s, fp32_flops_per_s, memory_bytes_per_s, h2d_bytes_per_s,
        /// d2h_bytes_per_s; missing ones keep the H200 defaults).
        #[arg(long)]
        device_profile: Option<PathBuf>,
        /// Host link bandwidth per direction in GB/s (overrides the profile).
        #[arg(long)]
        link_gbps: Option<f64>,
        /// Also write a Chrome-trace / Perfetto file of the plan here: ops as slices, the
        /// arena's reserved bytes as a counter track, spills as flows.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Also write the graph the plan refers to here (the input graph, or its rewrite),
        /// e.g. for ../shared/tools/check_plan.py.
        #[arg(long, value_name = "PATH")]
        graph_out: Option<PathBuf>,
        /// Leave `fuse` out of --rewrite (fusion is off unless asked).
        #[arg(long, hide = true)]
        no_fuse: bool,
        /// Conv algorithms (direct, im2col, Winograd F2/F4, chunked): `fastest` per conv,
        /// `min-memory` (least workspace), or `auto` (fastest without raising the
        /// min-memory plan's peak; under --budget: start fastest and downgrade convs jointly
        /// with spills/recomputes). Giving a mode other than `off` adds `conv-algos` to
        /// --rewrite; `off` removes it.
        #[arg(long, value_parser = conv_algo_names())]
        conv_algos: Option<String>,
        /// Memory tiers: weights in the weights region, activations in the arena's first
        /// region, every op's workspace in a temporaries region above it; prints the tier
        /// table (bytes, peak, fragmentation at peak) on stderr. Not with --budget.
        #[arg(long)]
        tiers: bool,
        /// With --tiers: each tier's alignment floor in bytes (power of two), as
        /// `persistent=256,activations=256,temporaries=512` (unnamed tiers: 256) or one
        /// number for all.
        #[arg(long, value_name = "SPEC")]
        tier_alignment: Option<String>,
        /// Spatial tiling into H-strips: `auto` (strip count per region with the lowest peak
        /// within --tile-overhead) or a strip count N >= 2. Giving it adds `tile` to
        /// --rewrite; `off` removes it.
        #[arg(long, value_name = "auto|N|off")]
        tile: Option<String>,
        /// Largest modelled overhead tiling may add, in percent of the untiled graph's
        /// modelled time (H200 roofline, or --device-profile).
        #[arg(long, default_value_t = 10.0, value_name = "PCT")]
        tile_overhead: f64,
    },
    /// Check a plan against its graph by replaying it; exit 0 if valid, 1 if not.
    Check {
        /// Graph file (memplan-graph/1 JSON).
        graph: PathBuf,
        /// Plan file (memplan-plan/1 JSON).
        plan: PathBuf,
        /// Also require the peak to be at most this many bytes.
        #[arg(long)]
        budget: Option<u64>,
    },
    /// Place buffers from a minimalloc CSV (id,lower,upper,size[,alignment]); writes the CSV
    /// with an offset column. With --capacity: fit it (exit 1 if that fails); without:
    /// minimise the peak. Heuristics first, then the exact search within the time limit.
    Place {
        /// Buffer CSV.
        buffers: PathBuf,
        /// Write the placed CSV here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Arena capacity in bytes to fit.
        #[arg(long)]
        capacity: Option<u64>,
        /// Heuristics only (no exact search).
        #[arg(long)]
        heuristic: bool,
        /// Time limit in seconds.
        #[arg(long, default_value_t = 1.0)]
        time_limit: f64,
        /// Alignment for buffers when the CSV has no alignment column.
        #[arg(long, default_value_t = 1)]
        alignment: u64,
    },
    /// Import a model from another framework as a memplan-graph/1 graph.
    Import {
        #[command(subcommand)]
        format: ImportFormat,
    },
    /// Print graph statistics: ops, tensors, naive bytes, LOAD of the listed order, weights,
    /// and the order-independent lower bound.
    Stats {
        /// Graph file (memplan-graph/1 JSON); `sample` for the bundled sample.
        graph: String,
    },
    /// Plan every graph of a model zoo through the planning pipeline three ways (listed
    /// order, heuristics, the full pipeline with the options below), validate each plan
    /// against the graph as given and save it under OUT/plans, and write results.json,
    /// results.csv, report.md and report.html. Resumable: graphs whose file hash and options
    /// already have a result in OUT are skipped.
    Zoo {
        /// Graph files, or folders whose *.json files are graphs.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Output folder (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Graph rewrites before planning, as for `plan --rewrite`: `fuse`, `conv-algos`,
        /// `tile`, `all` or `none` (the default: every graph is planned as given). Rewritten
        /// plans carry the graph they refer to.
        #[arg(long, default_value = "none", value_name = "LIST")]
        rewrite: String,
        /// Effort in deterministic work units, as for `plan --effort`.
        #[arg(long, default_value_t = memplan::pipeline::DEFAULT_EFFORT)]
        effort: u64,
        /// Wall-clock cap in seconds of each pipeline run, as for `plan --time-limit`; when
        /// it binds, that plan's status is `time_limit`.
        #[arg(long, default_value_t = memplan::pipeline::DEFAULT_TIME_LIMIT_S)]
        time_limit: f64,
        /// Graphs planned at once.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Budgets in % of the unconstrained (full pipeline) peak, e.g. 80,60,40; each is
        /// planned with every spill strategy (pipeline option `budget` = `PCT%`).
        #[arg(long)]
        budgets: Option<String>,
    },
    /// Run the HTTP service (POST /v1/plan, jobs, check, place, /metrics, /docs) until SIGTERM
    /// or Ctrl-C.
    Serve(ServeArgs),
    /// Execute a plan on real memory and compare every graph output with a reference run
    /// in which every tensor has its own allocation; exit 0 if equal, 1 if not (or if the
    /// plan is invalid or cannot be executed).
    Run {
        /// Graph file (memplan-graph/1 JSON); `sample` for the bundled sample.
        graph: String,
        /// Plan file (memplan-plan/1 JSON).
        plan: PathBuf,
        /// Where to run.
        #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
        device: DeviceArg,
        /// Seed of the generator of inputs and weights.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// `real`: f32 math where an op's shapes fit a real kernel, mixing elsewhere;
        /// `mix`: the mixing kernel for every op (byte-exact across devices).
        #[arg(long, value_enum, default_value_t = KernelsArg::Real)]
        kernels: KernelsArg,
        /// Execute even if the validator rejects the plan (to see what the violation does
        /// to the outputs).
        #[arg(long)]
        skip_validation: bool,
        /// The original graph when GRAPH is its rewrite (`memplan plan --graph-out`, after
        /// fusion or tiling): also prove that GRAPH computes the original's outputs.
        #[arg(long, value_name = "ORIGINAL.json")]
        original: Option<String>,
        /// Relative tolerance of the --original comparison (0: bitwise).
        #[arg(long, default_value_t = 0.0, value_name = "T")]
        original_tolerance: f64,
        /// Print the report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ImportFormat {
    /// An ONNX model: tensor sizes from its shapes (graph inputs/outputs, initializers and
    /// value_info, as filled by onnx.shape_inference.infer_shapes).
    Onnx {
        /// The .onnx file.
        model: PathBuf,
        /// Write the graph here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Shape of a graph input, binding its symbolic dimensions (repeatable):
        /// NAME=d0,d1,... (e.g. input=1,3,224,224).
        #[arg(long = "input-shape", value_name = "NAME=DIMS")]
        input_shape: Vec<String>,
        /// Graph name (default: the ONNX graph's name).
        #[arg(long)]
        name: Option<String>,
        /// Graph alignment in bytes (a power of two).
        #[arg(long, default_value_t = memplan::graph::DEFAULT_ALIGNMENT)]
        alignment: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    Cpu,
    Cuda,
}

#[derive(Clone, Copy, ValueEnum)]
enum KernelsArg {
    Real,
    Mix,
}

/// Options of `memplan serve` (defaults from `memplan_api::config`).
#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// SQLite file for jobs and stored plans (created when missing).
    #[arg(long, default_value = "memplan.db")]
    db: PathBuf,
    /// Solves that run at once [default: number of cores].
    #[arg(long)]
    workers: Option<usize>,
    /// Requests and jobs that may wait for a solver beyond the running ones; beyond that: 503.
    #[arg(long, default_value_t = config::DEFAULT_QUEUE)]
    queue: usize,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = config::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    /// Largest number of ops in a graph (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_MAX_OPS)]
    max_ops: usize,
    /// Largest number of tensors in a graph (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_MAX_TENSORS)]
    max_tensors: usize,
    /// Largest number of buffers of a placement (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_MAX_BUFFERS)]
    max_buffers: usize,
    /// Time limit in seconds when a request gives none.
    #[arg(long, default_value_t = config::DEFAULT_TIME_LIMIT_S)]
    default_time_limit: f64,
    /// Largest time limit in seconds of POST /v1/plan and /v1/place (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_SYNC_TIME_LIMIT_CAP_S)]
    sync_time_limit_cap: f64,
    /// Largest time limit in seconds of a job (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_MAX_TIME_LIMIT_S)]
    max_time_limit: f64,
    /// On SIGTERM, seconds running jobs may still run before they are stopped and kept queued
    /// for the next start.
    #[arg(long, default_value_t = config::DEFAULT_SHUTDOWN_GRACE_S)]
    shutdown_grace: f64,
}

fn strategy_names() -> PossibleValuesParser {
    PossibleValuesParser::new(Strategy::ALL.map(Strategy::name))
}

fn conv_algo_names() -> PossibleValuesParser {
    PossibleValuesParser::new(memplan::conv_algo::ConvAlgoMode::ALL.map(|m| m.name()))
}

fn spill_strategy_names() -> PossibleValuesParser {
    PossibleValuesParser::new(budget::strategy_names())
}

fn order_names() -> PossibleValuesParser {
    PossibleValuesParser::new(OrderMode::ALL.map(OrderMode::name))
}

/// Bad input: exit code 2.
#[derive(Debug)]
struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for BadInput {}

fn bad(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("memplan: {e:#}");
            if e.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(3)
            }
        }
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read {}: {e}", path.display())))
}

fn load_graph(arg: &str) -> Result<Graph> {
    let (text, label) = if arg == "sample" {
        (SAMPLE_GRAPH.to_string(), "bundled sample".to_string())
    } else {
        (read(Path::new(arg))?, arg.to_string())
    };
    Graph::parse(&text).map_err(|e| bad(format!("{label}: {e}")))
}

fn time_limit(secs: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        bad(format!(
            "--time-limit {secs} is not a non-negative number of seconds"
        ))
    })
}

fn write_out(output: &Option<PathBuf>, text: &str) -> Result<()> {
    match output {
        Some(path) => {
            // Write to a temporary file and rename, so a failure never leaves half a file.
            let tmp = path.with_extension("tmp~");
            std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, path)
                .with_context(|| format!("renaming to {}", path.display()))?;
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(())
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Plan {
            graph,
            output,
            rewrite,
            order,
            strategy,
            effort,
            time_limit: tl,
            inplace,
            budget,
            spill_strategy,
            device_profile,
            link_gbps,
            trace,
            graph_out,
            no_fuse,
            conv_algos,
            tiers,
            tier_alignment,
            tile,
            tile_overhead,
        } => {
            use memplan::pipeline::{self, PipelineOptions, Rewrite};
            let original = load_graph(&graph)?;
            let opt_err = |e: pipeline::PipelineError| bad(format!("{}: {e}", original.name));
            let mut rewrites = Rewrite::parse_list(&rewrite).map_err(opt_err)?;
            let mut opts = PipelineOptions::default();
            if no_fuse {
                rewrites.retain(|r| *r != Rewrite::Fuse);
            }
            if let Some(mode) = &conv_algos {
                rewrites.retain(|r| *r != Rewrite::ConvAlgos);
                if mode != "off" {
                    rewrites.push(Rewrite::ConvAlgos);
                    opts.conv_algos = memplan::conv_algo::ConvAlgoMode::from_name(mode)
                        .ok_or_else(|| bad(format!("unknown --conv-algos {mode}")))?;
                }
            }
            if let Some(t) = &tile {
                rewrites.retain(|r| *r != Rewrite::Tile);
                if t != "off" {
                    rewrites.push(Rewrite::Tile);
                    opts.tile = t.clone();
                }
            }
            rewrites.sort();
            rewrites.dedup();
            opts.rewrite = rewrites;
            opts.tile_overhead_pct = tile_overhead;
            opts.order = OrderMode::from_name(&order)
                .ok_or_else(|| bad(format!("unknown --order {order}")))?;
            opts.strategy = Strategy::from_name(&strategy)
                .ok_or_else(|| bad(format!("unknown --strategy {strategy}")))?;
            opts.effort = effort;
            opts.time_limit_s = tl;
            opts.inplace = inplace;
            opts.budget = match &budget {
                Some(spec) => {
                    Some(BudgetSpec::parse(spec).map_err(|e| bad(format!("--budget: {e}")))?)
                }
                None => None,
            };
            opts.spill_strategy = spill_strategy;
            opts.tiers = tiers;
            opts.tier_alignment = tier_alignment;
            opts.device_profile = match &device_profile {
                Some(path) => Some(
                    DeviceProfile::from_json(&read(path)?)
                        .map_err(|e| bad(format!("{}: {e}", path.display())))?,
                ),
                None => None,
            };
            opts.link_gbps = link_gbps;
            let result =
                pipeline::run(&original, &opts, &pipeline::Control::default()).map_err(|e| {
                    if e.is_bad_input() {
                        bad(format!("{}: {e}", original.name))
                    } else {
                        anyhow::Error::new(e)
                    }
                })?;
            report_plan(&original, &result);
            let mut text = result.plan.to_json();
            text.push('\n');
            write_out(&output, &text)?;
            if let Some(path) = &graph_out {
                write_out(
                    &Some(path.clone()),
                    &format!("{}\n", result.graph.to_json()),
                )?;
            }
            if let Some(path) = trace {
                let t = memplan::trace::chrome_trace(&result.graph, &result.plan)?;
                write_out(&Some(path), &format!("{t}\n"))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            graph,
            plan,
            budget,
        } => {
            let g = load_graph(&graph.to_string_lossy())?;
            let p =
                Plan::parse(&read(&plan)?).map_err(|e| bad(format!("{}: {e}", plan.display())))?;
            let g = match memplan::pipeline::graph_for_plan(g, &p) {
                Ok(g) => g,
                Err(e) if e.makes_plan_invalid() => {
                    eprintln!("invalid: {e}");
                    return Ok(ExitCode::from(1));
                }
                Err(e) => return Err(bad(format!("{}: {e}", plan.display()))),
            };
            match memplan::validate(&g, &p, budget) {
                Ok(r) => {
                    println!(
                        "valid: peak {} B, max live {} B, host peak {} B, {} execs, {} spills",
                        r.peak, r.max_live, r.host_peak, r.execs, r.spills
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(v) => {
                    eprintln!("invalid: {v}");
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Place {
            buffers,
            output,
            capacity,
            heuristic,
            time_limit: tl,
            alignment,
        } => {
            if !alignment.is_power_of_two() {
                return Err(bad(format!(
                    "--alignment {alignment} is not a power of two"
                )));
            }
            let started = Instant::now();
            let parsed = csv::parse(&read(&buffers)?, alignment)
                .map_err(|e| bad(format!("{}: {e}", buffers.display())))?;
            let mut problem = parsed.problem;
            problem.capacity = capacity;
            let opts = PlaceOptions {
                budget: Budget::with_time(time_limit(tl)?),
                exact: !heuristic,
            };
            let result = place::place(&problem, &opts)?;
            let load = problem.load();
            let peak = result.stats.objective;
            write_out(
                &output,
                &csv::write(&parsed.ids, &problem, &result.placement),
            )?;
            eprintln!(
                "{} buffers: LOAD {load} B, peak {peak} B ({:.4}x LOAD) by {}, lower bound {} B (gap {:.2}%), status {}{}{}, {:.1} ms",
                problem.buffers.len(),
                if load == 0 { 1.0 } else { peak as f64 / load as f64 },
                result.method,
                result.stats.lower_bound,
                result.stats.gap() * 100.0,
                result.stats.status,
                result
                    .exact
                    .map(|e| format!(", exact search {:?} after {} nodes", e.status, e.nodes))
                    .unwrap_or_default(),
                result
                    .ilp
                    .map(|i| format!(
                        ", HiGHS model {} ({} models, {} improved)",
                        i.status, i.models, i.improved
                    ))
                    .unwrap_or_default(),
                started.elapsed().as_secs_f64() * 1e3
            );
            if !result.fits {
                eprintln!(
                    "does not fit: peak {peak} B exceeds the capacity {} B{}",
                    capacity.unwrap_or(0),
                    if result.stats.status == memplan_solver::SolveStatus::Infeasible {
                        " (proven: no placement fits)"
                    } else {
                        ""
                    }
                );
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve(args) => serve(args),
        Command::Run {
            graph,
            plan,
            device,
            seed,
            kernels,
            skip_validation,
            original,
            original_tolerance,
            json,
        } => run_plan(
            &graph,
            &plan,
            exec_options(device, seed, kernels),
            skip_validation,
            original.as_deref(),
            original_tolerance,
            json,
        ),
        Command::Zoo {
            inputs,
            out,
            rewrite,
            effort,
            time_limit: tl,
            jobs,
            budgets,
        } => {
            let rewrite = memplan::pipeline::Rewrite::parse_list(&rewrite)
                .map_err(|e| bad(format!("--rewrite: {e}")))?;
            let base = memplan::pipeline::PipelineOptions {
                rewrite,
                effort,
                time_limit_s: tl,
                ..memplan::pipeline::PipelineOptions::default()
            };
            zoo(&inputs, &out, base, jobs, budgets)
        }
        Command::Import {
            format:
                ImportFormat::Onnx {
                    model,
                    output,
                    input_shape,
                    name,
                    alignment,
                },
        } => {
            use memplan::import::onnx::{import_onnx, parse_input_shape, OnnxOptions};
            let mut opts = OnnxOptions {
                name,
                alignment: Some(alignment),
                ..OnnxOptions::default()
            };
            for spec in &input_shape {
                let (n, dims) = parse_input_shape(spec).map_err(|e| bad(e.to_string()))?;
                if opts.input_shapes.insert(n.clone(), dims).is_some() {
                    return Err(bad(format!("--input-shape {n} is given twice")));
                }
            }
            let bytes = std::fs::read(&model)
                .with_context(|| format!("cannot read {}", model.display()))?;
            let g =
                import_onnx(&bytes, &opts).map_err(|e| bad(format!("{}: {e}", model.display())))?;
            eprintln!(
                "{}: {} ops, {} tensors ({} inputs, {} weights, {} outputs), arena tensors {}, weights {}",
                g.name,
                g.ops.len(),
                g.tensors.len(),
                count_kind(&g, memplan::TensorKind::Input),
                count_kind(&g, memplan::TensorKind::Weight),
                count_kind(&g, memplan::TensorKind::Output),
                mib(memplan::passes::arena_tensor_bytes(&g)),
                mib(g.weights_bytes())
            );
            write_out(&output, &format!("{}\n", g.to_json()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { graph } => {
            let g = load_graph(&graph)?;
            let s = memplan::planner::graph_stats(&g)?;
            println!("graph            {}", g.name);
            println!("ops              {}", s.ops);
            println!("tensors          {}", s.tensors);
            println!(
                "naive bytes      {} ({})",
                s.naive_bytes,
                mib(s.naive_bytes)
            );
            println!(
                "LOAD (listed)    {} ({})",
                s.listed_load,
                mib(s.listed_load)
            );
            println!(
                "weights bytes    {} ({})",
                s.weights_bytes,
                mib(s.weights_bytes)
            );
            println!(
                "order bound      {} ({})",
                s.order_lower_bound,
                mib(s.order_lower_bound)
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn zoo(
    inputs: &[PathBuf],
    out: &Path,
    base: memplan::pipeline::PipelineOptions,
    jobs: usize,
    budgets: Option<String>,
) -> Result<ExitCode> {
    use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
    use memplan::zoo::{self, ZooError, ZooEvent, ZooOptions};
    use std::collections::BTreeMap;
    use std::io::IsTerminal;
    // `--budgets 80,60,40`: percentages of each graph's unconstrained (full pipeline) peak.
    let mut percents = Vec::new();
    if let Some(list) = &budgets {
        for item in list.split(',') {
            let t = item.trim().trim_end_matches('%');
            match t.parse::<f64>() {
                // The one percentage rule and message (`--budget`, HTTP, zoo).
                Ok(p) => percents.push(
                    budget::check_percent(p).map_err(|e| bad(format!("--budgets {list}: {e}")))?,
                ),
                Err(_) => {
                    return Err(bad(format!(
                        "--budgets {list}: {item:?} is not a percentage in (0, 100] \
                         (e.g. --budgets 80,60,40)"
                    )))
                }
            }
        }
    }
    if jobs == 0 {
        return Err(bad("--jobs must be at least 1"));
    }
    let opts = ZooOptions {
        pipeline: base,
        jobs,
        budgets: percents,
    };
    // Progress bars only on a terminal: logs and pipes stay clean.
    let multi = std::io::stderr().is_terminal().then(MultiProgress::new);
    let mut overall: Option<ProgressBar> = None;
    let mut current: BTreeMap<String, ProgressBar> = BTreeMap::new();
    let mut observer = |ev: ZooEvent| {
        let Some(m) = &multi else { return };
        match ev {
            ZooEvent::Begin { total, skipped } => {
                let bar = m.add(ProgressBar::new(total as u64));
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} graphs {msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_prefix("zoo");
                bar.set_position(skipped as u64);
                if skipped > 0 {
                    bar.set_message(format!("({skipped} already done)"));
                }
                overall = Some(bar);
            }
            ZooEvent::Started { graph } => {
                let bar = m.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {prefix}: {msg} [{elapsed}]")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(graph.clone());
                bar.set_message("starting");
                bar.enable_steady_tick(Duration::from_millis(120));
                current.insert(graph, bar);
            }
            ZooEvent::Progress {
                graph,
                phase,
                best_peak,
                lower_bound,
            } => {
                if let Some(bar) = current.get(&graph) {
                    bar.set_message(format!(
                        "{phase}: best peak {}, bound {}",
                        mib(best_peak),
                        mib(lower_bound)
                    ));
                }
            }
            ZooEvent::Finished { graph, peak } => {
                if let Some(bar) = current.remove(&graph) {
                    bar.finish_and_clear();
                    m.remove(&bar);
                }
                if let Some(o) = &overall {
                    o.inc(1);
                    o.set_message(format!("last: {graph} {}", mib(peak)));
                }
            }
        }
    };
    let summary = zoo::run_zoo(inputs, out, &opts, &mut observer);
    if let Some(o) = &overall {
        o.finish_and_clear();
    }
    let summary = summary.map_err(|e| match e {
        ZooError::Missing(_)
        | ZooError::NoGraphs(_)
        | ZooError::Graph { .. }
        | ZooError::Options(_)
        | ZooError::Results { .. } => bad(e.to_string()),
        e => anyhow::Error::new(e),
    })?;
    eprintln!(
        "zoo: {} graphs ({} planned, {} skipped) in {:.1} s; {}/results.json, results.csv, report.md, report.html",
        summary.results.len(),
        summary.planned,
        summary.skipped,
        summary.seconds,
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn seconds(flag: &str, secs: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        bad(format!(
            "--{flag} {secs} is not a non-negative number of seconds"
        ))
    })
}

fn serve(a: ServeArgs) -> Result<ExitCode> {
    let cfg = memplan_api::Config {
        db_path: Some(a.db.clone()),
        body_limit: a.body_limit,
        max_ops: a.max_ops,
        max_tensors: a.max_tensors,
        max_buffers: a.max_buffers,
        workers: a.workers.unwrap_or_else(config::default_workers),
        queue: a.queue,
        default_time_limit: seconds("default-time-limit", a.default_time_limit)?,
        sync_time_limit_cap: seconds("sync-time-limit-cap", a.sync_time_limit_cap)?,
        max_time_limit: seconds("max-time-limit", a.max_time_limit)?,
        shutdown_grace: seconds("shutdown-grace", a.shutdown_grace)?,
    };
    if cfg.workers == 0 {
        return Err(bad("--workers must be at least 1"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let (workers, queue) = (cfg.workers, cfg.queue);
        let service = memplan_api::Service::start(cfg).await.map_err(|e| match e {
            memplan_api::StartError::Config(m) => bad(m),
            e => anyhow::Error::new(e).context(format!("opening {}", a.db.display())),
        })?;
        let listener = tokio::net::TcpListener::bind(a.addr)
            .await
            .map_err(|e| bad(format!("cannot listen on {}: {e}", a.addr)))?;
        let local = listener.local_addr()?;
        eprintln!(
            "memplan serve: listening on http://{local} (database {}, {workers} workers, queue {queue}; docs at /docs)",
            a.db.display()
        );
        memplan_api::serve(service, listener, memplan_api::shutdown_signal()).await?;
        eprintln!("memplan serve: stopped");
        Ok(ExitCode::SUCCESS)
    })
}

fn exec_options(
    device: DeviceArg,
    seed: u64,
    kernels: KernelsArg,
) -> memplan_executor::ExecOptions {
    use memplan_executor::{Device, ExecOptions, KernelMode};
    ExecOptions {
        device: match device {
            DeviceArg::Cpu => Device::Cpu,
            DeviceArg::Cuda => Device::Cuda,
        },
        seed,
        kernels: match kernels {
            KernelsArg::Real => KernelMode::Real,
            KernelsArg::Mix => KernelMode::Mix,
        },
    }
}

/// Whether `g` runs conv algorithms chosen by memplan (which round differently from the
/// original graph's kernels).
fn runs_chosen_algos(g: &Graph) -> bool {
    memplan::conv_algo::algo_mix(g)
        .keys()
        .any(|a| a != "none" && a != "given")
}

/// Relative tolerance of the equivalence check when the rewritten graph runs chosen conv
/// algorithms (which round differently from the original's kernels).
const CONV_ALGO_TOLERANCE: f64 = 1e-3;

/// The original graph of `run`: given as the plan's graph, or by `--original`.
enum OriginalGraph<'a> {
    Given(Graph),
    Path(&'a str),
}

fn run_plan(
    graph: &str,
    plan: &Path,
    opts: memplan_executor::ExecOptions,
    skip_validation: bool,
    original: Option<&str>,
    original_tolerance: f64,
    json: bool,
) -> Result<ExitCode> {
    use memplan_executor::{self as executor, ExecError};
    let given = load_graph(graph)?;
    let p = Plan::parse(&read(plan)?).map_err(|e| bad(format!("{}: {e}", plan.display())))?;
    let g = match memplan::pipeline::graph_for_plan(given.clone(), &p) {
        Ok(g) => g,
        Err(e) if e.makes_plan_invalid() => {
            eprintln!("invalid: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(bad(format!("{}: {e}", plan.display()))),
    };
    // A plan that carries its rewritten graph is run on that graph, and the graph given is
    // the original it must compute the outputs of (bitwise unless conv algorithms were
    // chosen, which round differently: then 1e-3 relative unless a tolerance is given).
    let original = match original {
        None if p.rewritten_graph.is_some() && g != given => {
            let tol = if runs_chosen_algos(&g) && original_tolerance == 0.0 {
                CONV_ALGO_TOLERANCE
            } else {
                original_tolerance
            };
            Some((OriginalGraph::Given(given), tol))
        }
        None => None,
        Some(path) => Some((OriginalGraph::Path(path), original_tolerance)),
    };
    if let Err(v) = memplan::validate(&g, &p, None) {
        if !skip_validation {
            eprintln!("invalid: {v} (--skip-validation runs it anyway)");
            return Ok(ExitCode::from(1));
        }
        eprintln!("warning: the validator rejects this plan ({v}); running it anyway");
    }
    let original = match original {
        Some((o, tol)) => {
            if !(tol >= 0.0 && tol.is_finite()) {
                return Err(bad(format!(
                    "--original-tolerance {tol} must be a finite number >= 0"
                )));
            }
            Some((
                match o {
                    OriginalGraph::Given(g) => g,
                    OriginalGraph::Path(path) => load_graph(path)?,
                },
                tol,
            ))
        }
        None => None,
    };
    let r = match executor::execute(&g, &p, &opts).and_then(|mut r| {
        if let Some((o, tol)) = &original {
            r.original = Some(executor::equivalence(o, &g, &opts, *tol)?);
        }
        Ok(r)
    }) {
        Ok(r) => r,
        Err(e @ ExecError::Device(_)) => return Err(bad(e.to_string())),
        Err(e @ ExecError::BadPlan { .. }) => {
            eprintln!("execution failed: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        let mut text = serde_json::to_string_pretty(&r)?;
        text.push('\n');
        write_out(&None, &text)?;
    } else {
        let verdict = match &r.first_mismatch {
            None => "yes".to_string(),
            Some(m) => format!(
                "NO: first differing output {:?} at byte {} ({} bytes differ{})",
                m.tensor,
                m.first_byte,
                m.differing_bytes,
                m.first_f32
                    .map(|(i, a, b)| format!("; element {i}: plan {a:e}, reference {b:e}"))
                    .unwrap_or_default()
            ),
        };
        println!("graph             {} on {}", r.graph, r.device);
        println!(
            "outputs equal     {verdict} ({} outputs{})",
            r.outputs_compared,
            if r.tolerance > 0.0 {
                format!(", relative tolerance {:e}", r.tolerance)
            } else {
                ", bitwise".to_string()
            }
        );
        println!(
            "arena             {} B allocated (one allocation) for arena_bytes {} B; replayed peak {} B, stats.peak_bytes {} B",
            r.arena_allocated, r.plan_arena_bytes, r.replay_peak_bytes, r.plan_peak_bytes
        );
        println!(
            "weights           {} B allocated for weights_bytes {} B",
            r.weights_allocated, r.plan_weights_bytes
        );
        println!(
            "host pool         {} B allocated for host_bytes {} B; peak used {} B",
            r.host_allocated, r.plan_host_bytes, r.host_peak_bytes
        );
        println!("kernel scratch    {} B (outside the plan)", r.scratch_bytes);
        println!(
            "spills            {} out ({} B), {} in ({} B)",
            r.spill_outs, r.spill_out_bytes, r.spill_ins, r.spill_in_bytes
        );
        println!(
            "executed ops      {} ({} ops, {} recomputes); kernels: {}",
            r.execs,
            r.ops,
            r.recomputes,
            r.kernels
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(d) = &r.device_memory {
            println!(
                "device memory     {} B taken by the plan's buffers (arena + weights = {} B, extra {} B); context {} B",
                d.taken_by_buffers,
                r.plan_arena_bytes + r.plan_weights_bytes,
                d.extra_bytes,
                d.taken_by_context
            );
        }
        println!(
            "time              step {:.1} ms, reference {:.1} ms (peak {} B), total {:.1} ms",
            r.step_ms, r.reference_ms, r.reference_peak_bytes, r.total_ms
        );
        if r.reference_nonfinite > 0 {
            println!(
                "note              {} reference output values are not finite",
                r.reference_nonfinite
            );
        }
        for n in &r.notes {
            println!("note              {n}");
        }
        if let Some(o) = &r.original {
            println!(
                "original graph    {}: {} ({} outputs{})",
                o.graph,
                match &o.first_mismatch {
                    None => "computes the same outputs".to_string(),
                    Some(m) => format!(
                        "DIFFERS at output {:?} byte {} ({} bytes differ)",
                        m.tensor, m.first_byte, m.differing_bytes
                    ),
                },
                o.outputs_compared,
                if o.tolerance > 0.0 {
                    format!(", relative tolerance {:e}", o.tolerance)
                } else {
                    ", bitwise".to_string()
                }
            );
            if !o.outputs_equal && o.tolerance == 0.0 && runs_chosen_algos(&g) {
                println!(
                    "note              the graph runs chosen conv algorithms, which round differently \
                     from the original's kernels: compare with --original-tolerance 1e-3, or plan \
                     with --conv-algos off for bitwise equality"
                );
            }
        }
    }
    let original_equal = r.original.as_ref().is_none_or(|o| o.outputs_equal);
    Ok(if r.outputs_equal && original_equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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
    eprintln!(
        "{}: {} ops, peak {} B ({}), lower bound {} B (gap {:.2}%), LOAD of order {} B, order {}, placement {} ({}), status {}, {:.1} ms",
        g.name,
        g.ops.len(),
        s.peak_bytes,
        mib(s.peak_bytes),
        s.lower_bound_bytes,
        s.gap.unwrap_or(0.0) * 100.0,
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

fn count_kind(g: &Graph, kind: memplan::TensorKind) -> usize {
    g.tensors.iter().filter(|t| t.kind == kind).count()
}

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
}
