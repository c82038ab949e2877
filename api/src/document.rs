//! The finishing touches of the OpenAPI document, applied to the JSON that `utoipa` generates
//! for what its attributes cannot say: the exact integer ranges (u64 and u32 fields are
//! `uint64` / `uint32` with their maximum, not `int64`), the limits of this instance (time-limit
//! caps, graph and buffer counts), the jobs' request body with its own time-limit cap, the
//! event stream's event schema, the JSON-encoded `device_profile` query parameter, and a 500
//! answer on every operation.

use crate::config::Config;
use serde_json::{json, Value};

const SCHEMAS: &str = "/components/schemas";

/// `doc` (the generated document as JSON) finished for a service with `config`.
pub fn finish(mut doc: Value, config: &Config) -> Value {
    exact_integers(&mut doc);
    let sync_cap = config.sync_time_limit_cap.as_secs_f64();
    let job_cap = config.max_time_limit.as_secs_f64();
    let schemas = SCHEMAS;
    if let Some(s) = doc.pointer_mut(&format!("{schemas}/GraphDoc/properties")) {
        s["tensors"]["maxItems"] = json!(config.max_tensors);
        s["ops"]["maxItems"] = json!(config.max_ops);
    }
    if let Some(s) = doc.pointer_mut(&format!("{schemas}/PlaceRequest/properties")) {
        s["buffers"]["maxItems"] = json!(config.max_buffers);
        s["time_limit_s"]["maximum"] = json!(sync_cap);
    }
    jobs_request(&mut doc, sync_cap, job_cap);
    for (path, cap) in [
        ("/plan", sync_cap),
        ("/jobs", job_cap),
        ("/v1/place", sync_cap),
    ] {
        if let Some(Value::Array(params)) = doc.pointer_mut(&format!(
            "/paths/{}/post/parameters",
            path.replace('/', "~1")
        )) {
            for p in params.iter_mut() {
                match p["name"].as_str() {
                    Some("time_limit_s") => p["schema"]["maximum"] = json!(cap),
                    Some("device_profile") => {
                        if let Some(o) = p.as_object_mut() {
                            o.remove("schema");
                            o.remove("example");
                            o.insert(
                                "content".into(),
                                json!({"application/json": {
                                    "schema": {"$ref": "#/components/schemas/DeviceProfileDoc"},
                                    "example": {"h2d_bytes_per_s": 25e9, "d2h_bytes_per_s": 25e9}
                                }}),
                            );
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(csv) =
        doc.pointer_mut("/paths/~1v1~1place/post/requestBody/content/text~1csv/schema")
    {
        csv["pattern"] = json!(crate::model::rules::buffer_csv_pattern());
        csv["description"] = json!(
            "A minimalloc CSV: header `id,lower,upper,size` (or with `,alignment`), one row per \
             buffer (`lower` < `upper`, unique ids); the other columns and options as query \
             parameters."
        );
    }
    event_stream(&mut doc);
    server_errors(&mut doc);
    link_keys(&mut doc);
    doc
}

/// utoipa 5 writes the keys of a Link Object in snake case; the OpenAPI names are camel case.
fn link_keys(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Object(links)) = o.get_mut("links") {
                for link in links.values_mut() {
                    if let Some(l) = link.as_object_mut() {
                        for (from, to) in [
                            ("operation_id", "operationId"),
                            ("operation_ref", "operationRef"),
                            ("request_body", "requestBody"),
                        ] {
                            if let Some(x) = l.remove(from) {
                                l.insert(to.into(), x);
                            }
                        }
                    }
                }
            }
            o.values_mut().for_each(link_keys);
        }
        Value::Array(items) => items.iter_mut().for_each(link_keys),
        _ => {}
    }
}

/// Integer schemas of unsigned Rust types (`format` int64 or int32 with `minimum` 0) get their
/// real range: `uint64` up to 2^64 - 1, `uint32` up to 2^32 - 1.
fn exact_integers(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let integer = match o.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            let unsigned = o
                .get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| m >= 0.0);
            if integer && unsigned {
                let max = match o.get("format").and_then(Value::as_str) {
                    Some("int64") => Some(("uint64", Value::from(u64::MAX))),
                    Some("int32") => Some(("uint32", Value::from(u32::MAX))),
                    _ => None,
                };
                if let Some((format, max)) = max {
                    o.insert("format".into(), json!(format));
                    o.entry("maximum").or_insert(max);
                }
            }
            for (_, child) in o.iter_mut() {
                exact_integers(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(exact_integers),
        _ => {}
    }
}

/// `PlanOptionsBody` gets the synchronous cap; `JobOptionsBody` and `JobRequest` (the body of
/// `POST /v1/jobs`) are copies with the jobs' cap.
fn jobs_request(doc: &mut Value, sync_cap: f64, job_cap: f64) {
    let Some(Value::Object(schemas)) = doc.pointer_mut(SCHEMAS) else {
        return;
    };
    let Some(mut options) = schemas.get("PlanOptionsBody").cloned() else {
        return;
    };
    let Some(mut request) = schemas.get("PlanRequest").cloned() else {
        return;
    };
    if let Some(s) = schemas.get_mut("PlanOptionsBody") {
        s["properties"]["time_limit_s"]["maximum"] = json!(sync_cap);
    }
    options["properties"]["time_limit_s"]["maximum"] = json!(job_cap);
    options["description"] = json!(format!(
        "{} The jobs' form: `time_limit_s` up to the service's `max_time_limit`.",
        options["description"].as_str().unwrap_or("")
    ));
    request["description"] = json!(
        "Body of `POST /v1/jobs`: as `PlanRequest`, with the jobs' time-limit cap. Other \
         fields are refused."
    );
    replace_refs(
        &mut request,
        "#/components/schemas/PlanOptionsBody",
        "#/components/schemas/JobOptionsBody",
    );
    schemas.insert("JobOptionsBody".into(), options);
    schemas.insert("JobRequest".into(), request);
    if let Some(body) =
        doc.pointer_mut("/paths/~1v1~1jobs/post/requestBody/content/application~1json/schema")
    {
        *body = json!({"$ref": "#/components/schemas/JobRequest"});
    }
}

fn replace_refs(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::Object(o) => {
            if o.get("$ref").and_then(Value::as_str) == Some(from) {
                o.insert("$ref".into(), json!(to));
            }
            o.values_mut().for_each(|c| replace_refs(c, from, to));
        }
        Value::Array(items) => items.iter_mut().for_each(|c| replace_refs(c, from, to)),
        _ => {}
    }
}

/// The event stream's schema: each event (as a client reads it: name, id, data) with its
/// JSON data a `JobView`.
fn event_stream(doc: &mut Value) {
    let example_job = doc
        .pointer("/components/schemas/JobView/examples/0")
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(Value::Object(schemas)) = doc.pointer_mut(SCHEMAS) {
        schemas.insert(
            "JobEvent".into(),
            json!({
                "type": "object",
                "description": "One server-sent event of `GET /v1/jobs/{id}/events`: `progress` \
                    while the job is queued or running, then one event named after its final \
                    status, or `queued` when the service stops before the job ends (the job \
                    is back in the queue and runs again at the next start); `id` counts the \
                    events from 1; `data` is the job (`JobView`) as JSON.",
                "required": ["event", "id", "data"],
                "properties": {
                    "event": {"type": "string", "enum": ["progress", "done", "failed", "cancelled", "queued"],
                              "description": "Event name."},
                    "id": {"type": "string", "pattern": "^[1-9][0-9]*$",
                           "description": "Event number, from 1."},
                    "data": {"type": "string", "contentMediaType": "application/json",
                             "contentSchema": {"$ref": "#/components/schemas/JobView"},
                             "description": "The job as JSON."}
                },
                "examples": [{"event": "progress", "id": "1",
                              "data": serde_json::to_string(&example_job).unwrap_or_default()}]
            }),
        );
    }
    if let Some(content) =
        doc.pointer_mut("/paths/~1v1~1jobs~1{id}~1events/get/responses/200/content")
    {
        *content = json!({"text/event-stream": {
            "schema": {"$ref": "#/components/schemas/JobEvent"}
        }});
    }
}

/// Every operation may answer 500 with a problem document (a bug, or the database failing).
fn server_errors(doc: &mut Value) {
    let Some(Value::Object(paths)) = doc.get_mut("paths") else {
        return;
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for op in item.values_mut() {
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                continue;
            };
            responses.entry("500").or_insert_with(|| {
                json!({
                    "description": "Internal error: a bug, or the database failing",
                    "content": {"application/problem+json": {
                        "schema": {"$ref": "#/components/schemas/Problem"}
                    }}
                })
            });
        }
    }
}
