//! The API contract: what the OpenAPI document states is what the service does (the rules it
//! states are enforced with 4xx problem documents, what it allows is accepted), and the
//! document's own structure (integer ranges, instance limits, links, event schema, 500s).
//! `scripts/api_contract.sh` checks the same with schemathesis against a running service.

mod common;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Every schema object in `v`, with its JSON pointer.
fn schemas<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(o) => {
            out.push((at.clone(), v));
            for (k, c) in o {
                schemas(c, format!("{at}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, c) in items.iter().enumerate() {
                schemas(c, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_unsigned_integer_of_the_document_states_its_maximum() {
    let doc: Value = serde_json::from_str(memplan_api::openapi_json()).unwrap();
    let mut all = Vec::new();
    schemas(&doc, String::new(), &mut all);
    let mut seen = 0;
    for (at, s) in all {
        if s.get("format").and_then(Value::as_str) == Some("int64") {
            panic!("{at} is still int64: {s}");
        }
        if s.get("format").and_then(Value::as_str) == Some("uint64") {
            seen += 1;
            assert!(s["maximum"].as_u64().is_some(), "{at} has no maximum: {s}");
        }
    }
    assert!(seen > 20, "{seen} uint64 fields");
    let size = &doc["components"]["schemas"]["TensorDoc"]["properties"]["size"];
    assert_eq!(size["maximum"], json!(u64::MAX));
    assert_eq!(size["minimum"], json!(1));
}

#[tokio::test]
async fn numbers_beyond_u64_are_refused_with_a_problem_document() {
    let api = start(config(None)).await;
    // One more than u64::MAX as a budget, a tensor size and a plan figure.
    let body = format!(
        r#"{{"graph": {}, "options": {{"budget": 18446744073709551616, "strategy": "heuristic"}}}}"#,
        sample()
    );
    let r = api
        .send(Method::POST, "/v1/plan", Some("application/json"), body)
        .await;
    r.assert_problem(422, "options.budget");
    let mut g = sample();
    let text = g.to_string().replacen(
        &format!("\"size\":{}", g["tensors"][0]["size"]),
        "\"size\":18446744073709551616",
        1,
    );
    g = serde_json::from_str(&text).unwrap_or(g);
    let r = api
        .send(
            Method::POST,
            "/plan?strategy=heuristic",
            Some("application/json"),
            g.to_string(),
        )
        .await;
    r.assert_problem(422, "");
    let plan = memplan_api::model::example_plan().to_string().replace(
        "\"weights_bytes\":1024",
        "\"weights_bytes\":18446744073709551616",
    );
    let body = format!(
        r#"{{"graph": {}, "plan": {plan}}}"#,
        memplan_api::model::example_graph()
    );
    let r = api
        .send(Method::POST, "/v1/check", Some("application/json"), body)
        .await;
    r.assert_problem(422, "expected u64");
}

#[tokio::test]
async fn the_served_document_states_the_instances_caps_and_limits() {
    let cfg = memplan_api::Config {
        sync_time_limit_cap: Duration::from_secs(2),
        max_time_limit: Duration::from_secs(30),
        max_ops: 10,
        max_tensors: 20,
        max_buffers: 30,
        ..config(None)
    };
    let api = start(cfg).await;
    let doc = api.get("/openapi.json").await.json();
    let s = &doc["components"]["schemas"];
    assert_eq!(
        s["PlanOptionsBody"]["properties"]["time_limit_s"]["maximum"],
        2.0
    );
    assert_eq!(
        s["JobOptionsBody"]["properties"]["time_limit_s"]["maximum"],
        30.0
    );
    assert_eq!(s["GraphDoc"]["properties"]["ops"]["maxItems"], 10);
    assert_eq!(s["GraphDoc"]["properties"]["tensors"]["maxItems"], 20);
    assert_eq!(s["PlaceRequest"]["properties"]["buffers"]["maxItems"], 30);
    assert_eq!(
        doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
            ["$ref"],
        "#/components/schemas/JobRequest"
    );
    let cap = |path: &str| {
        doc["paths"][path]["post"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "time_limit_s")
            .unwrap()["schema"]["maximum"]
            .clone()
    };
    assert_eq!(cap("/plan"), 2.0);
    assert_eq!(cap("/jobs"), 30.0);
    assert_eq!(cap("/v1/place"), 2.0);
    // The documented caps are the enforced ones.
    let over = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"time_limit_s": 2.5})),
        )
        .await;
    over.assert_problem(422, "sync_time_limit_cap");
}

#[test]
fn job_creation_links_to_every_operation_on_the_job() {
    let doc: Value = serde_json::from_str(memplan_api::openapi_json()).unwrap();
    for path in ["/v1/jobs", "/jobs"] {
        let links = &doc["paths"][path]["post"]["responses"]["202"]["links"];
        for (name, op) in [
            ("GetJob", "get_job"),
            ("JobEvents", "job_events"),
            ("JobPlan", "job_plan"),
            ("CancelJob", "delete_job"),
        ] {
            assert_eq!(links[name]["operationId"], op, "{path} {name}: {links}");
            assert_eq!(links[name]["parameters"]["id"], "$response.body#/id");
            assert!(links[name].get("operation_id").is_none());
        }
    }
    let mut ids = Vec::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            ids.push(op["operationId"].as_str().unwrap().to_string());
        }
    }
    for op in ["get_job", "job_events", "job_plan", "delete_job"] {
        assert!(ids.iter().any(|i| i == op), "no operation {op}");
    }
}

#[test]
fn every_operation_documents_a_500_problem_document() {
    let doc: Value = serde_json::from_str(memplan_api::openapi_json()).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let r = &op["responses"]["500"];
            assert_eq!(
                r["content"]["application/problem+json"]["schema"]["$ref"],
                "#/components/schemas/Problem",
                "{method} {path}"
            );
        }
    }
}

#[tokio::test]
async fn the_event_stream_documents_each_event_with_its_job_as_json_data() {
    let doc: Value = serde_json::from_str(memplan_api::openapi_json()).unwrap();
    let content = &doc["paths"]["/v1/jobs/{id}/events"]["get"]["responses"]["200"]["content"];
    assert_eq!(
        content["text/event-stream"]["schema"]["$ref"],
        "#/components/schemas/JobEvent"
    );
    let event = &doc["components"]["schemas"]["JobEvent"];
    assert_eq!(
        event["properties"]["data"]["contentSchema"]["$ref"],
        "#/components/schemas/JobView"
    );
    // What the service sends has the documented shape.
    let api = start(config(None)).await;
    let job = api
        .post_json(
            "/v1/jobs",
            &plan_request(sample(), json!({"strategy": "heuristic"})),
        )
        .await
        .json();
    let id = job["id"].as_str().unwrap();
    api.wait_job(id, Duration::from_secs(60), |s| s == "done")
        .await;
    let r = api.get(&format!("/v1/jobs/{id}/events")).await;
    assert_eq!(r.status, StatusCode::OK);
    let names: Vec<&str> = event["properties"]["event"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut events = 0;
    for block in r.text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let field = |f: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{f}:")))
                .map(str::trim)
                .unwrap_or_else(|| panic!("no {f} in {block:?}"))
        };
        assert!(names.contains(&field("event")), "{block}");
        assert!(field("id").parse::<u64>().unwrap() >= 1);
        let data: Value = serde_json::from_str(field("data")).unwrap();
        assert_eq!(data["id"], id);
        events += 1;
    }
    assert!(events >= 1, "{}", r.text);
}

#[tokio::test]
async fn a_rewrite_list_item_that_is_not_one_name_is_refused() {
    let api = start(config(None)).await;
    for rewrite in [json!(["fuse,tile"]), json!([""]), json!(["fuse", 3])] {
        let r = api
            .post_json(
                "/v1/plan",
                &plan_request(
                    sample(),
                    json!({"rewrite": rewrite, "strategy": "heuristic"}),
                ),
            )
            .await;
        r.assert_problem(422, "options.rewrite");
    }
    // A comma-separated string, spaces allowed, and a list of names are fine.
    for rewrite in [
        json!("none"),
        json!(" none , none"),
        json!(["none"]),
        json!([]),
    ] {
        let r = api
            .post_json(
                "/v1/plan",
                &plan_request(
                    sample(),
                    json!({"rewrite": rewrite, "strategy": "heuristic"}),
                ),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{rewrite}: {}", r.text);
    }
}

#[tokio::test]
async fn a_malformed_tile_or_tier_alignment_is_refused_even_when_unused() {
    let api = start(config(None)).await;
    for (options, field) in [
        (json!({"tile": "many"}), "options.tile"),
        (json!({"tile": 1}), "options.tile"),
        (json!({"tile": "02"}), "options.tile"),
        (json!({"budget": " 60%"}), "options.budget"),
        (json!({"budget": "007"}), "options.budget"),
        (json!({"link_gbps": 1e-6}), "options.link_gbps"),
    ] {
        let mut o = options.clone();
        o["strategy"] = json!("heuristic");
        let r = api.post_json("/v1/plan", &plan_request(sample(), o)).await;
        r.assert_problem(422, field);
    }
    let r = api
        .send(
            Method::POST,
            "/plan?tile=3&tier_alignment=persistent%3D256&tiers=true&strategy=heuristic",
            Some("application/json"),
            sample().to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api
        .send(
            Method::POST,
            "/plan?tier_alignment=%20512&tiers=true",
            Some("application/json"),
            sample().to_string(),
        )
        .await;
    r.assert_problem(422, "query parameter tier_alignment");
}

#[tokio::test]
async fn the_query_options_of_a_placement_apply_to_a_json_body_unless_given_twice() {
    let api = start(config(None)).await;
    let body = json!({"buffers": [
        {"id": "a", "lower": 0, "upper": 2, "size": 1024},
        {"id": "b", "lower": 1, "upper": 3, "size": 512}]});
    let r = api
        .send(
            Method::POST,
            "/v1/place?capacity=1000&heuristic=true",
            Some("application/json"),
            body.to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["fits"], false, "the query's capacity applies");
    let mut twice = body.clone();
    twice["capacity"] = json!(4096);
    let r = api
        .send(
            Method::POST,
            "/v1/place?capacity=1000",
            Some("application/json"),
            twice.to_string(),
        )
        .await;
    r.assert_problem(
        422,
        "capacity is given both in the query string and in the body",
    );
    let r = api
        .send(
            Method::POST,
            "/v1/place?alignment=3",
            Some("text/csv"),
            Body::from("id,lower,upper,size\na,0,2,8\n"),
        )
        .await;
    r.assert_problem(422, "alignment 3 is not a power of two");
}

#[tokio::test]
async fn a_plan_of_another_format_is_invalid_as_the_cli_and_python_say() {
    let api = start(config(None)).await;
    let mut plan = memplan_api::model::example_plan();
    plan["format"] = json!("memplan-plan/2");
    let body = json!({"graph": memplan_api::model::example_graph(), "plan": plan});
    let r = api.post_json("/v1/check", &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["valid"], false, "{v}");
    let message = v["violation"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("format is \"memplan-plan/2\""),
        "{message}"
    );
    let mut extra = body.clone();
    extra["plan"]["format"] = json!("memplan-plan/1");
    extra["comment"] = json!("x");
    api.post_json("/v1/check", &extra)
        .await
        .assert_problem(422, "unknown field `comment`");
}

#[tokio::test]
async fn a_device_profile_with_a_null_figure_is_refused_as_documented() {
    let doc: Value = serde_json::from_str(memplan_api::openapi_json()).unwrap();
    let rate = &doc["components"]["schemas"]["DeviceProfileDoc"]["properties"]["h2d_bytes_per_s"];
    assert_eq!(rate["type"], "number", "null is not documented: {rate}");
    let api = start(config(None)).await;
    let r = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"device_profile": {"name": null}})),
        )
        .await;
    r.assert_problem(422, "options.device_profile");
}

#[tokio::test]
async fn an_integer_written_with_a_fraction_is_refused_naming_the_value() {
    let api = start(config(None)).await;
    let r = api
        .post_json(
            "/v1/place",
            &json!({"buffers": [{"id": 3.0, "lower": 0, "upper": 2, "size": 8}]}),
        )
        .await;
    r.assert_problem(422, "floating point `3.0`, expected u64 or a string");
    let r = api
        .post_json(
            "/v1/place",
            &json!({"buffers": [{"id": 3, "lower": 0, "upper": 2, "size": 8}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api
        .post_json("/v1/plan", &plan_request(sample(), json!({"tile": 4.0})))
        .await;
    r.assert_problem(
        422,
        "options.tile: invalid type: floating point `4.0`, expected u64",
    );
}
