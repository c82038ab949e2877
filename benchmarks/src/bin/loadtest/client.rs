//! One client of the mixed mode: its operations (sync plans, jobs, checks), the 503 retries,
//! and the check of every answer against the reference plans (`ops.rs`).

use crate::http::{Answer, Conn, EventReader};
use crate::ops::{verify_plan, Case, Kind, Op, Tally};
use crate::stats::SplitMix64;
use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Barrier};

/// What every client shares.
pub struct Ctx {
    /// `HOST:PORT`.
    pub addr: String,
    /// Bearer token.
    pub token: Option<String>,
    /// The graphs.
    pub graphs: Vec<Case>,
    /// 503s one request may get before the operation fails.
    pub max_retries: usize,
    /// Longest wait after a 503 (Retry-After is capped to it, then jittered to 50-100 %).
    pub retry_cap: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Longest time a job may take to end once accepted.
    pub job_timeout: Duration,
}

/// The wait a 503 or 429 asks for, once it is checked to carry an integer Retry-After and a problem
/// document that agrees.
fn retry_after(a: &Answer) -> Result<u64, String> {
    let header = a
        .header("retry-after")
        .ok_or("503 without Retry-After")?
        .trim();
    let secs: u64 = header
        .parse()
        .map_err(|_| format!("503 with Retry-After {header:?}, not integer seconds"))?;
    if !a
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/problem+json"))
    {
        return Err(format!(
            "503 with Content-Type {:?}, not a problem document",
            a.header("content-type")
        ));
    }
    let p: Value = serde_json::from_slice(&a.body)
        .map_err(|e| format!("503 problem document unreadable: {e}"))?;
    let urn = p["type"]
        .as_str()
        .is_some_and(|t| t.starts_with("urn:memplan:problem:"));
    if p["status"] != a.status.as_u16() || !urn {
        return Err(format!(
            "503 with an unexpected problem document: {}",
            a.snippet()
        ));
    }
    if p["retry_after_s"].as_u64().is_some_and(|s| s != secs) {
        return Err(format!(
            "503: Retry-After {secs} but retry_after_s {}",
            p["retry_after_s"]
        ));
    }
    Ok(secs)
}

fn expect(a: &Answer, status: u16, what: &str) -> Result<(), String> {
    if a.status == StatusCode::from_u16(status).unwrap_or_default() {
        Ok(())
    } else {
        Err(format!("{what}: {} ({})", a.status, a.snippet()))
    }
}

fn json(a: &Answer, what: &str) -> Result<Value, String> {
    serde_json::from_slice(&a.body).map_err(|e| format!("{what}: unreadable JSON: {e}"))
}

fn terminal(status: &str) -> bool {
    matches!(status, "done" | "failed" | "cancelled")
}

/// One client: its connection, its generator (for jitter) and what it saw.
pub struct Client {
    ctx: Arc<Ctx>,
    conn: Conn,
    rng: SplitMix64,
    t: Tally,
}

impl Client {
    /// Opens the client's connection, waits at `ready` until every client has one, then for
    /// `go`, runs `ops`, and returns what it saw.
    pub async fn run(
        ctx: Arc<Ctx>,
        id: usize,
        seed: u64,
        ops: Vec<Op>,
        ready: Arc<Barrier>,
        mut go: watch::Receiver<bool>,
    ) -> Tally {
        let mut t = Tally::default();
        let conn = match Conn::connect(&ctx.addr, ctx.token.clone()).await {
            Ok(c) => c,
            Err(e) => {
                t.failures.push(format!("client {id}: {e:#}"));
                Conn::unopened(&ctx.addr, ctx.token.clone())
            }
        };
        ready.wait().await;
        let _ = go.wait_for(|g| *g).await;
        let rng = SplitMix64::new(seed.rotate_left(17) ^ id as u64);
        let mut c = Client { ctx, conn, rng, t };
        for (n, op) in ops.into_iter().enumerate() {
            let k = op.kind.index();
            c.t.ops[k] += 1;
            let started = Instant::now();
            match c.op(op).await {
                Ok(()) => {
                    c.t.ok[k] += 1;
                    c.t.latencies[k].push(started.elapsed());
                }
                Err(e) => {
                    let graph = &c.ctx.graphs[op.graph].name;
                    c.t.failures.push(format!(
                        "client {id} op {n} ({}, {graph}): {e}",
                        op.kind.label()
                    ));
                }
            }
        }
        c.t.opened = c.conn.opened;
        c.t.answered = c.conn.answered;
        c.t
    }

    async fn op(&mut self, op: Op) -> Result<(), String> {
        match op.kind {
            Kind::Plan | Kind::PlanFresh => self.plan(op).await,
            Kind::Job | Kind::JobFresh => self.job(op).await,
            Kind::Check => self.check(op).await,
        }
    }

    /// One request, sent again after each 503 (waiting its Retry-After, capped and
    /// jittered) up to the retry cap.
    async fn call(
        &mut self,
        kind: Kind,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Answer, String> {
        let mut retries = 0;
        loop {
            let sent = self.conn.request(method.clone(), path, body.clone());
            let a = match tokio::time::timeout(self.ctx.timeout, sent).await {
                Ok(Ok(a)) => a,
                Ok(Err(e)) => return Err(format!("{e:#}")),
                Err(_) => {
                    self.conn.drop_connection();
                    return Err(format!(
                        "{method} {path}: no answer within {} s",
                        self.ctx.timeout.as_secs()
                    ));
                }
            };
            // Back-pressure: 503 (all places taken) or 429 (this client's job limit), both
            // with Retry-After.
            if a.status != StatusCode::SERVICE_UNAVAILABLE
                && a.status != StatusCode::TOO_MANY_REQUESTS
            {
                self.t.most_503s = self.t.most_503s.max(retries);
                return Ok(a);
            }
            self.t.n503[kind.index()] += 1;
            let secs = match retry_after(&a) {
                Ok(s) => s,
                Err(e) => {
                    self.t.bad_503 += 1;
                    return Err(format!("{method} {path}: {e}"));
                }
            };
            self.t.retry_after.0 += secs;
            self.t.retry_after.1 = self.t.retry_after.1.max(secs);
            if retries >= self.ctx.max_retries {
                return Err(format!(
                    "{method} {path}: still 503 after {retries} retries"
                ));
            }
            retries += 1;
            self.t.retries += 1;
            let wait = Duration::from_secs(secs).min(self.ctx.retry_cap);
            tokio::time::sleep(wait.mul_f64(0.5 + 0.5 * self.rng.unit())).await;
        }
    }

    /// Replays a plan on a blocking thread.
    async fn verify(&mut self, graph: usize, body: Bytes) -> Result<(), String> {
        let ctx = self.ctx.clone();
        let identical = tokio::task::spawn_blocking(move || verify_plan(&ctx.graphs[graph], &body))
            .await
            .map_err(|e| format!("verifying: {e}"))??;
        self.t.plans_checked += 1;
        self.t.plans_identical += usize::from(identical);
        Ok(())
    }

    fn body(&self, op: Op) -> Bytes {
        let case = &self.ctx.graphs[op.graph];
        match op.kind {
            Kind::PlanFresh | Kind::JobFresh => case.body_fresh.clone(),
            Kind::Check => case.check_body.clone(),
            Kind::Plan | Kind::Job => case.body_cached.clone(),
        }
    }

    async fn plan(&mut self, op: Op) -> Result<(), String> {
        let a = self
            .call(op.kind, Method::POST, "/v1/plan", Some(self.body(op)))
            .await?;
        expect(&a, 200, "POST /v1/plan")?;
        match a.header("x-memplan-cache") {
            Some("hit") if op.kind == Kind::PlanFresh => {
                return Err("`cache: false` answered from the cache".into())
            }
            Some("hit") => self.t.cache[0] += 1,
            Some("miss") if op.kind == Kind::Plan => self.t.cache[1] += 1,
            Some("miss") => {}
            other => return Err(format!("X-Memplan-Cache {other:?}")),
        }
        self.verify(op.graph, a.body).await
    }

    async fn check(&mut self, op: Op) -> Result<(), String> {
        let a = self
            .call(op.kind, Method::POST, "/v1/check", Some(self.body(op)))
            .await?;
        expect(&a, 200, "POST /v1/check")?;
        let r = json(&a, "POST /v1/check")?;
        let peak = self.ctx.graphs[op.graph].peak;
        if r["valid"] != true || r["peak_bytes"].as_u64() != Some(peak) {
            return Err(format!(
                "check of the reference plan (peak {peak}) answered {}",
                a.snippet()
            ));
        }
        Ok(())
    }

    async fn job(&mut self, op: Op) -> Result<(), String> {
        let a = self
            .call(op.kind, Method::POST, "/v1/jobs", Some(self.body(op)))
            .await?;
        expect(&a, 202, "POST /v1/jobs")?;
        let view = json(&a, "POST /v1/jobs")?;
        let id = view["id"]
            .as_str()
            .ok_or_else(|| format!("202 without a job id: {}", a.snippet()))?
            .to_string();
        self.t.jobs_accepted += 1;
        let url = format!("/v1/jobs/{id}");
        if a.header("location") != Some(url.as_str()) {
            return Err(format!("job {id}: Location {:?}", a.header("location")));
        }
        let last = if view["status"] == "done" {
            self.t.jobs_done_at_once += 1;
            view
        } else if op.events {
            self.t.followed[0] += 1;
            self.follow_events(&id).await?
        } else {
            self.t.followed[1] += 1;
            self.poll(op.kind, &id).await?
        };
        if last["status"] != "done" {
            return Err(format!(
                "job {id} ended {}: {}",
                last["status"], last["error"]
            ));
        }
        let a = self
            .call(op.kind, Method::GET, &format!("{url}/plan"), None)
            .await?;
        expect(&a, 200, &format!("GET {url}/plan"))?;
        if a.header("x-memplan-job-status") != Some("done") {
            return Err(format!(
                "GET {url}/plan: X-Memplan-Job-Status {:?}",
                a.header("x-memplan-job-status")
            ));
        }
        self.verify(op.graph, a.body).await?;
        self.t.jobs_completed += 1;
        Ok(())
    }

    /// Polls a job with growing waits (50 ms to 1 s) until it ends; its last view.
    async fn poll(&mut self, kind: Kind, id: &str) -> Result<Value, String> {
        let deadline = Instant::now() + self.ctx.job_timeout;
        let path = format!("/v1/jobs/{id}");
        let mut wait = Duration::from_millis(50);
        loop {
            let a = self.call(kind, Method::GET, &path, None).await?;
            expect(&a, 200, &format!("GET {path}"))?;
            self.t.polls += 1;
            let view = json(&a, &path)?;
            let status = view["status"].as_str().unwrap_or_default();
            if terminal(status) {
                return Ok(view);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "job {id} still {status} after {} s",
                    self.ctx.job_timeout.as_secs()
                ));
            }
            tokio::time::sleep(wait.mul_f64(0.75 + 0.5 * self.rng.unit())).await;
            wait = (wait * 3 / 2).min(Duration::from_secs(1));
        }
    }

    /// Reads a job's event stream until its final event (and the end of the stream).
    async fn follow_events(&mut self, id: &str) -> Result<Value, String> {
        let limit = self.ctx.job_timeout;
        let r = match tokio::time::timeout(limit, self.events(id)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "job {id}: no final event within {} s",
                limit.as_secs()
            )),
        };
        if r.is_err() {
            self.conn.drop_connection();
        }
        r
    }

    async fn events(&mut self, id: &str) -> Result<Value, String> {
        let path = format!("/v1/jobs/{id}/events");
        let resp = self
            .conn
            .send(Method::GET, &path, None)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if resp.status() != StatusCode::OK || !ct.starts_with("text/event-stream") {
            return Err(format!("GET {path}: {} ({ct})", resp.status()));
        }
        let mut reader = EventReader::new(resp.into_body());
        let mut seen = 0;
        let last = loop {
            let ev = reader
                .next()
                .await
                .map_err(|e| format!("GET {path}: {e:#}"))?;
            let Some(ev) = ev else {
                return Err(format!(
                    "GET {path}: the stream ended after {seen} events, none final"
                ));
            };
            seen += 1;
            self.t.events += 1;
            let view: Value = serde_json::from_str(&ev.data)
                .map_err(|e| format!("GET {path}: event data unreadable: {e}"))?;
            let status = view["status"].as_str().unwrap_or_default().to_string();
            let named_right = if terminal(&status) {
                ev.name == status
            } else {
                ev.name == "progress"
            };
            if !named_right {
                return Err(format!(
                    "GET {path}: event {:?} carries status {status}",
                    ev.name
                ));
            }
            if terminal(&status) {
                break view;
            }
        };
        match tokio::time::timeout(Duration::from_secs(5), reader.next()).await {
            Ok(Ok(None)) => Ok(last),
            Ok(Ok(Some(ev))) => Err(format!(
                "GET {path}: event {:?} after the final one",
                ev.name
            )),
            Ok(Err(e)) => Err(format!("GET {path}: after the final event: {e:#}")),
            Err(_) => Err(format!(
                "GET {path}: the stream did not end within 5 s of its final event"
            )),
        }
    }
}
