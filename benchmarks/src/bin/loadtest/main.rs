//! Load test of the HTTP service, in two modes.
//!
//! **Throughput** (default): throughput and latency percentiles of `POST /v1/plan` on one
//! graph at each client count (see `throughput.rs`).
//!
//! ```sh
//! cargo run --release -p memplan-benchmarks --bin loadtest -- [--url http://HOST:PORT]
//!     [--graph GRAPH.json] [--clients 1,8,64] [--requests N] [--strategy heuristic] [--cache]
//!     [--workers N]
//! ```
//!
//! **Mixed** (`--mixed`): whether the service loses nothing under many concurrent clients, and
//! how much memory it holds meanwhile (see `mixed.rs`). `--clients` tasks, each on its own
//! keep-alive connection (all open before the first request), run `--rounds` operations drawn
//! from a seeded generator: synchronous plans (`POST /v1/plan`, cached or `cache: false`), jobs
//! (`POST /v1/jobs`, followed by events or polling to the end, then `GET /v1/jobs/{id}/plan`)
//! and checks (`POST /v1/check`) on a few zoo graphs. Every plan is replayed with
//! `memplan::validate` and must have the peak of the reference plan (the library pipeline run
//! in this process with the same options); every check must say valid; every accepted job must
//! end `done`; a 503 (all places taken) or 429 (the client's job limit) must carry `Retry-After`
//! and a problem document, and is retried after it.
//! The service's resident memory (VmRSS) is sampled every 100 ms. Prints Markdown tables and
//! exits non-zero on any failure.
//!
//! ```sh
//! cargo build --release -p memplan-cli -p memplan-benchmarks
//! $CARGO_TARGET_DIR/release/loadtest --mixed --serve-bin $CARGO_TARGET_DIR/release/memplan \
//!     --clients 500 --rounds 4 --seed 1
//! ```

mod client;
mod http;
mod mixed;
mod ops;
mod report;
mod server;
mod stats;
mod throughput;

use std::process::ExitCode;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--mixed") {
        let rest = args.into_iter().filter(|a| a != "--mixed").collect();
        mixed::run(rest).await
    } else {
        throughput::run(args).await?;
        Ok(ExitCode::SUCCESS)
    }
}
