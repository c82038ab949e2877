//! The place resource: `POST /v1/place` places buffers (minimalloc CSV or JSON).

use super::admission::CancelOnDrop;
use super::Service;
use crate::config::Config;
use crate::error::ApiError;
use crate::model::{PlaceQuery, PlaceRequest, PlaceResponse, PlacedBuffer};
use crate::request::{self, Mode};
use axum::body::Bytes;
use memplan::CancelToken;
use memplan_solver::placement::step::{self as place, PlaceOptions};
use memplan_solver::{csv, Limits, PlacementProblem};
use std::time::Instant;

/// A placement answer.
#[derive(Debug, Clone)]
pub struct PlaceAnswer {
    /// The figures and offsets.
    pub response: PlaceResponse,
    /// The placed buffers as minimalloc CSV.
    pub csv: String,
}

/// The body of a `POST /v1/place` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceBody {
    /// minimalloc CSV.
    Csv,
    /// [`PlaceRequest`] JSON.
    Json,
}

impl Service {
    /// `POST /v1/place`.
    pub async fn place(
        &self,
        kind: PlaceBody,
        query: PlaceQuery,
        body: Bytes,
    ) -> Result<PlaceAnswer, ApiError> {
        let config = self.config.clone();
        let (ids, problem, opts, table) = self
            .light(move || parse_place(kind, query, &body, &config))
            .await?;
        let ticket = self.admit()?;
        let permit = self.slot().await?;
        let cancel = CancelToken::new();
        let mut guard = CancelOnDrop(Some(cancel.clone()));
        let limit = opts.limits.time.unwrap_or(self.config.default_time_limit);
        let opts = PlaceOptions {
            limits: Limits {
                cancel: Some(cancel.clone()),
                ..opts.limits
            },
            ..opts
        };
        let started = Instant::now();
        let out = self
            .solve(
                "place",
                permit,
                ticket,
                limit,
                cancel,
                move || match place::place(&problem, &opts) {
                    Ok(r) => Ok((r, problem)),
                    Err(e) => Err((e, problem)),
                },
            )
            .await?;
        guard.0 = None;
        let (r, problem) = match out {
            Ok(r) => r,
            Err((e, problem)) => {
                return Err(ApiError::buffers(csv::placement_error(&e, &ids, &problem)))
            }
        };
        // A CSV comes back as sent with an offset column; a JSON list in the canonical columns.
        let csv = match &table {
            Some(t) => csv::write_table(t, &problem, &r.placement),
            None => csv::write(&ids, &problem, &r.placement),
        };
        let response = PlaceResponse {
            fits: r.fits,
            peak_bytes: r.stats.objective,
            lower_bound_bytes: r.stats.lower_bound,
            gap: r.stats.gap(),
            load_bytes: problem.load(),
            status: r.stats.status.as_str().to_string(),
            method: r.method.clone(),
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
            buffers: ids
                .into_iter()
                .zip(&r.placement.offsets)
                .map(|(id, &offset)| PlacedBuffer { id, offset })
                .collect(),
        };
        Ok(PlaceAnswer { response, csv })
    }
}

/// A JSON placement request with the query string's options added (an option given both ways
/// is refused, 422).
fn with_query(mut req: PlaceRequest, query: PlaceQuery) -> Result<PlaceRequest, ApiError> {
    fn merge<T>(body: &mut Option<T>, query: Option<T>, name: &str) -> Result<(), ApiError> {
        match (body.is_some(), query) {
            (true, Some(_)) => Err(ApiError::options(format!(
                "{name} is given both in the query string and in the body; give it once"
            ))),
            (false, Some(q)) => {
                *body = Some(q);
                Ok(())
            }
            (_, None) => Ok(()),
        }
    }
    merge(&mut req.capacity, query.capacity, "capacity")?;
    merge(&mut req.time_limit_s, query.time_limit_s, "time_limit_s")?;
    merge(&mut req.alignment, query.alignment, "alignment")?;
    merge(&mut req.heuristic, query.heuristic, "heuristic")?;
    Ok(req)
}

/// A parsed placement request: ids, problem, options, and a CSV body's columns as read.
type Parsed = (
    Vec<String>,
    PlacementProblem,
    PlaceOptions,
    Option<csv::Table>,
);

/// Parses a placement request into ids, problem, options and (a CSV body) its columns.
fn parse_place(
    kind: PlaceBody,
    query: PlaceQuery,
    body: &[u8],
    config: &Config,
) -> Result<Parsed, ApiError> {
    let text = request::text(body)?;
    let (ids, mut problem, capacity, time_limit_s, heuristic, table) = match kind {
        PlaceBody::Csv => {
            let alignment = query.alignment.unwrap_or(1);
            if !alignment.is_power_of_two() {
                return Err(ApiError::options(format!(
                    "alignment {alignment} is not a power of two"
                )));
            }
            let parsed =
                csv::parse(text, alignment).map_err(|e| ApiError::buffers(e.to_string()))?;
            (
                parsed.ids,
                parsed.problem,
                query.capacity,
                query.time_limit_s,
                query.heuristic.unwrap_or(false),
                Some(parsed.table),
            )
        }
        PlaceBody::Json => {
            let req: PlaceRequest = request::json(text)?;
            let req = with_query(req, query)?;
            let alignment = req.alignment.unwrap_or(1);
            if !alignment.is_power_of_two() {
                return Err(ApiError::options(format!(
                    "alignment {alignment} is not a power of two"
                )));
            }
            let rows = req
                .buffers
                .iter()
                .map(|b| (b.id.text(), b.lower, b.upper, b.size, b.alignment));
            let (ids, problem) = csv::from_rows(rows, alignment).map_err(ApiError::buffers)?;
            (
                ids,
                problem,
                req.capacity,
                req.time_limit_s,
                req.heuristic.unwrap_or(false),
                None,
            )
        }
    };
    if ids.len() > config.max_buffers {
        return Err(ApiError::LimitExceeded {
            limit: "max_buffers",
            detail: format!(
                "{} buffers, over the limit of {} buffers (max_buffers)",
                ids.len(),
                config.max_buffers
            ),
        });
    }
    let time = request::time_limit(time_limit_s, config, Mode::Sync, "time_limit_s")?;
    problem.capacity = capacity;
    Ok((
        ids,
        problem,
        PlaceOptions {
            limits: Limits::with_time(time),
            exact: !heuristic,
        },
        table,
    ))
}
