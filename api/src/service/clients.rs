//! Per-client limits: how many queued and running jobs each client has, and a [`ClientSlot`]
//! per job that gives its place back when the job is done with.

use super::Service;
use crate::auth::Client;
use crate::error::ApiError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Unfinished jobs per client.
#[derive(Debug, Default)]
pub(super) struct ClientCounts(Mutex<HashMap<String, usize>>);

/// A client's place for one unfinished job; released when dropped.
#[derive(Debug)]
pub(super) struct ClientSlot {
    counts: Arc<ClientCounts>,
    client: String,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Ok(mut map) = self.counts.0.lock() {
            if let Some(n) = map.get_mut(&self.client) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(&self.client);
                }
            }
        }
    }
}

impl ClientCounts {
    /// Takes a place for `client` if it has fewer than `limit` (any number when `force`).
    fn take(
        self: &Arc<Self>,
        client: &str,
        limit: usize,
        force: bool,
    ) -> Result<ClientSlot, usize> {
        let mut map = self.0.lock().map_err(|_| 0usize)?;
        let n = map.entry(client.to_string()).or_insert(0);
        if *n >= limit && !force {
            return Err(*n);
        }
        *n += 1;
        Ok(ClientSlot {
            counts: self.clone(),
            client: client.to_string(),
        })
    }

    /// Unfinished jobs of `client`.
    pub(super) fn of(&self, client: &str) -> usize {
        self.0
            .lock()
            .map_or(0, |m| m.get(client).copied().unwrap_or(0))
    }
}

impl Service {
    /// A place for one more unfinished job of `client`, or 429 beyond `max_jobs_per_client`.
    pub(super) fn client_slot(&self, client: &Client) -> Result<ClientSlot, ApiError> {
        let limit = self.config.max_jobs_per_client;
        self.clients
            .take(&client.0, limit, false)
            .map_err(|_| ApiError::TooManyJobs {
                client: client.0.clone(),
                limit,
                retry_after_s: self.retry_after(limit),
            })
    }

    /// A place for an accepted job of `client` (recovered at start), beyond the limit if need
    /// be: accepted work is never turned away.
    pub(super) fn client_slot_anyway(&self, client: &str) -> Option<ClientSlot> {
        self.clients.take(client, 0, true).ok()
    }

    /// Queued and running jobs of `client` known to this process.
    pub fn unfinished_jobs_of(&self, client: &Client) -> usize {
        self.clients.of(&client.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_gets_places_up_to_its_limit_and_a_dropped_slot_frees_one() {
        let c = Arc::new(ClientCounts::default());
        let a = c.take("alice", 2, false).unwrap();
        let _b = c.take("alice", 2, false).unwrap();
        assert_eq!(c.take("alice", 2, false).unwrap_err(), 2);
        let _bob = c.take("bob", 2, false).unwrap();
        drop(a);
        assert_eq!(c.of("alice"), 1);
        let _again = c.take("alice", 2, false).unwrap();
        let _forced = c.take("alice", 2, true).unwrap();
        assert_eq!(c.of("alice"), 3);
    }
}
