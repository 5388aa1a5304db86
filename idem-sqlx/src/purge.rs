//! The purge: expired rows deleted a bounded batch at a time, by a task the store starts
//! and stops.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use idem_core::StoreError;
use tokio::time::MissedTickBehavior;

use crate::task::Background;

/// What one [`purge`](crate::SqlStore::purge) run deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Purged {
    /// Expired windows and locks.
    pub locks: u64,
    /// Expired one-time tokens.
    pub tokens: u64,
    /// Expired idempotency records.
    pub records: u64,
    /// Live tokens evicted as the oldest past the token capacity.
    pub evicted_tokens: u64,
    /// Lapsed places in fair locks' queues.
    pub places: u64,
    /// Expired registrations of waiters, left by waiters that ended without deleting
    /// theirs (PostgreSQL; always 0 on SQLite, whose waiters do not register).
    pub waiters: u64,
}

/// Runs `purge` on `target` every `every`, as long as `target` lives, in a task that stops
/// when the returned handle is dropped; `None` outside a Tokio runtime.
pub(crate) fn spawn<T, F, Fut>(target: Weak<T>, every: Duration, purge: F) -> Option<Background>
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Purged, StoreError>> + Send,
{
    Background::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        // A slow database gets a full interval of rest after each run, not a burst.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(target) = target.upgrade() else {
                return;
            };
            match purge(target).await {
                Ok(purged) => tracing::debug!(?purged, "idem purge"),
                Err(error) => {
                    tracing::warn!(%error, "idem purge failed; trying again at the next interval")
                }
            }
        }
    })
}
