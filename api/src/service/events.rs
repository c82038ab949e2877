//! A job's event stream (`GET /v1/jobs/{id}/events`): server-sent events of its state.

use super::Service;
use crate::error::ApiError;
use crate::model::{JobStatus, JobView, Progress};
use axum::response::sse::Event;
use futures_util::Stream;
use std::convert::Infallible;
use tokio::sync::watch;

/// The server-sent event for a job state: named after its status when final, `queued` when
/// it is the stream's `last` event of a job in the queue, else `progress`.
fn event(view: &JobView, seq: u64, last: bool) -> Event {
    let name = if view.status.is_terminal() || (last && view.status == JobStatus::Queued) {
        view.status.as_str()
    } else {
        "progress"
    };
    Event::default()
        .event(name)
        .id(seq.to_string())
        .data(serde_json::to_string(view).unwrap_or_default())
}

impl Service {
    /// `GET /v1/jobs/{id}/events`: the job's state now and after every change, until it ends,
    /// or until the service lets go of it unfinished (it stops): then a last event `queued`
    /// says that the job waits in the queue for the next start.
    pub async fn events(
        &self,
        id: &str,
    ) -> Result<impl Stream<Item = Result<Event, Infallible>> + Send + 'static, ApiError> {
        struct St {
            rx: Option<watch::Receiver<JobView>>,
            last: Option<JobView>,
            seq: u64,
            done: bool,
        }
        let (rx, last) = match self.live_job(id) {
            Some(live) => (Some(live.state.subscribe()), None),
            None => (None, Some(self.job(id).await?)),
        };
        let st = St {
            rx,
            last,
            seq: 0,
            done: false,
        };
        Ok(futures_util::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            let view = match (&mut st.rx, st.last.take()) {
                (_, Some(view)) => {
                    st.done = true;
                    view
                }
                (None, None) => return None,
                (Some(rx), None) => {
                    if st.seq > 0 && rx.changed().await.is_err() {
                        // The runner let go of the job without a final status (the service
                        // stops): it is back in the queue, as the database says.
                        st.done = true;
                        let mut view = rx.borrow().clone();
                        view.status = JobStatus::Queued;
                        view.progress = Progress::default();
                        view.finished_unix_ms = None;
                        view
                    } else {
                        rx.borrow_and_update().clone()
                    }
                }
            };
            if view.status.is_terminal() {
                st.done = true;
            }
            st.seq += 1;
            Some((Ok(event(&view, st.seq, st.done)), st))
        }))
    }
}
