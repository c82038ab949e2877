//! `memplan serve`: runs the HTTP service of the `memplan-api` crate with the limits the
//! flags give, until SIGTERM or Ctrl-C.

use crate::args::ServeArgs;
use crate::common::{bad, seconds};
use anyhow::{Context, Result};
use memplan_api::auth::{check_exposure, Tokens};
use memplan_api::config::{self, Retention};
use std::process::ExitCode;
use std::sync::Arc;

/// Runs `memplan serve`.
pub fn serve(a: ServeArgs) -> Result<ExitCode> {
    let tokens = match &a.token_file {
        Some(path) => Some(Arc::new(
            Tokens::read(path).map_err(|e| bad(e.to_string()))?,
        )),
        None => None,
    };
    check_exposure(a.addr, tokens.is_some(), a.insecure).map_err(|e| bad(e.to_string()))?;
    let retention = Retention::parse(&a.retention).map_err(|e| bad(format!("--{e}")))?;
    // Also refuses a negative or NaN value.
    if !(a.client_timeout > 0.0 && a.client_timeout <= config::MAX_CLIENT_TIMEOUT_S) {
        return Err(bad(format!(
            "--client-timeout {} must be above 0 s and at most {} s",
            a.client_timeout,
            config::MAX_CLIENT_TIMEOUT_S
        )));
    }
    let patience = seconds("client-timeout", a.client_timeout)?;
    if a.max_jobs_per_client == 0 {
        return Err(bad("--max-jobs-per-client must be at least 1"));
    }
    let cfg = memplan_api::Config {
        db_path: Some(a.db.clone()),
        body_limit: a.body_limit,
        client_timeout: patience,
        max_ops: a.max_ops,
        max_tensors: a.max_tensors,
        max_buffers: a.max_buffers,
        workers: a.workers.unwrap_or_else(config::default_workers),
        queue: a.queue,
        default_time_limit: seconds("default-time-limit", a.default_time_limit)?,
        sync_time_limit_cap: seconds("sync-time-limit-cap", a.sync_time_limit_cap)?,
        max_time_limit: seconds("max-time-limit", a.max_time_limit)?,
        shutdown_grace: seconds("shutdown-grace", a.shutdown_grace)?,
        tokens: tokens.clone(),
        max_jobs_per_client: a.max_jobs_per_client,
        retention,
        retention_sweep: seconds("retention-sweep", a.retention_sweep)?,
    };
    if cfg.workers == 0 {
        return Err(bad("--workers must be at least 1"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let (workers, queue) = (cfg.workers, cfg.queue);
        let service = memplan_api::Service::start(cfg).await.map_err(|e| match e {
            memplan_api::StartError::Config(m) => bad(m),
            // The database file is the user's: a folder, a file of another kind or a missing
            // folder is named with the flag (once, without the driver's repeated chain).
            memplan_api::StartError::Store(e) => bad(format!(
                "--db {}: cannot open the job database: {e}",
                a.db.display()
            )),
        })?;
        let listener = tokio::net::TcpListener::bind(a.addr)
            .await
            .map_err(|e| bad(format!("cannot listen on {}: {e}", a.addr)))?;
        let local = listener.local_addr()?;
        let access = match &tokens {
            Some(t) => format!("{} bearer token(s)", t.len()),
            None => "no access control".to_string(),
        };
        eprintln!(
            "memplan serve: listening on http://{local} (database {}, {workers} workers, queue {queue}, {access}; docs at /docs)",
            a.db.display()
        );
        memplan_api::serve(service, listener, memplan_api::shutdown_signal()).await?;
        eprintln!("memplan serve: stopped");
        Ok(ExitCode::SUCCESS)
    })
}
