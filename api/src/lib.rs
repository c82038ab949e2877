//! The memplan HTTP service: plans, persistent jobs, checks and placements over HTTP/JSON, with
//! an OpenAPI document, limits and Prometheus metrics.
//!
//! Routes: `POST /v1/plan` and `POST /v1/jobs` take `{graph, options}`; `POST /plan` and
//! `POST /jobs` take the bare graph with the options as query parameters. Either way the
//! options are the planning pipeline's ([`memplan::PipelineOptions`], plus `cache`) and the
//! plan comes from [`memplan::pipeline::run`].
//!
//! [`app`] builds the axum [`Router`] over a [`Service`] (the state: settings, the SQLite
//! [`store`], admission and solver slots, live jobs, metrics); [`serve`] runs it on a listener
//! with graceful shutdown. The handlers ([`routes`](mod@routes)) and the schemas ([`model`]) are collected
//! into the OpenAPI document by `utoipa-axum` as the routes are registered, so the document
//! cannot miss a route. Errors are RFC 9457 problem documents ([`error`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use memplan_api::{serve, shutdown_signal, Config, Service};
//! let service = Service::start(Config { db_path: Some("memplan.db".into()), ..Config::default() }).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! serve(service, listener, shutdown_signal()).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod auth;
pub mod body_limit;
pub mod config;
pub mod document;
pub mod error;
pub mod metrics;
pub mod model;
pub mod request;
pub mod routes;
pub mod service;
pub mod store;

pub use config::Config;
pub use error::{ApiError, Problem};
pub use service::{AppState, Service, StartError};

use axum::extract::DefaultBodyLimit;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::Router;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use tower_http::catch_panic::CatchPanicLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

/// The document-level part of the OpenAPI document (the paths come from the routes).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "memplan",
        description = "Memory plans for deep-learning computation graphs: op order, arena offsets \
            and validation (memplan-graph/1 in, memplan-plan/1 out). Synchronous plans, persistent \
            jobs with progress events, plan checks and buffer placement. Plans come from the one \
            planning pipeline (the CLI's), whose options are `PlanOptionsBody`: in the body's \
            `options` of `POST /v1/plan` and `POST /v1/jobs`, or as query parameters of \
            `POST /plan` and `POST /jobs`, whose body is the bare graph. Errors are RFC 9457 \
            problem documents (`application/problem+json`). Swagger UI: `/docs`.",
        license(name = "MIT OR Apache-2.0")
    ),
    tags(
        (name = "plans", description = "Plan a graph synchronously"),
        (name = "jobs", description = "Plan a graph as a persistent job: status, progress, events, cancel"),
        (name = "tools", description = "Check a plan, place buffers"),
        (name = "service", description = "Health, metrics, this document")
    )
)]
struct ApiDoc;

/// The routes and the OpenAPI document they describe.
fn router_parts() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(routes::post_plan))
        .routes(routes!(routes::post_plan_bare))
        .routes(routes!(routes::post_job, routes::list_jobs))
        .routes(routes!(routes::post_job_bare))
        .routes(routes!(routes::get_job, routes::delete_job))
        .routes(routes!(routes::job_events))
        .routes(routes!(routes::job_plan))
        .routes(routes!(routes::post_check))
        .routes(routes!(routes::post_instantiate))
        .routes(routes!(routes::post_plan_symbolic))
        .routes(routes!(routes::post_place))
        .routes(routes!(routes::healthz))
        .routes(routes!(routes::metrics))
        .routes(routes!(routes::openapi_json))
        .split_for_parts()
}

/// States the access control in the document: the bearer scheme, the requirement (a token, or
/// none when the service has no token file) and a 401 answer on every operation but the
/// health check's.
fn with_access_control(
    (router, mut doc): (Router<AppState>, utoipa::openapi::OpenApi),
) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
    );
    doc.security = Some(vec![
        SecurityRequirement::new("bearer", Vec::<String>::new()),
        SecurityRequirement::default(),
    ]);
    let unauthorized = ResponseBuilder::new()
        .description(
            "The service has a token file and the request has no valid \
             `Authorization: Bearer` token",
        )
        .content(
            error::PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build();
    for (path, item) in doc.paths.paths.iter_mut() {
        if path.as_str() == "/healthz" {
            continue;
        }
        for op in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            op.responses
                .responses
                .entry("401".to_string())
                .or_insert_with(|| unauthorized.clone().into());
        }
    }
    (router, doc)
}

/// The OpenAPI document as `utoipa` generates it from the routes and schemas, with the access
/// control stated (without [`document::finish`]'s exact ranges and instance limits: see
/// [`openapi_document`]).
pub fn openapi() -> utoipa::openapi::OpenApi {
    with_access_control(router_parts()).1
}

/// The OpenAPI document of a service with `config`, as JSON: [`openapi`] finished by
/// [`document::finish`] (exact integer ranges, the instance's limits, event schema, 500s).
pub fn openapi_document(config: &Config) -> serde_json::Value {
    let raw = serde_json::to_value(openapi())
        .unwrap_or_else(|e| serde_json::json!({"error": e.to_string()}));
    document::finish(raw, config)
}

/// [`openapi_document`] as pretty JSON with a final newline (what `GET /openapi.json` serves).
pub fn openapi_json_for(config: &Config) -> String {
    let mut s = serde_json::to_string_pretty(&openapi_document(config))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// The OpenAPI document of a service with the default settings, as pretty JSON with a final
/// newline (what `openapi/openapi.json` holds).
pub fn openapi_json() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| openapi_json_for(&Config::default()))
}

/// The application: every route, the Swagger UI, error fallbacks, limits, panic catching and
/// metrics, over `service`.
pub fn app(service: AppState) -> Router {
    let (router, _) = with_access_control(router_parts());
    let metrics = service.metrics().clone();
    router
        .merge(SwaggerUi::new("/docs").config(utoipa_swagger_ui::Config::from("/openapi.json")))
        // 413 before the body is read, so that the client gets to read it (inside the route
        // tag, so that the 413 counts under its route).
        .route_layer(from_fn_with_state(service.clone(), body_limit::guard))
        .route_layer(from_fn(metrics::tag_route))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        // Access control covers every route, the fallbacks and the Swagger UI (but /healthz).
        .layer(from_fn_with_state(service.clone(), auth::guard))
        .layer(DefaultBodyLimit::max(service.config().body_limit))
        .layer(CatchPanicLayer::custom(routes::panicked))
        .layer(from_fn_with_state(metrics, metrics::record))
        .with_state(service)
}

/// Serves `service` on `listener` until `signal` completes, then shuts down gracefully:
/// admission stops (new work gets 503, `/healthz` 503) while running jobs get the grace
/// period and the listener still answers; then the jobs still running are put back in the
/// queue on disk (their event streams end with an event saying so) and open requests finish.
///
/// Each connection is served by hyper's HTTP/1 with keep-alive. A connection that has not
/// sent a request's head in full [`Config::client_timeout`] after it opened or after its last
/// answer is closed, and a body that stalls as long is answered 408 ([`body_limit`]). After
/// the drain, the connections with no request under way (idle, or still sending a request's
/// head) are closed at once, and open requests get at most [`Config::sync_time_limit_cap`]
/// (the longest a synchronous request runs) plus the client timeout to finish; the
/// connections still open then (a client that does not read its answers) are closed. So no
/// client can keep the service from stopping.
pub async fn serve(
    service: Arc<Service>,
    listener: tokio::net::TcpListener,
    signal: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;
    let app = app(service.clone());
    let patience = service.config().client_timeout;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut connections = tokio::task::JoinSet::new();
    // Set after the drain: connections with no request under way close then.
    let (closing, _) = tokio::sync::watch::channel(false);
    let stopping = service.clone();
    let mut stop = std::pin::pin!(async move {
        signal.await;
        stopping.begin_shutdown();
        stopping.drain().await;
    });
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // The peer address identifies a client without a token (per-client limits).
        let app = app.clone();
        let busy = Busy::default();
        let in_use = busy.clone();
        let handler =
            hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                // Under way from its handler's call until its answer is sent (or dropped).
                let guard = in_use.enter();
                let app = app.clone();
                async move {
                    let resp = app.oneshot(req).await?;
                    Ok::<_, std::convert::Infallible>(resp.map(|body| {
                        axum::body::Body::new(Guarded {
                            body,
                            _guard: guard,
                        })
                    }))
                }
            });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(patience)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), handler);
        let conn = graceful.watch(conn);
        let mut closing = closing.subscribe();
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let mut conn = std::pin::pin!(conn);
            // A connection's error (a reset, a timed-out head) concerns that client alone.
            tokio::select! {
                _ = &mut conn => return,
                _ = closing.wait_for(|c| *c) => {}
            }
            // Stopping: a connection with no request under way (idle, or a client still
            // sending a head) closes now instead of after the client timeout.
            if busy.under_way() {
                let _ = conn.await;
            }
        });
    }
    drop(listener);
    // The jobs still running go back to the queue (which ends their event streams).
    service.interrupt_running().await;
    closing.send_replace(true);
    // Idle connections close now, busy ones after their request, within the bound.
    let bound = service
        .config()
        .sync_time_limit_cap
        .saturating_add(patience);
    if tokio::time::timeout(bound, graceful.shutdown())
        .await
        .is_err()
    {
        eprintln!(
            "memplan serve: closing {} connection(s) still open {} s after the drain",
            connections.len(),
            bound.as_secs_f64()
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// How many requests of one connection are under way (see [`serve`]).
#[derive(Debug, Clone, Default)]
struct Busy(Arc<std::sync::atomic::AtomicUsize>);

impl Busy {
    /// Counts a request under way until the returned guard is dropped.
    fn enter(&self) -> BusyGuard {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        BusyGuard(self.0.clone())
    }

    /// Whether a request is under way.
    fn under_way(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst) > 0
    }
}

/// One request under way on its connection (see [`Busy::enter`]).
#[derive(Debug)]
struct BusyGuard(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// An answer's body that keeps its request counted as under way until it is sent.
struct Guarded {
    body: axum::body::Body,
    _guard: BusyGuard,
}

impl hyper::body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// After a failed accept: a connection that went away before it was accepted concerns that
/// client alone; anything else (out of file descriptors) is reported and retried after a
/// second, as hyper and axum do.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    eprintln!("memplan serve: accept failed: {e}; retrying in 1 s");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
}

/// Completes on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
