//! Service status: `GET /healthz` and the figures of `GET /metrics`.

use super::Service;
use crate::model::Health;
use std::sync::atomic::Ordering;

impl Service {
    /// `GET /healthz`: (healthy, figures).
    pub async fn health(&self) -> (bool, Health) {
        let db = self.db(|s| s.ping()).await;
        let g = self.gauges();
        let accepting = self.accepting.load(Ordering::SeqCst);
        let status = match (&db, accepting) {
            (Err(_), _) => "degraded",
            (Ok(()), false) => "shutting_down",
            (Ok(()), true) => "ok",
        };
        (
            status == "ok",
            Health {
                status: status.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                database: db.err().map_or_else(|| "ok".to_string(), |e| e.to_string()),
                workers: g.workers,
                queue_depth: g.queue_depth,
                running_jobs: g.running_jobs,
            },
        )
    }

    /// `GET /metrics`: the exposition text, with the stored jobs per status.
    pub async fn metrics_text(&self) -> String {
        let mut text = self.metrics.render(self.gauges());
        if let Ok(counts) = self.db(|s| s.status_counts()).await {
            text.push_str(
                "# HELP memplan_jobs Stored jobs by status.\n# TYPE memplan_jobs gauge\n",
            );
            for (status, n) in counts {
                text.push_str(&format!("memplan_jobs{{status=\"{status}\"}} {n}\n"));
            }
        }
        text
    }
}
