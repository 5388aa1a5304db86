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
//! use idem_core::{Key, Lock, MemoryStore};
//! use idem_core::lock::Lease;
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
//! use idem_core::{Key, Lock, MemoryStore};
//! use idem_core::lock::Lease;
//! use idem_core::store::FencingToken;
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
// `Lock` and `FairLock` are public at the crate root only: one path per public item.
pub(crate) mod fair;
mod fencing;
mod guard;
mod lease;
pub(crate) mod mutex;
mod watchdog;

use std::time::{Duration, Instant};

pub use self::error::{LockError, LockLost};
pub use self::fencing::{Fenced, FencingMode, Unfenced};
pub use self::guard::LockGuard;
pub use self::lease::Lease;
#[cfg(doc)]
use crate::{FairLock, Lock, Owner, Store};

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
