//! Access control, per-client job limits, the job listing and retention, through the router.

mod common;

use axum::http::{Method, StatusCode};
use common::*;
use memplan_api::auth::Tokens;
use memplan_api::config::Retention;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ALICE: &str = "alice-7c1f0e9a2b4d6f8e";
const BOB: &str = "bob-0a9b8c7d6e5f4a3b";
const LONG: Duration = Duration::from_secs(60);

fn tokens() -> Option<Arc<Tokens>> {
    Some(Arc::new(
        Tokens::parse(&format!("# test tokens\nalice {ALICE}\nbob {BOB}\n")).unwrap(),
    ))
}

/// One request with an optional `Authorization` header value.
async fn call(api: &Api, method: Method, uri: &str, auth: Option<&str>, body: &str) -> Reply {
    let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
    let content_type = (!body.is_empty()).then_some("application/json");
    api.send_with(method, uri, &headers, content_type, body.to_string())
        .await
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn assert_unauthorized(r: &Reply, needle: &str) {
    r.assert_problem(401, needle);
    assert_eq!(r.json()["type"], "urn:memplan:problem:unauthorized");
    assert!(
        r.header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer")),
        "401 without WWW-Authenticate: {:?}",
        r.headers
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_file_every_endpoint_but_healthz_needs_a_valid_bearer_token() {
    let api = start(memplan_api::Config {
        tokens: tokens(),
        ..config(None)
    })
    .await;
    assert_eq!(api.get("/healthz").await.status, StatusCode::OK);
    // Every operation of the document, with its path parameters filled in.
    let doc = memplan_api::openapi();
    let mut checked = 0;
    for (path, item) in &doc.paths.paths {
        let uri = path.replace("{id}", "5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44");
        for (method, op) in [
            (Method::GET, &item.get),
            (Method::POST, &item.post),
            (Method::DELETE, &item.delete),
        ] {
            let Some(op) = op else { continue };
            if path == "/healthz" {
                continue;
            }
            let r = call(&api, method.clone(), &uri, None, "").await;
            assert_unauthorized(&r, "needs a bearer token");
            let r = call(
                &api,
                method.clone(),
                &uri,
                Some(&bearer("wrong-token-0000000")),
                "",
            )
            .await;
            assert_unauthorized(&r, "not valid");
            assert!(
                op.responses.responses.contains_key("401"),
                "{method} {path} does not document its 401"
            );
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} operations checked");
    // Unknown routes and the Swagger UI are behind the token too.
    assert_unauthorized(
        &call(&api, Method::GET, "/nowhere", None, "").await,
        "bearer",
    );
    assert_unauthorized(&call(&api, Method::GET, "/docs/", None, "").await, "bearer");
    // Other schemes and malformed headers are refused, naming the problem.
    let basic = call(
        &api,
        Method::GET,
        "/openapi.json",
        Some("Basic YWxpY2U6cHc="),
        "",
    )
    .await;
    assert_unauthorized(&basic, "scheme");
    let bare = call(&api, Method::GET, "/openapi.json", Some(ALICE), "").await;
    assert_unauthorized(&bare, "Bearer TOKEN");
    // A valid token opens everything; the scheme is case-insensitive.
    for auth in [bearer(ALICE), bearer(BOB), format!("bearer {ALICE}")] {
        let r = call(&api, Method::GET, "/openapi.json", Some(&auth), "").await;
        assert_eq!(r.status, StatusCode::OK, "{auth}: {}", r.text);
    }
    let body = plan_request(sample(), json!({"time_limit_s": 0.5})).to_string();
    let r = call(&api, Method::POST, "/v1/plan", Some(&bearer(ALICE)), &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // A token differing in its last character is refused.
    let mut near = ALICE.to_string();
    near.pop();
    near.push('x');
    let r = call(&api, Method::POST, "/v1/plan", Some(&bearer(&near)), &body).await;
    assert_unauthorized(&r, "not valid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_states_the_bearer_scheme_as_optional() {
    let doc: Value = serde_json::from_str(memplan_api::openapi_json()).unwrap();
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"],
        json!({"type": "http", "scheme": "bearer"})
    );
    assert_eq!(doc["security"], json!([{"bearer": []}, {}]));
    assert!(doc["paths"]["/healthz"]["get"]["responses"]
        .get("401")
        .is_none());
}

async fn submit_as(api: &Api, token: &str, options: Value) -> Reply {
    let body = plan_request(busy_graph(), options).to_string();
    call(api, Method::POST, "/v1/jobs", Some(&bearer(token)), &body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_job_limit_gets_429_and_other_clients_do_not() {
    let api = start(memplan_api::Config {
        tokens: tokens(),
        max_jobs_per_client: 2,
        workers: 1,
        ..config(None)
    })
    .await;
    let busy = json!({"time_limit_s": 60, "order": "given", "effort": BUSY_EFFORT, "cache": false});
    let mut alice = Vec::new();
    for _ in 0..2 {
        let r = submit_as(&api, ALICE, busy.clone()).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        alice.push(r.json()["id"].as_str().unwrap().to_string());
    }
    let r = submit_as(&api, ALICE, busy.clone()).await;
    let p = r.assert_problem(429, "client alice already has 2 queued or running jobs");
    assert_eq!(p["type"], "urn:memplan:problem:too-many-jobs");
    assert_eq!(p["limit"], "max_jobs_per_client");
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait));
    // Bob is another client.
    let r = submit_as(&api, BOB, busy.clone()).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let bob = r.json()["id"].as_str().unwrap().to_string();
    // Cancelling one of Alice's jobs gives her place back once it has stopped.
    let r = call(
        &api,
        Method::DELETE,
        &format!("/v1/jobs/{}", alice[1]),
        Some(&bearer(ALICE)),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let until = Instant::now() + LONG;
    let third = loop {
        let r = submit_as(&api, ALICE, busy.clone()).await;
        if r.status == StatusCode::ACCEPTED {
            break r.json()["id"].as_str().unwrap().to_string();
        }
        r.assert_problem(429, "alice");
        assert!(
            Instant::now() < until,
            "the cancelled job's place never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for id in [&alice[0], &bob, &third] {
        let r = call(
            &api,
            Method::DELETE,
            &format!("/v1/jobs/{id}"),
            Some(&bearer(BOB)),
            "",
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_a_client_is_its_address_and_the_limit_still_holds() {
    let api = start(memplan_api::Config {
        max_jobs_per_client: 1,
        workers: 1,
        ..config(None)
    })
    .await;
    let busy = json!({"time_limit_s": 60, "order": "given", "effort": BUSY_EFFORT, "cache": false});
    let r = api
        .post_json("/v1/jobs", &plan_request(busy_graph(), busy.clone()))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.json()["id"].as_str().unwrap().to_string();
    // One-shot requests carry no peer address: they are the client `local`.
    api.post_json("/v1/jobs", &plan_request(busy_graph(), busy))
        .await
        .assert_problem(429, "client local");
    assert_eq!(
        api.delete(&format!("/v1/jobs/{id}")).await.status,
        StatusCode::OK
    );
}

async fn finished_job(api: &Api, tag: usize) -> String {
    let mut g = sample();
    g["name"] = json!(format!("listed-{tag}"));
    let r = api
        .post_json(
            "/v1/jobs",
            &plan_request(g, json!({"time_limit_s": 0.5, "cache": false})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.json()["id"].as_str().unwrap().to_string();
    api.wait_job(&id, LONG, |s| s == "done").await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_listed_newest_first_filtered_by_status_and_page_by_page() {
    let api = start(config(None)).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(finished_job(&api, i).await);
    }
    let busy = json!({"time_limit_s": 60, "order": "given", "effort": BUSY_EFFORT, "cache": false});
    let r = api
        .post_json("/v1/jobs", &plan_request(busy_graph(), busy))
        .await;
    let running = r.json()["id"].as_str().unwrap().to_string();
    api.wait_job(&running, LONG, |s| s == "running").await;

    // Page by page, following `next`, newest first.
    let mut seen = Vec::new();
    let mut url = "/v1/jobs?status=done&limit=2".to_string();
    let mut pages = 0;
    loop {
        let r = api.get(&url).await;
        assert_eq!(r.status, StatusCode::OK, "{url}: {}", r.text);
        let v = r.json();
        let jobs = v["jobs"].as_array().unwrap();
        assert!(jobs.len() <= 2);
        for j in jobs {
            assert_eq!(j["status"], "done");
            seen.push(j["id"].as_str().unwrap().to_string());
        }
        pages += 1;
        match v["next"].as_str() {
            Some(next) => url = next.to_string(),
            None => break,
        }
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
    assert_eq!(pages, 3);

    // Several statuses; the live job shows its current state.
    let v = api.get("/v1/jobs?status=running,queued").await.json();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{v}");
    assert_eq!(jobs[0]["id"], running.as_str());
    assert_eq!(jobs[0]["status"], "running");
    let all = api.get("/v1/jobs").await.json();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 6);
    assert!(all["next"].is_null());

    // Bad queries name the culprit, as query errors (not a body's).
    let p = api
        .get("/v1/jobs?status=finished")
        .await
        .assert_problem(422, "unknown job status \"finished\"");
    assert_eq!(p["type"], "urn:memplan:problem:invalid-query");
    assert_eq!(p["title"], "Invalid query parameters");
    api.get("/v1/jobs?limit=0")
        .await
        .assert_problem(422, "`limit` is 0");
    api.get("/v1/jobs?limit=1001")
        .await
        .assert_problem(422, "between 1 and 1000");
    api.get("/v1/jobs?cursor=abc")
        .await
        .assert_problem(422, "`cursor`");
    api.get("/v1/jobs?color=red")
        .await
        .assert_problem(422, "color");
    assert_eq!(
        api.delete(&format!("/v1/jobs/{running}")).await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_expire_after_the_retention_age_and_unfinished_ones_never_do() {
    let api = start(memplan_api::Config {
        retention: Retention::parse("1s").unwrap(),
        retention_sweep: Duration::from_millis(100),
        workers: 1,
        ..config(None)
    })
    .await;
    let old = finished_job(&api, 0).await;
    let busy = json!({"time_limit_s": 60, "order": "given", "effort": BUSY_EFFORT, "cache": false});
    let r = api
        .post_json("/v1/jobs", &plan_request(busy_graph(), busy))
        .await;
    let running = r.json()["id"].as_str().unwrap().to_string();
    let until = Instant::now() + LONG;
    while api.get(&format!("/v1/jobs/{old}")).await.status == StatusCode::OK {
        assert!(Instant::now() < until, "the finished job never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    api.get(&format!("/v1/jobs/{old}/plan"))
        .await
        .assert_problem(404, "no job");
    // The running job outlives the retention age.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let v = api.get(&format!("/v1/jobs/{running}")).await;
    assert_eq!(v.status, StatusCode::OK);
    assert!(matches!(
        v.json()["status"].as_str(),
        Some("queued" | "running")
    ));
    let metrics = api.get("/metrics").await.text;
    assert!(
        metrics.contains("memplan_expired_total{kind=\"jobs\"} 1"),
        "{metrics}"
    );
    assert_eq!(
        api.delete(&format!("/v1/jobs/{running}")).await.status,
        StatusCode::OK
    );
}
