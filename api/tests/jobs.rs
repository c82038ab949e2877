//! Jobs: acceptance, progress, events, plans, cancellation, the stored-plan cache, and
//! recovery after a restart.

mod common;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use memplan_api::model::{JobStatus, Progress};
use memplan_api::store::{Finish, NewJob, Store};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tower::ServiceExt;

const LONG: Duration = Duration::from_secs(60);

async fn submit(api: &Api, graph: Value, options: Value) -> String {
    let r = api
        .post_json("/v1/jobs", &plan_request(graph, options))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let v = r.json();
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(
        r.header("location"),
        Some(format!("/v1/jobs/{id}").as_str())
    );
    assert_eq!(v["links"]["plan"], format!("/v1/jobs/{id}/plan"));
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_accepted_runs_to_done_and_its_plan_is_valid() {
    let api = start(config(None)).await;
    let id = submit(&api, sample(), json!({"time_limit_s": 0.5})).await;
    let v = api.wait_job(&id, LONG, |s| s == "done").await;
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["cached"], false);
    assert_eq!(v["graph"], sample()["name"]);
    assert_eq!(v["options"]["strategy"], "auto");
    assert_eq!(v["options"]["time_limit_s"], 0.5);
    assert_eq!(
        v["options"]["rewrite"],
        json!([]),
        "the graph is planned as given"
    );
    let status = v["progress"]["status"].as_str().unwrap();
    assert!(
        memplan::PlanStatus::ALL
            .iter()
            .any(|s| s.as_str() == status),
        "{status}"
    );
    assert!(v["started_unix_ms"].as_u64().unwrap() <= v["finished_unix_ms"].as_u64().unwrap());
    let r = api.get(&format!("/v1/jobs/{id}/plan")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-memplan-job-status"), Some("done"));
    assert_valid_plan(&sample(), &r.text);
    let plan = r.json();
    assert_eq!(
        v["progress"]["best_peak_bytes"],
        plan["stats"]["peak_bytes"]
    );
    assert!(
        v["progress"]["lower_bound_bytes"].as_u64().unwrap()
            <= plan["stats"]["peak_bytes"].as_u64().unwrap()
    );
    assert!(v["progress"]["gap"].as_f64().unwrap() >= 0.0);
    api.delete(&format!("/v1/jobs/{id}"))
        .await
        .assert_problem(409, "already done");

    // The identical job is done at once, answered from the stored plan.
    let r = api
        .post_json(
            "/v1/jobs",
            &plan_request(sample(), json!({"time_limit_s": 0.5})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let cached = r.json();
    assert_eq!(cached["status"], "done");
    assert_eq!(cached["cached"], true);
    let again = api
        .get(&format!("/v1/jobs/{}/plan", cached["id"].as_str().unwrap()))
        .await;
    assert_eq!(again.json(), plan);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_options_a_job_reports_sent_back_give_the_same_options_and_the_same_plan() {
    let api = start(config(None)).await;
    let id = submit(&api, sample(), json!({"strategy": "heuristic"})).await;
    let first = api.wait_job(&id, LONG, |s| s == "done").await;
    let options = first["options"].clone();
    assert_eq!(options["rewrite"], json!([]), "{options}");
    // No rewrite: the modes say so, as `off` reads back.
    assert_eq!(
        (&options["conv_algos"], &options["tile"]),
        (&json!("off"), &json!("off"))
    );
    let plan = api.get(&format!("/v1/jobs/{id}/plan")).await.text;
    let again = submit(&api, sample(), options.clone()).await;
    let second = api.wait_job(&again, LONG, |s| s == "done").await;
    assert_eq!(second["options"], options);
    // The same request: answered from the first job's plan.
    assert_eq!(second["cached"], true, "{second}");
    assert_eq!(api.get(&format!("/v1/jobs/{again}/plan")).await.text, plan);
    // With a rewrite, its mode is kept and reads back the same too.
    let id = submit(
        &api,
        sample(),
        json!({"strategy": "heuristic", "conv_algos": "fastest"}),
    )
    .await;
    let with = api.wait_job(&id, LONG, |s| s == "done").await["options"].clone();
    assert_eq!(
        (&with["rewrite"], &with["conv_algos"], &with["tile"]),
        (&json!(["conv-algos"]), &json!("fastest"), &json!("off"))
    );
    let again = submit(&api, sample(), with.clone()).await;
    let back = api.wait_job(&again, LONG, |s| s == "done").await;
    assert_eq!((&back["options"], &back["cached"]), (&with, &json!(true)));
}

/// Reads server-sent events until the stream ends: (event name, data) pairs.
async fn read_events(api: &Api, id: &str, timeout: Duration) -> Vec<(String, Value)> {
    let req = Request::builder()
        .uri(format!("/v1/jobs/{id}/events"))
        .body(Body::empty())
        .unwrap();
    let resp = api.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let mut text = String::new();
    let until = Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, body.frame()).await {
            Ok(Some(frame)) => {
                if let Ok(data) = frame.unwrap().into_data() {
                    text.push_str(&String::from_utf8_lossy(&data));
                }
            }
            Ok(None) => break,
            Err(_) => panic!("event stream still open after {timeout:?}: {text}"),
        }
    }
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                }
                if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(d).unwrap());
                }
            }
            Some((name?, data?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_carries_progress_until_the_job_ends() {
    let api = start(config(None)).await;
    let id = submit(
        &api,
        busy_graph(),
        json!({"time_limit_s": 2, "order": "given", "effort": BUSY_EFFORT}),
    )
    .await;
    let events = read_events(&api, &id, LONG).await;
    assert!(!events.is_empty());
    let (last, data) = events.last().unwrap();
    assert_eq!(last, "done", "{events:?}");
    assert_eq!(data["status"], "done");
    assert!(events[..events.len() - 1]
        .iter()
        .all(|(n, _)| n == "progress"));
    assert!(
        events
            .iter()
            .any(|(_, d)| d["progress"]["best_peak_bytes"].is_u64() && d["status"] != "done"),
        "no progress while running: {events:?}"
    );
    // A finished job's stream is one final event.
    let again = read_events(&api, &id, Duration::from_secs(5)).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0, "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_the_run_ends_the_event_stream_with_the_job_back_in_the_queue() {
    let mut c = config(None);
    c.shutdown_grace = Duration::ZERO;
    let api = start(c).await;
    let id = api.running_busy_job().await;
    let stop = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        api.service.shutdown().await;
    };
    let (events, ()) = tokio::join!(read_events(&api, &id, LONG), stop);
    let (last, data) = events.last().unwrap();
    assert_eq!(last, "queued", "{events:?}");
    assert_eq!(
        (&data["status"], &data["attempts"]),
        (&json!("queued"), &json!(1))
    );
    assert!(events[..events.len() - 1]
        .iter()
        .all(|(n, _)| n == "progress"));
    // As the job reads now.
    let v = api.get(&format!("/v1/jobs/{id}")).await.json();
    assert_eq!(
        (&v["status"], &v["progress"]),
        (&data["status"], &data["progress"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_the_event_stream_of_a_job_still_waiting_in_the_queue_at_once() {
    let mut c = config(None);
    c.workers = 1;
    c.shutdown_grace = Duration::from_secs(30);
    let api = start(c).await;
    let running = api.running_busy_job().await;
    // With one worker busy, a second job waits in the queue.
    let waiting = submit(&api, busy_graph(), json!({"order": "given"})).await;
    assert_eq!(
        api.get(&format!("/v1/jobs/{waiting}")).await.json()["status"],
        "queued"
    );
    let stop = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        api.service.begin_shutdown();
    };
    // The stream of the waiting job ends at the stop, not after the running job's grace.
    let started = Instant::now();
    let (events, ()) = tokio::join!(read_events(&api, &waiting, Duration::from_secs(10)), stop);
    assert!(started.elapsed() < Duration::from_secs(10));
    let (last, data) = events.last().unwrap();
    assert_eq!(
        (last.as_str(), &data["status"]),
        ("queued", &json!("queued")),
        "{events:?}"
    );
    assert!(events[..events.len() - 1]
        .iter()
        .all(|(n, _)| n == "progress"));
    // Cancelling still works while stopping: the busy job does not outlive the test.
    let r = api.delete(&format!("/v1/jobs/{running}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_cancelled_and_keeps_its_best_plan_which_is_never_reused() {
    let api = start(config(None)).await;
    let graph = busy_graph();
    let opts = json!({"time_limit_s": 60, "order": "given", "effort": BUSY_EFFORT});
    let id = submit(&api, graph.clone(), opts.clone()).await;
    // Running, with the heuristics' plan as progress.
    api.wait_job(&id, LONG, |s| s == "running").await;
    let until = Instant::now() + LONG;
    while api.get(&format!("/v1/jobs/{id}")).await.json()["progress"]["best_peak_bytes"].is_null() {
        assert!(Instant::now() < until);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let v = api.get(&format!("/v1/jobs/{id}")).await.json();
    assert!(v["progress"]["elapsed_s"].as_f64().unwrap() >= 0.1, "{v}");
    assert!(
        v["progress"]["lower_bound_bytes"].as_u64() <= v["progress"]["best_peak_bytes"].as_u64()
    );
    api.get(&format!("/v1/jobs/{id}/plan"))
        .await
        .assert_problem(409, "is running; its plan is not ready");
    let started = Instant::now();
    let r = api.delete(&format!("/v1/jobs/{id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["status"], "cancelled");
    assert_eq!(r.json()["progress"]["status"], "cancelled");
    // The solvers stop at their next check: the best plan so far is stored within seconds.
    let plan = loop {
        let r = api.get(&format!("/v1/jobs/{id}/plan")).await;
        if r.status == StatusCode::OK {
            break r;
        }
        r.assert_problem(409, "being cancelled");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "cancel did not stop the solve"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(plan.header("x-memplan-job-status"), Some("cancelled"));
    assert_valid_plan(&graph, &plan.text);
    let v = api.get(&format!("/v1/jobs/{id}")).await.json();
    assert_eq!(v["status"], "cancelled");
    assert_eq!(
        v["progress"]["best_peak_bytes"],
        plan.json()["stats"]["peak_bytes"]
    );
    // One status vocabulary: the plan and the progress say cancelled (not time_limit).
    assert_eq!(plan.json()["stats"]["status"], "cancelled");
    assert_eq!(v["progress"]["status"], "cancelled");
    // Cancelling again changes nothing.
    assert_eq!(
        api.delete(&format!("/v1/jobs/{id}")).await.json()["status"],
        "cancelled"
    );
    // A cancelled job's plan does not answer an identical request.
    let r = api
        .post_json("/v1/jobs", &plan_request(graph, opts))
        .await
        .json();
    assert_ne!(r["status"], "done");
    api.delete(&format!("/v1/jobs/{}", r["id"].as_str().unwrap()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_is_cancelled_before_it_runs() {
    let mut c = config(None);
    c.workers = 1;
    let api = start(c).await;
    let busy = submit(
        &api,
        busy_graph(),
        json!({"time_limit_s": 60, "order": "given", "effort": BUSY_EFFORT}),
    )
    .await;
    api.wait_job(&busy, LONG, |s| s == "running").await;
    let queued = submit(&api, sample(), json!({})).await;
    assert_eq!(
        api.get(&format!("/v1/jobs/{queued}")).await.json()["status"],
        "queued"
    );
    let metrics = api.get("/metrics").await.text;
    assert!(metrics.contains("memplan_queue_depth 1"), "{metrics}");
    assert!(metrics.contains("memplan_running_jobs 1"), "{metrics}");
    assert_eq!(
        api.delete(&format!("/v1/jobs/{queued}")).await.json()["status"],
        "cancelled"
    );
    api.get(&format!("/v1/jobs/{queued}/plan"))
        .await
        .assert_problem(409, "cancelled before it produced a plan");
    assert_eq!(
        api.delete(&format!("/v1/jobs/{busy}")).await.status,
        StatusCode::OK
    );
    api.wait_job(&busy, LONG, |s| s == "cancelled").await;
    let v = api.get(&format!("/v1/jobs/{queued}")).await.json();
    assert_eq!(v["attempts"], 0, "a job cancelled in the queue never ran");
}

fn row<'a>(id: &'a str, graph: &'a str, options: &'a str) -> NewJob<'a> {
    NewJob {
        id,
        key: "k",
        status: JobStatus::Queued,
        graph_name: "g",
        graph,
        options,
        created_ms: 1,
        cached_plan: None,
        client: "test",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_queued_and_running_jobs_resume_or_fail_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    let graph = sample().to_string();
    let options = json!({"order": "auto", "strategy": "heuristic", "time_limit_s": 0.5, "inplace": false, "cache": true}).to_string();
    {
        // What a crashed service leaves behind.
        let s = Store::open(Some(&db)).unwrap();
        s.insert_job(&row("queued", &graph, &options)).unwrap();
        s.insert_job(&row("running", &graph, &options)).unwrap();
        s.mark_running("running", 2).unwrap();
        s.insert_job(&row("crashes", &graph, &options)).unwrap();
        for _ in 1..memplan_api::service::MAX_ATTEMPTS {
            s.mark_running("crashes", 2).unwrap();
            s.requeue("crashes", false).unwrap();
        }
        s.mark_running("crashes", 3).unwrap();
        s.insert_job(&row("unreadable", "{\"format\": 1}", &options))
            .unwrap();
        s.insert_job(&row("finished", &graph, &options)).unwrap();
        s.finish(
            "finished",
            &Finish {
                status: JobStatus::Failed,
                // Recent: the retention keeps it.
                finished_ms: memplan_api::service::now_ms(),
                progress: Progress::default(),
                plan: None,
                error: Some("{}".into()),
            },
        )
        .unwrap();
    }
    let api = start(config(Some(&db))).await;
    let done = |s: &str| s == "done" || s == "failed";
    let q = api.wait_job("queued", LONG, done).await;
    assert_eq!(
        (q["status"].as_str(), q["attempts"].as_u64()),
        (Some("done"), Some(1))
    );
    let r = api.wait_job("running", LONG, done).await;
    assert_eq!(
        (r["status"].as_str(), r["attempts"].as_u64()),
        (Some("done"), Some(2))
    );
    assert_valid_plan(&sample(), &api.get("/v1/jobs/running/plan").await.text);
    let c = api.wait_job("crashes", LONG, done).await;
    assert_eq!(c["status"], "failed");
    assert!(
        c["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("stopped 3 times"),
        "{c}"
    );
    let u = api.wait_job("unreadable", LONG, done).await;
    assert_eq!(u["status"], "failed");
    assert!(
        u["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("stored graph cannot be read"),
        "{u}"
    );
    assert_eq!(
        api.get("/v1/jobs/finished").await.json()["status"],
        "failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_puts_running_jobs_back_and_a_restart_finishes_every_job() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    let mut c = config(Some(&db));
    c.workers = 1;
    c.shutdown_grace = Duration::ZERO;
    let (busy, queued, done, plan) = {
        let api = start(c.clone()).await;
        let done = submit(&api, sample(), json!({"strategy": "heuristic"})).await;
        api.wait_job(&done, LONG, |s| s == "done").await;
        let plan = api.get(&format!("/v1/jobs/{done}/plan")).await.text;
        let busy = submit(
            &api,
            busy_graph(),
            json!({"time_limit_s": 3, "order": "given", "effort": BUSY_EFFORT}),
        )
        .await;
        api.wait_job(&busy, LONG, |s| s == "running").await;
        let queued = submit(
            &api,
            sample(),
            json!({"strategy": "heuristic", "order": "given"}),
        )
        .await;
        api.service.shutdown().await;
        (busy, queued, done, plan)
    };
    {
        let s = Store::open(Some(&db)).unwrap();
        let b = s.job(&busy).unwrap().unwrap();
        assert_eq!(
            (b.status, b.attempts, b.crashed_runs),
            (JobStatus::Queued, 1, 0),
            "interrupted: the start counts, not as a crash"
        );
        assert_eq!(s.job(&queued).unwrap().unwrap().status, JobStatus::Queued);
    }
    let api = start(c.clone()).await;
    for (id, starts) in [(&busy, 2), (&queued, 1)] {
        let v = api.wait_job(id, LONG, |s| s == "done").await;
        assert_eq!(v["attempts"], starts, "{v}");
    }
    // Results stay retrievable, and identical requests are answered from them.
    assert_eq!(api.get(&format!("/v1/jobs/{done}/plan")).await.text, plan);
    let r = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"strategy": "heuristic"})),
        )
        .await;
    assert_eq!(r.header("x-memplan-cache"), Some("hit"));
    assert_eq!(r.text, plan);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_start_counts_as_an_attempt_and_graceful_stops_never_fail_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    let mut c = config(Some(&db));
    c.workers = 1;
    c.shutdown_grace = Duration::ZERO;
    let mut job: Option<String> = None;
    // More graceful stops during its run than the crashes that fail a job.
    for starts in 1..=memplan_api::service::MAX_ATTEMPTS + 1 {
        let api = start(c.clone()).await;
        let id = match &job {
            None => api.running_busy_job().await,
            Some(id) => {
                api.wait_job(id, LONG, |s| s == "running").await;
                id.clone()
            }
        };
        let v = api.get(&format!("/v1/jobs/{id}")).await.json();
        assert_eq!(
            (&v["status"], &v["attempts"]),
            (&json!("running"), &json!(starts))
        );
        api.service.shutdown().await;
        let v = api.get(&format!("/v1/jobs/{id}")).await.json();
        assert_eq!(
            (&v["status"], &v["attempts"]),
            (&json!("queued"), &json!(starts))
        );
        job = Some(id);
    }
}

#[tokio::test]
async fn an_unknown_job_is_a_404_everywhere() {
    let api = start(config(None)).await;
    for (m, uri) in [
        (Method::GET, "/v1/jobs/0"),
        (Method::DELETE, "/v1/jobs/0"),
        (Method::GET, "/v1/jobs/0/plan"),
        (Method::GET, "/v1/jobs/0/events"),
    ] {
        api.send(m, uri, None, Body::empty())
            .await
            .assert_problem(404, "no job \"0\"");
    }
}
