//! Shared helpers of the service's black-box tests: a service over a fresh database, one-shot
//! requests, the sample graph and a graph that keeps the exact search busy; `../shared` and
//! python3 (the workspace's tests/support/shared.rs: skip with a note, or fail under
//! `MEMPLAN_REQUIRE_SHARED=1`) and the independent checker.
#![allow(dead_code)]

#[path = "../../../tests/support/shared.rs"]
pub mod shared;

mod sample;
#[allow(unused_imports)] // each test binary uses some of the helpers
pub use sample::{sample_graph, sample_text};

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use memplan_api::{app, AppState, Config, Service};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use tower::ServiceExt;

/// A test service and its router.
pub struct Api {
    pub service: AppState,
    pub app: Router,
}

/// A reply: status, headers, body text.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a problem document with this status whose detail contains `needle`.
    pub fn assert_problem(&self, status: u16, needle: &str) -> Value {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.text
        );
        let p = self.json();
        assert_eq!(p["status"], status);
        assert!(p["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:memplan:problem:"));
        assert!(
            p["detail"].as_str().unwrap().contains(needle),
            "detail {:?} lacks {needle:?}",
            p["detail"]
        );
        p
    }
}

/// Settings for tests: in memory unless a path is given, 2 workers.
pub fn config(db: Option<&Path>) -> Config {
    Config {
        db_path: db.map(Path::to_path_buf),
        workers: 2,
        ..Config::default()
    }
}

pub async fn start(config: Config) -> Api {
    let service = Service::start(config).await.unwrap();
    let app = app(service.clone());
    Api { service, app }
}

impl Api {
    pub async fn send(
        &self,
        method: Method,
        uri: &str,
        content_type: Option<&str>,
        body: impl Into<Body>,
    ) -> Reply {
        self.send_with(method, uri, &[], content_type, body).await
    }

    /// [`Api::send`] with extra request headers (name, value).
    pub async fn send_with(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        content_type: Option<&str>,
        body: impl Into<Body>,
    ) -> Reply {
        let mut b = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            b = b.header(*name, *value);
        }
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        let resp = self
            .app
            .clone()
            .oneshot(b.body(body.into()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    pub async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, None, Body::empty()).await
    }

    pub async fn delete(&self, uri: &str) -> Reply {
        self.send(Method::DELETE, uri, None, Body::empty()).await
    }

    pub async fn post_json(&self, uri: &str, body: &Value) -> Reply {
        self.send(
            Method::POST,
            uri,
            Some("application/json"),
            body.to_string(),
        )
        .await
    }

    /// Polls a job until `done(status)` or the timeout.
    pub async fn wait_job(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Value {
        let until = Instant::now() + timeout;
        loop {
            let r = self.get(&format!("/v1/jobs/{id}")).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            let v = r.json();
            if done(v["status"].as_str().unwrap()) {
                return v;
            }
            assert!(Instant::now() < until, "job {id} still {}", v["status"]);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Submits a [`busy_graph`] job (60 s, [`BUSY_EFFORT`]) and waits until it runs; its id.
    pub async fn running_busy_job(&self) -> String {
        let r = self
            .post_json(
                "/v1/jobs",
                &plan_request(
                    busy_graph(),
                    json!({"time_limit_s": 60, "order": "given", "effort": BUSY_EFFORT}),
                ),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        let job = r.json()["id"].as_str().unwrap().to_string();
        self.wait_job(&job, Duration::from_secs(60), |st| st == "running")
            .await;
        job
    }
}

pub fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

pub fn sample() -> Value {
    serde_json::from_str(&sample_text()).unwrap()
}

pub fn plan_request(graph: Value, options: Value) -> Value {
    json!({"graph": graph, "options": options})
}

/// `n` ops, each reading its predecessor's output and `reads` outputs from up to `window`
/// ops back (deterministic pseudo-random sizes and reads): many buffers with overlapping,
/// uneven lifetimes, so the exact placement search does not finish within minutes and a job
/// stays running until it is cancelled or out of time. `busy_graph()` is the one the tests use.
pub fn busy_graph_with(n: usize, window: u64, reads: usize) -> Value {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut tensors = vec![json!({"name": "t0", "size": 4096, "kind": "input"})];
    let mut ops = Vec::new();
    for i in 1..=n as u64 {
        let size = 256 * (1 + next() % 977);
        let kind = if i == n as u64 {
            "output"
        } else {
            "activation"
        };
        tensors.push(json!({"name": format!("t{i}"), "size": size, "kind": kind}));
        let mut inputs = vec![format!("t{}", i - 1)];
        for _ in 0..reads {
            let back = 1 + next() % window;
            if back <= i {
                inputs.push(format!("t{}", i - back));
            }
        }
        ops.push(json!({"name": format!("op{i}"), "type": "f", "inputs": inputs, "outputs": [format!("t{i}")]}));
    }
    json!({"format": "memplan-graph/1", "name": format!("busy{n}"), "alignment": 256, "tensors": tensors, "ops": ops})
}

/// The effort that keeps the solvers of a [`busy_graph`] job at work until its time limit
/// or a cancel (at the default effort, the work limits end it in well under a second).
pub const BUSY_EFFORT: u64 = memplan::pipeline::MAX_EFFORT;

/// The graph that keeps a job busy (see [`busy_graph_with`]); plan it with `order: given` and
/// `effort: BUSY_EFFORT`.
pub fn busy_graph() -> Value {
    // 400 ops and a window of 60 used to keep the search busy for about 5 s; since the
    // backjumping rounds it places them at LOAD in about 0.1 s.
    busy_graph_with(1200, 200, 2)
}

/// Checks a plan document against its graph with the library's validator.
pub fn assert_valid_plan(graph: &Value, plan: &str) {
    let g = memplan::Graph::parse(&graph.to_string()).unwrap();
    let p = memplan::Plan::parse(plan).unwrap();
    memplan::validate(&g, &p, None).unwrap_or_else(|v| panic!("invalid plan: {v}"));
}

/// A graph of the shared zoo (`../shared/zoo/NAME`), or `None` when the shared folder is not
/// there (see [`shared::skip`]).
#[track_caller]
pub fn zoo(name: &str) -> Option<Value> {
    let path = shared::shared_path(&format!("zoo/{name}"))?;
    Some(serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
}

/// Runs `../shared/tools/check_plan.py` on a graph and a plan document (with
/// `--budget BYTES` when `budget` is given) and asserts that the plan is valid (within the
/// budget) and that the checker's peak is the plan's `stats.peak_bytes`. Without the checker
/// or python3: see [`shared::skip`].
#[track_caller]
pub fn check_plan_py(graph: &Value, plan: &Value, budget: Option<u64>) {
    let Some(script) = shared::check_plan_py() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (gp, pp) = (dir.path().join("graph.json"), dir.path().join("plan.json"));
    std::fs::write(&gp, graph.to_string()).unwrap();
    std::fs::write(&pp, plan.to_string()).unwrap();
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(script).arg(&gp).arg(&pp);
    if let Some(b) = budget {
        cmd.args(["--budget", &b.to_string()]);
    }
    let r = cmd.output().expect("python3 runs");
    let v: Value = serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|_| panic!("check_plan.py: {}", String::from_utf8_lossy(&r.stderr)));
    assert_eq!(
        v["valid"], true,
        "{} (budget {budget:?}): {}",
        graph["name"], v["error"]
    );
    assert_eq!(v["peak"], plan["stats"]["peak_bytes"], "{}", graph["name"]);
}

impl Api {
    /// POSTs a JSON text as is (no re-serialisation).
    pub async fn post_text(&self, uri: &str, body: String) -> Reply {
        self.send(Method::POST, uri, Some("application/json"), body)
            .await
    }
}
