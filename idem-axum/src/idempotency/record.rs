//! [`IdempotencyRecord`]: the record [`IdempotencyLayer`](super::IdempotencyLayer) began
//! for a request, handed to its handler so that the handler can complete it in its own
//! database transaction.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use idem_core::outbound::{OutboundKey, OutboundKeys};
use idem_core::{Key, Owner};

use super::capture::{Captured, capture};
use super::stored_response;
use super::{RecordScope, Settings};
use crate::rejection::impl_layer_extractor;

/// The idempotency record of this request, begun by [`IdempotencyLayer`] before the
/// handler runs: for a handler whose store keeps records in its own database, to
/// complete the record **in the same transaction as its business writes**.
///
/// A store in another place than the business data (memory, Redis) can only be told the
/// outcome after the business transaction committed; a process that dies in between
/// leaves the record in progress, and once its lease runs out a retry runs the handler a
/// second time. Completed inside the transaction, the record and the business writes
/// commit together or not at all, and a retry after any crash either replays the stored
/// response or runs a handler whose first run left nothing behind.
///
/// Which store, then: `MemoryStore` for one process, `RedisStore` for many instances
/// (guards decided in the sub-millisecond; a record completed after the business commit,
/// so the window above stays open), and the SQL stores of `idem-sqlx` (`PostgresStore`,
/// `SqliteStore`) where a record must commit with the business data. Guards with nothing
/// to commit can stay on Redis: an [`Idem`](crate::Idem) runtime on the SQL store, layered
/// on just the routes whose handlers complete their records, is the one their layer uses.
///
/// The handler:
/// 1. [takes the record over](Self::take_over), begins its transaction and does its
///    writes in it;
/// 2. turns its response into the bytes the layer would store, with
///    [`stored_response`](Self::stored_response);
/// 3. completes the record with them in the same transaction and commits (for the SQL
///    stores of `idem-sqlx`, `commit_with_record`, which rolls back instead if the
///    record was lost: its lease ran out and a retry took the key over);
/// 4. returns the response.
///
/// The layer then leaves the record as it is, and answers without a further call to the
/// store: a request whose transaction took up to the store's timeout (a stalled link) is
/// answered within that timeout, not two. A handler that fails before committing returns
/// its error as usual: by the layer's policy (a 5xx is not stored) the record is removed
/// (waited for at most 50 ms, then in the background), and a retry runs afresh.
///
/// Extract it as `IdempotencyRecord` on a route where every request carries a key
/// (the layer [requires one](super::IdempotencyLayer::with_required)); a request without
/// one answers 500 naming what is missing. Extract `Option<IdempotencyRecord>` where a key
/// is optional.
///
/// ```
/// use axum::Json;
/// use axum::http::StatusCode;
/// use axum::response::{IntoResponse, Response};
/// use idem_axum::idempotency::IdempotencyRecord;
///
/// async fn create_order(record: IdempotencyRecord) -> Response {
///     record.take_over();
///     // let mut tx = pool.begin().await?;  … the order's writes …
///     let response = (StatusCode::CREATED, Json("order 7")).into_response();
///     let Ok((stored, response)) = record.stored_response(response).await else {
///         return StatusCode::INTERNAL_SERVER_ERROR.into_response();
///     };
///     // SqliteStore::commit_with_record(tx, record.key(), record.owner(), stored, record.retention()).await?;
///     # let _ = stored;
///     response
/// }
/// ```
///
/// [`IdempotencyLayer`]: super::IdempotencyLayer
#[derive(Clone)]
pub struct IdempotencyRecord {
    key: Key,
    owner: Owner,
    retention: Duration,
    scope: RecordScope,
    max_stored: usize,
    compress_from: Option<usize>,
    taken_over: Arc<AtomicBool>,
}

impl IdempotencyRecord {
    /// The handle on the record `owner` began under `key`, kept as `settings` say.
    pub(super) fn new(key: Key, owner: Owner, settings: &Settings) -> Self {
        Self {
            key,
            owner,
            retention: settings.retention,
            scope: settings.scope,
            max_stored: settings.max_stored_response,
            compress_from: settings.compress_from,
            taken_over: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The record's key in the store.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The owner the layer began the record as: only it can complete the record.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// How long a completed record is replayed
    /// ([`IdempotencyLayer::with_retention`](super::IdempotencyLayer::with_retention)).
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The keys of this handler's calls to other services, derived from the record's key:
    /// a rerun of the handler for the same record (after a crash, once the lease ran out)
    /// sends the same keys, and the services deduplicate its calls. Put the handle, or a
    /// key from it, in each outbound request's extensions for `idem-client`'s layer.
    ///
    /// Make one handle per run and clone it into each request: its clones number the
    /// run's unlabelled calls together ([`OutboundKeys::next_key`]).
    pub fn outbound_keys(&self) -> OutboundKeys {
        OutboundKeys::new(&self.key)
    }

    /// The key of this handler's outbound call named `label` (`"charge"`): the same in
    /// every run for this record, another for every label. See
    /// [`outbound_keys`](Self::outbound_keys).
    pub fn outbound_key(&self, label: &str) -> OutboundKey {
        OutboundKeys::new(&self.key).key(label)
    }

    /// Tells the layer that the handler completes this record itself, in its transaction:
    /// from this call on, the layer no longer completes it, and asks the store nothing
    /// before it answers. [`stored_response`](Self::stored_response) says the same; call
    /// this first, before the transaction begins, when that transaction can fail on the
    /// store's database: the layer then answers the failure without one more call to a
    /// store that is failing (a stalled link would hold the answer for a second timeout),
    /// and removes the record in the background.
    pub fn take_over(&self) {
        self.taken_over.store(true, Ordering::Relaxed);
    }

    /// The bytes that complete this record with `response`, encoded as the layer stores
    /// a response (status, headers, body), and the response to return, its body now read
    /// into memory. A body larger than the layer's
    /// [limit](super::IdempotencyLayer::with_max_stored_response) gives the "too large to
    /// replay" note instead, as the layer would store it.
    ///
    /// From this call on, the layer expects the handler to complete the record itself
    /// ([`take_over`](Self::take_over)). A response it would not keep (a 5xx: the
    /// transaction failed) has the record removed, and the answer waits for that at most
    /// 50 ms: a store that stalls goes on removing it in the background, which the drain
    /// ([`Idem::shutdown`](crate::Idem::shutdown)) waits for, and a retry that comes
    /// before then gets 409 with `Retry-After`.
    ///
    /// # Errors
    ///
    /// The response's body failed while it was being read.
    pub async fn stored_response(
        &self,
        response: impl IntoResponse,
    ) -> Result<(Bytes, Response), axum::Error> {
        self.take_over();
        let (parts, body) = response.into_response().into_parts();
        let captured = match capture(body, self.max_stored).await {
            Captured::Failed { error, .. } => return Err(error),
            captured => captured,
        };
        let stored = match &captured {
            Captured::Whole { data, trailers } => stored_response::encode_response(
                &parts,
                data,
                trailers.as_ref(),
                self.scope,
                self.compress_from,
            ),
            _ => stored_response::encode_too_large(parts.status),
        };
        Ok((stored, Response::from_parts(parts, captured.into_body())))
    }

    /// Whether the handler took over the record's completion.
    pub(super) fn taken_over(&self) -> bool {
        self.taken_over.load(Ordering::Relaxed)
    }
}

/// Leaves the owner out of the output: it is what completes the record.
impl fmt::Debug for IdempotencyRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyRecord")
            .field("key", &self.key)
            .field("retention", &self.retention)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl_layer_extractor! {
    IdempotencyRecord,
    log: "idem: IdempotencyRecord extracted where no record was begun",
    detail: "this handler takes the request's idempotency record, but none was begun: put \
             `IdempotencyLayer` on its route and require a key there (`with_required`), or \
             extract `Option<IdempotencyRecord>`",
}
