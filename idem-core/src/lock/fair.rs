//! [`FairLock`]: a [`Lock`] granted in arrival order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::mutex::Lock;
use super::{FencingMode, Lease, LockError, LockGuard, Unfenced, time_left};
use crate::key::{Key, Owner};
use crate::store::{FairStore, Turn};

/// How long a waiter's place outlives its last renewal, unless
/// [`with_place_timeout`](FairLock::with_place_timeout) says otherwise.
const PLACE_TIMEOUT: Duration = Duration::from_secs(3);

/// The shortest place timeout: below it, a live waiter could not renew its place in time
/// on a busy machine.
const SHORTEST_PLACE_TIMEOUT: Duration = Duration::from_millis(30);

/// A [`Lock`] whose waiters take it in the order they came: made by
/// [`Lock::fair`], on a [`FairStore`].
///
/// ```
/// use std::time::Duration;
/// use idem_core::{Key, Lock, MemoryStore};
/// use idem_core::lock::Lease;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new(); // or a RedisStore, shared by every instance
/// let lock = Lock::new(store, Key::new("ledger")?, Lease::Fixed(Duration::from_secs(10))).fair();
///
/// let guard = lock.acquire_within(Duration::from_secs(5)).await?;
/// // ... the work ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # What it adds to [`Lock`]
///
/// A plain lock wakes a waiter on release, but whoever asks first after the release takes
/// it: a newcomer can overtake callers that have waited for seconds, and under steady
/// contention the unluckiest caller waits without bound. A fair lock keeps, beside the
/// lock, a **queue** of waiters, across every process that shares the store:
///
/// - **Arrival order.** A caller that finds the lock held (or others queued) takes a place
///   at the back of the queue, in the same atomic step that looked at the lock. A free lock
///   goes to the head of the queue only; a newcomer, [`try_acquire`](Self::try_acquire)
///   included, never takes it past a waiter.
/// - **One release, one wake-up.** A release hands the turn to the head of the queue, and
///   wakes that waiter only: no herd of waiters rushing the store to find that one of them
///   won.
/// - **Dead waiters drop out.** A waiter renews its place each time it looks at the lock
///   (at least three times per [place timeout](Self::with_place_timeout), default 3 s);
///   a waiter that dies stops renewing, and its place lapses: it holds up the callers
///   behind it for at most the place timeout. A waiter that gives up or is cancelled
///   leaves the queue at once (a cancelled one, in a task spawned on drop).
/// - **The rest is [`Lock`]'s**: owners, reentry, leases and the watchdog, fencing tokens
///   ([`Lock::fenced`] before [`fair`](Lock::fair)), and the same [`LockGuard`].
///
/// # When to choose it
///
/// When callers contend for one lock steadily and **waiting time must be bounded**: jobs
/// that must each get their turn, a queue of payments for one account. Under light
/// contention a plain [`Lock`] serves the same. What fairness costs:
///
/// - **Hand-off**: a freed lock waits for the head of the queue to wake and take it,
///   instead of going to whoever asks first; with a waiter on a slow connection, the lock
///   sits free meanwhile. Acquisitions per second under contention are lower than a plain
///   lock's for that reason.
/// - **A dead waiter** at the head holds the lock free for up to the place timeout.
/// - **Store work**: a waiting attempt, a release and a leave are each one atomic step over
///   the lock, its queue and the places' lapse times — in Redis one script (keys
///   `namespace:{name}:queue`, `…:places`, and one wake-up list per waiter,
///   `…:turn:<owner>`), in the SQL stores one transaction on a queue table, where the head
///   of the queue polls for its turn — and each waiter renews its place every third of the
///   place timeout.
///
/// BENCHMARKS.md in the repository measures hand-off latency, acquisitions per second and
/// the longest wait of the two locks under the same contention.
///
/// Everyone who takes the same lock name must take it through a fair lock: a plain
/// [`Lock`] on the name does not look at the queue.
#[derive(Debug)]
pub struct FairLock<S: FairStore, F: FencingMode = Unfenced> {
    lock: Lock<S, F>,
    place_timeout: Duration,
}

impl<S: FairStore, F: FencingMode> Lock<S, F> {
    /// The same lock, taken in arrival order: see [`FairLock`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// use idem_core::{FairLock, Key, Lock, MemoryStore};
    /// use idem_core::lock::{Fenced, Lease};
    /// let lock: FairLock<MemoryStore, Fenced> =
    ///     Lock::new(MemoryStore::new(), Key::new("ledger").unwrap(), Lease::Fixed(Duration::from_secs(5)))
    ///         .fenced()
    ///         .fair();
    /// ```
    pub fn fair(self) -> FairLock<S, F> {
        FairLock {
            lock: self,
            place_timeout: PLACE_TIMEOUT,
        }
    }
}

impl<S: FairStore, F: FencingMode> FairLock<S, F> {
    /// How long a waiter's place in the queue outlives its last renewal (default 3 s, at
    /// least 30 ms): the longest a waiter that died holds up those behind it. A waiter
    /// renews its place three times per this, so a shorter timeout means more store
    /// operations per waiter.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_core::{Key, Lock, MemoryStore};
    /// # use idem_core::lock::Lease;
    /// let lock = Lock::new(MemoryStore::new(), Key::new("job").unwrap(), Lease::Fixed(Duration::from_secs(60)))
    ///     .fair()
    ///     .with_place_timeout(Duration::from_secs(1));
    /// ```
    pub fn with_place_timeout(mut self, timeout: Duration) -> Self {
        self.place_timeout = timeout.max(SHORTEST_PLACE_TIMEOUT);
        self
    }

    /// The lock's name.
    pub fn key(&self) -> &Key {
        self.lock.key()
    }

    /// Who acquires.
    pub fn owner(&self) -> &Owner {
        self.lock.owner()
    }

    /// The lease every acquisition takes.
    pub fn lease(&self) -> Lease {
        self.lock.lease()
    }

    /// How long a waiter's place outlives its last renewal.
    pub fn place_timeout(&self) -> Duration {
        self.place_timeout
    }

    /// Takes the lock if it is free and nobody waits for it (or it is already this
    /// owner's), without waiting and without taking a place in the queue.
    ///
    /// # Errors
    ///
    /// - [`LockError::Held`] when another owner holds it, or others wait for it
    ///   (`remaining` is then what the holder's lease has left, zero if it is free).
    /// - [`LockError::Store`] when the store fails.
    /// - [`LockError::NoRuntime`] outside a Tokio runtime.
    pub async fn try_acquire(&self) -> Result<LockGuard<S, F>, LockError> {
        let runtime = Handle::try_current().map_err(|_| LockError::NoRuntime)?;
        let sent_at = Instant::now();
        let turn = self.attempt(None).await?;
        self.lock.guard(&runtime, turn.into_acquire(), sent_at)
    }

    /// Takes the lock when its turn comes, waiting up to `timeout`: queues behind the
    /// waiters already there, sleeps until a release hands it the turn (or the holder's
    /// lease runs out), renewing its place meanwhile, and leaves the queue if `timeout`
    /// passes first. A last attempt is made when `timeout` has passed.
    ///
    /// # Errors
    ///
    /// - [`LockError::TimedOut`] when its turn did not come within `timeout`.
    /// - [`LockError::Store`] when the store fails.
    /// - [`LockError::NoRuntime`] outside a Tokio runtime.
    pub async fn acquire_within(&self, timeout: Duration) -> Result<LockGuard<S, F>, LockError> {
        let runtime = Handle::try_current().map_err(|_| LockError::NoRuntime)?;
        let started = Instant::now();
        let left = time_left(started, timeout);
        // Three renewals per place timeout, and never longer than a plain lock's waits.
        let renew_every = (self.place_timeout / 3).min(super::FALLBACK_POLL);
        let mut place = Place {
            store: Arc::clone(&self.lock.store),
            key: self.lock.key.clone(),
            owner: self.lock.owner.clone(),
            runtime: runtime.clone(),
            held: false,
        };
        let mut waited = false;
        loop {
            let last = left().is_zero();
            let sent_at = Instant::now();
            let turn = self.attempt((!last).then_some(self.place_timeout)).await?;
            let Turn::Queued { next, remaining } = turn else {
                place.held = false;
                if waited {
                    #[cfg(feature = "metrics")]
                    metrics::counter!("idem_lock_handoffs_total").increment(1);
                }
                return self.lock.guard(&runtime, turn.into_acquire(), sent_at);
            };
            if last {
                // The last attempt takes no place; one an earlier attempt took is left.
                if place.held {
                    place.leave().await;
                }
                return Err(LockError::TimedOut {
                    waited: started.elapsed(),
                });
            }
            place.held = true;
            // The head also looks again just past the holder's lease, so that an expiry
            // (which hands the turn to nobody) is seen.
            let until_expiry = match (next, remaining) {
                (true, Some(remaining)) => remaining.saturating_add(Duration::from_millis(1)),
                _ => Duration::MAX,
            };
            let within = until_expiry.min(renew_every).min(left());
            if within.is_zero() {
                continue;
            }
            waited = true;
            #[cfg(feature = "metrics")]
            metrics::counter!("idem_lock_waits_total").increment(1);
            let store = &self.lock.store;
            if let Err(error) = store.wait_for_turn(self.key(), self.owner(), within).await {
                tracing::debug!(key = %self.key(), ?error, "idem: waiting for a turn failed; polling instead");
                tokio::time::sleep(within).await;
            }
        }
    }

    /// One attempt; with `place`, one that queues (or renews the place) for that long.
    async fn attempt(&self, place: Option<Duration>) -> Result<Turn, LockError> {
        let lock = &self.lock;
        lock.store
            .acquire_in_turn(
                &lock.key,
                &lock.owner,
                lock.lease.duration(),
                F::FENCING,
                place,
            )
            .await
            .map_err(LockError::Store)
    }
}

/// A waiter's place in the queue, left when the wait ends without the lock: at once when
/// it times out, in a spawned task when its future is dropped (cancelled) or fails.
struct Place<S: FairStore> {
    store: Arc<S>,
    key: Key,
    owner: Owner,
    runtime: Handle,
    held: bool,
}

impl<S: FairStore> Place<S> {
    async fn leave(&mut self) {
        self.held = false;
        leave(&*self.store, &self.key, &self.owner).await;
    }
}

impl<S: FairStore> Drop for Place<S> {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let (store, key, owner) = (
            Arc::clone(&self.store),
            self.key.clone(),
            self.owner.clone(),
        );
        self.runtime
            .spawn(async move { leave(&*store, &key, &owner).await });
    }
}

/// Gives up `owner`'s place in `key`'s queue; a store that fails leaves the place to lapse.
async fn leave<S: FairStore>(store: &S, key: &Key, owner: &Owner) {
    if let Err(error) = store.leave_queue(key, owner).await {
        tracing::debug!(%key, ?error, "idem: leaving a lock's queue failed; the place lapses");
    }
}
