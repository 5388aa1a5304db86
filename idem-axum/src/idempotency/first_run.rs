//! The first attempt of a key: run in a task of its own, so a client that goes away does
//! not abandon it half-way; its record's lease renewed while it runs; and ending in one of
//! two ways — its response stored, or its record removed so a retry runs afresh.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use futures_util::future::{self, Either};
use http::StatusCode;
use http::header::CONTENT_ENCODING;
use http::response::Parts;
use idem_core::{AnyStore, Key, Owner, Store, StoreError};
use tokio::runtime::Handle;

use super::Settings;
use super::capture::{Captured, capture};
use super::stored_response;
use crate::detached::run_to_completion;
use crate::future::Inner;
use crate::rejection::Rejection;

/// An in-progress record this attempt began.
#[derive(Debug, Clone)]
pub(super) struct Record {
    store: AnyStore,
    key: Key,
    owner: Owner,
}

impl Record {
    pub(super) fn new(store: AnyStore, key: Key, owner: Owner) -> Self {
        Self { store, key, owner }
    }

    /// Renews the lease every third of it, for as long as it is polled.
    async fn keep_alive(self, lease: Duration) -> Infallible {
        // A lease under 3 ms would otherwise renew in a tight loop.
        let period = (lease / 3).max(Duration::from_millis(1));
        loop {
            tokio::time::sleep(period).await;
            match self.store.renew_record(&self.key, &self.owner, lease).await {
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
    async fn complete(&self, response: Bytes, status: StatusCode, retention: Duration) {
        let stored = self
            .store
            .complete_record(&self.key, &self.owner, response, retention)
            .await;
        let stored = match stored {
            Err(StoreError::Memory { .. }) => {
                tracing::warn!("idem: no room to store the response; retries get 409");
                let note = stored_response::encode_too_large(status);
                self.store
                    .complete_record(&self.key, &self.owner, note, retention)
                    .await
            }
            other => other,
        };
        match stored {
            Ok(true) => tracing::debug!("idem: response stored"),
            Ok(false) => tracing::warn!(
                "idem: the response was not stored: the attempt lost its record to a newer one"
            ),
            Err(error) => tracing::warn!(
                %error,
                "idem: the response could not be stored; a retry runs again once the lease ends"
            ),
        }
    }

    /// `work`, with the record's lease renewed every third of it for as long as `work`
    /// runs. The renewal's timer starts only if `work` does not end on its first poll.
    async fn renewed_while<T>(&self, work: impl Future<Output = T>, lease: Duration) -> T {
        let (work, renewal) = (pin!(work), pin!(self.clone().keep_alive(lease)));
        match future::select(work, renewal).await {
            Either::Left((output, _)) => output,
            Either::Right((never, _)) => match never {},
        }
    }

    async fn abandon(&self) {
        if let Err(error) = self.store.abandon_record(&self.key, &self.owner).await {
            tracing::warn!(%error, "idem: could not remove an idempotency record; it ends with its lease");
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
/// running to the end, its record's lease renewed every third of it while it runs. A panic
/// in the handler removes the record, then resumes here.
///
/// # Errors
///
/// The refusal for an attempt the runtime cancelled while shutting down (its record then
/// ends with its lease).
pub(super) async fn run_first<S: Inner>(
    settings: Arc<Settings>,
    record: Record,
    mut inner: S,
    request: Request,
) -> Result<Result<Response, S::Error>, Rejection> {
    let max_stored = settings.max_stored_response;
    let work = async move {
        let (parts, body) = inner.call(request).await?.into_parts();
        Ok::<_, S::Error>((parts, capture(body, max_stored).await))
    };
    run_to_completion(async move {
        let mut pending = Pending {
            record,
            armed: true,
        };
        let produced = pending.record.renewed_while(work, settings.lease).await;
        pending.armed = false;
        settle(&settings, &pending.record, produced).await
    })
    .await
}

/// Stores the response, or removes the record, and hands the response on.
async fn settle<E>(
    settings: &Settings,
    record: &Record,
    produced: Result<(Parts, Captured), E>,
) -> Result<Response, E> {
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
                         compression outside IdempotencyLayer, so that the identity encoding \
                         is stored and each replay is compressed for its own request (until \
                         then a retry that does not accept the encoding gets 409)"
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
