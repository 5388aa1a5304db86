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
