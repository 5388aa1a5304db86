//! The watchdog of a [`Lease::Watchdog`](crate::Lease::Watchdog) lock: a task that renews
//! the hold every third of the lease while the guard lives, and tells the guard when it
//! cannot.
//!
//! The guard aborts the task when it is released or dropped; nothing else stops it before
//! the lock is lost, so no renewal is ever sent for a lock its holder gave up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::LockLost;
use super::lease::valid_until;
use crate::key::{Key, Owner};
use crate::store::LockStore;
use crate::throttled;

/// What a guard knows about its hold; the watchdog updates it, the guard reads it.
#[derive(Debug, Clone)]
pub(super) struct Status {
    /// Until when the hold is known valid on this machine's monotonic clock.
    pub(super) valid_until: Instant,
    /// Set once, when the hold is known lost.
    pub(super) lost: Option<LockLost>,
}

/// Everything one watchdog needs.
pub(super) struct Watchdog<S> {
    pub(super) store: Arc<S>,
    pub(super) key: Key,
    pub(super) owner: Owner,
    pub(super) lease: Duration,
    pub(super) status: watch::Sender<Status>,
}

impl<S: LockStore> Watchdog<S> {
    pub(super) fn spawn(self, runtime: &Handle) -> JoinHandle<()> {
        runtime.spawn(self.renew_while_held())
    }

    async fn renew_while_held(self) {
        let lost = loop {
            let valid_until = self.status.borrow().valid_until;
            // Renew once two thirds of the lease are left: every third of a lease, and at
            // once for a re-entered hold that has less than that left.
            let renew_at = valid_until
                .checked_sub(self.lease * 2 / 3)
                .unwrap_or(valid_until);
            tokio::time::sleep_until(renew_at.into()).await;
            match self.renew(valid_until).await {
                Ok(until) => self.status.send_modify(|status| status.valid_until = until),
                Err(lost) => break lost,
            }
        };
        throttled::warn!(key = %self.key, ?lost, "idem: lock lost; the watchdog stops");
        #[cfg(feature = "metrics")]
        metrics::counter!("idem_lock_losses_total", "reason" => match lost {
            LockLost::NotHeld => "not_held",
            LockLost::Expired => "expired",
        })
        .increment(1);
        self.status.send_modify(|status| status.lost = Some(lost));
    }

    /// One renewal, tried again after store errors until it succeeds, is refused, or the
    /// hold is no longer known valid. The new validity on success.
    async fn renew(&self, valid_until_now: Instant) -> Result<Instant, LockLost> {
        let deadline = tokio::time::Instant::from_std(valid_until_now);
        loop {
            let sent_at = Instant::now();
            let renewal = self.store.renew(&self.key, &self.owner, self.lease);
            match tokio::time::timeout_at(deadline, renewal).await {
                Ok(Ok(true)) => return Ok(valid_until(sent_at, self.lease, self.lease)),
                Ok(Ok(false)) => return Err(LockLost::NotHeld),
                Ok(Err(error)) => {
                    throttled::warn!(key = %self.key, ?error, "idem: lock renewal failed; trying again");
                    let pause = tokio::time::sleep(self.lease / 10);
                    if tokio::time::timeout_at(deadline, pause).await.is_err() {
                        return Err(LockLost::Expired);
                    }
                }
                Err(_elapsed) => return Err(LockLost::Expired),
            }
        }
    }
}
