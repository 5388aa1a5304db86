//! [`Lock`]: a named lock over any store, its waiters served in no particular order
//! ([`FairLock`](crate::FairLock) serves them in arrival order).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;

#[cfg(doc)]
use super::LockLost;
use super::watchdog::{Status, Watchdog};
use super::{
    FALLBACK_POLL, Fenced, FencingMode, Lease, LockError, LockGuard, Unfenced, lease, time_left,
};
#[cfg(doc)]
use crate::FairLock;
use crate::key::{Key, Owner};
use crate::store::{Acquire, LockStore, StoreError};

/// A named distributed lock, held by one [`Owner`]; [`Unfenced`] unless made
/// [`fenced`](Lock::fenced).
///
/// ```
/// use std::time::Duration;
/// use idem_core::{Key, Lock, MemoryStore};
/// use idem_core::lock::{Lease, LockError};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let key = Key::new("report:2024-06")?;
/// let lease = Lease::Fixed(Duration::from_secs(10));
/// let mine = Lock::new(store.clone(), key.clone(), lease);
/// let theirs = Lock::new(store, key, lease);
///
/// let guard = mine.try_acquire().await?;
/// assert!(matches!(theirs.try_acquire().await, Err(LockError::Held { .. })));
/// guard.release().await?;
/// assert!(theirs.try_acquire().await.is_ok());
/// # Ok(()) }
/// ```
///
/// # Owners
///
/// A `Lock` acquires as one owner: a random one from [`Lock::new`], or one chosen with
/// [`with_owner`](Lock::with_owner) (say, a job id that survives a retry). Processes or
/// tasks that must exclude each other each make their own `Lock`.
///
/// # Reentry
///
/// Acquiring a lock its owner already holds succeeds at once, as after a network timeout
/// that hid a successful acquisition. Reentry is **not counted**: the guards share one
/// hold, with one fencing token (if fenced) and the lease the store has left (re-entering
/// does not extend it). The first guard to be released (or dropped) frees the lock for all
/// of them; the others then answer `false` to [`release`](LockGuard::release), and their
/// watchdogs (each guard of a watchdog lock runs one, since the first acquisition's guard
/// may have been lost with the timeout) report [`LockLost::NotHeld`].
///
/// # Waiting
///
/// [`acquire_within`](Lock::acquire_within) tries to acquire and, finding the lock held,
/// registers as a waiter in the same atomic step
/// ([`LockStore::acquire_or_register_waiter`]); then it sleeps in the store
/// ([`LockStore::wait_for_release`]) until a release wakes it — one waiter per release — or
/// the holder's lease runs out, and tries again. Since the registration and the look at
/// the lock are one step, a release cannot slip between them unseen: it either left the
/// lock free for that step, or came after it and wakes a waiter. A release signals only
/// when a waiter registered, so a lock nobody waits for costs no signal. Each wait also
/// ends after a second at the latest, and the waiter tries again, so even a wake-up lost
/// to a cancelled waiter costs at most that. Waiters are not served in order: a newcomer
/// may take a lock just freed before the woken waiter does, and under steady contention
/// an unlucky caller can wait long; [`fair`](Lock::fair) makes a [`FairLock`], served in
/// arrival order.
///
/// [`try_acquire`](Lock::try_acquire) never registers.
#[derive(Debug)]
pub struct Lock<S: LockStore, F: FencingMode = Unfenced> {
    // The fair lock, in a module beside this one, takes its turns with the same store,
    // name and owner.
    pub(super) store: Arc<S>,
    pub(super) key: Key,
    pub(super) owner: Owner,
    pub(super) lease: Lease,
    fencing: PhantomData<F>,
}

impl<S: LockStore> Lock<S> {
    /// A lock named `key` in `store`, with a fresh random owner, without fencing tokens
    /// (see [`fenced`](Lock::fenced)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use idem_core::{Key, Lock, MemoryStore};
    /// use idem_core::lock::Lease;
    /// let lock = Lock::new(MemoryStore::new(), Key::new("invoice-run").unwrap(), Lease::Watchdog(Duration::from_secs(30)));
    /// ```
    pub fn new(store: S, key: Key, lease: Lease) -> Self {
        Self {
            store: Arc::new(store),
            key,
            owner: Owner::random(),
            lease,
            fencing: PhantomData,
        }
    }

    /// The same lock, drawing a fencing token with each acquisition: its guards have a
    /// [`fencing_token`](LockGuard::fencing_token). Costs one counter per lock name and a
    /// script instead of a plain `SET` in Redis; see
    /// [fencing or not](crate::lock#fencing-or-not).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use idem_core::{Key, Lock, MemoryStore};
    /// use idem_core::lock::{Fenced, Lease};
    /// let lock: Lock<MemoryStore, Fenced> =
    ///     Lock::new(MemoryStore::new(), Key::new("ledger").unwrap(), Lease::Fixed(Duration::from_secs(5))).fenced();
    /// ```
    pub fn fenced(self) -> Lock<S, Fenced> {
        Lock {
            store: self.store,
            key: self.key,
            owner: self.owner,
            lease: self.lease,
            fencing: PhantomData,
        }
    }
}

impl<S: LockStore, F: FencingMode> Lock<S, F> {
    /// Acquires as `owner` instead of a random owner, so that acquiring again as the same
    /// owner — from a retry, another task, another process — re-enters the hold.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_core::{Key, Lock, MemoryStore, Owner};
    /// # use idem_core::lock::Lease;
    /// let lock = Lock::new(MemoryStore::new(), Key::new("job").unwrap(), Lease::Fixed(Duration::from_secs(60)))
    ///     .with_owner(Owner::new("worker-7:job-42").unwrap());
    /// ```
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.owner = owner;
        self
    }

    /// The lock's name.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Who acquires.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The lease every acquisition takes.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// Takes the lock if it is free (or already this owner's), without waiting.
    ///
    /// # Errors
    ///
    /// - [`LockError::Held`] when another owner holds it.
    /// - [`LockError::Store`] when the store fails.
    /// - [`LockError::NoRuntime`] outside a Tokio runtime.
    pub async fn try_acquire(&self) -> Result<LockGuard<S, F>, LockError> {
        let runtime = Handle::try_current().map_err(|_| LockError::NoRuntime)?;
        self.attempt(&runtime, None).await
    }

    /// Takes the lock, waiting up to `timeout` for its holder to release it or for its
    /// lease to run out. A last attempt is made when `timeout` has passed.
    ///
    /// # Errors
    ///
    /// - [`LockError::TimedOut`] when others held it for the whole wait.
    /// - [`LockError::Store`] when the store fails.
    /// - [`LockError::NoRuntime`] outside a Tokio runtime.
    pub async fn acquire_within(&self, timeout: Duration) -> Result<LockGuard<S, F>, LockError> {
        let runtime = Handle::try_current().map_err(|_| LockError::NoRuntime)?;
        let started = Instant::now();
        let left = time_left(started, timeout);
        let mut waited = false;
        loop {
            // Every attempt but the last registers for the wait that may follow it, which
            // is never longer than this.
            let longest_wait = left().min(FALLBACK_POLL);
            let registering = (!longest_wait.is_zero()).then_some(longest_wait);
            let remaining = match self.attempt(&runtime, registering).await {
                Err(LockError::Held { remaining }) => remaining,
                Ok(guard) => {
                    if waited {
                        // Taken after waiting for another holder: a hand-off.
                        #[cfg(feature = "metrics")]
                        metrics::counter!("idem_lock_handoffs_total").increment(1);
                    }
                    return Ok(guard);
                }
                Err(failed) => return Err(failed),
            };
            if registering.is_none() {
                return Err(LockError::TimedOut {
                    waited: started.elapsed(),
                });
            }
            // Just past the holder's lease, so that an expiry (which wakes nobody) is seen.
            let until_expiry = remaining.saturating_add(Duration::from_millis(1));
            let within = until_expiry.min(left()).min(FALLBACK_POLL);
            if within.is_zero() {
                continue;
            }
            waited = true;
            #[cfg(feature = "metrics")]
            metrics::counter!("idem_lock_waits_total").increment(1);
            if let Err(error) = self.store.wait_for_release(&self.key, within).await {
                // The next attempt shows whether the store is really gone; until then,
                // waiting degrades to polling.
                tracing::debug!(key = %self.key, ?error, "idem: waiting for a lock failed; polling instead");
                tokio::time::sleep(within).await;
            }
        }
    }

    /// One acquisition; with `registering`, one that counts this owner as a waiter for
    /// that long if the lock is held.
    async fn attempt(
        &self,
        runtime: &Handle,
        registering: Option<Duration>,
    ) -> Result<LockGuard<S, F>, LockError> {
        let lease = self.lease.duration();
        let sent_at = Instant::now();
        let acquired = match registering {
            None => {
                self.store
                    .acquire(&self.key, &self.owner, lease, F::FENCING)
                    .await
            }
            Some(wait) => {
                self.store
                    .acquire_or_register_waiter(&self.key, &self.owner, lease, F::FENCING, wait)
                    .await
            }
        }
        .map_err(LockError::Store)?;
        self.guard(runtime, acquired, sent_at)
    }

    /// The guard of an acquisition the store answered with `acquired`, to a request sent
    /// at `sent_at`; [`LockError::Held`] if it was not acquired.
    pub(super) fn guard(
        &self,
        runtime: &Handle,
        acquired: Acquire,
        sent_at: Instant,
    ) -> Result<LockGuard<S, F>, LockError> {
        let lease = self.lease.duration();
        let (fence, remaining, reentered) = match acquired {
            Acquire::Acquired { fence } => (fence, lease, false),
            Acquire::Reentered { remaining, fence } => (fence, remaining, true),
            Acquire::Held { remaining } => return Err(LockError::Held { remaining }),
        };
        let token = F::token(fence).ok_or_else(|| self.no_fence(&acquired))?;
        let valid_until = lease::valid_until(sent_at, remaining, lease);
        let watched = match self.lease {
            Lease::Fixed(_) => None,
            Lease::Watchdog(_) => {
                let (status, _) = watch::channel(Status {
                    valid_until,
                    lost: None,
                });
                let watchdog = Watchdog {
                    store: Arc::clone(&self.store),
                    key: self.key.clone(),
                    owner: self.owner.clone(),
                    lease,
                    status: status.clone(),
                }
                .spawn(runtime);
                Some((status, watchdog))
            }
        };
        tracing::debug!(key = %self.key, ?token, reentered, "idem: lock acquired");
        Ok(LockGuard::new(
            self.key.clone(),
            token,
            reentered,
            Arc::clone(&self.store),
            self.owner.clone(),
            valid_until,
            watched,
        ))
    }

    /// A store that answered a fenced acquisition without a token broke its contract.
    fn no_fence(&self, answer: &Acquire) -> LockError {
        LockError::Store(StoreError::unexpected(
            "acquire",
            format_args!("{answer:?} for fenced lock {}", self.key),
        ))
    }
}
