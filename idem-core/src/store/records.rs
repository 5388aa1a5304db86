//! [`RecordStore`]: the operations of idempotency records, and [`Begin`], what beginning
//! one found.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

use super::StoreError;
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
