//! The service on a real socket (port 0): 200 concurrent requests are all answered, correctly,
//! with and without overload (where exactly the free places are served and every other request
//! gets a 503); shutdown is graceful.

mod common;

use axum::body::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use memplan_api::{app, serve, Config, Service};
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// The same service through its router (no socket), to submit and cancel jobs.
    api: Api,
}

async fn server(config: Config) -> Server {
    let service = Service::start(config).await.unwrap();
    let api = Api {
        service: service.clone(),
        app: app(service.clone()),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(service, listener, async {
        let _ = rx.await;
    }));
    Server {
        addr,
        stop,
        task,
        api,
    }
}

/// One request on its own connection: (status, Retry-After, body).
async fn post(addr: SocketAddr, path: &str, body: String) -> (u16, Option<String>, String) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, retry, String::from_utf8(body.to_vec()).unwrap())
}

fn named_sample(i: usize) -> serde_json::Value {
    let mut g = sample();
    g["name"] = json!(format!("sample-{i}"));
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_plans_are_all_answered_correctly() {
    let s = server(config(None)).await;
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let body = plan_request(
                named_sample(i),
                json!({"strategy": "heuristic", "order": "given"}),
            );
            tokio::spawn(post(s.addr, "/v1/plan", body.to_string()))
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let (status, _, body) = t.await.unwrap();
        assert_eq!(status, 200, "request {i}: {body}");
        assert_valid_plan(&named_sample(i), &body);
        let plan: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            plan["graph"],
            format!("sample-{i}"),
            "answers must not be mixed up"
        );
    }
    s.stop.send(()).unwrap();
    s.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_worker_busy_the_queue_places_are_served_and_every_other_request_gets_503() {
    const QUEUE: usize = 8;
    let mut c = config(None);
    c.workers = 1;
    c.queue = QUEUE;
    let s = server(c).await;
    // A job that keeps the only worker busy until it is cancelled.
    let job = s.api.running_busy_job().await;
    // 200 requests at once: the queue's places admit QUEUE of them, which wait for the worker;
    // every other one is refused at once.
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let body = plan_request(
                named_sample(i),
                json!({"strategy": "heuristic", "order": "given"}),
            );
            tokio::spawn(post(s.addr, "/v1/plan", body.to_string()))
        })
        .collect();
    let refused = 200 - QUEUE;
    let until = Instant::now() + Duration::from_secs(60);
    while tasks.iter().filter(|t| t.is_finished()).count() < refused {
        assert!(Instant::now() < until, "the refusals did not come");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The admitted requests still wait: the worker is busy.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(tasks.iter().filter(|t| t.is_finished()).count(), refused);
    let r = s.api.delete(&format!("/v1/jobs/{job}")).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let (mut ok, mut busy) = (0, 0);
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            (200, _, body) => {
                assert_valid_plan(&named_sample(i), &body);
                ok += 1;
            }
            (503, retry, body) => {
                assert!(retry.unwrap().parse::<u64>().unwrap() >= 1);
                assert!(body.contains("urn:memplan:problem:overloaded"), "{body}");
                busy += 1;
            }
            (status, _, body) => panic!("request {i}: {status} {body}"),
        }
    }
    assert_eq!(
        (ok, busy),
        (QUEUE, refused),
        "the queue's places are served, every other request is refused"
    );
    s.stop.send(()).unwrap();
    s.task.await.unwrap().unwrap();
}

/// `GET path` on its own connection: the status, or `None` when the connection is refused.
async fn get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    Some(sender.send_request(req).await.ok()?.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_the_grace_period_the_service_still_answers_503_and_then_requeues_the_job() {
    let mut c = config(None);
    c.shutdown_grace = Duration::from_secs(3);
    let s = server(c).await;
    let job = s.api.running_busy_job().await;
    assert_eq!(get_status(s.addr, "/healthz").await, Some(200));
    s.stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Before, the listener closed at the signal: connections were refused for the whole
    // grace period.
    assert_eq!(get_status(s.addr, "/healthz").await, Some(503));
    let (status, _, body) = post(
        s.addr,
        "/v1/plan",
        plan_request(sample(), json!({"strategy": "heuristic"})).to_string(),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    s.task.await.unwrap().unwrap();
    // The job outlived the grace period: it is back in the queue, not failed.
    let r = s.api.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(r.json()["status"], "queued", "{}", r.text);
}
