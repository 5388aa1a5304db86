//! [`RecordStore`]: the operations of idempotency records, and [`Begin`], what beginning
//! one found.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;

use super::{RELEASE_POLL_INTERVAL, StoreError, poll_until};
#[cfg(doc)]
use crate::MemoryStore;
use crate::key::{Fingerprint, Key, Owner};

/// Idempotency records: an attempt begun, its lease renewed while it runs, then its
/// response kept for later attempts or the record removed: what `IdempotencyLayer` and a
/// form token with replay are made of.
///
/// One of the capabilities a [`Store`](crate::Store) is the sum of. Each operation is one
/// atomic step in the store.
///
/// # An operator's operations
///
/// [`record_state`](Self::record_state) and [`remove_record`](Self::remove_record) serve
/// the people who run the application, not the guards: they look a record up by its key
/// alone and remove it without its owner (a payment stuck in progress after a crash, a
/// response kept by mistake). Every store of idem's own implements them. They have default
/// bodies so that a store written before them still compiles: those answer
/// [`StoreError::Unsupported`], and a store that keeps the defaults fails the
/// conformance suite's cases for them.
pub trait RecordStore: std::fmt::Debug + Send + Sync + 'static {
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

    /// What the record `key` holds now, whoever began it: `None` when there is no live
    /// record. For an operator, not a guard: a guard's decision is
    /// [`begin_record`](Self::begin_record)'s, in one atomic step.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer; [`StoreError::Unsupported`] from a
    /// store that keeps this default (see [An operator's
    /// operations](RecordStore#an-operators-operations)).
    fn record_state(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Option<RecordState>, StoreError>> + Send {
        let _ = key;
        std::future::ready(Err(StoreError::Unsupported {
            operation: "record_state",
        }))
    }

    /// Removes the record `key`, in progress or completed, whoever began it: the next
    /// request with its key runs afresh. `true` if a live record was there.
    ///
    /// An attempt still running when its record is removed is not stopped: its
    /// [`complete_record`](Self::complete_record) then finds no record of its owner and
    /// changes nothing, and a retry meanwhile begins the record anew. Remove a record in
    /// progress once its attempt is known to be dead (its process gone), or accept that
    /// the work may run again.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer; [`StoreError::Unsupported`] from a
    /// store that keeps this default (see [An operator's
    /// operations](RecordStore#an-operators-operations)).
    fn remove_record(&self, key: &Key) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = key;
        std::future::ready(Err(StoreError::Unsupported {
            operation: "remove_record",
        }))
    }

    /// Waits until the record `key` may have ended — completed, abandoned, removed, or its
    /// lease run out — or `within` has passed: `true` when the caller should look again,
    /// `false` when `within` passed with the record, as far as the store saw, still in
    /// progress.
    ///
    /// For a caller that found the record [in progress](Begin::InProgress) and would
    /// rather wait for the first attempt's answer than refuse: it waits at most the
    /// `remaining` lease `begin_record` reported (and its own bound), then looks again with
    /// [`begin_record`](Self::begin_record), which answers the stored response, starts the
    /// key afresh, or finds it in progress still (then it may wait again):
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_core::StoreError> {
    /// use std::time::Duration;
    /// use idem_core::{Begin, Fingerprint, Key, MemoryStore, Owner, RecordStore};
    /// let store = MemoryStore::new();
    /// let (key, fingerprint) = (Key::hashed(["POST /orders", "key-7f3a"]), Fingerprint::of(["book"]));
    /// let (first, lease) = (Owner::random(), Duration::from_secs(30));
    /// store.begin_record(&key, &first, &fingerprint, lease).await?;
    /// let winner = store.clone();
    /// let (k, f) = (key.clone(), first.clone());
    /// tokio::spawn(async move { winner.complete_record(&k, &f, "201".into(), lease).await });
    ///
    /// let mut begun = store.begin_record(&key, &Owner::random(), &fingerprint, lease).await?;
    /// while let Begin::InProgress { remaining } = begun {
    ///     store.wait_for_record(&key, remaining.min(Duration::from_secs(5))).await?;
    ///     begun = store.begin_record(&key, &Owner::random(), &fingerprint, lease).await?;
    /// }
    /// assert_eq!(begun, Begin::Completed { response: "201".into() });
    /// # Ok(()) }
    /// ```
    ///
    /// # The contract
    ///
    /// - **`true` is a hint**, never an answer: a wake-up may be spurious (a stale signal,
    ///   a renewal at the end of the lease, another attempt that began the key again at
    ///   once), and the record's fate is known only from the next `begin_record`.
    ///   A record that is not in progress when the wait starts (none, completed, or begun
    ///   for another fingerprint) answers `true` at once.
    /// - **No wake-up is missed**: an ending after the wait started wakes it, or the
    ///   store looks at the record often enough to see it (a store that cannot be
    ///   signalled polls; see each store's docs for how often).
    /// - **Bounded**: it returns by `within` (give or take one question to the store and
    ///   the scheduler), and a store that cannot be signalled of a lease running out
    ///   waits at most the remaining lease.
    /// - **Nothing on the way of the calls that do not wait**: a store may make
    ///   [`complete_record`](Self::complete_record),
    ///   [`abandon_record`](Self::abandon_record) and
    ///   [`remove_record`](Self::remove_record) signal, but only the keys somebody waits
    ///   for, and a record nobody waits for costs them no more than a read in the same
    ///   atomic step. A wait that answers at once sets no timer.
    ///
    /// Needs a Tokio runtime with its timer enabled.
    ///
    /// By default it polls: it asks [`record_state`](Self::record_state) every
    /// [`RELEASE_POLL_INTERVAL`](crate::store::RELEASE_POLL_INTERVAL) (and once more at the
    /// end of `within`) and is `true` once the record is no longer in progress; a store
    /// that keeps `record_state`'s [`Unsupported`](StoreError::Unsupported) default
    /// sleeps one such interval (at most `within`) and answers `true`, so that its caller
    /// polls with `begin_record`. A wrapper store forwards it, or its waiters poll.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn wait_for_record(
        &self,
        key: &Key,
        within: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        poll_for_record(self, key, within)
    }
}

/// The default [`RecordStore::wait_for_record`]: polls
/// [`record_state`](RecordStore::record_state), or, where the store does not support it,
/// sleeps one poll interval and lets the caller look.
async fn poll_for_record<S: RecordStore + ?Sized>(
    store: &S,
    key: &Key,
    within: Duration,
) -> Result<bool, StoreError> {
    let unsupported = AtomicBool::new(false);
    let ended = poll_until(within, || {
        let (asked, unsupported) = (store.record_state(key), &unsupported);
        async move {
            match asked.await {
                Ok(state) => Ok(!matches!(state, Some(RecordState::InProgress { .. }))),
                Err(StoreError::Unsupported { .. }) => {
                    unsupported.store(true, Ordering::Relaxed);
                    Ok(true)
                }
                Err(error) => Err(error),
            }
        }
    })
    .await?;
    if unsupported.load(Ordering::Relaxed) {
        tokio::time::sleep(within.min(RELEASE_POLL_INTERVAL)).await;
    }
    Ok(ended)
}

/// What a record holds, as [`RecordStore::record_state`] tells an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// An attempt is running, or ran and died without ending its record.
    InProgress {
        /// The fingerprint of the request that began it.
        fingerprint: Fingerprint,
        /// How long its lease has left: when it ends without a renewal, the next request
        /// with the key runs afresh.
        remaining: Duration,
    },
    /// An attempt completed: what it stored is replayed to every request with the key and
    /// the same fingerprint.
    Completed {
        /// The fingerprint of the request that began it.
        fingerprint: Fingerprint,
        /// The bytes given to [`RecordStore::complete_record`].
        response: Bytes,
        /// How long the record is kept still.
        remaining: Duration,
    },
}

impl RecordState {
    /// The fingerprint of the request that began the record.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem_core::{Fingerprint, RecordState};
    /// let fingerprint = Fingerprint::of(["POST", "/payments"]);
    /// let state = RecordState::InProgress { fingerprint, remaining: Duration::from_secs(5) };
    /// assert_eq!(state.fingerprint(), &fingerprint);
    /// ```
    pub fn fingerprint(&self) -> &Fingerprint {
        match self {
            Self::InProgress { fingerprint, .. } | Self::Completed { fingerprint, .. } => {
                fingerprint
            }
        }
    }

    /// How long the record has left: its lease in progress, its retention once completed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem_core::{Fingerprint, RecordState};
    /// let state = RecordState::Completed {
    ///     fingerprint: Fingerprint::of(["POST", "/payments"]),
    ///     response: "201".into(),
    ///     remaining: Duration::from_secs(60),
    /// };
    /// assert_eq!(state.remaining(), Duration::from_secs(60));
    /// ```
    pub fn remaining(&self) -> Duration {
        match self {
            Self::InProgress { remaining, .. } | Self::Completed { remaining, .. } => *remaining,
        }
    }
}

/// What [`RecordStore::begin_record`] found.
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
        /// The bytes given to [`RecordStore::complete_record`].
        response: Bytes,
    },
    /// The record belongs to a request with another fingerprint.
    Mismatch,
}
