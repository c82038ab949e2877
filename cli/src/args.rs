//! The command line's definitions (clap): the commands, their flags and help texts. What each
//! command does is in [`crate::commands`].

use clap::builder::PossibleValuesParser;
use clap::{Parser, Subcommand, ValueEnum};
use memplan::budget;
use memplan::planner::{OrderMode, Strategy};
use memplan_api::config;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The most random bindings `memplan check --samples` replays (more would run for hours).
pub const MAX_SAMPLES: usize = 10_000_000;

/// The longest delay in microseconds `memplan run --perturb-us` may ask for (1 s per task).
pub const MAX_PERTURB_US: u64 = 1_000_000;

/// The command line: one subcommand.
#[derive(Parser)]
#[command(
    name = "memplan",
    version,
    about = "Memory plans for deep-learning computation graphs: op order, arena offsets, validation"
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

// One value per run: the size of the `plan` variant (its many flags) does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Plan a graph: order, arena offsets, instruction stream (memplan-plan/1). Fills the
    /// pipeline options (`memplan::pipeline`) that the HTTP service and the zoo batch fill too.
    Plan(PlanArgs),
    /// Check a plan against its graph by replaying it; exit 0 if valid, 1 if not.
    Check(CheckArgs),
    /// Place buffers from a minimalloc CSV (`id,lower,upper,size[,alignment]`); writes the same
    /// CSV (its columns, their order, extra ones) with an offset column. With --capacity: fit
    /// it (exit 1 if that fails); without: minimise the peak. Heuristics first, then the
    /// exact search within the time limit.
    Place(PlaceArgs),
    /// Import a model from another framework as a memplan-graph/1 graph.
    Import(ImportArgs),
    /// Print graph statistics: ops, tensors, naive bytes, LOAD of the listed order, weights,
    /// and the order-independent lower bound.
    Stats(StatsArgs),
    /// Plan every graph of a model zoo through the planning pipeline three ways (listed
    /// order, heuristics, the full pipeline with the options below), validate each plan
    /// against the graph as given and save it under OUT/plans, and write results.json,
    /// results.csv, report.md and report.html. Resumable: graphs whose file hash and options
    /// already have a result in OUT are skipped.
    Zoo(ZooArgs),
    /// Run the HTTP service (POST /v1/plan, jobs, check, place, /metrics, /docs) until SIGTERM
    /// or Ctrl-C.
    Serve(ServeArgs),
    /// Instantiate a symbolic plan (memplan-symbolic-plan/1, what `memplan plan` writes for a
    /// graph with `symbols`) or a symbolic graph at one binding of its symbols: writes an
    /// ordinary memplan-plan/1 plan or memplan-graph/1 graph.
    Instantiate(InstantiateArgs),
    /// Choose the arena to reserve for a symbolic plan so that the bindings up to a quantile
    /// of a histogram fit; print each binding's peak, utilisation and, above the quantile,
    /// the fallback (split the batch, or a budgeted plan at the reserved size).
    Reserve(ReserveArgs),
    /// Execute a plan on real memory and compare every graph output with a reference run
    /// in which every tensor has its own allocation; exit 0 if equal, 1 if not (or if the
    /// plan is invalid or cannot be executed).
    Run(RunArgs),
}

/// The formats `memplan import` reads.
#[derive(Subcommand)]
pub enum ImportFormat {
    /// An ONNX model: tensor sizes from its shapes (graph inputs/outputs, initializers and
    /// value_info, as filled by onnx.shape_inference.infer_shapes).
    Onnx(OnnxArgs),
}

/// `memplan run --device`: where to run.
#[derive(Clone, Copy, ValueEnum)]
pub enum DeviceArg {
    // The host CPU. (Plain comments on these variants: doc comments would become help text.)
    Cpu,
    // A CUDA GPU (the `cuda` feature).
    Cuda,
}

/// `memplan run --kernels`: which kernels compute the ops.
#[derive(Clone, Copy, ValueEnum)]
pub enum KernelsArg {
    // f32 math where an op's shapes fit a real kernel (see `--kernels`).
    Real,
    // The mixing kernel for every op.
    Mix,
}

/// The arguments of `memplan plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Graph file (memplan-graph/1 JSON); `sample` plans the bundled sample graph. A graph
    /// with `symbols` (sizes as expressions over symbols) gets one symbolic plan for the
    /// whole range (memplan-symbolic-plan/1; `memplan instantiate` turns it into a plan).
    pub graph: String,
    /// Write the plan here instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Symbolic graphs only: split the widest symbol's range into pieces while a piece's
    /// instantiated peak exceeds this many times the per-binding plan's (default 1.05).
    #[arg(long, value_name = "R")]
    pub max_ratio: Option<f64>,
    /// Symbolic graphs only: at most this many pieces (default 16; 1 = one plan for the whole
    /// range).
    #[arg(long, value_name = "N")]
    pub max_pieces: Option<usize>,
    /// Graph rewrites before planning, comma-separated: `fuse`, `conv-algos`, `tile`, `all`
    /// or `none` (the default: the graph is planned as given). When a rewrite changes the
    /// graph, the plan carries the rewritten graph (`rewritten_graph`), so `check` and
    /// `run` work against the input graph.
    #[arg(long, default_value = "none", value_name = "LIST")]
    pub rewrite: String,
    /// `given`: the listed order; `auto`: also try memory-aware reorderings, keep the best.
    #[arg(long, default_value = "auto", value_parser = order_names())]
    pub order: String,
    /// `heuristic`: heuristics only; `ilp`: heuristics, then the order integer program
    /// (HiGHS) with most of the work, then exact placement; `auto`: heuristics, the
    /// order program and exact placement, best plan wins.
    #[arg(long, default_value = "auto", value_parser = strategy_names())]
    pub strategy: String,
    /// Effort in deterministic work units: a multiplier of the solvers' work caps (search
    /// nodes, HiGHS branch-and-bound nodes). The same graph and options give the same
    /// plan on any machine unless --time-limit binds.
    #[arg(long, default_value_t = memplan::pipeline::DEFAULT_EFFORT)]
    pub effort: u64,
    /// Wall-clock cap in seconds for the whole run; when it binds, the plan's status is
    /// `time_limit`.
    #[arg(long, default_value_t = memplan::pipeline::DEFAULT_TIME_LIMIT_S)]
    pub time_limit: f64,
    /// Honour the graph's in-place hints (plans use the `inplace_of` alloc extension,
    /// which ../shared/tools/check_plan.py does not accept). Not with --budget.
    #[arg(long)]
    pub inplace: bool,
    /// Fit this arena budget: BYTES, or PCT% of the unconstrained plan's peak; the plan
    /// then spills to host and recomputes (exit 2 when no plan fits).
    #[arg(long, allow_hyphen_values = true)]
    pub budget: Option<String>,
    /// With --budget: `best` (every strategy, then the joint program; lowest modelled
    /// overhead wins), `sweep` (the heuristic), `ilp`, `chen` (sqrt(n) checkpointing),
    /// `spill-all` or `joint` (order, spill and recompute chosen together).
    #[arg(long, default_value = "best", value_parser = spill_strategy_names())]
    pub spill_strategy: String,
    /// Device-profile JSON (conv algorithm times, tiling overhead, spills) (fields
    /// half_flops_per_s, fp32_flops_per_s, memory_bytes_per_s, h2d_bytes_per_s,
    /// d2h_bytes_per_s; missing ones keep the H200 defaults).
    #[arg(long)]
    pub device_profile: Option<PathBuf>,
    /// Host link bandwidth per direction in GB/s (overrides the profile).
    #[arg(long)]
    pub link_gbps: Option<f64>,
    /// Also write a Chrome-trace / Perfetto file of the plan here: ops as slices, the
    /// arena's reserved bytes as a counter track, spills as flows.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Also write the graph the plan refers to here (the input graph, or its rewrite),
    /// e.g. for ../shared/tools/check_plan.py.
    #[arg(long, value_name = "PATH")]
    pub graph_out: Option<PathBuf>,
    /// Leave `fuse` out of --rewrite (fusion is off unless asked).
    #[arg(long, hide = true)]
    pub no_fuse: bool,
    /// Conv algorithms (direct, im2col, Winograd F2/F4, chunked): `fastest` per conv,
    /// `min-memory` (least workspace), or `auto` (fastest without raising the
    /// min-memory plan's peak; under --budget: start fastest and downgrade convs jointly
    /// with spills/recomputes). Giving a mode other than `off` adds `conv-algos` to
    /// --rewrite; `off` removes it.
    #[arg(long, value_parser = conv_algo_names())]
    pub conv_algos: Option<String>,
    /// Memory tiers: weights in the weights region, activations in the arena's first
    /// region, every op's workspace in a temporaries region above it; prints the tier
    /// table (bytes, peak, fragmentation at peak) on stderr. Not with --budget.
    #[arg(long)]
    pub tiers: bool,
    /// With --tiers: each tier's alignment floor in bytes (power of two), as
    /// `persistent=256,activations=256,temporaries=512` (unnamed tiers: 256) or one
    /// number for all.
    #[arg(long, value_name = "SPEC")]
    pub tier_alignment: Option<String>,
    /// Spatial tiling into H-strips: `auto` (strip count per region with the lowest peak
    /// within --tile-overhead) or a strip count N >= 2. Giving it adds `tile` to
    /// --rewrite; `off` removes it.
    #[arg(long, value_name = "auto|N|off")]
    pub tile: Option<String>,
    /// With --tile (or tile in --rewrite): the largest modelled overhead tiling may add, in
    /// percent of the untiled graph's modelled time (H200 roofline, or --device-profile).
    #[arg(long, default_value_t = 10.0, value_name = "PCT")]
    pub tile_overhead: f64,
    /// Streams the plan may run on: with K > 1 independent branches run concurrently, with
    /// `record_event` / `wait_event` instructions that keep every reuse of bytes safe (an
    /// extension of memplan-plan/1 that `memplan check` validates and plain memplan-plan/1
    /// checkers such as ../shared/tools/check_plan.py do not accept); prints the modelled
    /// makespan against the single-stream plan's on stderr.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub streams: u32,
    /// With --streams: the most arena bytes the parallel plan may take, as a multiple of the
    /// single-stream peak (a --budget caps it instead).
    #[arg(long, default_value_t = memplan::pipeline::DEFAULT_STREAM_PEAK_RATIO, value_name = "RATIO")]
    pub stream_peak_ratio: f64,
}

/// The arguments of `memplan instantiate`.
#[derive(clap::Args)]
pub struct InstantiateArgs {
    /// A symbolic plan (memplan-symbolic-plan/1) or a symbolic graph (memplan-graph/1 with
    /// `symbols`).
    pub input: PathBuf,
    /// The value of every symbol, e.g. `B=17` or `B=17 S=128` (within the declared ranges).
    #[arg(required = true, value_name = "SYMBOL=VALUE")]
    pub binding: Vec<String>,
    /// Write the concrete plan or graph here instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// The arguments of `memplan reserve`.
#[derive(clap::Args)]
pub struct ReserveArgs {
    /// A symbolic plan (memplan-symbolic-plan/1, from `memplan plan` on a symbolic graph).
    pub plan: PathBuf,
    /// The distribution of one symbol: a JSON histogram `{"B": {"1": 120, "8": 40, ...}}`
    /// (value: weight), a JSON listed sample `{"B": [3, 1, 8, ...]}` (one entry per
    /// observation), or CSV/text: a header `B` (or `B,weight`), then one value (and weight)
    /// per line.
    pub histogram: PathBuf,
    /// The share of the distribution's weight that must fit, in (0, 1].
    #[arg(long, default_value_t = 0.99)]
    pub quantile: f64,
    /// The batch symbol to split for bindings above the reservation.
    #[arg(long, value_name = "SYMBOL")]
    pub split: Option<String>,
    /// Also simulate a dynamic batcher that merges queued requests along the `--split` symbol
    /// into the reservation, and report its utilisation per run (`memplan::symbolic::batching`).
    #[arg(long, requires = "split")]
    pub batching: bool,
    /// With `--batching`: how many requests may wait to be merged.
    #[arg(long, default_value_t = 16, requires = "batching")]
    pub window: usize,
    /// With `--batching`: requests in the simulated stream.
    #[arg(long, default_value_t = 10_000, requires = "batching")]
    pub requests: usize,
    /// With `--batching`: the stream's seed.
    #[arg(long, default_value_t = 0, requires = "batching")]
    pub seed: u64,
    /// The symbolic graph the plan was made for: plan the budgeted fallback (spills and
    /// recomputes within the reserved bytes) of every binding above the quantile and report it.
    #[arg(long, value_name = "SYMGRAPH")]
    pub graph: Option<PathBuf>,
    /// With `--graph`: write each fallback that fits as `DIR/B=32.graph.json` and
    /// `DIR/B=32.plan.json` (replay with `memplan check` / `memplan run`).
    #[arg(long, value_name = "DIR", requires = "graph")]
    pub fallback_dir: Option<PathBuf>,
    /// Write the reservation as JSON here (with a `batching` object under `--batching`).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// The arguments of `memplan check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// Graph file (memplan-graph/1 JSON; a symbolic graph with a symbolic plan).
    pub graph: PathBuf,
    /// Plan file (memplan-plan/1 JSON, or memplan-symbolic-plan/1: then every corner of the
    /// symbols' box, the quartiles, the pieces' ends and `--samples` random bindings are
    /// instantiated and replayed).
    pub plan: PathBuf,
    /// Also require the peak to be at most this many bytes.
    #[arg(long)]
    pub budget: Option<u64>,
    /// With a symbolic graph and plan: seeded random bindings checked besides the corners,
    /// quartiles and piece ends; at most 10000000 (exit 2 above; a million take about half a
    /// second).
    #[arg(long, default_value_t = 32)]
    pub samples: usize,
}

/// The arguments of `memplan place`.
#[derive(clap::Args)]
pub struct PlaceArgs {
    /// Buffer CSV.
    pub buffers: PathBuf,
    /// Write the placed CSV here instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Arena capacity in bytes to fit.
    #[arg(long)]
    pub capacity: Option<u64>,
    /// Heuristics only (no exact search).
    #[arg(long)]
    pub heuristic: bool,
    /// Time limit in seconds, for the whole command (reading the CSV counts; a little is
    /// kept back per buffer for finishing and writing the answer).
    #[arg(long, default_value_t = 1.0)]
    pub time_limit: f64,
    /// Alignment for buffers when the CSV has no alignment column.
    #[arg(long, default_value_t = 1)]
    pub alignment: u64,
}

/// The arguments of `memplan import`.
#[derive(clap::Args)]
pub struct ImportArgs {
    // The format (a plain comment: a doc comment here would become help text).
    #[command(subcommand)]
    pub format: ImportFormat,
}

/// The arguments of `memplan stats`.
#[derive(clap::Args)]
pub struct StatsArgs {
    /// Graph file (memplan-graph/1 JSON); `sample` for the bundled sample.
    pub graph: String,
}

/// The arguments of `memplan zoo`.
#[derive(clap::Args)]
pub struct ZooArgs {
    /// Graph files, or folders whose *.json files are graphs.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Output folder (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Graph rewrites before planning, as for `plan --rewrite`: `fuse`, `conv-algos`,
    /// `tile`, `all` or `none` (the default: every graph is planned as given). Rewritten
    /// plans carry the graph they refer to.
    #[arg(long, default_value = "none", value_name = "LIST")]
    pub rewrite: String,
    /// Effort in deterministic work units, as for `plan --effort`.
    #[arg(long, default_value_t = memplan::pipeline::DEFAULT_EFFORT)]
    pub effort: u64,
    /// Wall-clock cap in seconds of each pipeline run, as for `plan --time-limit`; when
    /// it binds, that plan's status is `time_limit`.
    #[arg(long, default_value_t = memplan::pipeline::DEFAULT_TIME_LIMIT_S)]
    pub time_limit: f64,
    /// Graphs planned at once.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Budgets in % of the unconstrained (full pipeline) peak, e.g. 80,60,40; each is
    /// planned with every spill strategy (pipeline option `budget` = `PCT%`).
    #[arg(long)]
    pub budgets: Option<String>,
}

/// The arguments of `memplan run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Graph file (memplan-graph/1 JSON); `sample` for the bundled sample.
    pub graph: String,
    /// Plan file (memplan-plan/1 JSON).
    pub plan: PathBuf,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Seed of the generator of inputs and weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `real`: f32 math where an op's shapes fit a real kernel, mixing elsewhere;
    /// `mix`: the mixing kernel for every op (byte-exact across devices).
    #[arg(long, value_enum, default_value_t = KernelsArg::Real)]
    pub kernels: KernelsArg,
    /// Execute even if the validator rejects the plan (to see what the violation does
    /// to the outputs).
    #[arg(long)]
    pub skip_validation: bool,
    /// The original graph when GRAPH is its rewrite (`memplan plan --graph-out`, after
    /// fusion or tiling): also prove that GRAPH computes the original's outputs.
    #[arg(long, value_name = "ORIGINAL.json")]
    pub original: Option<String>,
    /// Relative tolerance of the comparison with the original graph (--original, or the graph
    /// given when the plan carries its rewrite); 0: bitwise. Default: bitwise, or 1e-3 when
    /// the graph run uses conv algorithms memplan chose (they round differently from the
    /// original's kernels). Only with such a comparison (exit 2 otherwise).
    #[arg(long, value_name = "T")]
    pub original_tolerance: Option<f64>,
    /// Parallel plans on the CPU: delay every stream's tasks by a random time seeded by S
    /// (up to --perturb-us), so that a race the plan allows shows up.
    #[arg(long, value_name = "S")]
    pub perturb_seed: Option<u64>,
    /// With --perturb-seed (exit 2 without it): the longest delay in microseconds; at most
    /// 1000000 (1 s per task; exit 2 above). Default 2000.
    #[arg(long, value_name = "US")]
    pub perturb_us: Option<u64>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Tensor file (safetensors) of values for graph inputs and weights, by tensor name
    /// (repeatable; e.g. the weights `import onnx --weights-out` writes and an input).
    /// Tensors it does not name are generated from --seed. Every name must be an input or
    /// weight of the graph with the same dtype and size.
    #[arg(long, value_name = "FILE.safetensors")]
    pub data: Vec<PathBuf>,
    /// Write the graph outputs the plan's run computed here (safetensors; dtypes and
    /// shapes from the graph).
    #[arg(long, value_name = "FILE.safetensors")]
    pub outputs_out: Option<PathBuf>,
    /// Fail (exit 1) when an op has no real kernel and would run the mixing kernel, whose
    /// outputs are hashes rather than values. Without it, --data with such ops prints a
    /// warning naming them.
    #[arg(long)]
    pub require_real_kernels: bool,
}

/// The arguments of `memplan import onnx`.
#[derive(clap::Args)]
pub struct OnnxArgs {
    /// The .onnx file.
    pub model: PathBuf,
    /// Write the graph here instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Shape of a graph input, binding its symbolic dimensions (repeatable):
    /// NAME=d0,d1,... (e.g. input=1,3,224,224).
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shape: Vec<String>,
    /// Keep an ONNX dim_param symbolic with this range instead of binding it (repeatable):
    /// NAME=MIN..MAX (e.g. batch=1..64); the output is then a symbolic graph whose sizes
    /// depending on it are expressions ("602112*batch").
    #[arg(long = "symbol", value_name = "NAME=MIN..MAX")]
    pub symbol: Vec<String>,
    /// Graph name (default: the ONNX graph's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Graph alignment in bytes (a power of two).
    #[arg(long, default_value_t = memplan::graph::DEFAULT_ALIGNMENT)]
    pub alignment: u64,
    /// Also write the weights' data (initializers and Constant values) here, as a tensor
    /// file (safetensors) keyed by the graph's tensor names, for `memplan run --data`.
    #[arg(long, value_name = "FILE.safetensors")]
    pub weights_out: Option<PathBuf>,
}

/// Options of `memplan serve` (defaults from `memplan_api::config`).
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// SQLite file for jobs and stored plans (created when missing).
    #[arg(long, default_value = "memplan.db")]
    pub db: PathBuf,
    /// Solves that run at once [default: number of cores].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Requests and jobs that may wait for a solver beyond the running ones; beyond that: 503.
    #[arg(long, default_value_t = config::DEFAULT_QUEUE)]
    pub queue: usize,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = config::DEFAULT_BODY_LIMIT)]
    pub body_limit: usize,
    /// Seconds the service waits for a client: for a request's head to arrive in full, after the
    /// connection opened or its last answer (then the connection is closed), and for each next
    /// piece of a body (then 408); at most 86400. A stalled client holds no connection longer,
    /// and after SIGTERM no client keeps the service from stopping (see the README).
    #[arg(long, default_value_t = config::DEFAULT_CLIENT_TIMEOUT_S)]
    pub client_timeout: f64,
    /// Largest number of ops in a graph (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_MAX_OPS)]
    pub max_ops: usize,
    /// Largest number of tensors in a graph (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_MAX_TENSORS)]
    pub max_tensors: usize,
    /// Largest number of buffers of a placement (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_MAX_BUFFERS)]
    pub max_buffers: usize,
    /// Time limit in seconds of a placement (`POST /v1/place`) whose request gives none.
    /// Plans and jobs without one get the pipeline's default of 60 s, as the CLI's `plan`
    /// does, lowered to --sync-time-limit-cap or --max-time-limit.
    #[arg(long, default_value_t = config::DEFAULT_TIME_LIMIT_S)]
    pub default_time_limit: f64,
    /// Largest time limit in seconds of POST /v1/plan and /v1/place (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_SYNC_TIME_LIMIT_CAP_S)]
    pub sync_time_limit_cap: f64,
    /// Largest time limit in seconds of a job (422 beyond).
    #[arg(long, default_value_t = config::DEFAULT_MAX_TIME_LIMIT_S)]
    pub max_time_limit: f64,
    /// On SIGTERM, seconds running jobs may still run before they are stopped and kept queued
    /// for the next start.
    #[arg(long, default_value_t = config::DEFAULT_SHUTDOWN_GRACE_S)]
    pub shutdown_grace: f64,
    /// Bearer tokens, one per line (`TOKEN` or `NAME TOKEN`; `#` comments): every endpoint
    /// but /healthz then needs `Authorization: Bearer TOKEN` (401 otherwise).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Serve without tokens on an address other machines can reach (refused otherwise).
    #[arg(long)]
    pub insecure: bool,
    /// Largest number of queued and running jobs of one client (a token's name, else an
    /// address); more is answered 429.
    #[arg(long, default_value_t = config::DEFAULT_MAX_JOBS_PER_CLIENT)]
    pub max_jobs_per_client: usize,
    /// How long finished jobs and stored plans are kept, and how many bytes they may take,
    /// oldest deleted first: an age (30d, 12h, 45m, 90s), a size (1GiB, 500MB, 1048576B),
    /// both (`30d,1GiB`), or `none`.
    #[arg(long, default_value = config::DEFAULT_RETENTION)]
    pub retention: String,
    /// Seconds between two retention sweeps.
    #[arg(long, default_value_t = config::DEFAULT_RETENTION_SWEEP_S)]
    pub retention_sweep: f64,
}

/// The `--strategy` values.
fn strategy_names() -> PossibleValuesParser {
    PossibleValuesParser::new(Strategy::ALL.map(Strategy::name))
}

/// The `--conv-algos` values.
fn conv_algo_names() -> PossibleValuesParser {
    PossibleValuesParser::new(memplan::conv_algo::ConvAlgoMode::ALL.map(|m| m.name()))
}

/// The `--spill-strategy` values.
fn spill_strategy_names() -> PossibleValuesParser {
    PossibleValuesParser::new(budget::strategy_names())
}

/// The `--order` values.
fn order_names() -> PossibleValuesParser {
    PossibleValuesParser::new(OrderMode::ALL.map(OrderMode::name))
}
