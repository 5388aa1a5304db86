//! [`LockError`]: why a lock was not acquired; [`LockLost`]: why a held lock ended.

use std::time::Duration;

use crate::store::StoreError;

/// Why [`Lock::try_acquire`](crate::Lock::try_acquire) or
/// [`Lock::acquire_within`](crate::Lock::acquire_within) returned no guard.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner holds the lock ([`try_acquire`](crate::Lock::try_acquire) only).
    #[error("the lock is held by another owner for {remaining:?} more")]
    Held {
        /// How long its current lease has left (a watchdog may extend it).
        remaining: Duration,
    },
    /// The lock stayed held by others for the whole wait.
    #[error("the lock stayed held for the whole wait of {waited:?}")]
    TimedOut {
        /// How long the caller waited.
        waited: Duration,
    },
    /// The store failed while acquiring. The lock may or may not have been taken for this
    /// owner; acquiring again with the same owner re-enters it if it was.
    #[error("the store failed while acquiring the lock")]
    Store(#[source] StoreError),
    /// No Tokio runtime is running here. A lock needs one for its timers, its watchdog
    /// and the release on drop.
    #[error("a lock needs a Tokio runtime, and none is running on this thread")]
    NoRuntime,
}

/// Why [`LockGuard::lost`](crate::lock::LockGuard::lost) completed: the holder can no longer
/// count on holding the lock and should stop the work it protects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockLost {
    /// A renewal found the lock no longer this owner's: it expired, was deleted, or
    /// another owner holds it now.
    NotHeld,
    /// The lease ran out: a [`Lease::Fixed`](crate::lock::Lease::Fixed) one reached its end, or
    /// the watchdog's renewals failed (the store did not answer) until it did. Someone
    /// else may hold the lock already.
    Expired,
}
