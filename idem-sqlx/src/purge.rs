//! The purge: expired rows deleted a bounded batch at a time, by a task the store starts
//! and stops.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use idem_core::StoreError;
use tokio::time::MissedTickBehavior;

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
}

/// The background purge of one store (and its clones); aborted when dropped, that is when
/// the last clone of the store is.
#[derive(Debug)]
pub(crate) struct PurgeTask(tokio::task::AbortHandle);

impl PurgeTask {
    /// Runs `purge` on `target` every `every`, as long as `target` lives; `None` outside a
    /// Tokio runtime.
    pub(crate) fn spawn<T, F, Fut>(target: Weak<T>, every: Duration, purge: F) -> Option<Self>
    where
        T: Send + Sync + 'static,
        F: Fn(Arc<T>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Purged, StoreError>> + Send,
    {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let task = runtime.spawn(async move {
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
                    Err(error) => tracing::warn!(%error, "idem purge failed; trying again at the next interval"),
                }
            }
        });
        Some(Self(task.abort_handle()))
    }
}

#[cfg(test)]
impl PurgeTask {
    pub(crate) fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for PurgeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
