//! The throughput mode (the default): throughput and latency percentiles of `POST /v1/plan`
//! at each client count of `--clients`.
//!
//! Without `--url` a service is started in this process on a free port (in-memory database,
//! `--workers` solver slots, default: the number of cores) and shares the machine with the
//! clients, as a local deployment would. Each client holds one keep-alive HTTP/1.1 connection
//! and sends requests back to back until `--requests` (default 200) have been sent at that
//! concurrency. By default every request sets `cache: false`, so each one is solved;
//! `--cache` measures answers from the stored plan instead. Every response must be 200 with a
//! plan of the graph; anything else counts as an error. Prints a Markdown table: clients,
//! requests, errors, throughput, p50, p99 and max latency.

use crate::stats::percentile;
use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::rt::TokioIo;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

struct Args {
    url: Option<String>,
    graph: String,
    clients: Vec<usize>,
    requests: usize,
    strategy: String,
    cache: bool,
    workers: Option<usize>,
}

fn parse_args(args: Vec<String>) -> Result<Args> {
    let mut a = Args {
        url: None,
        graph: "../shared/zoo/resnet50.32.train.json".into(),
        clients: vec![1, 8, 64],
        requests: 200,
        strategy: "heuristic".into(),
        cache: false,
        workers: None,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--url" => a.url = Some(value()?),
            "--graph" => a.graph = value()?,
            "--clients" => {
                a.clients = value()?
                    .split(',')
                    .map(|c| {
                        c.trim()
                            .parse()
                            .context("--clients takes numbers like 1,8,64")
                    })
                    .collect::<Result<_>>()?
            }
            "--requests" => a.requests = value()?.parse().context("--requests")?,
            "--strategy" => a.strategy = value()?,
            "--workers" => a.workers = Some(value()?.parse().context("--workers")?),
            "--cache" => a.cache = true,
            "-h" | "--help" => {
                println!(
                    "usage: loadtest [--url http://HOST:PORT] [--graph GRAPH.json] [--clients 1,8,64] \
                     [--requests N] [--strategy heuristic|auto] [--cache] [--workers N]\n       \
                     loadtest --mixed ... (see loadtest --mixed --help)"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if a.clients.contains(&0) || a.requests == 0 {
        bail!("--clients and --requests must be positive");
    }
    Ok(a)
}

/// Sends requests on one connection until the shared counter reaches `total`.
async fn client(
    addr: String,
    body: Bytes,
    graph_name: String,
    next: Arc<AtomicUsize>,
    total: usize,
) -> (Vec<Duration>, usize) {
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut sender = None;
    while next.fetch_add(1, Ordering::SeqCst) < total {
        if sender.is_none() {
            let conn = async {
                let stream = TcpStream::connect(&addr).await?;
                stream.set_nodelay(true)?;
                let (s, c) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
                tokio::spawn(c);
                anyhow::Ok(s)
            };
            match conn.await {
                Ok(s) => sender = Some(s),
                Err(_) => {
                    errors += 1;
                    continue;
                }
            }
        }
        let Some(s) = sender.as_mut() else { continue };
        let req = Request::post("/v1/plan")
            .header("host", &addr)
            .header("content-type", "application/json")
            .body(Full::new(body.clone()));
        let Ok(req) = req else {
            errors += 1;
            continue;
        };
        let started = Instant::now();
        let ok = async {
            s.ready().await?;
            let resp = s.send_request(req).await?;
            let status = resp.status();
            let bytes = resp.into_body().collect().await?.to_bytes();
            let plan: serde_json::Value = serde_json::from_slice(&bytes)?;
            anyhow::Ok(status == 200 && plan["graph"] == graph_name.as_str())
        }
        .await;
        match ok {
            Ok(true) => latencies.push(started.elapsed()),
            Ok(false) => errors += 1,
            Err(_) => {
                errors += 1;
                sender = None; // reconnect
            }
        }
    }
    (latencies, errors)
}

/// Runs the throughput mode with the command-line `args` (without the program name).
pub async fn run(args: Vec<String>) -> Result<()> {
    let a = parse_args(args)?;
    let text = std::fs::read_to_string(&a.graph).with_context(|| format!("reading {}", a.graph))?;
    let graph: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", a.graph))?;
    let graph_name = graph["name"].as_str().unwrap_or_default().to_string();
    let body = serde_json::json!({
        "graph": graph,
        "options": {"strategy": a.strategy, "cache": a.cache}
    });
    let body = Bytes::from(body.to_string());
    let (addr, server) = match &a.url {
        Some(url) => {
            let addr = url
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string();
            (addr, None)
        }
        None => {
            let config = memplan_api::Config {
                workers: a
                    .workers
                    .unwrap_or_else(memplan_api::config::default_workers),
                queue: a.clients.iter().copied().max().unwrap_or(1) * 2,
                ..memplan_api::Config::default()
            };
            let (addr, here) = crate::server::listen_here(config).await?;
            (addr, Some(here))
        }
    };
    println!(
        "POST /v1/plan, {} ({} bytes), strategy {}, {}; server {}",
        graph_name,
        body.len(),
        a.strategy,
        if a.cache {
            "answers from the stored plan (cache)"
        } else {
            "every request solved (cache: false)"
        },
        a.url.as_deref().unwrap_or("in this process")
    );
    println!();
    println!(
        "| clients | requests | errors | throughput (req/s) | p50 (ms) | p99 (ms) | max (ms) |"
    );
    println!(
        "|--------:|---------:|-------:|-------------------:|---------:|---------:|---------:|"
    );
    // Warm-up: one request (and, with --cache, the plan the others are answered from).
    let _ = client(
        addr.clone(),
        body.clone(),
        graph_name.clone(),
        Arc::default(),
        1,
    )
    .await;
    for &c in &a.clients {
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..c)
            .map(|_| {
                tokio::spawn(client(
                    addr.clone(),
                    body.clone(),
                    graph_name.clone(),
                    next.clone(),
                    a.requests,
                ))
            })
            .collect();
        let mut latencies = Vec::new();
        let mut errors = 0;
        for t in tasks {
            let (l, e) = t.await?;
            latencies.extend(l);
            errors += e;
        }
        let wall = started.elapsed().as_secs_f64();
        latencies.sort();
        println!(
            "| {c} | {} | {errors} | {:.1} | {:.1} | {:.1} | {:.1} |",
            latencies.len() + errors,
            latencies.len() as f64 / wall,
            percentile(&latencies, 50.0),
            percentile(&latencies, 99.0),
            latencies.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
        );
    }
    if let Some((stop, task)) = server {
        let _ = stop.send(());
        task.await??;
    }
    Ok(())
}
