//! The first attempt of a key over HTTP: the handler's call and its response captured,
//! what of the response the record keeps, and the answer to a client whose key another
//! attempt took meanwhile.
//!
//! The record's own life — begun, its lease renewed, completed (again, while the store
//! cannot answer), claimed again, given back — is [`idem_core::record`]'s, which knows
//! nothing of HTTP; [`FirstRun`] is what an HTTP attempt hosts it with. [`Record`] is what
//! both users of idempotency records here call — [`IdempotencyLayer`] (on HTTP and gRPC)
//! and a form token with replay: [`Record::begin_on`], [`Record::run`] (which completes or
//! abandons the record), [`Record::abandon`] for an attempt that does not run, and
//! [`replay`](super::replay) for a completed one.
//!
//! [`IdempotencyLayer`]: super::IdempotencyLayer

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::Either;
use http::header::CONTENT_ENCODING;
use http::response::Parts;
use http::{HeaderMap, HeaderValue, StatusCode};
pub(crate) use idem_core::record::Spending;
use idem_core::record::{self, Host, Kept};
use idem_core::{Fingerprint, Key, Owner, Store, StoreError, throttled};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::Settings;
use super::capture::{Captured, capture};
use super::content_coding;
use super::do_not_keep::DoNotKeep;
use super::record::IdempotencyRecord;
use super::stored_response;
use crate::IdemStore;
use crate::detached::run_to_completion;
use crate::future::Inner;
use crate::guard::GuardContext;
use crate::idem::handlers::Running;
use crate::outcome::Reporter;
use crate::rejection::{Rejection, RejectionKind};

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

/// What an HTTP attempt hosts its record with: the runtime, which counts the work that
/// outlives the request (its drain waits for it); the layer's settings; and the handle on
/// the record its handler gets, which says whether the handler took the record over.
#[derive(Clone)]
pub(crate) struct FirstRun {
    guard: GuardContext,
    settings: Arc<Settings>,
    /// The guard and route of the request, for the replay of a winner's answer.
    reporter: Reporter,
    handle: IdempotencyRecord,
    /// The request's `Accept-Encoding`: the request itself goes to the handler, and an
    /// attempt that loses its key answers with the winner's response, which must be
    /// readable to this client as a replay to it would be.
    accept_encoding: Option<HeaderValue>,
}

impl fmt::Debug for FirstRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FirstRun")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl Host for FirstRun {
    fn spawn<F>(&self, work: F) -> Option<JoinHandle<()>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let runtime = Handle::try_current().ok()?;
        let running = Running::start(self.guard.idem());
        Some(runtime.spawn(async move {
            work.await;
            drop(running);
        }))
    }

    fn taken_over(&self) -> bool {
        self.handle.taken_over()
    }
}

/// An in-progress record this attempt began, hosted by its [`FirstRun`]: one `Arc`,
/// which the boxed work holds twice (`tests::the_boxed_work_stays_small`).
#[derive(Clone)]
pub(crate) struct Record<St: Store = IdemStore>(record::Record<St, FirstRun>);

impl<St: Store> std::ops::Deref for Record<St> {
    type Target = record::Record<St, FirstRun>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<St: Store> fmt::Debug for Record<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<St: Store + Clone> Record<St> {
    /// Begins the record `key` for a request with `fingerprint` and the headers `request`
    /// on `store` (the runtime's, typed), or finds the one there.
    ///
    /// The lifecycle's own future, mapped, not wrapped in an `async fn` of this one's,
    /// which would hold the arguments twice (`answer::tests::the_per_request_future_stays_small`:
    /// 920 bytes wrapped, against 800).
    ///
    /// # Errors
    ///
    /// The store's, when it cannot answer.
    pub(crate) fn begin_on(
        store: St,
        guard: &GuardContext,
        reporter: &Reporter,
        key: &Key,
        fingerprint: &Fingerprint,
        settings: &Arc<Settings>,
        request: &HeaderMap,
    ) -> impl Future<Output = Result<Began<St>, StoreError>> {
        let host = |key: &Key, owner: &Owner| FirstRun {
            guard: guard.clone(),
            settings: Arc::clone(settings),
            reporter: reporter.clone(),
            handle: IdempotencyRecord::new(key.clone(), owner.clone(), settings),
            accept_encoding: content_coding::accepted(request),
        };
        record::Record::begin(store, key, fingerprint, settings.lease, host).map(|began| {
            Ok(match began? {
                record::Began::First(record) => Began::First(Self(record)),
                record::Began::Completed(stored) => Began::Completed(stored),
                record::Began::InProgress(remaining) => Began::InProgress(remaining),
                record::Began::Mismatch => Began::Mismatch,
            })
        })
    }

    /// This record, with what the attempt spends given back whenever it is abandoned, and
    /// spent late when the layer stores the response.
    pub(crate) fn spending(self, spending: impl Spending) -> Self {
        Self(self.0.spending(spending))
    }

    /// The handle on the record its handler gets.
    pub(crate) fn handle(&self) -> &IdempotencyRecord {
        &self.host().handle
    }

    fn guard(&self) -> &GuardContext {
        &self.host().guard
    }

    fn settings(&self) -> &Settings {
        &self.host().settings
    }

    /// Stores `response`, the encoding of a response with `status`, and says whether
    /// the client gets its own response or, the key being answered by another attempt,
    /// the answer of that one; a response the store has no room for is kept as a note of
    /// its status ([`record::Record::complete`]). The lifecycle's own future, not wrapped:
    /// it is part of the boxed work (`tests::the_boxed_work_stays_small`).
    fn complete(
        &self,
        response: Bytes,
        status: StatusCode,
        retention: Duration,
    ) -> impl Future<Output = Kept> + '_ {
        let too_large = move || stored_response::encode_too_large(status);
        self.0.complete(response, retention, too_large)
    }

    /// The answer of the attempt that holds the key now, for the client of this one,
    /// which lost it: the response that attempt stored, replayed as to a retry with this
    /// request's `Accept-Encoding`, or, while it still runs, the 409 that says so. One key
    /// never answers two ways.
    fn answer_of_winner(&self, stored: Option<&Bytes>) -> Response {
        match stored {
            Some(stored) => {
                let request = content_coding::accepting(self.host().accept_encoding.as_ref());
                let reporter = &self.host().reporter;
                super::replay(self.guard(), self.settings(), reporter, stored, &request)
            }
            None => {
                let mut refused = self.guard().refuse(
                    Rejection::new(
                        RejectionKind::IdempotentRequestInProgress,
                        "this request lost its idempotency key to a retry while the server \
                         could not reach its store, and the retry is still being processed; \
                         retry to get its answer",
                    )
                    .with_retry_after(Duration::from_secs(1)),
                );
                // As on the 409 of a retry that meets its first attempt running: the client
                // learns how long its key is kept.
                self.settings().advertise_retention(refused.headers_mut());
                refused
            }
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
        run_to_completion(
            Running::start(self.guard().idem()),
            self.work(inner, request),
        )
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
    /// A [`Renewing`](record::Renewing) future composed with [`settle`](Self::settle)
    /// rather than one `async` block, which would hold the renewal inline and the work and
    /// the record twice (`tests::the_boxed_work_stays_small`).
    fn work<S: Inner>(
        self,
        mut inner: S,
        mut request: Request,
    ) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
        request.extensions_mut().insert(self.handle().clone());
        let max_stored = self.settings().max_stored_response;
        let work = async move {
            let (parts, body) = inner.call(request).await?.into_parts();
            Ok::<_, S::Error>((parts, capture(body, max_stored).await))
        };
        let renewing = self.renewing(work);
        let pending = self.0.abandon_on_drop();
        renewing.then(move |produced| {
            let record = Self(pending.disarm());
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
        mut parts: Parts,
        captured: Captured,
    ) -> impl Future<Output = Result<Response, E>> {
        async move {
            match self.kept(&parts, &captured) {
                Some(stored) => {
                    let retention = self.settings().retention;
                    if let Kept::Lost(theirs) = self.complete(stored, parts.status, retention).await
                    {
                        return Ok(self.answer_of_winner(theirs.as_ref()));
                    }
                    // After the response was encoded: the stored bytes are the handler's.
                    self.settings().advertise_retention(&mut parts.headers);
                }
                // The handler took the record over, and its transaction did not complete
                // it (or it would be kept). Boxed: the rare way, whose timer inline would
                // size every first attempt's boxed work (`tests::the_boxed_work_stays_small`).
                None if self.handle().taken_over() => Box::pin(self.abandon_taken_over()).await,
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
        if !(self.settings().stores_status)(parts.status) {
            tracing::debug!(
                status = parts.status.as_u16(),
                "idem: response not stored (by policy)"
            );
            return None;
        }
        match captured {
            #[cfg(feature = "grpc")]
            Captured::Whole { trailers, .. }
                if !self
                    .settings()
                    .keeps_call(&parts.headers, trailers.as_ref()) =>
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
                    self.settings().scope,
                    self.settings().compress_from,
                ))
            }
            Captured::TooLarge { .. } => {
                tracing::info!(
                    status = parts.status.as_u16(),
                    limit = self.settings().max_stored_response,
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
    use crate::outcome::Guard;

    /// The work of a first attempt, boxed per first request, is measured with
    /// `size_of_val` in a debug build with a `Router` as the inner service: 728 bytes as
    /// written (712 before the record's lifecycle moved to `idem_core::record`); 792 with
    /// its completion wrapped in an `async fn` here; 752 with a form token's late spend awaited in `settle` rather than in
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
        let began = Record::begin_on(
            MemoryStore::new(),
            &guard,
            &Reporter::named(Guard::Idempotency, "/orders"),
            &key,
            &fingerprint,
            &settings,
            &HeaderMap::new(),
        )
        .await;
        let Ok(Began::First(record)) = began else {
            panic!("a new key begins a record");
        };
        let work = record.work(axum::Router::new(), Request::new(axum::body::Body::empty()));
        let size = std::mem::size_of_val(&work);
        assert!(size <= 750, "the boxed work grew to {size} bytes");
    }
}
