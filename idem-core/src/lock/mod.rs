//! A distributed lock over any [`Store`]: [`Lock`], [`LockGuard`], [`Lease`].
//!
//! A distributed lock, all the way from `SET NX`:
//!
//! - **An owner token**, so only the holder frees or extends its lock. A holder that
//!   stalled past its lease cannot delete the lock the next holder took meanwhile:
//!   release and renewal are one compare-and-act step in the
//!   store (a Lua script in Redis).
//! - **A lease** ([`Lease`]), so a holder that dies cannot block the lock for ever — either
//!   fixed, or renewed every third of it by a watchdog while the guard lives (Redisson's
//!   watchdog). The choice is explicit.
//! - **A fencing token** (Kleppmann), if asked for ([`Lock::fenced`]), with every
//!   acquisition, larger than every token before it for the same lock, also after an
//!   expiry. See [fencing or not](#fencing-or-not).
//! - **Reentry**: acquiring again with the same [`Owner`] succeeds, as after a network
//!   timeout that hid a success.
//! - **Waiting** that wakes on release: a release with waiters leaves one wake-up, taken
//!   by one waiter, so waiters neither poll in a tight loop nor stampede the store on each
//!   release; a release nobody waits for signals nothing. See [waiting](Lock#waiting).
//! - **Arrival order**, if asked for ([`Lock::fair`], a [`FairLock`]): waiters queue, and
//!   the lock goes to the head of the queue only, so no caller waits without bound.
//!
//! ```
//! use std::time::Duration;
//! use idem_core::{Key, Lease, Lock, MemoryStore};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new(); // or a RedisStore, shared by every instance
//! let lock = Lock::new(store, Key::new("nightly-invoice-run")?, Lease::Watchdog(Duration::from_secs(30)));
//!
//! let guard = lock.acquire_within(Duration::from_secs(5)).await?;
//! // ... the work, which may take longer than 30 s: the watchdog keeps the lock ...
//! assert!(guard.release().await?, "still ours when released");
//! # Ok(()) }
//! ```
//!
//! # What the lock guarantees, and what it does not
//!
//! Martin Kleppmann ("How to do distributed locking") separates locks taken for
//! **efficiency** — two workers doing the same job is wasteful, but harmless once in a
//! while — from locks taken for **correctness**, where two holders at once corrupt data.
//!
//! What holds:
//! - While the store keeps the key, at most one owner holds it: acquiring is one atomic
//!   step (`SET NX` or a Lua script in Redis, one critical section in memory).
//! - Nobody but the owner releases or renews it.
//! - A fenced lock's tokens strictly increase per lock name, across releases and expiry.
//! - A holder that dies frees the lock one lease later at most.
//!
//! What does not hold:
//! - **Mutual exclusion in time.** A holder can pause — a long GC, a swapped-out VM, a
//!   stalled network — past its lease without noticing; another process then takes the
//!   lock, and for a while both believe they hold it. No lease-based lock can prevent
//!   this; [`LockGuard::valid_until`] and [`LockGuard::lost`] only narrow the window.
//! - Survival of a Redis failure: the lock lives on one Redis (or one cluster shard, with
//!   asynchronous replication). If it fails over and loses the key, a second holder can
//!   acquire. This is no Redlock.
//!
//! So the lock alone is enough for **efficiency**. When **correctness** matters, make it
//! [fenced](Lock::fenced), pass the [fencing token](LockGuard::fencing_token) to the
//! resource the lock protects, and have
//! the resource refuse a write that carries a smaller token than one it has already seen —
//! in a database, a conditional `UPDATE`:
//!
//! ```
//! use std::time::Duration;
//! use idem_core::{FencingToken, Key, Lease, Lock, MemoryStore};
//!
//! /// What the application runs against its database, with the lock's token as `$2`.
//! const UPDATE: &str =
//!     "UPDATE invoices SET total = $1, fence = $2 WHERE id = 42 AND fence < $2";
//!
//! /// A stand-in for the table `invoices (id, total, fence)` that runs [`UPDATE`] and
//! /// returns the rows it changed, as a database driver's `execute` would.
//! struct Invoices { total: i64, fence: u64 }
//!
//! impl Invoices {
//!     fn execute(&mut self, sql: &str, total: i64, token: FencingToken) -> u64 {
//!         assert_eq!(sql, UPDATE);
//!         if self.fence < token.get() {
//!             (self.total, self.fence) = (total, token.get());
//!             1
//!         } else {
//!             0
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let (key, lease) = (Key::new("invoice-42")?, Lease::Fixed(Duration::from_millis(50)));
//! let mut invoices = Invoices { total: 0, fence: 0 };
//!
//! // Client 1 takes the lock, then stalls past its lease...
//! let stalled = Lock::new(store.clone(), key.clone(), lease).fenced().try_acquire().await?;
//! tokio::time::sleep(Duration::from_millis(60)).await;
//!
//! // ...so client 2 takes it, and writes with its (larger) token.
//! let current = Lock::new(store.clone(), key, lease).fenced().try_acquire().await?;
//! assert_eq!(invoices.execute(UPDATE, 200, current.fencing_token()), 1);
//!
//! // Client 1 wakes up and writes: the database refuses the stale token,
//! assert_eq!(invoices.execute(UPDATE, 100, stalled.fencing_token()), 0);
//! assert_eq!(invoices.total, 200);
//! // and its release leaves client 2's lock alone.
//! assert!(!stalled.release().await?);
//! assert!(current.release().await?);
//! # Ok(()) }
//! ```
//!
//! # Fencing or not
//!
//! The choice is made by type, once, where the lock is made:
//!
//! | made with | type | guard | in Redis, one acquire + release |
//! |---|---|---|---|
//! | [`Lock::new`] | `Lock<S>` = `Lock<S, Unfenced>` | no token | `SET … NX PX … GET`; a compare-and-delete script (`GET`, `DEL`, and a `GET` of the waiter count): 2 round trips |
//! | [`Lock::new`]`(..).`[`fenced()`](Lock::fenced) | `Lock<S, Fenced>` | [`fencing_token()`](LockGuard::fencing_token) | a script taking the lock and drawing the token (`GET`, `SET`, `INCR` of the name's counter); the same release: 2 round trips |
//!
//! Those are [`try_acquire`](Lock::try_acquire)'s. The attempts of
//! [`acquire_within`](Lock::acquire_within) are one script each in either mode (take the
//! lock, or count the caller as a waiter in the same step), and a release that has a
//! waiter to wake also pushes its wake-up; a lock nobody waits for pays neither.
//!
//! A fenced guard always has its token (a store that answers a fenced acquisition without
//! one fails the acquisition), and an unfenced guard has no `fencing_token` method at all,
//! so code that needs a token cannot compile against a lock that draws none.
//!
//! What fencing costs, besides the script: one counter per lock name that ever took a
//! token, which never expires (it is what keeps tokens growing across expiry; in Redis
//! `namespace:{name}:fence`, a few dozen bytes).
//!
//! Choose **fenced** when two holders at once would corrupt data and the protected
//! resource can check a number (a database row, a storage API with conditional writes):
//! only a token makes the lock safe against a holder paused past its lease. Choose
//! **unfenced** when the lock is for efficiency — sparing duplicate work, not preventing
//! it at all costs — or when the resource cannot check a token anyway.
//!
//! # Runtime
//!
//! A lock needs a Tokio runtime with its timer enabled: the watchdog is a task, waits and
//! leases are timed, and a dropped guard is released by a spawned task. Without one,
//! acquiring fails with [`LockError::NoRuntime`].

mod error;
mod fair;
mod fencing;
mod guard;
mod lease;
mod watchdog;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;

pub use self::error::{LockError, LockLost};
pub use self::fair::FairLock;
pub use self::fencing::{Fenced, FencingMode, Unfenced};
pub use self::guard::LockGuard;
pub use self::lease::Lease;
use self::watchdog::{Status, Watchdog};
use crate::key::{Key, Owner};
use crate::store::{Acquire, Store, StoreError};

/// The longest a waiter sleeps before trying again on its own, should the wake-up of a
/// release never reach it (a woken waiter was cancelled before it acquired, or a waiter
/// took a wake-up meant for one that gave up). Waiters wake on release long before this;
/// it only bounds how long such a miss costs.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// How much of a wait of `timeout` from `started` is left, each time it is called; a
/// timeout too long for the clock never runs out.
pub(crate) fn time_left(started: Instant, timeout: Duration) -> impl Fn() -> Duration {
    let deadline = started.checked_add(timeout);
    move || {
        deadline.map_or(Duration::MAX, |deadline| {
            deadline - Instant::now().min(deadline)
        })
    }
}

/// A named distributed lock, held by one [`Owner`]; [`Unfenced`] unless made
/// [`fenced`](Lock::fenced).
///
/// ```
/// use std::time::Duration;
/// use idem_core::{Key, Lease, Lock, LockError, MemoryStore};
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
/// ([`Store::acquire_or_register_waiter`]); then it sleeps in the store
/// ([`Store::wait_for_release`]) until a release wakes it — one waiter per release — or
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
pub struct Lock<S: Store, F: FencingMode = Unfenced> {
    store: Arc<S>,
    key: Key,
    owner: Owner,
    lease: Lease,
    fencing: PhantomData<F>,
}

impl<S: Store> Lock<S> {
    /// A lock named `key` in `store`, with a fresh random owner, without fencing tokens
    /// (see [`fenced`](Lock::fenced)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use idem_core::{Key, Lease, Lock, MemoryStore};
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
    /// use idem_core::{Fenced, Key, Lease, Lock, MemoryStore};
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

impl<S: Store, F: FencingMode> Lock<S, F> {
    /// Acquires as `owner` instead of a random owner, so that acquiring again as the same
    /// owner — from a retry, another task, another process — re-enters the hold.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_core::{Key, Lease, Lock, MemoryStore, Owner};
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
    fn guard(
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
