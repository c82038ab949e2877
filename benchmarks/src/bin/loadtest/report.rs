//! The Markdown report of the mixed mode.

use crate::ops::{Kind, Tally};
use crate::server::{Peaks, Sample};
use crate::stats::{latency_cells, mib};

/// The figures of one pass of the clients.
#[derive(Debug, Clone)]
pub struct Pass {
    /// Its seed.
    pub seed: u64,
    /// Seconds from the start signal to the last client's end.
    pub wall: f64,
    /// Operations.
    pub ops: usize,
    /// Failed operations (and connection failures).
    pub failures: usize,
    /// The service once every client had connected.
    pub at_start: Option<Sample>,
    /// The highest readings during the pass.
    pub peaks: Option<Peaks>,
    /// The service 1 s after the pass.
    pub after: Option<Sample>,
}

/// Everything the mixed mode prints.
pub struct Report {
    pub clients: usize,
    pub rounds: usize,
    pub seed: u64,
    pub time_limit: f64,
    pub fresh_own_key: bool,
    pub open_files: Option<u64>,
    /// The service, in words.
    pub describe: String,
    /// One row per graph.
    pub graph_rows: Vec<Vec<String>>,
    /// What the clients saw, every pass together.
    pub tally: Tally,
    pub passes: Vec<Pass>,
    /// The service before the first pass.
    pub before: Option<Sample>,
    /// Answers the clients (and the set-up connection) received.
    pub answered: usize,
    /// Requests the service counted (`memplan_http_requests_total`).
    pub served: u64,
    /// Jobs stored by the service, by status (`memplan_jobs`).
    pub stored: Vec<(String, u64)>,
    /// How the service stopped.
    pub stop: String,
    /// What the service wrote on stderr.
    pub log: Vec<String>,
    /// Failures found after the clients ended (service figures, shutdown).
    pub notes: Vec<String>,
}

fn table(header: &[&str], rows: &[Vec<String>]) {
    println!("| {} |", header.join(" | "));
    let rule: Vec<&str> = header.iter().map(|_| "---").collect();
    println!("|{}|", rule.join("|"));
    for r in rows {
        println!("| {} |", r.join(" | "));
    }
    println!();
}

fn fig(b: Option<u64>) -> String {
    b.map_or("n/a".to_string(), mib)
}

impl Report {
    /// Failed operations plus failures found afterwards.
    pub fn failures(&self) -> usize {
        self.tally.failures.len() + self.notes.len()
    }

    /// Prints the tables (and the failures).
    pub fn print(mut self) {
        let failures = self.failures();
        let t = &mut self.tally;
        println!(
            "## Mixed load: {} clients × {} rounds, seed {}{}\n\nService: {}; open-file limit {}; \
             time limit {} s per plan{}.\n",
            self.clients,
            self.rounds,
            self.seed,
            if self.passes.len() > 1 {
                format!(", {} passes", self.passes.len())
            } else {
                String::new()
            },
            self.describe,
            self.open_files.map_or("?".to_string(), |l| l.to_string()),
            self.time_limit,
            if self.fresh_own_key {
                " (`cache: false` requests: 1 s more, so another cache key)"
            } else {
                ""
            },
        );
        table(
            &[
                "graph",
                "KiB",
                "ops",
                "tensors",
                "strategy",
                "reference peak (B)",
                "status",
                "library ms",
                "service's warm-up plan",
            ],
            &self.graph_rows,
        );
        let total = |v: &[usize; 5]| v.iter().sum::<usize>();
        let mut rows = Vec::new();
        let mut all = Vec::new();
        for k in Kind::ALL {
            let i = k.index();
            all.extend(t.latencies[i].iter().copied());
            let [p50, p99, max] = latency_cells(&mut t.latencies[i]);
            rows.push(vec![
                k.label().to_string(),
                t.ops[i].to_string(),
                t.ok[i].to_string(),
                (t.ops[i] - t.ok[i]).to_string(),
                t.n503[i].to_string(),
                p50,
                p99,
                max,
            ]);
        }
        let [p50, p99, max] = latency_cells(&mut all);
        rows.push(vec![
            "**all**".into(),
            total(&t.ops).to_string(),
            total(&t.ok).to_string(),
            (total(&t.ops) - total(&t.ok)).to_string(),
            total(&t.n503).to_string(),
            p50,
            p99,
            max,
        ]);
        println!("Latency: from the first request of an operation to its checked answer, 503 waits included.\n");
        table(
            &[
                "operation",
                "count",
                "answered OK",
                "failed",
                "503s",
                "p50 ms",
                "p99 ms",
                "max ms",
            ],
            &rows,
        );
        let n503 = total(&t.n503);
        let wall: f64 = self.passes.iter().map(|p| p.wall).sum();
        let max_peak = |f: fn(&Peaks) -> u64| {
            self.passes
                .iter()
                .filter_map(|p| p.peaks.as_ref().map(f))
                .max()
        };
        let samples: usize = self
            .passes
            .iter()
            .filter_map(|p| p.peaks.map(|k| k.samples))
            .sum();
        let first = self.passes.first();
        let last = self.passes.last().and_then(|p| p.after);
        let rows: Vec<Vec<String>> = [
            (
                "clients (connections open before the first request)",
                format!(
                    "{} ({} open in the service at the start)",
                    self.clients,
                    first
                        .and_then(|p| p.at_start)
                        .map_or("n/a".into(), |s| format!("{} fds", s.fds))
                ),
            ),
            ("failures", failures.to_string()),
            (
                "503 answers (all with Retry-After and a problem document?)",
                format!(
                    "{n503} ({})",
                    if t.bad_503 == 0 {
                        "yes".to_string()
                    } else {
                        format!("no: {} not", t.bad_503)
                    }
                ),
            ),
            (
                "retries after a 503 (most for one request; Retry-After mean / max)",
                format!(
                    "{} ({}; {} / {} s)",
                    t.retries,
                    t.most_503s,
                    if n503 > 0 {
                        format!("{:.1}", t.retry_after.0 as f64 / n503 as f64)
                    } else {
                        "–".into()
                    },
                    t.retry_after.1
                ),
            ),
            (
                "jobs accepted / completed `done` (done at once from the cache; followed by events / polling)",
                format!(
                    "{} / {} ({}; {} / {})",
                    t.jobs_accepted,
                    t.jobs_completed,
                    t.jobs_done_at_once,
                    t.followed[0],
                    t.followed[1]
                ),
            ),
            ("events read / polls", format!("{} / {}", t.events, t.polls)),
            (
                "plans replayed with memplan::validate (identical to the reference)",
                format!("{} ({})", t.plans_checked, t.plans_identical),
            ),
            (
                "sync plans with default caching: cache hit / miss",
                format!("{} / {}", t.cache[0], t.cache[1]),
            ),
            ("connections opened by the clients", t.opened.to_string()),
            (
                "HTTP answers received / counted by the service",
                format!("{} / {}", self.answered, self.served),
            ),
            (
                "wall time of the load",
                format!("{wall:.1} s ({:.1} operations/s)", total(&t.ok) as f64 / wall),
            ),
            ("service RSS before the load", fig(self.before.map(|s| s.rss))),
            (
                "service RSS max during the load (100 ms samples)",
                format!("{} ({samples} samples)", fig(max_peak(|p| p.rss))),
            ),
            ("service RSS 1 s after the load", fig(last.map(|s| s.rss))),
            ("service VmHWM (peak RSS of its life)", fig(last.map(|s| s.hwm))),
            (
                "service open fds / threads, max during the load",
                format!(
                    "{} / {}",
                    max_peak(|p| p.fds).map_or("n/a".into(), |n| n.to_string()),
                    max_peak(|p| p.threads).map_or("n/a".into(), |n| n.to_string())
                ),
            ),
            (
                "service open fds / threads 1 s after the load",
                last.map_or("n/a".into(), |s| format!("{} / {}", s.fds, s.threads)),
            ),
            ("jobs stored by the service, by status", format!("{:?}", self.stored)),
            ("service shutdown", self.stop.clone()),
        ]
        .into_iter()
        .map(|(k, v)| vec![k.to_string(), v])
        .collect();
        table(&["figure", "value"], &rows);
        if self.passes.len() > 1 {
            let rows: Vec<Vec<String>> = self
                .passes
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    vec![
                        (i + 1).to_string(),
                        p.seed.to_string(),
                        p.ops.to_string(),
                        p.failures.to_string(),
                        format!("{:.1}", p.wall),
                        fig(p.peaks.map(|k| k.rss)),
                        fig(p.after.map(|s| s.rss)),
                        p.after.map_or("n/a".into(), |s| s.threads.to_string()),
                    ]
                })
                .collect();
            table(
                &[
                    "pass",
                    "seed",
                    "operations",
                    "failures",
                    "wall s",
                    "RSS max",
                    "RSS 1 s after",
                    "threads after",
                ],
                &rows,
            );
        }
        if !self.log.is_empty() {
            println!(
                "The service wrote on stderr ({} lines; first 20):\n",
                self.log.len()
            );
            for l in self.log.iter().take(20) {
                println!("    {l}");
            }
            println!();
        }
        if failures > 0 {
            println!("### Failures ({failures}), grouped by what went wrong\n");
            for f in &self.notes {
                println!("- {f}");
            }
            // "client C op N (kind, graph): what" grouped by kind and what.
            let mut groups: Vec<(String, usize, String)> = Vec::new();
            for f in &self.tally.failures {
                let key = match (f.find(" ("), f.find("): ")) {
                    (Some(a), Some(b)) if a < b => {
                        let kind = f[a + 2..b].split(", ").next().unwrap_or_default();
                        let what: String = f[b + 3..]
                            .split(|c: char| c.is_ascii_digit())
                            .collect::<Vec<_>>()
                            .join("#");
                        format!("{kind}: {what}")
                    }
                    _ => f.clone(),
                };
                match groups.iter_mut().find(|g| g.0 == key) {
                    Some(g) => g.1 += 1,
                    None => groups.push((key, 1, f.clone())),
                }
            }
            for (_, n, example) in groups {
                println!("- {n} × e.g. {example}");
            }
            println!();
        }
    }
}
