//! The request body: its limit, answered so that the client reads the 413, and its pace.
//!
//! A server that answers 413 without reading the body and closes the connection makes the
//! kernel reset it while the client is still uploading: the client sees a broken pipe or a
//! reset, not the answer. So [`guard`], ahead of the handlers:
//! - with a `Content-Length` over the limit and `Expect: 100-continue`, answers 413 at once:
//!   the body is never polled, so hyper never sends `100 Continue` and the client never sends
//!   the body;
//! - with a `Content-Length` over the limit and no `Expect`, reads and discards the body (at
//!   most [`DRAIN_MAX_BYTES`] bytes and [`DRAIN_MAX_TIME`], and only while the body keeps
//!   coming: nothing for [`Config::client_timeout`] ends it too; beyond any of these it
//!   answers at once), then answers 413;
//! - otherwise reads the body (declared length or chunked) up to the limit: within it, the
//!   handler gets the body read; over it, the rest is discarded as above and the answer is
//!   413.
//!
//! While it reads, a body from which nothing more comes for [`Config::client_timeout`] is
//! answered 408 (`request-timeout`): a client that stalls in the middle of its upload holds
//! its connection no longer. Once shutdown has begun, the rest of a body being read has that
//! time in all (then 503 `shutting-down`: the work would be refused anyway), so that a client
//! trickling its upload cannot hold off [`crate::serve`]'s stop either. [`crate::serve`]
//! bounds the wait for a request's head the same way.
//!
//! Every 413, 408 and 503 from here says `Connection: close`: the connection is not reused
//! after a refused upload.
//!
//! [`Config::client_timeout`]: crate::Config::client_timeout

use crate::error::ApiError;
use crate::service::AppState;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use std::time::{Duration, Instant};

/// The most bytes of a refused body read (and discarded) so that the client gets to read the
/// 413; a longer body is answered at once.
pub const DRAIN_MAX_BYTES: u64 = 256 << 20;

/// The longest time spent discarding a refused body; a slower upload is answered when it
/// has passed.
pub const DRAIN_MAX_TIME: Duration = Duration::from_secs(5);

/// The declared `Content-Length`, if any (hyper refuses malformed ones before this).
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether the client waits for `100 Continue` before it sends the body.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"))
}

/// Whether the body's length is not declared but the body may be there (chunked).
fn unknown_length(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING) && !headers.contains_key(header::CONTENT_LENGTH)
}

/// The 413 problem, with `Connection: close`.
fn too_large(limit: usize) -> Response {
    closing(ApiError::PayloadTooLarge { limit })
}

/// `e`'s problem, with `Connection: close`.
fn closing(e: ApiError) -> Response {
    let mut resp = e.into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// Reads and discards `stream` until it ends, [`DRAIN_MAX_BYTES`] more bytes have come
/// (counting `already`), [`DRAIN_MAX_TIME`] has passed or nothing has come for `patience`
/// (the client timeout: a stalled upload is answered as soon as a stalled one within the
/// limit is). Whether it ended.
async fn drain<S, E>(mut stream: S, already: u64, patience: Duration) -> bool
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let mut seen = already;
    let read = async {
        loop {
            let chunk = match tokio::time::timeout(patience, stream.next()).await {
                Err(_) => return false,
                Ok(None) => return true,
                Ok(Some(chunk)) => chunk,
            };
            match chunk {
                Ok(b) => {
                    seen = seen.saturating_add(b.len() as u64);
                    if seen > DRAIN_MAX_BYTES {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
    };
    tokio::time::timeout(DRAIN_MAX_TIME, read)
        .await
        .unwrap_or(false)
}

/// The body limit and pace ahead of the handlers (see the module doc).
pub async fn guard(State(svc): State<AppState>, req: Request, next: Next) -> Response {
    let limit = svc.config().body_limit;
    let patience = svc.config().client_timeout;
    match content_length(req.headers()) {
        Some(n) if n > limit as u64 => {
            if !expects_continue(req.headers()) && n <= DRAIN_MAX_BYTES {
                drain(req.into_body().into_data_stream(), 0, patience).await;
            }
            return too_large(limit);
        }
        Some(_) => {}
        None if !unknown_length(req.headers()) => return next.run(req).await,
        None => {}
    }
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let begun = svc.shutdown_begun();
    let mut begun = std::pin::pin!(begun);
    // Once shutdown has begun, the rest of the body has `patience` in all.
    let mut until: Option<Instant> = None;
    loop {
        let wait = until.map_or(patience, |u| u.saturating_duration_since(Instant::now()));
        let next = tokio::select! {
            next = tokio::time::timeout(wait, stream.next()) => next,
            () = &mut begun, if until.is_none() => {
                until = Some(Instant::now() + patience);
                continue;
            }
        };
        let chunk = match next {
            Err(_) if until.is_some() => return closing(ApiError::ShuttingDown),
            Err(_) => {
                return closing(ApiError::RequestTimeout {
                    seconds: patience.as_secs_f64(),
                })
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return ApiError::BadRequest(format!("cannot read the request body: {e}"))
                    .into_response()
            }
            Ok(Some(Ok(c))) => c,
        };
        if buf.len().saturating_add(chunk.len()) > limit {
            let read = (buf.len() + chunk.len()) as u64;
            drop(buf);
            drain(stream, read, patience).await;
            return too_large(limit);
        }
        buf.extend_from_slice(&chunk);
    }
    next.run(Request::from_parts(parts, Body::from(buf))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expect_and_lengths_are_read_from_the_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(content_length(&h), None);
        assert!(!expects_continue(&h));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static(" 42"));
        h.insert(header::EXPECT, HeaderValue::from_static("100-Continue"));
        assert_eq!(content_length(&h), Some(42));
        assert!(expects_continue(&h));
        assert!(!unknown_length(&h));
        let mut c = HeaderMap::new();
        c.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        assert!(unknown_length(&c));
    }

    #[tokio::test]
    async fn a_drain_stops_at_its_byte_cap() {
        let big = Bytes::from(vec![0u8; 1 << 20]);
        let chunks = futures_util::stream::iter(
            (0..300).map(|_| Ok::<_, std::convert::Infallible>(big.clone())),
        );
        let patience = Duration::from_secs(30);
        assert!(!drain(chunks, 0, patience).await, "300 MiB is over the cap");
        let few = futures_util::stream::iter(
            (0..3).map(|_| Ok::<_, std::convert::Infallible>(big.clone())),
        );
        assert!(drain(few, 0, patience).await);
    }

    #[tokio::test]
    async fn a_drain_of_a_stalled_body_ends_after_the_client_timeout_not_its_time_cap() {
        let big = Bytes::from(vec![0u8; 1 << 10]);
        // Two pieces, then nothing (the stream never ends).
        let stalled = futures_util::stream::iter(
            (0..2).map(|_| Ok::<_, std::convert::Infallible>(big.clone())),
        )
        .chain(futures_util::stream::pending());
        let started = Instant::now();
        assert!(!drain(stalled, 0, Duration::from_millis(100)).await);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < DRAIN_MAX_TIME / 2,
            "ended after {took:?}"
        );
    }
}
