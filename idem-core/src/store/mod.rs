//! The store capabilities: the atomic operations every guard in idem is built from, and
//! the stores that implement them.
//!
//! Each operation is **one atomic step in the store**: one command or one Lua script in
//! Redis, one critical section in memory. That is the whole point: a check-then-act in the
//! caller ("is it taken? no → take it") lets two concurrent requests both pass the check.
//!
//! A store has the capabilities below, each a trait; [`Store`] is their sum, which a guard
//! runtime takes. Code that needs one capability asks only for it: a [`Lock`](crate::Lock)
//! takes any [`LockStore`].
//!
//! | capability | trait | operations |
//! |---|---|---|
//! | anti-repeat windows, locks | [`LockStore`] | [`acquire`](LockStore::acquire), [`release`](LockStore::release), [`renew`](LockStore::renew), [`remaining`](LockStore::remaining) |
//! | waiting for a lock ([`Lock`](crate::Lock)) | [`LockStore`] | [`acquire_or_register_waiter`](LockStore::acquire_or_register_waiter), [`release_and_signal`](LockStore::release_and_signal), [`wait_for_release`](LockStore::wait_for_release) |
//! | one-time form tokens | [`TokenStore`] | [`put_token`](TokenStore::put_token), [`consume_token`](TokenStore::consume_token), [`has_token`](TokenStore::has_token) |
//! | idempotency records | [`RecordStore`] | [`begin_record`](RecordStore::begin_record), [`complete_record`](RecordStore::complete_record), [`renew_record`](RecordStore::renew_record), [`abandon_record`](RecordStore::abandon_record) |
//! | an operator's look at a record, and its removal | [`RecordStore`] | [`record_state`](RecordStore::record_state), [`remove_record`](RecordStore::remove_record) |
//! | waiting in arrival order ([`FairLock`](crate::FairLock)), not part of [`Store`] | [`FairStore`] | [`acquire_in_turn`](FairStore::acquire_in_turn), [`wait_for_turn`](FairStore::wait_for_turn), [`leave_queue`](FairStore::leave_queue), and [`release_and_signal`](LockStore::release_and_signal) |
//!
//! Everything that forwards the operations — [`AnyStore`](crate::AnyStore), idem-axum's
//! runtime store, test wrappers — is generated from one list of them,
//! [`store_operations!`](crate::store_operations).
//!
//! Locks, tokens and records live in separate spaces: the same [`Key`] used for a lock and
//! for a token names two different entries.
//!
//! Durations are kept to the millisecond; a TTL below one millisecond counts as one, and
//! one above a century as a century.

// The items an application writes first (`Store`, `MemoryStore`, `StoreError`, ...) are
// defined in these modules and public at the crate root only, so that every public item
// has one path; this module's own public items are the ones a store author needs besides.
pub(crate) mod any;
mod bound;
pub(crate) mod contract;
pub(crate) mod error;
pub(crate) mod fair;
pub(crate) mod locks;
pub(crate) mod memory;
mod operations;
pub(crate) mod records;
pub(crate) mod tokens;

use std::future::Future;
use std::time::Duration;

pub use self::bound::{Bounded, bounded, sharing_one_timer};
pub(crate) use self::contract::Store;
pub use self::error::BoxError;
pub(crate) use self::error::StoreError;
pub(crate) use self::fair::FairStore;
pub use self::fair::Turn;
pub(crate) use self::locks::{Acquire, LockStore};
pub use self::memory::MemoryStoreBuilder;
pub(crate) use self::records::{Begin, RecordState, RecordStore};
pub(crate) use self::tokens::TokenStore;
#[cfg(doc)]
use crate::Key;

/// How often the default [`LockStore::wait_for_release`] looks at the key it waits for.
pub const RELEASE_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Asks `ready` every [`RELEASE_POLL_INTERVAL`], and once more when `within` has passed:
/// `true` as soon as it answers `true`, `false` if it never did. How a store that cannot
/// signal waits, as the default [`LockStore::wait_for_release`] does.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_core::StoreError> {
/// use std::time::Duration;
/// let mut asked = 0;
/// let ready = idem_core::store::poll_until(Duration::from_secs(1), || {
///     asked += 1;
///     let now = asked;
///     async move { Ok(now == 3) }
/// })
/// .await?;
/// assert!(ready);
/// assert_eq!(asked, 3);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// The first error `ready` answers.
pub async fn poll_until<F, Fut>(within: Duration, mut ready: F) -> Result<bool, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, StoreError>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if ready().await? {
            return Ok(true);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        tokio::time::sleep_until(deadline.min(now + RELEASE_POLL_INTERVAL)).await;
    }
}

/// Whether [`LockStore::acquire`] draws a [`FencingToken`].
///
/// A [fenced lock](crate::lock#fencing-or-not) wants one; a plain lock and a per-client
/// anti-repeat window do not, and skipping it saves a counter per key (and, in Redis,
/// keeps the accept path at a single `SET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// No token.
    Off,
    /// Draw a token on each fresh acquisition.
    On,
}

/// A number that grows with every acquisition of one key (Kleppmann's fencing token).
///
/// Hand it to the resource the lock protects (a `WHERE fence < $1` in a database write)
/// and a holder that lost its lock during a pause can no longer write over the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// A token with a given value.
    ///
    /// ```
    /// assert_eq!(idem_core::store::FencingToken::new(7).get(), 7);
    /// ```
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// The longest TTL a store keeps, a century, in milliseconds: longer ones are cut to it,
/// so neither `Instant` arithmetic nor a server's expiry (Redis' `PEXPIRE`, a SQL
/// interval) can overflow, whatever a caller asks for.
pub const LONGEST_TTL_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

/// A TTL as the whole milliseconds every store keeps: at least 1, at most
/// [`LONGEST_TTL_MS`]. A store written outside this crate converts its TTLs with it, so it
/// keeps them as the others do.
///
/// ```
/// use std::time::Duration;
/// use idem_core::store::{LONGEST_TTL_MS, ttl_millis};
///
/// assert_eq!(ttl_millis(Duration::from_micros(1500)), 1);
/// assert_eq!(ttl_millis(Duration::ZERO), 1, "a TTL never means \"for ever\"");
/// assert_eq!(ttl_millis(Duration::MAX), LONGEST_TTL_MS);
/// ```
pub fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, LONGEST_TTL_MS)
}
