//! Prometheus metrics in the text exposition format, kept by hand (a few counters and
//! histograms behind one mutex; series are BTreeMap-ordered so the output is stable).
//!
//! - `memplan_http_requests_total{route,method,status}` and
//!   `memplan_http_request_duration_seconds{route}`: every response, labelled by the route
//!   template (`/v1/jobs/{id}`, never the id), `unmatched` for unknown paths;
//! - `memplan_solve_seconds{kind}`: wall time of each solve (`plan`, `job`, `place`);
//! - `memplan_cache_hits_total`, `memplan_jobs_finished_total{status}`;
//! - `memplan_expired_total{kind}` (`jobs`, `plans`) and `memplan_expired_bytes_total`: what
//!   the retention sweep deleted;
//! - gauges sampled at scrape time: `memplan_queue_depth`, `memplan_running_solves`,
//!   `memplan_running_jobs`, `memplan_workers`, `memplan_queue_capacity`.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Upper bounds (seconds) of the duration histograms' buckets.
const BUCKETS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (c, b) in self.counts.iter_mut().zip(BUCKETS) {
            if secs <= b {
                *c += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (c, b) in self.counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    requests: BTreeMap<(String, String, u16), u64>,
    durations: BTreeMap<String, Histogram>,
    solves: BTreeMap<&'static str, Histogram>,
    cache_hits: u64,
    jobs_finished: BTreeMap<&'static str, u64>,
    expired_jobs: u64,
    expired_plans: u64,
    expired_bytes: u64,
}

/// The gauges, sampled when metrics are rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Work waiting for a solver slot.
    pub queue_depth: usize,
    /// Solves running (synchronous requests and jobs).
    pub running_solves: usize,
    /// Jobs running.
    pub running_jobs: usize,
    /// Solver slots.
    pub workers: usize,
    /// Queue places.
    pub queue_capacity: usize,
}

/// The metrics registry of one service.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    inner: Arc<Mutex<Inner>>,
}

/// The route template of a response, set by [`tag_route`].
#[derive(Debug, Clone)]
pub struct RouteLabel(pub String);

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        // A poisoned registry still counts: the data are plain numbers.
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Counts one response.
    pub fn request(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.with(|m| {
            *m.requests
                .entry((route.to_string(), method.to_string(), status))
                .or_default() += 1;
            m.durations
                .entry(route.to_string())
                .or_default()
                .observe(elapsed.as_secs_f64());
        })
    }

    /// Records one solve.
    pub fn solve(&self, kind: &'static str, elapsed: Duration) {
        self.with(|m| {
            m.solves
                .entry(kind)
                .or_default()
                .observe(elapsed.as_secs_f64())
        })
    }

    /// Counts a request answered from a stored plan.
    pub fn cache_hit(&self) {
        self.with(|m| m.cache_hits += 1)
    }

    /// Counts a job reaching a final status.
    pub fn job_finished(&self, status: &'static str) {
        self.with(|m| *m.jobs_finished.entry(status).or_default() += 1)
    }

    /// Counts what a retention sweep deleted.
    pub fn expired(&self, e: &crate::store::Expired) {
        self.with(|m| {
            m.expired_jobs += e.jobs;
            m.expired_plans += e.plans;
            m.expired_bytes += e.bytes;
        })
    }

    /// Mean seconds per solve so far (None before the first).
    pub fn mean_solve_seconds(&self) -> Option<f64> {
        let mut out = None;
        self.with(|m| {
            let (sum, n) = m
                .solves
                .values()
                .fold((0.0, 0u64), |(s, n), h| (s + h.sum, n + h.count));
            if n > 0 {
                out = Some(sum / n as f64);
            }
        });
        out
    }

    /// The exposition text.
    pub fn render(&self, g: Gauges) -> String {
        let mut out = String::new();
        self.with(|m| {
            out.push_str("# HELP memplan_http_requests_total HTTP responses by route template, method and status.\n");
            out.push_str("# TYPE memplan_http_requests_total counter\n");
            for ((route, method, status), n) in &m.requests {
                let _ = writeln!(
                    out,
                    "memplan_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                    escape(route),
                    escape(method)
                );
            }
            out.push_str("# HELP memplan_http_request_duration_seconds Time to answer, by route template.\n");
            out.push_str("# TYPE memplan_http_request_duration_seconds histogram\n");
            for (route, h) in &m.durations {
                h.render(
                    &mut out,
                    "memplan_http_request_duration_seconds",
                    &format!("route=\"{}\"", escape(route)),
                );
            }
            out.push_str("# HELP memplan_solve_seconds Wall time of each solve, by kind (plan, job, place).\n");
            out.push_str("# TYPE memplan_solve_seconds histogram\n");
            for (kind, h) in &m.solves {
                h.render(&mut out, "memplan_solve_seconds", &format!("kind=\"{kind}\""));
            }
            out.push_str("# HELP memplan_cache_hits_total Requests answered from a stored plan.\n");
            out.push_str("# TYPE memplan_cache_hits_total counter\n");
            let _ = writeln!(out, "memplan_cache_hits_total {}", m.cache_hits);
            out.push_str("# HELP memplan_jobs_finished_total Jobs that reached a final status in this process.\n");
            out.push_str("# TYPE memplan_jobs_finished_total counter\n");
            for (status, n) in &m.jobs_finished {
                let _ = writeln!(out, "memplan_jobs_finished_total{{status=\"{status}\"}} {n}");
            }
            out.push_str("# HELP memplan_expired_total Finished jobs and stored plans deleted by retention.\n");
            out.push_str("# TYPE memplan_expired_total counter\n");
            let _ = writeln!(out, "memplan_expired_total{{kind=\"jobs\"}} {}", m.expired_jobs);
            let _ = writeln!(out, "memplan_expired_total{{kind=\"plans\"}} {}", m.expired_plans);
            out.push_str("# HELP memplan_expired_bytes_total Stored bytes freed by retention.\n");
            out.push_str("# TYPE memplan_expired_bytes_total counter\n");
            let _ = writeln!(out, "memplan_expired_bytes_total {}", m.expired_bytes);
        });
        for (name, help, v) in [
            (
                "memplan_queue_depth",
                "Requests and jobs waiting for a solver slot.",
                g.queue_depth,
            ),
            (
                "memplan_running_solves",
                "Solves running (synchronous requests and jobs).",
                g.running_solves,
            ),
            ("memplan_running_jobs", "Jobs running.", g.running_jobs),
            ("memplan_workers", "Solver slots.", g.workers),
            (
                "memplan_queue_capacity",
                "Places in the queue beyond the running solves.",
                g.queue_capacity,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        out
    }
}

/// Route layer: labels the response with the matched route template.
pub async fn tag_route(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let mut resp = next.run(req).await;
    if let Some(r) = route {
        resp.extensions_mut().insert(RouteLabel(r));
    }
    resp
}

/// Outer layer: counts every response and its duration.
pub async fn record(State(metrics): State<Metrics>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().to_string();
    let resp = next.run(req).await;
    let route = resp
        .extensions()
        .get::<RouteLabel>()
        .map_or("unmatched", |r| r.0.as_str())
        .to_string();
    metrics.request(&route, &method, resp.status().as_u16(), started.elapsed());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_series_sorted() {
        let m = Metrics::default();
        m.request("/v1/plan", "POST", 200, Duration::from_millis(30));
        m.request("/healthz", "GET", 200, Duration::from_millis(1));
        m.solve("plan", Duration::from_millis(30));
        let text = m.render(Gauges::default());
        let a = text.find("route=\"/healthz\"").unwrap();
        let b = text.find("route=\"/v1/plan\"").unwrap();
        assert!(a < b);
        assert!(text.contains("memplan_solve_seconds_bucket{kind=\"plan\",le=\"0.025\"} 0"));
        assert!(text.contains("memplan_solve_seconds_bucket{kind=\"plan\",le=\"0.05\"} 1"));
        assert!(text.contains("memplan_solve_seconds_bucket{kind=\"plan\",le=\"+Inf\"} 1"));
        assert!((m.mean_solve_seconds().unwrap() - 0.03).abs() < 1e-9);
    }
}
