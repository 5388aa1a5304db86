//! [`LockGuard`]: a held lock — its fencing token if it is fenced, how long it is known
//! valid, whether it was lost — and how it is given back, explicitly or on drop.

use std::sync::Arc;
use std::time::Instant;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::LockLost;
use super::fencing::{Fenced, FencingMode, Unfenced};
use super::watchdog::Status;
use crate::key::{Key, Owner};
use crate::store::{FencingToken, LockStore, StoreError};
use crate::throttled;

/// A held [`Lock`](crate::Lock). Made by [`Lock::try_acquire`](crate::Lock::try_acquire)
/// and [`Lock::acquire_within`](crate::Lock::acquire_within).
///
/// - [`fencing_token`](Self::fencing_token), on the guard of a [`Fenced`] lock only: pass
///   it to the resource you protect.
/// - [`valid_until`](Self::valid_until): the hold is known valid until then (monotonic
///   clock); a watchdog moves it forward.
/// - [`lost`](Self::lost): completes when the hold is known lost or its lease ran out.
/// - [`release`](Self::release): frees the lock and says whether it was still ours.
///
/// **Dropping** the guard stops its watchdog at once and frees the lock in a task spawned
/// on the current Tokio runtime, so a drop never blocks, not even on a current-thread
/// runtime. Dropped where no runtime runs, the lock is left to its lease.
#[derive(Debug)]
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard<S: LockStore, F: FencingMode = Unfenced> {
    key: Key,
    token: F::Token,
    reentered: bool,
    validity: Validity,
    /// `None` once [`release`](Self::release) took it, so that drop does nothing more.
    hold: Option<Hold<S>>,
}

/// What a guard knows of how long its hold lasts.
#[derive(Debug)]
enum Validity {
    /// A fixed lease: valid until then, never extended. No channel, no task: the common
    /// short lock costs no more than its two store operations and the guard.
    Fixed(Instant),
    /// A watchdog lease: what the watchdog last learnt.
    Watched(watch::Receiver<Status>),
}

/// What giving the lock back needs.
#[derive(Debug)]
struct Hold<S> {
    store: Arc<S>,
    owner: Owner,
    /// Kept so that a watched hold's status channel stays open after its watchdog ended.
    _status: Option<watch::Sender<Status>>,
    watchdog: Option<JoinHandle<()>>,
}

impl<S: LockStore> Hold<S> {
    /// Stops the watchdog; once this returns, it sends no more renewals.
    async fn stop_watchdog(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
            // An aborted task may be in the middle of a poll on another thread; waiting
            // for it means no renewal leaves after this point.
            let _cancelled_or_finished = watchdog.await;
        }
    }

    async fn release(mut self, key: &Key) -> Result<bool, StoreError> {
        self.stop_watchdog().await;
        let released = self.store.release_and_signal(key, &self.owner).await;
        tracing::debug!(%key, ?released, "idem: lock released");
        released
    }
}

impl<S: LockStore, F: FencingMode> LockGuard<S, F> {
    /// A guard; `watched` is a watchdog lease's status channel and task, `None` for a
    /// fixed lease valid until `valid_until`.
    pub(super) fn new(
        key: Key,
        token: F::Token,
        reentered: bool,
        store: Arc<S>,
        owner: Owner,
        valid_until: Instant,
        watched: Option<(watch::Sender<Status>, JoinHandle<()>)>,
    ) -> Self {
        let (validity, status, watchdog) = match watched {
            None => (Validity::Fixed(valid_until), None, None),
            Some((status, watchdog)) => (
                Validity::Watched(status.subscribe()),
                Some(status),
                Some(watchdog),
            ),
        };
        Self {
            key,
            token,
            reentered,
            validity,
            hold: Some(Hold {
                store,
                owner,
                _status: status,
                watchdog,
            }),
        }
    }

    /// The lock's name.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Whether this guard re-entered a hold its owner had already (acquiring again with
    /// the same [`Owner`]). Such guards share one hold; see [`Lock`](crate::Lock#reentry).
    pub fn is_reentered(&self) -> bool {
        self.reentered
    }

    /// Until when the hold is known valid, on the monotonic clock: the time the request
    /// that acquired (or last renewed) it was sent, plus the lease, less an allowance for
    /// clock drift. Past it, someone else may hold the lock.
    ///
    /// This is what the holder can know, not a promise: a process paused past this
    /// instant does not notice until it looks. That is what fencing tokens are for.
    pub fn valid_until(&self) -> Instant {
        match &self.validity {
            Validity::Fixed(valid_until) => *valid_until,
            Validity::Watched(status) => status.borrow().valid_until,
        }
    }

    /// Completes when the hold is known lost: a renewal found it gone or taken
    /// ([`LockLost::NotHeld`]), or its lease ran out — a fixed lease at its end, a watchdog
    /// lease when renewals kept failing ([`LockLost::Expired`]).
    ///
    /// Race it against the protected work (`tokio::select!`) to stop work that no longer
    /// holds the lock. A fixed lease is not checked against the store: a key deleted
    /// behind its back is noticed only by a watchdog's renewal, or by
    /// [`release`](Self::release) answering `false`.
    pub async fn lost(&self) -> LockLost {
        let mut status = match &self.validity {
            Validity::Fixed(valid_until) => {
                tokio::time::sleep_until(tokio::time::Instant::from_std(*valid_until)).await;
                return LockLost::Expired;
            }
            Validity::Watched(status) => status.clone(),
        };
        loop {
            let (valid_until, lost) = {
                let current = status.borrow_and_update();
                (current.valid_until, current.lost)
            };
            if let Some(lost) = lost {
                return lost;
            }
            let deadline = tokio::time::Instant::from_std(valid_until);
            match tokio::time::timeout_at(deadline, status.changed()).await {
                Ok(Ok(())) => {}
                // Nobody can extend the hold any more.
                Ok(Err(_closed)) => {
                    tokio::time::sleep_until(deadline).await;
                    return LockLost::Expired;
                }
                Err(_elapsed) => return LockLost::Expired,
            }
        }
    }

    /// Stops the watchdog, then frees the lock if this owner still holds it, waking one
    /// waiter. `true` if it did; `false` if the lock had expired or been taken by someone
    /// else (nothing is changed then: another holder's lock stays intact).
    ///
    /// With re-entered guards sharing a hold, the first release frees it for all of them.
    /// If this future is dropped before it completes, the lock is left to its lease.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer; the lock may or may not have been
    /// freed, and is freed by its lease at the latest.
    pub async fn release(mut self) -> Result<bool, StoreError> {
        let hold = self
            .hold
            .take()
            .expect("only `release`, which consumes the guard, takes the hold");
        hold.release(&self.key).await
    }
}

impl<S: LockStore> LockGuard<S, Fenced> {
    /// The fencing token of this hold: larger than that of every earlier hold of this
    /// lock, also across expiry. Hand it to the resource the lock protects, which refuses
    /// writes carrying a smaller token than one it has seen (see the
    /// [module docs](crate::lock)).
    ///
    /// Only a [`Fenced`] lock's guard has one, always: a plain lock's guard has no such
    /// method, rather than one that might answer "none".
    ///
    /// A re-entered guard has the token of the hold it shares.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }
}

impl<S: LockStore, F: FencingMode> Drop for LockGuard<S, F> {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        if let Some(watchdog) = &hold.watchdog {
            watchdog.abort();
        }
        match Handle::try_current() {
            Ok(runtime) => {
                let key = self.key.clone();
                runtime.spawn(async move {
                    if let Err(error) = hold.release(&key).await {
                        throttled::warn!(%key, ?error, "idem: releasing a dropped lock failed; its lease will free it");
                    }
                });
            }
            Err(_) => {
                tracing::debug!(key = %self.key, "idem: lock guard dropped outside a Tokio runtime; its lease will free it");
            }
        }
    }
}
