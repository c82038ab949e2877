//! One-shot tests of every endpoint of the service and of every class of bad input.

mod common;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use common::*;
use memplan::{OrderMode, Strategy};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test]
async fn a_plan_of_the_sample_is_valid_and_a_repeat_is_answered_from_the_store() {
    let api = start(config(None)).await;
    let req = plan_request(sample(), json!({"strategy": "heuristic"}));
    let r = api.post_json("/v1/plan", &req).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-memplan-cache"), Some("miss"));
    assert_valid_plan(&sample(), &r.text);
    assert_eq!(r.json()["format"], "memplan-plan/1");

    // Same graph and options, written differently: answered from the store, same plan.
    let reordered =
        json!({"options": {"strategy": "heuristic", "time_limit_s": 60}, "graph": sample()});
    let again = api.post_json("/v1/plan", &reordered).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.header("x-memplan-cache"), Some("hit"));
    assert_eq!(again.text, r.text);

    // `cache: false` solves again.
    let fresh = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"strategy": "heuristic", "cache": false})),
        )
        .await;
    assert_eq!(fresh.header("x-memplan-cache"), Some("miss"));
    let metrics = api.get("/metrics").await.text;
    assert!(metrics.contains("memplan_cache_hits_total 1"), "{metrics}");
}

#[tokio::test]
async fn every_strategy_and_order_the_library_lists_is_accepted() {
    let api = start(config(None)).await;
    for s in Strategy::ALL {
        for o in OrderMode::ALL {
            let opts = json!({"strategy": s.name(), "order": o.name(), "time_limit_s": 0.2});
            let r = api
                .post_json("/v1/plan", &plan_request(sample(), opts))
                .await;
            assert_eq!(
                r.status,
                StatusCode::OK,
                "{} {}: {}",
                s.name(),
                o.name(),
                r.text
            );
            assert_valid_plan(&sample(), &r.text);
        }
    }
}

#[tokio::test]
async fn bad_options_are_refused_naming_the_option_and_the_choices() {
    let api = start(config(None)).await;
    let cases = [
        (
            json!({"strategy": "fastest"}),
            "options.strategy: unknown variant `fastest`, expected one of `heuristic`, `ilp`, `auto`",
        ),
        (
            json!({"order": "random"}),
            "options.order: unknown variant `random`, expected `given` or `auto`",
        ),
        (
            json!({"time_limit_s": -1}),
            "time_limit_s -1 is not a finite non-negative number",
        ),
        (
            json!({"spill_strategy": "chen"}),
            "spill_strategy \"chen\" needs a budget",
        ),
        (json!({"fuse": true}), "options.fuse: unknown field `fuse`"),
        (
            json!({"rewrite": "fuse,fission"}),
            "options.rewrite: unknown rewrite \"fission\"",
        ),
        (
            json!({"budget": "lots"}),
            "options.budget: ",
        ),
        (json!({"cache": "yes"}), "options.cache: expected true or false"),
    ];
    for (opts, needle) in cases {
        let r = api
            .post_json("/v1/plan", &plan_request(sample(), opts))
            .await;
        let p = r.assert_problem(422, needle);
        assert_eq!(p["type"], "urn:memplan:problem:invalid-options");
    }
}

#[tokio::test]
async fn a_budget_gives_a_valid_plan_under_it_and_an_unreachable_one_is_refused() {
    let api = start(config(None)).await;
    let free = api
        .post_json("/v1/plan", &plan_request(sample(), json!({})))
        .await;
    assert_eq!(free.status.as_u16(), 200);
    let peak = free.json()["stats"]["peak_bytes"].as_u64().unwrap();
    let budget = peak * 6 / 10;
    let r = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"budget": budget})),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let plan: memplan::Plan = serde_json::from_str(&r.text).unwrap();
    assert!(plan.arena_bytes <= budget);
    let graph = sample_graph();
    memplan::validate(&graph, &plan, Some(budget)).unwrap();
    check_plan_py(&sample(), &r.json(), Some(budget));
    assert!(plan.stats.budget.is_some());
    let r = api
        .post_json("/v1/plan", &plan_request(sample(), json!({"budget": 1000})))
        .await;
    r.assert_problem(422, "cannot be met");
    let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
    assert!(
        detail.starts_with("budget of 1000 bytes cannot be met"),
        "the message names the budget once: {detail}"
    );
    // A job is accepted, then fails with the same reason.
    let r = api
        .post_json("/v1/jobs", &plan_request(sample(), json!({"budget": 1000})))
        .await;
    assert_eq!(r.status.as_u16(), 202, "{}", r.text);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let v = api
        .wait_job(&id, Duration::from_secs(60), |s| s == "failed")
        .await;
    assert!(
        v["error"].to_string().contains("cannot be met"),
        "{}",
        v["error"]
    );
    let r = api
        .post_json("/v1/plan", &plan_request(sample(), json!({"budget": 0})))
        .await;
    r.assert_problem(422, "more than 0 bytes");
}

#[tokio::test]
async fn time_limits_over_the_caps_are_refused_naming_the_cap() {
    let mut c = config(None);
    c.sync_time_limit_cap = Duration::from_secs(5);
    c.max_time_limit = Duration::from_secs(60);
    let api = start(c).await;
    let r = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"time_limit_s": 30})),
        )
        .await;
    let p = r.assert_problem(
        422,
        "over the limit of 5 s (sync_time_limit_cap); submit longer work to POST /v1/jobs",
    );
    assert_eq!(p["limit"], "sync_time_limit_cap");
    let r = api
        .post_json(
            "/v1/jobs",
            &plan_request(sample(), json!({"time_limit_s": 61})),
        )
        .await;
    assert_eq!(
        r.assert_problem(422, "max_time_limit")["limit"],
        "max_time_limit"
    );
    // Past what a duration holds is over the cap too (it was "not a non-negative number").
    let r = api
        .post_json(
            "/v1/jobs",
            &plan_request(sample(), json!({"time_limit_s": 1e20})),
        )
        .await;
    let p = r.assert_problem(
        422,
        "time_limit_s 100000000000000000000 s is over the limit of 60 s",
    );
    assert_eq!(p["limit"], "max_time_limit");
}

#[tokio::test]
async fn malformed_json_is_a_400_with_line_and_column() {
    let api = start(config(None)).await;
    let r = api
        .send(
            Method::POST,
            "/v1/plan",
            Some("application/json"),
            "{\n  \"graph\": {,\n}",
        )
        .await;
    let p = r.assert_problem(400, "request JSON error at line 2, column 13");
    assert_eq!(p["type"], "urn:memplan:problem:bad-request");
    // A bare graph's body too (POST /plan, POST /jobs), empty or cut short; well-formed JSON
    // that is no graph stays a 422.
    for route in ["/plan", "/jobs"] {
        for body in [
            "",
            "{\n  \"format\": ,\n}",
            "{\"format\": \"memplan-graph/1\"",
        ] {
            let r = api
                .send(Method::POST, route, Some("application/json"), body)
                .await;
            let p = r.assert_problem(400, "graph JSON error at line");
            assert_eq!(
                p["type"], "urn:memplan:problem:bad-request",
                "{route} {body:?}"
            );
        }
        let r = api
            .send(Method::POST, route, Some("application/json"), "[1, 2]")
            .await;
        r.assert_problem(422, "graph JSON error");
    }
}

#[tokio::test]
async fn a_body_of_the_wrong_structure_is_a_422_naming_the_field() {
    let api = start(config(None)).await;
    let r = api
        .post_json("/v1/plan", &json!({"graph": sample(), "strategy": "auto"}))
        .await;
    r.assert_problem(422, "unknown field `strategy`");
    let r = api.post_json("/v1/plan", &json!({"options": {}})).await;
    r.assert_problem(422, "missing field `graph`");
}

#[tokio::test]
async fn a_graph_breaking_a_rule_is_a_422_naming_the_culprit_with_the_cli_message() {
    let api = start(config(None)).await;
    let mut g = sample();
    g["ops"][1]["inputs"][0] = json!("no_such_tensor");
    let op = g["ops"][1]["name"].as_str().unwrap().to_string();
    let r = api
        .post_json("/v1/plan", &plan_request(g.clone(), json!({})))
        .await;
    let expected = memplan::Graph::parse(&g.to_string())
        .unwrap_err()
        .to_string();
    assert!(expected.contains(&op) && expected.contains("no_such_tensor"));
    let p = r.assert_problem(422, &expected);
    assert_eq!(p["type"], "urn:memplan:problem:invalid-graph");
}

#[tokio::test]
async fn a_json_error_inside_the_graph_is_reported_at_its_place_in_the_body() {
    let api = start(config(None)).await;
    // The graph's first tensor has a string size, which ends at line 3, column 58 of the body;
    // the message names it by its path in the graph and its name.
    let body = "{\"options\": {},\n \"graph\": {\"format\": \"memplan-graph/1\", \"ops\": [],\n  \"tensors\": [{\"name\": \"x\", \"kind\": \"input\", \"size\": \"big\"}]}}";
    let r = api
        .send(Method::POST, "/v1/plan", Some("application/json"), body)
        .await;
    r.assert_problem(
        422,
        "graph JSON error at line 3, column 58: tensors[0] (\"x\").size: invalid type: string \"big\", \
         expected u64",
    );
    // On the body's first line the graph's own columns are shifted by where it starts.
    let r = api
        .send(
            Method::POST,
            "/v1/plan",
            Some("application/json"),
            "{\"graph\": {\"format\": 5}}",
        )
        .await;
    r.assert_problem(422, "graph JSON error at line 1, column 22");
}

#[tokio::test]
async fn a_body_that_starts_with_a_byte_order_mark_is_read_as_without_it_as_the_cli_reads_it() {
    let api = start(config(None)).await;
    let graph = sample().to_string();
    let plain = api
        .send(
            Method::POST,
            "/plan?strategy=heuristic",
            Some("application/json"),
            graph.clone(),
        )
        .await;
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.text);
    let marked = api
        .send(
            Method::POST,
            "/plan?strategy=heuristic",
            Some("application/json"),
            format!("\u{feff}{graph}"),
        )
        .await;
    assert_eq!(marked.status, StatusCode::OK, "{}", marked.text);
    assert_eq!(marked.json()["instructions"], plain.json()["instructions"]);
    // A structure error after the mark is a 422 (not a syntax error), its column counted
    // after the mark.
    let r = api
        .send(
            Method::POST,
            "/plan",
            Some("application/json"),
            "\u{feff}{\"format\": 5}",
        )
        .await;
    r.assert_problem(422, "graph JSON error at line 1, column 12");
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413() {
    let mut c = config(None);
    c.body_limit = 1024;
    let api = start(c).await;
    let r = api
        .post_json("/v1/plan", &plan_request(sample(), json!({})))
        .await;
    let p = r.assert_problem(413, "over the limit of 1024 bytes");
    assert_eq!(p["limit"], "body_limit");
    // Also without a Content-Length (a streamed body).
    let stream =
        futures_util::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b' '; 512])));
    let r = api
        .send(
            Method::POST,
            "/v1/check",
            Some("application/json"),
            Body::from_stream(stream),
        )
        .await;
    r.assert_problem(413, "1024 bytes");
}

#[tokio::test]
async fn graphs_over_the_size_limits_are_a_422_naming_the_limit() {
    let mut c = config(None);
    c.max_ops = 3;
    let api = start(c).await;
    let r = api
        .post_json("/v1/plan", &plan_request(sample(), json!({})))
        .await;
    assert_eq!(
        r.assert_problem(422, "over the limit of 3 ops (max_ops)")["limit"],
        "max_ops"
    );
    let mut c = config(None);
    c.max_tensors = 5;
    let api = start(c).await;
    let r = api
        .post_json("/v1/jobs", &plan_request(sample(), json!({})))
        .await;
    assert_eq!(
        r.assert_problem(422, "(max_tensors)")["limit"],
        "max_tensors"
    );
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_415() {
    let api = start(config(None)).await;
    let r = api
        .send(Method::POST, "/v1/plan", Some("text/plain"), sample_text())
        .await;
    r.assert_problem(415, "send application/json");
    // No Content-Type at all is read as JSON (curl --data-binary sends none with -H '').
    let r = api
        .send(
            Method::POST,
            "/v1/plan",
            None,
            plan_request(sample(), json!({"strategy": "heuristic"})).to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_place_is_taken_new_work_is_answered_503_with_retry_after() {
    let mut c = config(None);
    c.workers = 1;
    c.queue = 0;
    let api = start(c).await;
    let id = api.running_busy_job().await;
    let plan = plan_request(sample(), json!({"strategy": "heuristic"}));
    for uri in ["/v1/plan", "/v1/jobs"] {
        let r = api.post_json(uri, &plan).await;
        let p = r.assert_problem(503, "solver and queue places are taken");
        let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&after));
        assert_eq!(p["retry_after_s"], after);
    }
    let r = api
        .send(
            Method::POST,
            "/v1/place",
            Some("text/csv"),
            "id,lower,upper,size\na,0,1,8\n",
        )
        .await;
    r.assert_problem(503, "taken");
    let gauges = api.get("/metrics").await.text;
    assert!(gauges.contains("memplan_queue_capacity 0"));
    // Cancelling frees the place.
    assert_eq!(
        api.delete(&format!("/v1/jobs/{id}")).await.status,
        StatusCode::OK
    );
    api.wait_job(&id, Duration::from_secs(30), |s| s == "cancelled")
        .await;
    let mut freed = false;
    for _ in 0..500 {
        let r = api.post_json("/v1/plan", &plan).await;
        if r.status == StatusCode::OK {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(freed, "the cancelled job never freed its place");
}

#[tokio::test]
async fn check_reports_the_replay_of_a_valid_plan_and_the_first_violation_of_a_broken_one() {
    let api = start(config(None)).await;
    let plan = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"strategy": "heuristic"})),
        )
        .await
        .json();
    let r = api
        .post_json("/v1/check", &json!({"graph": sample(), "plan": plan}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["valid"], true);
    assert_eq!(v["peak_bytes"], plan["stats"]["peak_bytes"]);
    assert!(v["violation"].is_null());

    // Over a budget below the peak: invalid, with the CLI's message.
    let peak = plan["stats"]["peak_bytes"].as_u64().unwrap();
    let r = api
        .post_json(
            "/v1/check",
            &json!({"graph": sample(), "plan": plan, "budget": peak - 1}),
        )
        .await
        .json();
    assert_eq!(r["valid"], false);
    assert!(r["violation"]["message"]
        .as_str()
        .unwrap()
        .contains("over the budget"));

    // A dropped exec: the first violation names an instruction.
    let mut broken = plan.clone();
    let instrs = broken["instructions"].as_array_mut().unwrap();
    let exec = instrs.iter().position(|i| i["op"] == "exec").unwrap();
    instrs.remove(exec);
    let r = api
        .post_json("/v1/check", &json!({"graph": sample(), "plan": broken}))
        .await
        .json();
    assert_eq!(r["valid"], false);
    assert!(
        r["violation"]["instruction"].is_u64()
            || r["violation"]["message"]
                .as_str()
                .unwrap()
                .contains("never executed")
    );
}

#[tokio::test]
async fn check_with_an_unreadable_plan_or_graph_is_a_422() {
    let api = start(config(None)).await;
    let r = api
        .post_json(
            "/v1/check",
            &json!({"graph": sample(), "plan": {"format": "memplan-plan/1"}}),
        )
        .await;
    let p = r.assert_problem(422, "plan JSON error at line 1");
    assert_eq!(p["type"], "urn:memplan:problem:invalid-plan");
    let r = api
        .post_json(
            "/v1/check",
            &json!({"graph": {"format": "x", "tensors": [], "ops": []}, "plan": {}}),
        )
        .await;
    r.assert_problem(422, "format is \"x\"");
}

/// The bundled symbolic sample (the sample's batch as the symbol B in 1..=32).
fn symbolic_sample() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../samples/resnet_block.train.symbolic.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn instantiate_gives_the_plan_and_graph_at_a_binding_as_the_library_does() {
    use memplan::symbolic::{plan_symbolic, Binding, SymbolicGraph};
    let api = start(config(None)).await;
    let graph = symbolic_sample();
    let sg = SymbolicGraph::parse(&graph.to_string()).unwrap();
    let sp = plan_symbolic(&sg, &memplan::PipelineOptions::default()).unwrap();
    let plan: Value = serde_json::from_str(&sp.to_json()).unwrap();
    let r = api
        .post_json(
            "/v1/instantiate",
            &json!({"plan": plan, "graph": graph, "binding": {"B": 3}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    let at3 = sp.instantiate(&Binding::new().with("B", 3)).unwrap();
    assert_eq!(v["peak_bytes"], at3.stats.peak_bytes);
    let g = memplan::Graph::parse(&v["graph"].to_string()).unwrap();
    let p = memplan::Plan::parse(&v["plan"].to_string()).unwrap();
    assert_eq!(g, sg.instantiate(&Binding::new().with("B", 3)).unwrap());
    memplan::validate(&g, &p, None).unwrap();
    // The concrete pair checks through the service too.
    let c = api
        .post_json(
            "/v1/check",
            &json!({"graph": v["graph"], "plan": v["plan"]}),
        )
        .await
        .json();
    assert_eq!(c["valid"], true, "{c}");
}

#[tokio::test]
async fn instantiate_refuses_bad_bindings_and_unreadable_documents_naming_the_culprit() {
    let api = start(config(None)).await;
    let graph = symbolic_sample();
    for (binding, says) in [
        (json!({"B": 33}), "\"B\" = 33 is out of its range 1..=32"),
        (json!({"S": 2}), "symbol \"S\" is not declared"),
        (json!({}), "\"B\""),
    ] {
        let r = api
            .post_json(
                "/v1/instantiate",
                &json!({"graph": graph, "binding": binding}),
            )
            .await;
        r.assert_problem(422, says);
    }
    let r = api
        .post_json("/v1/instantiate", &json!({"binding": {"B": 1}}))
        .await;
    r.assert_problem(422, "give `plan`");
    let r = api
        .post_json(
            "/v1/instantiate",
            &json!({"plan": {"format": "memplan-symbolic-plan/1"}, "binding": {"B": 1}}),
        )
        .await;
    let p = r.assert_problem(422, "symbolic plan");
    assert_eq!(p["type"], "urn:memplan:problem:invalid-plan");
    // A wrong field of a symbolic plan is named by its path, as the CLI names it.
    use memplan::symbolic::{plan_symbolic, SymbolicGraph};
    let sg = SymbolicGraph::parse(&graph.to_string()).unwrap();
    let sp = plan_symbolic(&sg, &memplan::PipelineOptions::default()).unwrap();
    let mut plan: Value = serde_json::from_str(&sp.to_json()).unwrap();
    plan["buffers"][1]["alignment"] = json!(-1);
    let r = api
        .post_json(
            "/v1/instantiate",
            &json!({"plan": plan, "binding": {"B": 1}}),
        )
        .await;
    r.assert_problem(422, "symbolic plan: buffers[1]");
    r.assert_problem(422, "alignment: invalid value: integer `-1`");
    let r = api
        .post_json(
            "/v1/instantiate",
            &json!({"plan": [1], "binding": {"B": 1}}),
        )
        .await;
    r.assert_problem(422, "symbolic plan: the document is an array");
    let mut bad = graph.clone();
    bad["tensors"][0]["size"] = json!("802816*B - 1");
    let r = api
        .post_json(
            "/v1/instantiate",
            &json!({"graph": bad, "binding": {"B": 1}}),
        )
        .await;
    let p = r.assert_problem(422, "input");
    assert_eq!(p["type"], "urn:memplan:problem:invalid-graph");
}

#[tokio::test]
async fn a_symbolic_graph_is_planned_once_for_its_range_as_the_cli_and_library_do() {
    use memplan::symbolic::{plan_symbolic_with, Binding, SymbolicGraph, SymbolicOptions};
    let api = start(config(None)).await;
    let graph = symbolic_sample();
    let r = api
        .post_json(
            "/v1/plan/symbolic",
            &json!({"graph": graph, "max_pieces": 4}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    // The library's plan with the same options and switches: the same document.
    let sg = SymbolicGraph::parse(&graph.to_string()).unwrap();
    let split = SymbolicOptions {
        max_pieces: 4,
        ..SymbolicOptions::default()
    };
    let sp = plan_symbolic_with(&sg, &memplan::PipelineOptions::default(), &split).unwrap();
    let ours: Value = serde_json::from_str(&sp.to_json()).unwrap();
    assert_eq!(v["plan"], ours);
    let pieces = v["pieces"].as_array().unwrap();
    assert_eq!(pieces.len(), sp.pieces().map_or(0, |(_, r)| r.len()));
    // The profile: the instantiated peak at the corners and between.
    let profile = v["profile"].as_array().unwrap();
    assert!(profile.len() >= 2);
    for p in profile {
        let b = Binding::new().with("B", p["binding"]["B"].as_u64().unwrap());
        assert_eq!(
            p["peak_bytes"],
            sp.instantiate(&b).unwrap().stats.peak_bytes
        );
        // Against a plan made for that binding alone.
        let alone = sp
            .peak_profile(&sg, &[b], &memplan::PipelineOptions::default())
            .unwrap();
        assert_eq!(p["per_binding_bytes"], alone.points[0].per_binding_bytes);
        assert_eq!(p["ratio"].as_f64().unwrap(), alone.points[0].ratio);
    }
    // The plan instantiates through the service.
    let r = api
        .post_json(
            "/v1/instantiate",
            &json!({"plan": v["plan"], "binding": {"B": 5}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn symbolic_and_concrete_graphs_sent_to_the_wrong_plan_route_are_refused_naming_the_right_one(
) {
    let api = start(config(None)).await;
    let r = api
        .post_json("/v1/plan", &json!({"graph": symbolic_sample()}))
        .await;
    let p = r.assert_problem(422, "a symbolic graph (it declares symbols B)");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("POST /v1/plan/symbolic"),
        "{p}"
    );
    let r = api
        .post_json("/v1/plan/symbolic", &json!({"graph": sample()}))
        .await;
    r.assert_problem(422, "symbolic graph");
    // Options symbolic planning refuses, and bad split switches.
    let r = api
        .post_json(
            "/v1/plan/symbolic",
            &json!({"graph": symbolic_sample(), "options": {"budget": "80%"}}),
        )
        .await;
    r.assert_problem(422, "budget");
    let r = api
        .post_json(
            "/v1/plan/symbolic",
            &json!({"graph": symbolic_sample(), "max_ratio": 0.5}),
        )
        .await;
    r.assert_problem(422, "max_ratio");
    let r = api
        .post_json(
            "/v1/plan/symbolic",
            &json!({"graph": symbolic_sample(), "max_pieces": 0}),
        )
        .await;
    r.assert_problem(422, "max_pieces");
    let r = api
        .post_json(
            "/v1/plan/symbolic",
            &json!({"graph": symbolic_sample(), "pieces": 2}),
        )
        .await;
    r.assert_problem(422, "pieces");
}

const CSV: &str = "id,lower,upper,size\na,0,2,1024\nb,1,3,512\nc,2,4,1024\n";

#[tokio::test]
async fn place_takes_csv_or_json_and_answers_json_or_csv() {
    let api = start(config(None)).await;
    let r = api
        .send(
            Method::POST,
            "/v1/place?time_limit_s=0.5",
            Some("text/csv"),
            CSV,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["fits"], true);
    assert_eq!(v["peak_bytes"], 1536);
    assert_eq!(v["load_bytes"], 1536);
    assert_eq!(v["status"], "optimal");
    let ids: Vec<&str> = v["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(r.header("x-memplan-peak-bytes"), Some("1536"));

    // The CSV answer re-parses and its offsets are a valid placement.
    let req = axum::http::Request::builder()
        .method(Method::POST)
        .uri("/v1/place")
        .header("content-type", "text/csv")
        .header("accept", "text/csv")
        .body(Body::from(CSV))
        .unwrap();
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let resp = api.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let text = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    let placed = memplan_solver::csv::parse(&text, 1).unwrap();
    let peak = placed
        .problem
        .check(placed.offsets.as_ref().unwrap())
        .unwrap();
    assert_eq!(peak, 1536);

    // A CSV comes back as sent, its column order and extra columns kept, with the offsets.
    let req = axum::http::Request::builder()
        .method(Method::POST)
        .uri("/v1/place")
        .header("content-type", "text/csv")
        .header("accept", "text/csv")
        .body(Body::from(
            "size,id,note,lower,upper\n8,a,first,0,2\n4,b,x,1,3\n",
        ))
        .unwrap();
    let resp = api.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(
        text.starts_with("size,id,note,lower,upper,offset\n8,a,first,0,2,"),
        "{text}"
    );

    // JSON ids with a comma or a quote come back as quoted CSV fields that re-parse to them;
    // an id with a line break, which no CSV row holds, is refused.
    let req = axum::http::Request::builder()
        .method(Method::POST)
        .uri("/v1/place")
        .header("content-type", "application/json")
        .header("accept", "text/csv")
        .body(Body::from(
            json!({"buffers": [{"id": "a,b", "lower": 0, "upper": 2, "size": 8},
                               {"id": "x\"y", "lower": 1, "upper": 3, "size": 4}]})
            .to_string(),
        ))
        .unwrap();
    let resp = api.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let placed = memplan_solver::csv::parse(std::str::from_utf8(&bytes).unwrap(), 1).unwrap();
    assert_eq!(placed.ids, ["a,b", "x\"y"]);
    let r = api
        .post_json(
            "/v1/place",
            &json!({"buffers": [{"id": "a\nb", "lower": 0, "upper": 2, "size": 8}]}),
        )
        .await;
    r.assert_problem(422, "may not hold a line break");

    // JSON buffers, numeric ids, a capacity below LOAD: proven infeasible.
    let r = api
        .post_json(
            "/v1/place",
            &json!({"buffers": [{"id": 1, "lower": 0, "upper": 2, "size": 1024},
                                 {"id": 2, "lower": 1, "upper": 3, "size": 512, "alignment": 256}],
                    "capacity": 1000, "time_limit_s": 0.5}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["fits"], false);
    assert_eq!(v["status"], "infeasible");
    assert_eq!(v["buffers"][1]["id"], "2");
    assert_eq!(v["buffers"][1]["offset"].as_u64().unwrap() % 256, 0);
}

#[tokio::test]
async fn place_refuses_bad_buffers_and_options_naming_the_culprit() {
    let api = start(config(None)).await;
    let r = api
        .send(
            Method::POST,
            "/v1/place",
            Some("text/csv"),
            "id,lower,upper,size\na,0,x,8\n",
        )
        .await;
    let p = r.assert_problem(
        422,
        "line 2, column `upper`: `x` is not a non-negative integer",
    );
    assert_eq!(p["type"], "urn:memplan:problem:invalid-buffers");
    let r = api
        .post_json("/v1/place", &json!({"buffers": [{"id": "a", "lower": 0, "upper": 1, "size": 8},
                                                     {"id": "a", "lower": 0, "upper": 1, "size": 8}]}))
        .await;
    r.assert_problem(
        422,
        "buffers[1] (buffer `a`): id already used by buffers[0]",
    );
    let r = api
        .post_json(
            "/v1/place",
            &json!({"buffers": [{"id": "a", "lower": 3, "upper": 3, "size": 8}]}),
        )
        .await;
    r.assert_problem(422, "buffers[0] (buffer `a`): lifetime [3, 3) is empty");
    let big = i64::MAX;
    let r = api
        .post_json(
            "/v1/place",
            &json!({"buffers": [{"id": "a", "lower": 0, "upper": 2, "size": big},
                                {"id": "b", "lower": 1, "upper": 3, "size": big},
                                {"id": "c", "lower": 1, "upper": 2, "size": big}]}),
        )
        .await;
    r.assert_problem(
        422,
        "buffers[2] (buffer `c`): with it the buffers alive at step 1 need",
    );
    let r = api
        .send(
            Method::POST,
            "/v1/place?capacity=lots",
            Some("text/csv"),
            CSV,
        )
        .await;
    r.assert_problem(400, "query string");
    let r = api
        .send(Method::POST, "/v1/place?speed=11", Some("text/csv"), CSV)
        .await;
    r.assert_problem(400, "unknown field `speed`");
    let r = api
        .send(Method::POST, "/v1/place?alignment=3", Some("text/csv"), CSV)
        .await;
    r.assert_problem(422, "alignment 3 is not a power of two");
    let r = api
        .send(
            Method::POST,
            "/v1/place?capacity=10",
            Some("application/json"),
            json!({"buffers": [], "capacity": 5}).to_string(),
        )
        .await;
    r.assert_problem(
        422,
        "capacity is given both in the query string and in the body",
    );
    let r = api
        .send(Method::POST, "/v1/place", Some("application/xml"), "<a/>")
        .await;
    r.assert_problem(415, "text/csv");
    let r = api
        .send(
            Method::POST,
            "/v1/place?time_limit_s=3600",
            Some("text/csv"),
            CSV,
        )
        .await;
    r.assert_problem(422, "sync_time_limit_cap");
    let mut c = config(None);
    c.max_buffers = 2;
    let small = start(c).await;
    let r = small
        .send(Method::POST, "/v1/place", Some("text/csv"), CSV)
        .await;
    r.assert_problem(422, "3 buffers, over the limit of 2 buffers (max_buffers)");
}

#[tokio::test]
async fn healthz_answers_ok_and_the_service_figures() {
    let api = start(config(None)).await;
    let r = api.get("/healthz").await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["database"], "ok");
    assert_eq!(v["workers"], 2);
    api.service.begin_shutdown();
    let r = api.get("/healthz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.json()["status"], "shutting_down");
    let r = api
        .post_json("/v1/plan", &plan_request(sample(), json!({"cache": false})))
        .await;
    r.assert_problem(503, "shutting down");
}

#[tokio::test]
async fn metrics_count_requests_by_route_template_and_status_and_show_the_gauges() {
    let api = start(config(None)).await;
    api.get("/v1/jobs/nope").await;
    api.get("/v1/jobs/nope").await;
    api.get("/no/such/path").await;
    api.post_json(
        "/v1/plan",
        &plan_request(sample(), json!({"strategy": "heuristic"})),
    )
    .await;
    let r = api.get("/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let t = r.text;
    for needle in [
        "memplan_http_requests_total{route=\"/v1/jobs/{id}\",method=\"GET\",status=\"404\"} 2",
        "memplan_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1",
        "memplan_http_requests_total{route=\"/v1/plan\",method=\"POST\",status=\"200\"} 1",
        "memplan_solve_seconds_count{kind=\"plan\"} 1",
        "memplan_http_request_duration_seconds_bucket{route=\"/v1/plan\",le=\"+Inf\"} 1",
        "# TYPE memplan_queue_depth gauge\nmemplan_queue_depth 0",
        "memplan_running_jobs 0",
        "memplan_workers 2",
    ] {
        assert!(t.contains(needle), "metrics lack {needle:?}:\n{t}");
    }
    assert!(!t.contains("nope"), "ids must not become labels");
}

#[tokio::test]
async fn unknown_routes_and_methods_get_problem_documents() {
    let api = start(config(None)).await;
    api.get("/v2/plan")
        .await
        .assert_problem(404, "no route for GET /v2/plan");
    api.get("/v1/plan")
        .await
        .assert_problem(405, "GET is not served on /v1/plan");
    api.get("/v1/jobs/unknown-id")
        .await
        .assert_problem(404, "no job \"unknown-id\"");
    api.delete("/v1/jobs/unknown-id")
        .await
        .assert_problem(404, "no job");
    api.get("/v1/jobs/unknown-id/plan")
        .await
        .assert_problem(404, "no job");
    api.get("/v1/jobs/unknown-id/events")
        .await
        .assert_problem(404, "no job");
}

#[tokio::test]
async fn the_swagger_ui_is_served_from_vendored_assets_and_reads_the_document() {
    let api = start(config(None)).await;
    let r = api.get("/docs/").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.to_lowercase().contains("swagger"), "{}", r.text);
    let init = api.get("/docs/swagger-initializer.js").await;
    assert_eq!(init.status, StatusCode::OK);
    assert!(init.text.contains("/openapi.json"), "{}", init.text);
    let css = api.get("/docs/swagger-ui.css").await;
    assert_eq!(css.status, StatusCode::OK);
    let doc = api.get("/openapi.json").await;
    assert_eq!(doc.status, StatusCode::OK);
    assert_eq!(doc.text, memplan_api::openapi_json());
}

fn committed_openapi() -> std::path::PathBuf {
    repo().join("openapi/openapi.json")
}

#[test]
fn the_committed_openapi_document_is_current() {
    let current = memplan_api::openapi_json();
    let path = committed_openapi();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, current).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == current,
        "openapi/openapi.json is stale; rewrite it with \
         `UPDATE_OPENAPI=1 cargo test --release -p memplan-api --test endpoints the_committed_openapi`"
    );
}

#[test]
fn every_schema_carries_an_example_and_every_operation_its_errors() {
    let doc: Value = serde_json::from_str(memplan_api::openapi_json()).unwrap();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    assert!(schemas.len() >= 20, "{:?}", schemas.keys());
    for (name, s) in schemas {
        assert!(
            s.get("examples")
                .is_some_and(|e| !e.as_array().unwrap().is_empty())
                || s.get("example").is_some(),
            "schema {name} has no example"
        );
    }
    let paths = doc["paths"].as_object().unwrap();
    let expected: BTreeSet<&str> = [
        "/v1/plan",
        "/plan",
        "/v1/jobs",
        "/jobs",
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/events",
        "/v1/jobs/{id}/plan",
        "/v1/check",
        "/v1/instantiate",
        "/v1/plan/symbolic",
        "/v1/place",
        "/healthz",
        "/metrics",
        "/openapi.json",
    ]
    .into();
    assert_eq!(
        paths.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        expected
    );
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            assert!(op["summary"].is_string(), "{method} {path} lacks a summary");
            if method == "post" {
                for code in ["400", "413", "415", "422"] {
                    assert!(
                        op["responses"].get(code).is_some(),
                        "{method} {path} lacks {code}"
                    );
                }
            }
        }
    }
    let strategies = &schemas["StrategyName"]["enum"];
    assert_eq!(
        strategies.as_array().unwrap().len(),
        Strategy::ALL.len(),
        "strategy names come from the library's list"
    );
}

fn keys(v: &Value, out: &mut BTreeSet<String>) {
    if let Some(o) = v.as_object() {
        out.extend(o.keys().cloned());
    }
}

fn props(doc: &Value, schema: &str) -> BTreeSet<String> {
    doc["components"]["schemas"][schema]["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("schema {schema}"))
        .keys()
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_documented_graph_and_plan_schemas_name_every_field_the_library_uses() {
    let doc: Value = serde_json::from_str(memplan_api::openapi_json()).unwrap();
    let api = start(config(None)).await;
    let plan = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"strategy": "heuristic"})),
        )
        .await
        .json();
    let (mut top, mut stats, mut instr) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    keys(&plan, &mut top);
    keys(&plan["stats"], &mut stats);
    for i in plan["instructions"].as_array().unwrap() {
        keys(i, &mut instr);
    }
    assert!(top.is_subset(&props(&doc, "PlanDoc")), "{top:?}");
    assert!(stats.is_subset(&props(&doc, "PlanStatsDoc")), "{stats:?}");
    let mut documented = BTreeSet::new();
    for variant in doc["components"]["schemas"]["InstructionDoc"]["oneOf"]
        .as_array()
        .unwrap()
    {
        keys(&variant["properties"], &mut documented);
    }
    assert!(instr.is_subset(&documented), "{instr:?}");
    let g = sample();
    let (mut gk, mut tk, mut ok) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    keys(&g, &mut gk);
    g["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .for_each(|t| keys(t, &mut tk));
    g["ops"]
        .as_array()
        .unwrap()
        .iter()
        .for_each(|o| keys(o, &mut ok));
    assert!(gk.is_subset(&props(&doc, "GraphDoc")), "{gk:?}");
    assert!(tk.is_subset(&props(&doc, "TensorDoc")), "{tk:?}");
    assert!(ok.is_subset(&props(&doc, "OpDoc")), "{ok:?}");
}

#[test]
fn the_documented_example_plan_is_a_valid_plan_of_the_example_graph() {
    let g = memplan_api::model::example_graph();
    let p = memplan_api::model::example_plan();
    assert_valid_plan(&g, &p.to_string());
}
