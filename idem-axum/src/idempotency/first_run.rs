//! The first attempt of a key, from its record begun to its record completed or
//! abandoned: run to its end, in a task of its own once its client goes away, so that
//! the client does not abandon it half-way; its record's lease renewed while it runs; and ending in one of two ways — its
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
use futures_util::future::Either;
use http::header::CONTENT_ENCODING;
use http::response::Parts;
use http::{HeaderMap, StatusCode};
use idem_core::{Begin, Fingerprint, Key, Owner, Store, StoreError, throttled};
use pin_project_lite::pin_project;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::Settings;
use super::capture::{Captured, capture};
use super::do_not_keep::DoNotKeep;
use super::record::IdempotencyRecord;
use super::stored_response;
use crate::IdemStore;
use crate::detached::run_to_completion;
use crate::future::Inner;
use crate::guard::GuardContext;
use crate::idem::handlers::Running;
use crate::rejection::{Rejection, RejectionKind};

/// How long the answer of a handler that took its record over, and failed, waits for the
/// record's removal (`Record::abandon_taken_over`).
const REMOVAL_WAIT: Duration = Duration::from_millis(50);

/// What beginning a record came to.
pub(crate) enum Began<St: Store = IdemStore> {
    /// No record existed: this request holds one now, and runs first.
    First(Record<St>),
    /// A request with this key completed: what it stored, to [replay](super::replay).
    Completed(Bytes),
    /// A request with this key still runs; its lease has this long left.
    InProgress(Duration),
    /// The key belongs to a request with another fingerprint.
    Mismatch,
}

/// What keeping a first attempt's response came to.
enum Kept {
    /// Stored in the attempt's record.
    Stored,
    /// The handler completed the record itself, in its own transaction.
    ByHandler,
    /// Stored after the key was claimed again: the record had ended with its lease.
    ClaimedAgain,
    /// Not known: the store could not answer (the response is stored again in the
    /// background, where there is a runtime to do it).
    Unknown,
    /// The key is another attempt's now: what it stored, if it completed.
    Lost(Option<Bytes>),
}

impl Kept {
    /// Logs it; `again` for a completion retried after the store failed to answer (an
    /// earlier try may have been applied).
    fn log(&self, again: bool) {
        match self {
            Self::Stored => tracing::debug!(again, "idem: response stored"),
            Self::ByHandler => tracing::debug!(
                "idem: the handler completed the record itself, in its own transaction"
            ),
            Self::ClaimedAgain => throttled::warn!(
                "idem: the record had ended with its lease while the store was unreachable; \
                 the key was free, so it was claimed again and the response stored"
            ),
            Self::Unknown => {}
            Self::Lost(_) if again => throttled::error!(
                "idem: the key was taken by another attempt while this one's response could \
                 not be stored; this client already got its own response"
            ),
            Self::Lost(_) => throttled::warn!(
                "idem: the record was taken by another attempt after this one's lease ran \
                 out; its client gets that attempt's answer"
            ),
        }
    }
}

/// What an attempt spends to be let run (a form token). Spent before the handler runs,
/// it is given back before the record is removed: a retry of the failed attempt then
/// finds it again, and no retry can begin the record before it is back. Left to the
/// handler, to spend in its own transaction, it is spent after the response is stored
/// when the handler left the record to the layer.
pub(crate) trait Spending: Send + Sync + 'static {
    /// Gives back what was spent before the handler ran; a failure is logged, not
    /// returned: the record goes either way.
    fn give_back(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// Spends what the handler was to spend, now that the layer stored the response in
    /// its stead; a failure is logged.
    fn spend_late(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// An in-progress record this attempt began, and the handle on it the handler gets.
///
/// Shared behind one `Arc`: the boxed work holds it twice (renewing its lease, and
/// abandoning it on a panic), and each copy inline would take that box past glibc's
/// per-thread cache (BENCHMARKS.md, "The reshape"; `tests::the_boxed_work_stays_small`).
#[derive(Clone)]
pub(crate) struct Record<St: Store = IdemStore>(Arc<RecordState<St>>);

/// What a [`Record`] shares.
pub(crate) struct RecordState<St: Store> {
    guard: GuardContext,
    /// The runtime's store, typed: its calls' futures are this store's own.
    store: St,
    fingerprint: Fingerprint,
    settings: Arc<Settings>,
    handle: IdempotencyRecord,
    spending: Option<Box<dyn Spending>>,
}

impl<St: Store> std::ops::Deref for Record<St> {
    type Target = RecordState<St>;

    fn deref(&self) -> &RecordState<St> {
        &self.0
    }
}

impl<St: Store> fmt::Debug for Record<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl<St: Store + Clone> Record<St> {
    /// Begins the record `key` for a request with `fingerprint` on `store` (the runtime's,
    /// typed), or finds the one there.
    ///
    /// # Errors
    ///
    /// The store's, when it cannot answer.
    pub(crate) async fn begin_on(
        store: St,
        guard: &GuardContext,
        key: &Key,
        fingerprint: &Fingerprint,
        settings: &Arc<Settings>,
    ) -> Result<Began<St>, StoreError> {
        let owner = Owner::random();
        let begun = store.begin_record(key, &owner, fingerprint, settings.lease);
        Ok(match begun.await? {
            Begin::Started => Began::First(Self(Arc::new(RecordState {
                guard: guard.clone(),
                store,
                fingerprint: *fingerprint,
                settings: Arc::clone(settings),
                handle: IdempotencyRecord::new(key.clone(), owner, settings),
                spending: None,
            }))),
            Begin::Completed { response } => Began::Completed(response),
            Begin::InProgress { remaining } => Began::InProgress(remaining),
            Begin::Mismatch => Began::Mismatch,
        })
    }

    /// This record, with what the attempt spends given back whenever it is abandoned, and
    /// spent late when the layer stores the response.
    pub(crate) fn spending(self, spending: impl Spending) -> Self {
        let spending = Some(Box::new(spending) as Box<dyn Spending>);
        Self(Arc::new(RecordState {
            guard: self.guard.clone(),
            store: self.store.clone(),
            fingerprint: self.fingerprint,
            settings: Arc::clone(&self.settings),
            handle: self.handle.clone(),
            spending,
        }))
    }

    /// The handle on the record its handler gets.
    pub(crate) fn handle(&self) -> &IdempotencyRecord {
        &self.handle
    }

    fn key(&self) -> &Key {
        self.handle.key()
    }

    fn store(&self) -> &St {
        &self.store
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
                .store()
                .renew_record(self.key(), self.owner(), lease)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    throttled::warn!(
                        "idem: a running request lost its idempotency record (its lease ran \
                         out); its response will not be stored"
                    );
                    return std::future::pending().await;
                }
                // The next renewal comes before the lease ends, unless the store stays down.
                Err(error) => {
                    throttled::warn!(%error, "idem: could not renew an idempotency record")
                }
            }
        }
    }

    /// Stores `response`, the encoding of a response with `status`, and says whether
    /// the client gets its own response or, the key being answered by another attempt,
    /// the answer of that one.
    ///
    /// A store that cannot answer now (Redis restarting, a network fault) gets the
    /// completion again, in the background, until it answers: the handler has run, and
    /// a record left in progress would let a retry run it a second time once its lease
    /// ran out. The client gets its response meanwhile; the runtime's drain
    /// ([`Idem::shutdown`](crate::Idem::shutdown)) waits for the completion.
    async fn complete(&self, response: Bytes, status: StatusCode, retention: Duration) -> Kept {
        match self.keep(&response, status, retention).await {
            Ok(kept) => {
                kept.log(false);
                kept
            }
            Err(error) => {
                throttled::warn!(
                    %error,
                    "idem: the response could not be stored yet; storing it again until the \
                     store answers"
                );
                self.in_background(|record| async move {
                    record
                        .complete_when_the_store_answers(response, status, retention)
                        .await;
                });
                Kept::Unknown
            }
        }
    }

    /// Spends what the handler was to spend, now that the layer stored the response in
    /// its stead.
    async fn spend_late(&self) {
        if let Some(spending) = &self.spending {
            spending.spend_late().await;
        }
    }

    /// Keeps the response again and again, ever less often (from 50 ms up to 1 s
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
            match self.keep(&response, status, retention).await {
                Ok(kept) => return kept.log(true),
                Err(_) if tokio::time::Instant::now() < deadline => {}
                Err(error) => {
                    throttled::error!(
                        %error,
                        "idem: the response could not be stored within its retention; a \
                         retry runs again once the lease ends"
                    );
                    return;
                }
            }
        }
    }

    /// One attempt at keeping the response in the record.
    ///
    /// A record no longer this attempt's (its lease ran out while the store could not be
    /// reached) is claimed again when its key is free, and the response stored in it: a
    /// retry then replays it rather than running the handler a second time. A key
    /// another attempt took meanwhile is that attempt's, and so is its answer.
    async fn keep(
        &self,
        response: &Bytes,
        status: StatusCode,
        retention: Duration,
    ) -> Result<Kept, StoreError> {
        // Asked before the store is: the handler's own transaction, which completed the
        // record, may have used up the store's timeout already (a stalled link), and the
        // answer must not wait for a second one.
        if self.handle.taken_over() {
            return Ok(Kept::ByHandler);
        }
        if self
            .try_complete(response.clone(), status, retention)
            .await?
        {
            self.spend_late().await;
            return Ok(Kept::Stored);
        }
        // Boxed: the rare way, which inline would size every first attempt's boxed work
        // (`tests::the_boxed_work_stays_small`).
        Box::pin(self.claim_again(response, status, retention)).await
    }

    /// Claims the key of a record that ended with its lease, and stores the response in
    /// it; or, the key being another attempt's, says so.
    async fn claim_again(
        &self,
        response: &Bytes,
        status: StatusCode,
        retention: Duration,
    ) -> Result<Kept, StoreError> {
        let (key, owner, lease) = (self.key(), self.owner(), self.settings.lease);
        let claimed = self
            .store()
            .begin_record(key, owner, &self.fingerprint, lease);
        Ok(match claimed.await? {
            Begin::Started => match self
                .try_complete(response.clone(), status, retention)
                .await?
            {
                true => {
                    self.spend_late().await;
                    Kept::ClaimedAgain
                }
                false => Kept::Lost(None),
            },
            // This attempt's own response: an earlier try whose answer was lost did store it.
            Begin::Completed { response: stored } if stored == *response => Kept::Stored,
            Begin::Completed { response: stored } => Kept::Lost(Some(stored)),
            Begin::InProgress { .. } | Begin::Mismatch => Kept::Lost(None),
        })
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
            .store()
            .complete_record(self.key(), self.owner(), response, retention)
            .await;
        match stored {
            Err(StoreError::Memory { .. }) => {
                throttled::warn!("idem: no room to store the response; retries get 409");
                let note = stored_response::encode_too_large(status);
                self.store()
                    .complete_record(self.key(), self.owner(), note, retention)
                    .await
            }
            other => other,
        }
    }

    /// The answer of the attempt that holds the key now, for the client of this one,
    /// which lost it: the response that attempt stored, or, while it still runs, the 409
    /// that says so. One key never answers two ways.
    fn answer_of_winner(&self, stored: Option<&Bytes>) -> Response {
        match stored {
            Some(stored) => super::replay(&self.guard, &self.settings, stored, &HeaderMap::new()),
            None => self.guard.refuse(
                Rejection::new(
                    RejectionKind::IdempotentRequestInProgress,
                    "this request lost its idempotency key to a retry while the server could \
                     not reach its store, and the retry is still being processed; retry \
                     to get its answer",
                )
                .with_retry_after(Duration::from_secs(1)),
            ),
        }
    }

    /// Runs `work` on this record in a task of its own, which the runtime's drain
    /// ([`Idem::shutdown`](crate::Idem::shutdown)) waits for; `None`, and nothing run,
    /// without a runtime (it is shutting down: the record ends with its lease).
    fn in_background<F>(&self, work: impl FnOnce(Self) -> F) -> Option<JoinHandle<()>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let runtime = Handle::try_current().ok()?;
        let (work, running) = (work(self.clone()), Running::start(self.guard.idem()));
        Some(runtime.spawn(async move {
            work.await;
            drop(running);
        }))
    }

    /// Removes the record of a handler that took it over and whose response is not kept
    /// (its transaction failed), in a task of its own that the runtime's drain waits for,
    /// and waits for the removal for at most [`REMOVAL_WAIT`]: a store that answers
    /// removes it well within that, so that a retry right after the failure runs afresh;
    /// one that stalls had likely held the handler's transaction up to the store's
    /// timeout already, and the answer does not wait out a second one. Without a runtime
    /// (it is shutting down) the record ends with its lease.
    async fn abandon_taken_over(&self) {
        let Some(removal) = self.in_background(|record| async move { record.abandon().await })
        else {
            return;
        };
        if tokio::time::timeout(REMOVAL_WAIT, removal).await.is_err() {
            throttled::warn!(
                "idem: the store did not remove the record of a failed attempt in time; the \
                 answer goes now, the removal goes on (a retry meanwhile gets 409)"
            );
        }
    }

    /// Removes the record, so that a retry runs afresh, once what the attempt spent is
    /// given back.
    pub(crate) async fn abandon(&self) {
        if let Some(spending) = &self.spending {
            spending.give_back().await;
        }
        if let Err(error) = self.store().abandon_record(self.key(), self.owner()).await {
            throttled::warn!(%error, "idem: could not remove an idempotency record; it ends with its lease");
        }
    }
}

pin_project! {
    /// `work`, with its record's lease renewed every third of it while `work` waits. The
    /// renewal (a timer) is made, on the heap, only once `work` has to wait.
    struct Renewing<W, St: Store> {
        #[pin]
        work: W,
        record: Record<St>,
        renewal: Option<Pin<Box<dyn Future<Output = Infallible> + Send>>>,
    }
}

impl<W: Future, St: Store + Clone> Future for Renewing<W, St> {
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
struct Pending<St: Store + Clone> {
    record: Record<St>,
    armed: bool,
}

impl<St: Store + Clone> Drop for Pending<St> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        throttled::error!(
            "idem: the first attempt ended without a response (a panic); its idempotency record is removed"
        );
        // Without a runtime (it is shutting down) the record ends with its lease.
        if let Ok(runtime) = Handle::try_current() {
            let record = self.record.clone();
            runtime.spawn(async move { record.abandon().await });
        }
    }
}

impl<St: Store + Clone> Record<St> {
    /// Runs the request as the first attempt of this record's key and answers with its
    /// response, stored in the record — or the record abandoned, when the response is not
    /// to be kept, the service failed or the handler panicked.
    ///
    /// Dropping this future (the client went away) leaves the attempt running to its end,
    /// in a task of its own. A panic in the handler removes the record, then resumes here.
    pub(crate) fn run<S: Inner>(
        self,
        inner: S,
        request: Request,
    ) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
        run_to_completion(Running::start(self.guard.idem()), self.work(inner, request))
    }

    /// [`run`](Self::run) for a caller whose answer already runs to its end, in a task of
    /// its own when it has to (a form post, detached from its first store call on): the
    /// same attempt, without a second task.
    pub(crate) fn run_in_place<S: Inner>(
        self,
        inner: S,
        request: Request,
    ) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
        self.work(inner, request)
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
            let record = pending.record.clone();
            match produced {
                Ok((parts, captured)) => Either::Left(record.settle(parts, captured)),
                Err(error) => Either::Right(record.failed(error)),
            }
        })
    }

    /// Stores the response, or removes the record, and hands the response on: the
    /// attempt's own, or, the key being another attempt's now, that one's answer.
    ///
    /// An `async` block, which holds its arguments once, where an `async fn` would hold
    /// them twice: it is part of the work [`run`](Self::run) boxes
    /// (`tests::the_boxed_work_stays_small`).
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn's future would hold the response twice"
    )]
    fn settle<E>(
        self,
        parts: Parts,
        captured: Captured,
    ) -> impl Future<Output = Result<Response, E>> {
        async move {
            match self.kept(&parts, &captured) {
                Some(stored) => {
                    let retention = self.settings.retention;
                    if let Kept::Lost(theirs) = self.complete(stored, parts.status, retention).await
                    {
                        return Ok(self.answer_of_winner(theirs.as_ref()));
                    }
                }
                // The handler took the record over, and its transaction did not complete
                // it (or it would be kept). Boxed: the rare way, whose timer inline would
                // size every first attempt's boxed work.
                None if self.handle.taken_over() => Box::pin(self.abandon_taken_over()).await,
                None => self.abandon().await,
            }
            Ok(Response::from_parts(parts, captured.into_body()))
        }
    }

    /// Removes the record of an attempt whose service failed, and hands the error on.
    async fn failed<E>(self, error: E) -> Result<Response, E> {
        self.abandon().await;
        Err(error)
    }

    /// What the record keeps of a response: the response, or, too large, a note of it;
    /// nothing when its status is not kept (by policy) or its body failed.
    fn kept(&self, parts: &Parts, captured: &Captured) -> Option<Bytes> {
        if parts.extensions.get::<DoNotKeep>().is_some() {
            tracing::debug!("idem: response not stored (the handler marked it DoNotKeep)");
            return None;
        }
        if parts.status == StatusCode::PAYLOAD_TOO_LARGE {
            // A body limit refused the request before it was processed, wherever the limit
            // stands; the same request would be refused again.
            tracing::debug!("idem: a 413 is not stored");
            return None;
        }
        if !(self.settings.stores_status)(parts.status) {
            tracing::debug!(
                status = parts.status.as_u16(),
                "idem: response not stored (by policy)"
            );
            return None;
        }
        match captured {
            #[cfg(feature = "grpc")]
            Captured::Whole { trailers, .. }
                if !self.settings.keeps_call(&parts.headers, trailers.as_ref()) =>
            {
                None
            }
            Captured::Whole { data, trailers } => {
                if let Some(coding) = parts.headers.get(CONTENT_ENCODING) {
                    throttled::warn!(
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
                    trailers.as_ref(),
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
                // The handler ran: a retry must not run it again, and there is no whole
                // response to give it. Its client gets the body as far as it went, then
                // the error, which ends the connection.
                throttled::warn!(%error, "idem: the response body failed; retries get 409");
                Some(stored_response::encode_failed(parts.status))
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
    /// `size_of_val` in a debug build with a `Router` as the inner service: 712 bytes as
    /// written; 752 with a form token's late spend awaited in `settle` rather than in
    /// `keep`, 760 in `complete`; 952 when `settle` took the handler's result whole and
    /// split it (holding the response twice), 1,040 with the key claimed again inline
    /// rather than boxed.
    /// Measured earlier on a larger work (880): 1,032 with the record's state held as two
    /// `Arc`s, 1,432 with `settle` an `async fn`, 2,448 with the renewal an `async` block
    /// selecting between the work and the lease's renewal.
    #[tokio::test]
    async fn the_boxed_work_stays_small() {
        let guard = GuardContext::new(crate::Idem::new(MemoryStore::new()), false);
        let settings = IdempotencyLayer::new().settings;
        let (key, fingerprint) = (Key::hashed(["k"]), Fingerprint::of(["f"]));
        let began =
            Record::begin_on(MemoryStore::new(), &guard, &key, &fingerprint, &settings).await;
        let Ok(Began::First(record)) = began else {
            panic!("a new key begins a record");
        };
        let work = record.work(axum::Router::new(), Request::new(axum::body::Body::empty()));
        let size = std::mem::size_of_val(&work);
        assert!(size <= 750, "the boxed work grew to {size} bytes");
    }
}
