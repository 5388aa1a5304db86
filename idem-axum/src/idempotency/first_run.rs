//! The first attempt of a key, from its record begun to its record completed or
//! abandoned: run in a task of its own, so a client that goes away does not abandon it
//! half-way; its record's lease renewed while it runs; and ending in one of two ways — its
//! response stored, or its record removed so a retry runs afresh.
//!
//! [`Record`] is what both users of idempotency records call — [`IdempotencyLayer`] and
//! a form token with replay: [`Record::begin`], [`Record::run`] (which completes or
//! abandons the record), [`Record::abandon`] for an attempt that does not run, and
//! [`replay`](super::replay) for a completed one.
//!
//! [`IdempotencyLayer`]: super::IdempotencyLayer

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use futures_util::FutureExt;
use http::StatusCode;
use http::header::CONTENT_ENCODING;
use http::response::Parts;
use idem_core::{AnyStore, Begin, Fingerprint, Key, Owner, Store, StoreError};
use pin_project_lite::pin_project;
use tokio::runtime::Handle;

use super::Settings;
use super::capture::{Captured, capture};
use super::record::IdempotencyRecord;
use super::stored_response;
use crate::detached::run_to_completion;
use crate::future::Inner;
use crate::rejection::Rejection;

/// What beginning a record came to.
pub(crate) enum Began {
    /// No record existed: this request holds one now, and runs first.
    First(Record),
    /// A request with this key completed: what it stored, to [replay](super::replay).
    Completed(Bytes),
    /// A request with this key still runs; its lease has this long left.
    InProgress(Duration),
    /// The key belongs to a request with another fingerprint.
    Mismatch,
}

/// What an attempt spent to be let run (a form token), given back before its record is
/// removed: a retry of the failed attempt then finds it again, and no retry can begin
/// the record before it is back.
pub(crate) trait GiveBack: Send + Sync + 'static {
    /// Gives it back; a failure is logged, not returned: the record goes either way.
    fn give_back(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// An in-progress record this attempt began, and the handle on it the handler gets.
///
/// Shared behind one `Arc`: the boxed work holds it twice (renewing its lease, and
/// abandoning it on a panic), and each copy inline would take that box past glibc's
/// per-thread cache (BENCHMARKS.md, "The reshape"; `tests::the_boxed_work_stays_small`).
#[derive(Clone)]
pub(crate) struct Record(Arc<RecordState>);

/// What a [`Record`] shares.
pub(crate) struct RecordState {
    store: AnyStore,
    settings: Arc<Settings>,
    handle: IdempotencyRecord,
    given_back: Option<Box<dyn GiveBack>>,
}

impl std::ops::Deref for Record {
    type Target = RecordState;

    fn deref(&self) -> &RecordState {
        &self.0
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl Record {
    /// Begins the record `key` for a request with `fingerprint`, or finds the one there.
    ///
    /// # Errors
    ///
    /// The store's, when it cannot answer.
    pub(crate) async fn begin(
        store: &AnyStore,
        key: &Key,
        fingerprint: &Fingerprint,
        settings: &Arc<Settings>,
    ) -> Result<Began, StoreError> {
        let owner = Owner::random();
        let begun = store.begin_record(key, &owner, fingerprint, settings.lease);
        Ok(match begun.await? {
            Begin::Started => Began::First(Self(Arc::new(RecordState {
                store: store.clone(),
                settings: Arc::clone(settings),
                handle: IdempotencyRecord::new(key.clone(), owner, settings),
                given_back: None,
            }))),
            Begin::Completed { response } => Began::Completed(response),
            Begin::InProgress { remaining } => Began::InProgress(remaining),
            Begin::Mismatch => Began::Mismatch,
        })
    }

    /// This record, with `spent` given back whenever it is abandoned.
    pub(crate) fn giving_back(self, spent: impl GiveBack) -> Self {
        let given_back = Some(Box::new(spent) as Box<dyn GiveBack>);
        Self(Arc::new(RecordState {
            store: self.store.clone(),
            settings: Arc::clone(&self.settings),
            handle: self.handle.clone(),
            given_back,
        }))
    }

    fn key(&self) -> &Key {
        self.handle.key()
    }

    fn owner(&self) -> &Owner {
        self.handle.owner()
    }

    /// Renews the lease every third of it, for as long as it is polled.
    async fn keep_alive(self, lease: Duration) -> Infallible {
        // A lease under 3 ms would otherwise renew in a tight loop.
        let period = (lease / 3).max(Duration::from_millis(1));
        loop {
            tokio::time::sleep(period).await;
            match self
                .store
                .renew_record(self.key(), self.owner(), lease)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(
                        "idem: a running request lost its idempotency record (its lease ran \
                         out); its response will not be stored"
                    );
                    return std::future::pending().await;
                }
                // The next renewal comes before the lease ends, unless the store stays down.
                Err(error) => tracing::warn!(%error, "idem: could not renew an idempotency record"),
            }
        }
    }

    /// Stores `response`, the encoding of a response with `status`. A store out of room
    /// for it (a full `MemoryStore`) keeps the "too large to replay" note instead, so a
    /// retry is refused rather than run a second time.
    ///
    /// A store that cannot answer now (Redis restarting, a network fault) gets the
    /// completion again, in the background, until it answers: the handler has run, and
    /// a record left in progress would let a retry run it a second time once its lease
    /// ran out. The client gets its response meanwhile.
    async fn complete(&self, response: Bytes, status: StatusCode, retention: Duration) {
        match self.try_complete(response.clone(), status, retention).await {
            Ok(stored) => self.completed(stored, false),
            Err(error) => {
                tracing::warn!(
                    %error,
                    "idem: the response could not be stored yet; storing it again until the \
                     store answers"
                );
                let Ok(runtime) = Handle::try_current() else {
                    return;
                };
                let record = self.clone();
                runtime.spawn(async move {
                    record
                        .complete_when_the_store_answers(response, status, retention)
                        .await;
                });
            }
        }
    }

    /// Completes the record again and again, ever less often (from 50 ms up to 1 s
    /// apart), until the store answers or `retention` has passed.
    async fn complete_when_the_store_answers(
        self,
        response: Bytes,
        status: StatusCode,
        retention: Duration,
    ) {
        let deadline = tokio::time::Instant::now() + retention;
        let mut pause = Duration::from_millis(50);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            match self.try_complete(response.clone(), status, retention).await {
                Ok(stored) => return self.completed(stored, true),
                Err(_) if tokio::time::Instant::now() < deadline => {}
                Err(error) => {
                    tracing::error!(
                        %error,
                        "idem: the response could not be stored within its retention; a \
                         retry runs again once the lease ends"
                    );
                    return;
                }
            }
        }
    }

    /// One attempt at completing the record, falling back to the "too large" note when
    /// the store has no room for the response.
    async fn try_complete(
        &self,
        response: Bytes,
        status: StatusCode,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let stored = self
            .store
            .complete_record(self.key(), self.owner(), response, retention)
            .await;
        match stored {
            Err(StoreError::Memory { .. }) => {
                tracing::warn!("idem: no room to store the response; retries get 409");
                let note = stored_response::encode_too_large(status);
                self.store
                    .complete_record(self.key(), self.owner(), note, retention)
                    .await
            }
            other => other,
        }
    }

    /// Logs what a completion the store answered came to; `again` after an attempt whose
    /// outcome is unknown (a timeout can strike after the store applied it).
    fn completed(&self, stored: bool, again: bool) {
        if stored {
            tracing::debug!(again, "idem: response stored");
        } else if again {
            tracing::info!(
                "idem: the record was no longer in progress when the store answered again: \
                 stored by the earlier attempt, or lost when its lease ran out"
            );
        } else if self.handle.taken_over() {
            tracing::debug!(
                "idem: the handler completed the record itself, in its own transaction"
            );
        } else {
            tracing::warn!(
                "idem: the response was not stored: the attempt lost its record to a newer one \
                 (its lease ran out)"
            );
        }
    }

    /// Removes the record, so that a retry runs afresh, once what the attempt spent is
    /// given back.
    pub(crate) async fn abandon(&self) {
        if let Some(spent) = &self.given_back {
            spent.give_back().await;
        }
        if let Err(error) = self.store.abandon_record(self.key(), self.owner()).await {
            tracing::warn!(%error, "idem: could not remove an idempotency record; it ends with its lease");
        }
    }
}

pin_project! {
    /// `work`, with its record's lease renewed every third of it while `work` waits. The
    /// renewal (a timer) is made, on the heap, only once `work` has to wait.
    struct Renewing<W> {
        #[pin]
        work: W,
        record: Record,
        renewal: Option<Pin<Box<dyn Future<Output = Infallible> + Send>>>,
    }
}

impl<W: Future> Future for Renewing<W> {
    type Output = W::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<W::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.work.poll(cx) {
            return Poll::Ready(output);
        }
        let record = this.record;
        let renewal = this.renewal.get_or_insert_with(|| {
            let lease = record.settings.lease;
            Box::pin(record.clone().keep_alive(lease))
        });
        match renewal.as_mut().poll(cx) {
            Poll::Ready(never) => match never {},
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Removes the record when dropped while armed: when the handler panicked, unwinding the
/// task that held it.
struct Pending {
    record: Record,
    armed: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        tracing::error!(
            "idem: the first attempt ended without a response (a panic); its idempotency record is removed"
        );
        // Without a runtime (it is shutting down) the record ends with its lease.
        if let Ok(runtime) = Handle::try_current() {
            let record = self.record.clone();
            runtime.spawn(async move { record.abandon().await });
        }
    }
}

impl Record {
    /// Runs the request as the first attempt of this record's key and answers with its
    /// response, stored in the record — or the record abandoned, when the response is not
    /// to be kept, the service failed or the handler panicked.
    ///
    /// The attempt is a task of its own: dropping this future (the client went away)
    /// leaves it running to the end. A panic in the handler removes the record, then
    /// resumes here.
    ///
    /// Its output is the refusal for an attempt the runtime cancelled while shutting down
    /// (its record then ends with its lease), or the attempt's answer.
    pub(crate) fn run<S: Inner>(
        self,
        inner: S,
        request: Request,
    ) -> impl Future<Output = Result<Result<Response, S::Error>, Rejection>> + Send + 'static {
        run_to_completion(self.work(inner, request))
    }

    /// The attempt [`run`](Self::run) boxes: the handler's call and the response
    /// captured, renewing the lease while they wait, then settled.
    ///
    /// A [`Renewing`] future composed with [`settle`](Self::settle) rather than one
    /// `async` block, which would hold the renewal inline and the work and the record
    /// twice (`tests::the_boxed_work_stays_small`).
    fn work<S: Inner>(
        self,
        mut inner: S,
        mut request: Request,
    ) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
        request.extensions_mut().insert(self.handle.clone());
        let max_stored = self.settings.max_stored_response;
        let work = async move {
            let (parts, body) = inner.call(request).await?.into_parts();
            Ok::<_, S::Error>((parts, capture(body, max_stored).await))
        };
        let renewing = Renewing {
            work,
            record: self.clone(),
            renewal: None,
        };
        let pending = Pending {
            record: self,
            armed: true,
        };
        renewing.then(move |produced| {
            let mut pending = pending;
            pending.armed = false;
            pending.record.clone().settle(produced)
        })
    }

    /// Stores the response, or removes the record, and hands the response on.
    ///
    /// An `async` block, whose arguments its future keeps once (an `async fn` keeps them
    /// twice): it is part of the work [`run`](Self::run) boxes
    /// (`tests::the_boxed_work_stays_small`).
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn's future would hold `produced` twice"
    )]
    fn settle<E>(
        self,
        produced: Result<(Parts, Captured), E>,
    ) -> impl Future<Output = Result<Response, E>> {
        async move {
            let (parts, captured) = match produced {
                Ok(produced) => produced,
                Err(error) => {
                    self.abandon().await;
                    return Err(error);
                }
            };
            match self.kept(&parts, &captured) {
                Some(stored) => {
                    let retention = self.settings.retention;
                    self.complete(stored, parts.status, retention).await;
                }
                None => self.abandon().await,
            }
            Ok(Response::from_parts(parts, captured.into_body()))
        }
    }

    /// What the record keeps of a response: the response, or, too large, a note of it;
    /// nothing when its status is not kept (by policy) or its body failed.
    fn kept(&self, parts: &Parts, captured: &Captured) -> Option<Bytes> {
        if !(self.settings.stores_status)(parts.status) {
            tracing::debug!(
                status = parts.status.as_u16(),
                "idem: response not stored (by policy)"
            );
            return None;
        }
        match captured {
            Captured::Whole { data, .. } => {
                if let Some(coding) = parts.headers.get(CONTENT_ENCODING) {
                    tracing::warn!(
                        content_encoding = ?coding,
                        "idem: an idempotent response is stored already encoded; put \
                         compression outside IdempotencyLayer, so that the identity \
                         encoding is stored and each replay is compressed for its own \
                         request (until then a retry that does not accept the encoding \
                         gets 409)"
                    );
                }
                Some(stored_response::encode_response(
                    parts,
                    data,
                    self.settings.scope,
                ))
            }
            Captured::TooLarge { .. } => {
                tracing::info!(
                    status = parts.status.as_u16(),
                    limit = self.settings.max_stored_response,
                    "idem: response too large to store; retries get 409"
                );
                Some(stored_response::encode_too_large(parts.status))
            }
            Captured::Failed { error, .. } => {
                tracing::warn!(%error, "idem: the response body failed; not stored");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use idem_core::MemoryStore;

    use super::*;
    use crate::IdempotencyLayer;

    /// The work of a first attempt, boxed per first request, is measured with
    /// `size_of_val` in a debug build with a `Router` as the inner service: 1,032 bytes as
    /// written; 1,432 with `settle` an `async fn`, 2,448 with the renewal an `async`
    /// block selecting between the work and the lease's renewal.
    #[tokio::test]
    async fn the_boxed_work_stays_small() {
        let store = AnyStore::new(MemoryStore::new());
        let settings = IdempotencyLayer::new().settings;
        let (key, fingerprint) = (Key::hashed(["k"]), Fingerprint::of(["f"]));
        let began = Record::begin(&store, &key, &fingerprint, &settings).await;
        let Ok(Began::First(record)) = began else {
            panic!("a new key begins a record");
        };
        let work = record.work(axum::Router::new(), Request::new(axum::body::Body::empty()));
        let size = std::mem::size_of_val(&work);
        assert!(size <= 1_100, "the boxed work grew to {size} bytes");
    }
}
