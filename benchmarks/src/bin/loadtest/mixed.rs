//! The mixed mode (`--mixed`): many clients mixing sync plans, jobs and checks on zoo graphs;
//! every answer is checked, the service's memory is sampled, and the run fails on any lost
//! request, wrong answer or unfinished job.
//!
//! Steps: read the graphs (default: four of `--zoo`, see [`DEFAULT_GRAPHS`]; `--graphs` for
//! others) and plan each with the library pipeline in this process (the reference: validated,
//! its peak kept); start the service (`--serve-bin`: `memplan serve` on a free port with a
//! database in a temporary folder, `--workers`, `--queue` and `--server-token-file` passed on;
//! `--url`: an external one, `--pid` for its memory; neither: in this process); one
//! `cache: false` plan per graph, which must be the reference's; then `--passes` times (default
//! 1): open one connection per client and wait until the service holds them all, run the
//! clients (see `client.rs`, the mix in `ops.rs`) while a thread reads the service's VmRSS,
//! threads and open files every 100 ms, and read them again 1 s after; then cross-check
//! `/metrics` (stored jobs all `done` and as many as were accepted, answers counted) and
//! `/healthz`, stop the service with SIGTERM (it must exit 0), and print the tables
//! (`report.rs`).
//!
//! `--fresh-own-key` gives the `cache: false` requests a time limit 1 s longer, hence a cache
//! key of their own: their stored plans then never supersede the plan a cached job request
//! has just read (a race of `POST /v1/jobs` this load test found: the cached plan's id is read,
//! a newer plan of the same key prunes it, and storing the job fails with a 500 "FOREIGN KEY
//! constraint failed").

use crate::client::{Client, Ctx};
use crate::http::Conn;
use crate::ops::{self, Case, Tally};
use crate::report::{Pass, Report};
use crate::server::{self, Sample, Sampler, Server, ServerArgs};
use anyhow::{bail, Context, Result};
use hyper::body::Bytes;
use hyper::Method;
use memplan::pipeline::{self, Control};
use memplan::{Graph, PipelineOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The default graphs (in `--zoo`): two inference graphs and two training graphs, small to
/// medium; even positions are planned with `strategy: auto`, odd ones with `heuristic`.
const DEFAULT_GRAPHS: [&str; 4] = [
    "resnet18.1.inference.json",
    "mobilenet_v2.1.inference.json",
    "squeezenet1_0.32.train.json",
    "resnet50.32.train.json",
];

const USAGE: &str =
    "usage: loadtest --mixed [--serve-bin MEMPLAN | --url http://HOST:PORT [--pid PID]]
  [--workers N] [--queue Q] [--token TOKEN] [--server-token-file FILE]
  [--clients 500] [--rounds 4] [--seed 1] [--zoo ../shared/zoo | --graphs A.json,B.json]
  [--time-limit 10] [--max-retries 200] [--retry-cap 2] [--timeout 120] [--job-timeout 600]
  [--passes 1] [--fresh-own-key]";

struct Args {
    server: ServerArgs,
    token: Option<String>,
    clients: usize,
    rounds: usize,
    seed: u64,
    graphs: Vec<PathBuf>,
    time_limit: f64,
    max_retries: usize,
    retry_cap: f64,
    timeout: u64,
    job_timeout: u64,
    passes: usize,
    fresh_own_key: bool,
}

fn parse_args(args: Vec<String>) -> Result<Args> {
    let mut a = Args {
        server: ServerArgs::default(),
        token: None,
        clients: 500,
        rounds: 4,
        seed: 1,
        graphs: Vec::new(),
        time_limit: 10.0,
        max_retries: 200,
        retry_cap: 2.0,
        timeout: 120,
        job_timeout: 600,
        passes: 1,
        fresh_own_key: false,
    };
    let mut zoo = PathBuf::from("../shared/zoo");
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--serve-bin" => a.server.serve_bin = Some(value()?.into()),
            "--url" => a.server.url = Some(value()?),
            "--pid" => a.server.pid = Some(value()?.parse().context("--pid")?),
            "--workers" => a.server.workers = Some(value()?.parse().context("--workers")?),
            "--queue" => a.server.queue = Some(value()?.parse().context("--queue")?),
            "--server-token-file" => a.server.token_file = Some(value()?.into()),
            "--token" => a.token = Some(value()?),
            "--clients" => a.clients = value()?.parse().context("--clients")?,
            "--rounds" => a.rounds = value()?.parse().context("--rounds")?,
            "--seed" => a.seed = value()?.parse().context("--seed")?,
            "--zoo" => zoo = value()?.into(),
            "--graphs" => a.graphs = value()?.split(',').map(PathBuf::from).collect(),
            "--time-limit" => a.time_limit = value()?.parse().context("--time-limit")?,
            "--max-retries" => a.max_retries = value()?.parse().context("--max-retries")?,
            "--retry-cap" => a.retry_cap = value()?.parse().context("--retry-cap")?,
            "--timeout" => a.timeout = value()?.parse().context("--timeout")?,
            "--job-timeout" => a.job_timeout = value()?.parse().context("--job-timeout")?,
            "--passes" => a.passes = value()?.parse().context("--passes")?,
            "--fresh-own-key" => a.fresh_own_key = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    if a.graphs.is_empty() {
        a.graphs = DEFAULT_GRAPHS.iter().map(|g| zoo.join(g)).collect();
    }
    if a.clients == 0 || a.rounds == 0 || a.passes == 0 {
        bail!("--clients, --rounds and --passes must be positive");
    }
    if a.server.url.is_some() && a.server.serve_bin.is_some() {
        bail!("--url and --serve-bin exclude each other");
    }
    Ok(a)
}

/// The soft limit on open files of this process (the service started here inherits it).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Reads a graph, plans it with the library (the reference) and builds its request bodies.
/// With `fresh_own_key` the `cache: false` requests ask for a time limit 1 s longer, so that
/// their plans are stored under another key than the cached requests'.
fn case(
    path: &Path,
    strategy: &str,
    time_limit: f64,
    fresh_own_key: bool,
) -> Result<(Case, Vec<String>)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let graph = Graph::parse(&text).with_context(|| format!("parsing {}", path.display()))?;
    let options = json!({"strategy": strategy, "time_limit_s": time_limit});
    let pipeline_options: PipelineOptions = serde_json::from_value(options.clone())?;
    let started = Instant::now();
    let reference = pipeline::run(&graph, &pipeline_options, &Control::default())
        .with_context(|| format!("planning {}", path.display()))?
        .plan;
    let secs = started.elapsed().as_secs_f64();
    let peak = memplan::validate(&graph, &reference, None)
        .map_err(|v| anyhow::anyhow!("the reference plan of {} is invalid: {v}", graph.name))?
        .peak;
    let value: Value = serde_json::from_str(&text)?;
    let mut fresh = options.clone();
    fresh["cache"] = json!(false);
    if fresh_own_key {
        fresh["time_limit_s"] = json!(time_limit + 1.0);
    }
    let row = vec![
        format!("`{}`", graph.name),
        format!("{:.0}", text.len() as f64 / 1024.0),
        graph.ops.len().to_string(),
        graph.tensors.len().to_string(),
        format!("`{strategy}`"),
        peak.to_string(),
        reference
            .stats
            .status
            .map_or("–", |s| s.as_str())
            .to_string(),
        format!("{:.0}", secs * 1e3),
    ];
    let case = Case {
        name: graph.name.clone(),
        body_cached: Bytes::from(json!({"graph": value, "options": options}).to_string()),
        body_fresh: Bytes::from(json!({"graph": value, "options": fresh}).to_string()),
        check_body: Bytes::from(
            json!({"graph": value, "plan": serde_json::to_value(&reference)?}).to_string(),
        ),
        graph,
        reference,
        peak,
    };
    Ok((case, row))
}

/// Runs the mixed mode with the command-line `args` (without the program name and `--mixed`).
pub async fn run(args: Vec<String>) -> Result<ExitCode> {
    let a = parse_args(args)?;
    let limit = open_files_limit();
    let needed = a.clients as u64 + 64;
    if limit.is_some_and(|l| l < needed) {
        bail!(
            "the open-file limit is {} but {} clients need about {needed} here (and as many in \
             the service): raise it, e.g. `ulimit -n {}`",
            limit.unwrap_or(0),
            a.clients,
            needed * 2
        );
    }
    // 1. The graphs and their reference plans.
    let (time_limit, paths, own) = (a.time_limit, a.graphs.clone(), a.fresh_own_key);
    let built = tokio::task::spawn_blocking(move || {
        paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let strategy = if i % 2 == 0 { "auto" } else { "heuristic" };
                case(p, strategy, time_limit, own)
            })
            .collect::<Result<Vec<_>>>()
    })
    .await??;
    let (cases, graph_rows): (Vec<Case>, Vec<Vec<String>>) = built.into_iter().unzip();

    // 2. The service, and one plan per graph and cache key from it.
    let server = Server::start(&a.server).await?;
    let ctx = Arc::new(Ctx {
        addr: server.addr.clone(),
        token: a.token.clone(),
        graphs: cases,
        max_retries: a.max_retries,
        retry_cap: Duration::from_secs_f64(a.retry_cap),
        timeout: Duration::from_secs(a.timeout),
        job_timeout: Duration::from_secs(a.job_timeout),
    });
    let mut setup = Conn::connect(&ctx.addr, ctx.token.clone()).await?;
    let mut graph_rows = graph_rows;
    for (case, row) in ctx.graphs.iter().zip(&mut graph_rows) {
        let mut bodies = vec![&case.body_fresh];
        if a.fresh_own_key {
            bodies.push(&case.body_cached);
        }
        let mut identical = true;
        for body in bodies {
            let ans = setup
                .request(Method::POST, "/v1/plan", Some(body.clone()))
                .await?;
            if ans.status != 200 {
                bail!(
                    "warm-up plan of {}: {} ({})",
                    case.name,
                    ans.status,
                    ans.snippet()
                );
            }
            identical &= ops::verify_plan(case, &ans.body)
                .map_err(|e| anyhow::anyhow!("warm-up: the service's {e}"))?;
        }
        row.push(if identical { "identical" } else { "same peak" }.to_string());
    }

    // 3. The clients, pass after pass against the same service.
    let pid = server.pid;
    let before = pid.and_then(server::sample);
    let mut passes = Vec::new();
    let mut tally = Tally::default();
    for n in 0..a.passes {
        let seed = a.seed.wrapping_add(n as u64);
        let (t, p) = pass(&ctx, a.clients, a.rounds, seed, pid, before).await?;
        tally.merge(t);
        passes.push(p);
    }

    // 4. The service's own figures, then its shutdown.
    let mut notes = Vec::new();
    let answered = tally.answered + setup.answered;
    let metrics = setup
        .request(Method::GET, "/metrics", None)
        .await
        .map(|m| String::from_utf8_lossy(&m.body).to_string())
        .unwrap_or_default();
    let stored: Vec<(String, u64)> = metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("memplan_jobs{status=\"")?;
            let (status, n) = rest.split_once("\"} ")?;
            Some((status.to_string(), n.trim().parse().ok()?))
        })
        .collect();
    let served: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("memplan_http_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let stored_total: u64 = stored.iter().map(|(_, n)| n).sum();
    let stored_done = stored
        .iter()
        .find(|(s, _)| s == "done")
        .map_or(0, |(_, n)| *n);
    if stored_total != tally.jobs_accepted as u64 || stored_done != stored_total {
        notes.push(format!(
            "the service stores {stored_total} jobs ({stored:?}); the clients saw {} accepted",
            tally.jobs_accepted
        ));
    }
    let health = setup.request(Method::GET, "/healthz", None).await;
    if !health.as_ref().is_ok_and(|h| h.status == 200) {
        notes.push(format!("GET /healthz after the load: {health:?}"));
    }
    drop(setup);
    let log = server.log();
    let describe = format!("{} at {}", server.describe, server.addr);
    let (stopped_cleanly, stop) = server.stop().await?;
    if !stopped_cleanly {
        notes.push(format!("service shutdown: {stop}"));
    }
    let r = Report {
        clients: a.clients,
        rounds: a.rounds,
        seed: a.seed,
        time_limit: a.time_limit,
        fresh_own_key: a.fresh_own_key,
        open_files: limit,
        describe,
        graph_rows,
        tally,
        passes,
        before,
        answered,
        served,
        stored,
        stop,
        log,
        notes,
    };
    let failures = r.failures();
    r.print();
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One pass: every client connected (and the service holding the connections, or 5 s), then
/// all at once, the service sampled every 100 ms; its figures 1 s after.
async fn pass(
    ctx: &Arc<Ctx>,
    clients: usize,
    rounds: usize,
    seed: u64,
    pid: Option<u32>,
    before: Option<Sample>,
) -> Result<(Tally, Pass)> {
    let ops = ops::schedule(seed, clients, rounds, ctx.graphs.len());
    let sampler = pid.map(|p| Sampler::start(p, Duration::from_millis(100)));
    let ready = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let (go, gate) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = ops
        .into_iter()
        .enumerate()
        .map(|(id, ops)| {
            let (ctx, ready, gate) = (ctx.clone(), ready.clone(), gate.clone());
            tokio::spawn(Client::run(ctx, id, seed, ops, ready, gate))
        })
        .collect();
    ready.wait().await;
    let base_fds = before.map_or(0, |s| s.fds);
    let mut at_start = pid.and_then(server::sample);
    let waited = Instant::now();
    while let (Some(p), Some(s)) = (pid, at_start) {
        if s.fds >= base_fds + clients as u64 || waited.elapsed() > Duration::from_secs(5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        at_start = server::sample(p);
    }
    let started = Instant::now();
    go.send_replace(true);
    let mut tally = Tally::default();
    for t in tasks {
        tally.merge(t.await?);
    }
    let wall = started.elapsed().as_secs_f64();
    let peaks = sampler.map(Sampler::finish);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = pid.and_then(server::sample);
    let p = Pass {
        seed,
        wall,
        ops: tally.ops.iter().sum(),
        failures: tally.failures.len(),
        at_start,
        peaks,
        after,
    };
    Ok((tally, p))
}
