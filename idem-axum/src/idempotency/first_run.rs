//! The first attempt of a key: run in a task of its own, so a client that goes away does
//! not abandon it half-way; its record's lease renewed while it runs; and ending in one of
//! two ways — its response stored, or its record removed so a retry runs afresh.

use std::convert::Infallible;
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
use idem_core::{AnyStore, Key, Owner, Store, StoreError};
use pin_project_lite::pin_project;
use tokio::runtime::Handle;

use super::Settings;
use super::capture::{Captured, capture};
use super::record::IdempotencyRecord;
use super::stored_response;
use crate::detached::run_to_completion;
use crate::future::Inner;
use crate::rejection::Rejection;

/// An in-progress record this attempt began, and the handle on it the handler gets.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    store: AnyStore,
    handle: IdempotencyRecord,
}

impl Record {
    pub(crate) fn new(store: AnyStore, handle: IdempotencyRecord) -> Self {
        Self { store, handle }
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

    async fn abandon(&self) {
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
        lease: Duration,
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
        let (record, lease) = (this.record, *this.lease);
        let renewal = this
            .renewal
            .get_or_insert_with(|| Box::pin(record.clone().keep_alive(lease)));
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

/// Runs the request as the first attempt of `record`'s key and answers with its response.
///
/// The attempt is a task of its own: dropping this future (the client went away) leaves it
/// running to the end. A panic in the handler removes the record, then resumes here.
///
/// The attempt is boxed before this returns, so the future returned holds only a pointer
/// to it; it is a [`Renewing`] future composed with [`settle`] rather than one `async`
/// block, which would keep the work and the record twice (as captured and as moved into
/// its locals). Both sizes are measured in BENCHMARKS.md, "HTTP end to end".
///
/// Its output is the refusal for an attempt the runtime cancelled while shutting down (its
/// record then ends with its lease), or the attempt's answer.
pub(crate) fn run_first<S: Inner>(
    settings: Arc<Settings>,
    record: Record,
    mut inner: S,
    mut request: Request,
) -> impl Future<Output = Result<Result<Response, S::Error>, Rejection>> + Send + 'static {
    request.extensions_mut().insert(record.handle.clone());
    let max_stored = settings.max_stored_response;
    let work = async move {
        let (parts, body) = inner.call(request).await?.into_parts();
        Ok::<_, S::Error>((parts, capture(body, max_stored).await))
    };
    let renewing = Renewing {
        work,
        record: record.clone(),
        lease: settings.lease,
        renewal: None,
    };
    let pending = Pending {
        record,
        armed: true,
    };
    let task = renewing.then(move |produced| {
        let mut pending = pending;
        pending.armed = false;
        settle(settings, pending.record.clone(), produced)
    });
    run_to_completion(task)
}

/// Stores the response, or removes the record, and hands the response on.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn's future would hold `produced` twice"
)]
fn settle<E>(
    settings: Arc<Settings>,
    record: Record,
    produced: Result<(Parts, Captured), E>,
) -> impl Future<Output = Result<Response, E>> {
    async move {
        let (parts, captured) = match produced {
            Ok(produced) => produced,
            Err(error) => {
                record.abandon().await;
                return Err(error);
            }
        };
        if !(settings.stores_status)(parts.status) {
            tracing::debug!(
                status = parts.status.as_u16(),
                "idem: response not stored (by policy)"
            );
            record.abandon().await;
        } else {
            match &captured {
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
                    let stored = stored_response::encode_response(&parts, data, settings.scope);
                    record
                        .complete(stored, parts.status, settings.retention)
                        .await;
                }
                Captured::TooLarge { .. } => {
                    tracing::info!(
                        status = parts.status.as_u16(),
                        limit = settings.max_stored_response,
                        "idem: response too large to store; retries get 409"
                    );
                    let stored = stored_response::encode_too_large(parts.status);
                    record
                        .complete(stored, parts.status, settings.retention)
                        .await;
                }
                Captured::Failed { error, .. } => {
                    tracing::warn!(%error, "idem: the response body failed; not stored");
                    record.abandon().await;
                }
            }
        }
        Ok(Response::from_parts(parts, captured.into_body()))
    }
}
