//! The [`Store`] trait: the atomic operations every guard in idem is built from, and the
//! stores that implement it.
//!
//! Each operation is **one atomic step in the store**: one command or one Lua script in
//! Redis, one critical section in memory. That is the whole point: a check-then-act in the
//! caller ("is it taken? no → take it") lets two concurrent requests both pass the check.
//!
//! | capability | operations |
//! |---|---|
//! | anti-repeat window, locks | [`acquire`](Store::acquire), [`release`](Store::release), [`renew`](Store::renew), [`remaining`](Store::remaining) |
//! | waiting for a lock ([`Lock`](crate::Lock)) | [`acquire_or_register_waiter`](Store::acquire_or_register_waiter), [`release_and_signal`](Store::release_and_signal), [`wait_for_release`](Store::wait_for_release) |
//! | waiting in arrival order ([`FairLock`](crate::FairLock)), trait [`FairStore`] | [`acquire_in_turn`](FairStore::acquire_in_turn), [`wait_for_turn`](FairStore::wait_for_turn), [`leave_queue`](FairStore::leave_queue), and [`release_and_signal`](Store::release_and_signal) |
//! | one-time form tokens | [`put_token`](Store::put_token), [`consume_token`](Store::consume_token) |
//! | idempotency records | [`begin_record`](Store::begin_record), [`complete_record`](Store::complete_record), [`renew_record`](Store::renew_record), [`abandon_record`](Store::abandon_record) |
//!
//! Locks, tokens and records live in separate spaces: the same [`Key`] used for a lock and
//! for a token names two different entries.
//!
//! Durations are kept to the millisecond; a TTL below one millisecond counts as one, and
//! one above a century as a century.

mod any;
mod fair;
mod memory;
#[cfg(feature = "redis")]
mod redis;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

use crate::key::{Fingerprint, Key, Owner};

pub use self::any::AnyStore;
pub use self::fair::{FairStore, Turn};
pub use self::memory::{MemoryStore, MemoryStoreBuilder};
#[cfg(feature = "redis")]
pub use self::redis::{
    EvictionCheck, RedisSetupError, RedisStore, RedisStoreBuilder, ReplicasBehind,
};

/// A shared store of short-lived keys with atomic operations.
///
/// Implemented by [`MemoryStore`] (one process) and `RedisStore` (feature `redis`: many
/// processes). Every implementation passes the same conformance suite (`tests/` in the
/// repository). Clones of a store share its data.
pub trait Store: std::fmt::Debug + Send + Sync + 'static {
    /// Takes `key` for `owner` for `ttl`, unless someone holds it.
    ///
    /// With [`Fencing::On`] a fresh acquisition also draws a [`FencingToken`] larger than
    /// every token drawn for this key before, also after the key expired in between.
    /// Re-acquiring a key this owner already holds is [`Acquire::Reentered`]; it does not
    /// change the key's TTL.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer (or, for [`MemoryStore`], is full).
    fn acquire(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send;

    /// Frees `key` if `owner` holds it. `true` if it did; `false` (and nothing changed) if
    /// the key is free or held by someone else.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn release(
        &self,
        key: &Key,
        owner: &Owner,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// [`acquire`](Store::acquire), and when another owner holds `key`
    /// ([`Acquire::Held`]), counts the caller as a waiter for up to `wait`, in the same
    /// atomic step, so that the next [`release_and_signal`](Store::release_and_signal) of
    /// `key` leaves a wake-up for it. A caller that gets `Held` goes on to
    /// [`wait_for_release`](Store::wait_for_release) for at most `wait`.
    ///
    /// Registering in the step that saw the key held is what makes a wake-up impossible to
    /// miss: a release either came before that step (which then took the key, or saw it
    /// taken again by someone else) or after it (and signals). A registration is never
    /// taken back: a waiter that leaves without being woken leaves one wake-up unused,
    /// which wakes a later waiter once for nothing; it lapses after `wait` at the latest.
    ///
    /// By default it is [`acquire`](Store::acquire): a store whose
    /// [`wait_for_release`](Store::wait_for_release) registers the waiter itself (atomically
    /// with seeing the key held) or polls has nothing to do here. A store that overrides
    /// one of this, [`release_and_signal`](Store::release_and_signal) and
    /// [`wait_for_release`](Store::wait_for_release) overrides the three, and a wrapper
    /// store forwards the three, or its lock waiters are never signalled and wake only by
    /// their fallback poll.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer (or, for [`MemoryStore`], is full).
    fn acquire_or_register_waiter(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send {
        let _ = wait;
        self.acquire(key, owner, ttl, fencing)
    }

    /// Frees `key` like [`release`](Store::release), and if it did and a waiter is
    /// registered, signals **one** caller of [`wait_for_release`](Store::wait_for_release)
    /// on `key`.
    ///
    /// A separate operation so that [`release`](Store::release), on the anti-repeat path
    /// where nobody waits, stays one plain compare-and-delete. Still one atomic step: the
    /// delete, the look at the waiters and the signal happen together or not at all. A
    /// release nobody waits for signals nothing and leaves nothing behind, so it costs what
    /// a [`release`](Store::release) costs, give or take one read inside the step.
    ///
    /// By default it is [`release`](Store::release) and signals nothing, which suits the
    /// default [`wait_for_release`](Store::wait_for_release) (it looks at the key rather
    /// than waiting for a signal).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn release_and_signal(
        &self,
        key: &Key,
        owner: &Owner,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.release(key, owner)
    }

    /// Waits until a [`release_and_signal`](Store::release_and_signal) of `key` wakes this
    /// caller, or `within` has passed. `true` when woken, `false` when the time ran out.
    ///
    /// - A release signals only waiters that registered: by
    ///   [`acquire_or_register_waiter`](Store::acquire_or_register_waiter) answering
    ///   [`Acquire::Held`], or (in stores that do it that way, such as [`MemoryStore`]) by
    ///   this call, atomically with seeing the key held — it is `true` at once when the key
    ///   is free.
    /// - One signal wakes **one** waiter, so a release does not stampede every waiter into
    ///   the store at once.
    /// - A signal given for a registered waiter that has not started waiting yet is not
    ///   lost: it wakes the next waiter to arrive (typically that one). A release that
    ///   nobody registered for wakes nobody, now or later.
    /// - `true` is a hint, not a promise that the key is free: a signal can be stale, or
    ///   someone else can take the key first. Callers try to acquire again.
    /// - A key that expires, rather than being released, signals nobody: waiters pass a
    ///   `within` no longer than the key's remaining TTL to notice that.
    ///
    /// Needs a Tokio runtime with its timer enabled. `RedisStore` waits with `BLPOP` on a
    /// connection of its own, never on the one its other operations share.
    ///
    /// By default it asks [`remaining`](Store::remaining) every
    /// [`RELEASE_POLL_INTERVAL`] (and once more at the end of `within`) and is `true` as
    /// soon as the key is free: every waiter then sees the same release, so a store with
    /// many waiters per key overrides this and
    /// [`release_and_signal`](Store::release_and_signal) with a real signal.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn wait_for_release(
        &self,
        key: &Key,
        within: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        poll_until(within, move || async move {
            Ok(self.remaining(key).await?.is_none())
        })
    }

    /// Sets the TTL of `key` to `ttl` from now if `owner` holds it. `true` if it did.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn renew(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// How long `key` stays held, or `None` if it is free.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn remaining(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Duration>, StoreError>> + Send;

    /// Stores the one-time token `token` in `scope` for `ttl` (replacing one with the same
    /// name), and keeps only the `keep` newest tokens of `scope`: older ones lapse, as if
    /// they had expired. A scope is typically one client, so a client that renders a form
    /// a thousand times holds its last few tokens, not a thousand.
    ///
    /// Tokens have a budget of their own in every store, apart from windows, locks and
    /// records: when it is full the store evicts the unspent tokens that expire soonest (for
    /// one TTL, the oldest) to make room, so a flood of tokens never fails this call and
    /// never takes room a guard needs. An evicted token costs its user a form reload, never
    /// a duplicate.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn put_token(
        &self,
        scope: &Key,
        token: &Key,
        ttl: Duration,
        keep: usize,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the token `token` of `scope`. `true` for exactly one caller per stored token;
    /// the delete itself is the check, so concurrent consumers cannot both succeed. A
    /// token of another scope, an expired, lapsed or evicted one is `false`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn consume_token(
        &self,
        scope: &Key,
        token: &Key,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Starts an idempotency record for `owner`, or reports the one that exists.
    ///
    /// A new record is in progress for `lease`, tied to `fingerprint`. An existing record
    /// with another fingerprint is [`Begin::Mismatch`], whatever its state.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer (or, for [`MemoryStore`], is full).
    fn begin_record(
        &self,
        key: &Key,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> impl Future<Output = Result<Begin, StoreError>> + Send;

    /// Stores `response` in the record `owner` began and keeps it for `retention`.
    ///
    /// Fenced: `true` only if the record is still in progress and still `owner`'s. A worker
    /// whose lease ran out (and whose key someone else began again) gets `false` and
    /// changes nothing.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer (or, for [`MemoryStore`], has no room
    /// for the response: the record then stays in progress, unchanged).
    fn complete_record(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Extends the lease of an in-progress record `owner` began. `true` if it did.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn renew_record(
        &self,
        key: &Key,
        owner: &Owner,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes an in-progress record `owner` began, so a retry runs afresh. `true` if it
    /// did; a completed record, or another owner's, is left alone.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn abandon_record(
        &self,
        key: &Key,
        owner: &Owner,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// How often the default [`Store::wait_for_release`] looks at the key it waits for.
pub const RELEASE_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Asks `ready` every [`RELEASE_POLL_INTERVAL`], and once more when `within` has passed:
/// `true` as soon as it answers `true`, `false` if it never did. How a store that cannot
/// signal waits, as the default [`Store::wait_for_release`] does.
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

/// Whether [`Store::acquire`] draws a [`FencingToken`].
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
    /// assert_eq!(idem_core::FencingToken::new(7).get(), 7);
    /// ```
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// What [`Store::acquire`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The key was free and is now ours.
    Acquired {
        /// The fencing token, with [`Fencing::On`].
        fence: Option<FencingToken>,
    },
    /// The key was already ours (same [`Owner`]); nothing changed.
    Reentered {
        /// How long it stays held.
        remaining: Duration,
        /// The fencing token of the current hold, with [`Fencing::On`].
        fence: Option<FencingToken>,
    },
    /// Someone else holds the key.
    Held {
        /// How long it stays held.
        remaining: Duration,
    },
}

/// What [`Store::begin_record`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// No record existed; one is now in progress for the caller.
    Started,
    /// Another attempt with the same fingerprint is running.
    InProgress {
        /// How long its lease has left.
        remaining: Duration,
    },
    /// An attempt with the same fingerprint completed; here is what it stored.
    Completed {
        /// The bytes given to [`Store::complete_record`].
        response: Bytes,
    },
    /// The record belongs to a request with another fingerprint.
    Mismatch,
}

/// Why a store operation failed.
///
/// Whatever the variant, the operation may or may not have taken effect in the store (a
/// timeout can strike after the server applied a command): callers treat it as "unknown"
/// and follow their store-failure policy.
///
/// The variants speak of stores in general; what a particular backend reports (a Redis
/// error, a SQL driver's error, a server the store will not use) is the source of
/// [`Backend`](StoreError::Backend), typed, for [`downcast_ref`](std::error::Error) by
/// whoever needs the detail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within its timeout.
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    /// A store bounded in entries (such as [`MemoryStore`]) holds as many live windows,
    /// locks and records as it may, even after reclaiming the expired ones.
    #[error("the store is full ({capacity} live entries)")]
    Capacity {
        /// The configured capacity.
        capacity: usize,
    },
    /// A store bounded in bytes (such as [`MemoryStore`]) holds as many bytes of windows,
    /// locks and records, stored responses included, as it may, even after reclaiming the
    /// expired ones.
    #[error("the store is full ({max_bytes} bytes)")]
    Memory {
        /// The configured limit.
        max_bytes: usize,
    },
    /// The backend failed: no connection could be opened, a command was refused or broke
    /// off, or the server is one the store will not use. The source says which.
    #[error("the store's backend failed")]
    Backend(#[source] BoxError),
    /// The store answered something the operation cannot read.
    #[error("unexpected answer from the store to `{operation}`: {answer}")]
    UnexpectedAnswer {
        /// The operation.
        operation: &'static str,
        /// What came back.
        answer: String,
    },
}

/// The error a backend reports, as [`StoreError::Backend`] carries it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl StoreError {
    /// A [`Backend`](StoreError::Backend) failure caused by `source`.
    ///
    /// ```
    /// use std::io;
    /// use idem_core::StoreError;
    ///
    /// let error = StoreError::backend(io::Error::from(io::ErrorKind::ConnectionRefused));
    /// let source = std::error::Error::source(&error).unwrap();
    /// assert!(source.downcast_ref::<io::Error>().is_some());
    /// ```
    pub fn backend(source: impl Into<BoxError>) -> Self {
        Self::Backend(source.into())
    }

    /// The backend's own error, when this is a [`Backend`](StoreError::Backend) failure
    /// caused by an `E`.
    ///
    /// ```
    /// use std::io;
    /// use idem_core::StoreError;
    ///
    /// let error = StoreError::backend(io::Error::from(io::ErrorKind::ConnectionRefused));
    /// assert_eq!(error.backend_error::<io::Error>().unwrap().kind(), io::ErrorKind::ConnectionRefused);
    /// assert!(StoreError::Timeout(std::time::Duration::from_secs(1)).backend_error::<io::Error>().is_none());
    /// ```
    pub fn backend_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Self::Backend(source) => source.downcast_ref(),
            _ => None,
        }
    }

    /// An [`UnexpectedAnswer`](StoreError::UnexpectedAnswer) to `operation`: the store
    /// answered `answer`, kept in its `Debug` form, which shows a backend's raw value as it
    /// came.
    ///
    /// ```
    /// use idem_core::StoreError;
    ///
    /// let error = StoreError::unexpected("acquire", [7, 0]);
    /// assert_eq!(error.to_string(), "unexpected answer from the store to `acquire`: [7, 0]");
    /// ```
    pub fn unexpected(operation: &'static str, answer: impl std::fmt::Debug) -> Self {
        Self::UnexpectedAnswer {
            operation,
            answer: format!("{answer:?}"),
        }
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
