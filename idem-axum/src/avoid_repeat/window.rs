//! The window every avoid-repeat guard keeps, whether attribute or layer: take the key,
//! run the handler to its end, give the key back when the handler failed or the mode says
//! so.

use std::future::Future;
use std::time::Instant;

use tracing::Instrument;

use axum::extract::Request;
use axum::response::Response;
use http::Uri;
use idem_core::payload::PayloadFingerprint;
use idem_core::store::Fencing;
use idem_core::{Acquire, Fingerprint, Key, Owner, Store, throttled};

use super::{Release, Settings};
use crate::detached::run_to_completion;
use crate::guard::GuardContext;
use crate::idem::handlers::Running;
use crate::identity::ClientId;
use crate::outcome::{Outcome, Reporter};
use crate::rejection::{Rejection, RejectionKind};
use crate::request_body::read_back;

/// Runs the handler `start` starts under the key `key`, or answers for it. The handler is
/// not started (a tower service not even called) unless the key was taken.
///
/// Once the key is taken the handler runs to its end even if the request is dropped (a
/// browser abandons the first POST of a double click): it may already have committed, so
/// cutting it off and freeing the key would let the second POST run it again. Its outcome
/// decides the key, not the client's patience.
///
/// The whole of it — the key taken, the handler, the key settled — runs in the request's
/// `idem` span (see [`outcome`](crate::outcome)).
///
/// An `async move` block rather than an `async fn`, which would keep its arguments twice
/// (as arguments and as the block's captures) in a future boxed per request
/// (`layer::tests::the_per_request_future_stays_small`).
pub(crate) fn in_window<'a, St, F, E>(
    store: St,
    guard: &'a GuardContext,
    settings: &'a Settings,
    handler: Handler<'a>,
    client: &ClientId,
    key: Key,
    start: impl FnOnce() -> F + 'a,
) -> impl Future<Output = Result<Response, E>> + 'a
where
    St: Store + Clone,
    F: Future<Output = Result<Response, E>> + Send + 'static,
    E: Send + 'static,
{
    let Handler { id, reporter } = handler;
    let span = reporter.span(id, Some(client));
    async move {
        let owner = Owner::random();
        let started = Instant::now();
        let acquired = store
            .acquire(&key, &owner, settings.timeout, Fencing::Off)
            .await;
        reporter.store_latency(started.elapsed());
        let permit = match acquired {
            Ok(Acquire::Acquired { .. }) => {
                reporter.report(Outcome::Accepted);
                Permit {
                    store,
                    key,
                    owner,
                    armed: true,
                }
            }
            // A fresh random owner cannot re-enter: `Reentered` is as good as `Held`.
            Ok(Acquire::Held { remaining } | Acquire::Reentered { remaining, .. }) => {
                reporter.report(Outcome::Duplicate);
                let duplicate = Rejection::new(RejectionKind::Duplicate, settings.message())
                    .with_retry_after(remaining);
                return Ok(guard.refuse(duplicate));
            }
            Err(error) => match guard.on_store_error(&error, id) {
                Err(refusal) => return Ok(refusal),
                // Failing open: nothing is held, so nothing needs the handler to finish.
                // Boxed: inline, the handler's future would size every request's future
                // for this rare way out (`layer::tests::the_per_request_future_stays_small`).
                Ok(()) => return Box::pin(start()).await,
            },
        };
        let release = settings.release;
        let handler = start();
        let work = async move {
            let result = handler.await;
            let keep = release == Release::Expire && result.as_ref().is_ok_and(succeeded);
            permit.settle(keep).await;
            result
        };
        run_to_completion(Running::start(guard.idem()), work).await
    }
    .instrument(span)
}

/// The handler a window guards, as a request to it names it.
pub(crate) struct Handler<'a> {
    /// Its identity: the key's, the span's route, what a store failure names.
    pub(crate) id: &'a str,
    /// The guard and the route its outcomes are reported under.
    pub(crate) reporter: Reporter,
}

/// Whether an answer keeps the window: only a success (1xx–3xx) does.
///
/// A 4xx or a 5xx — from the handler, its extractors or a layer inside the guard, idem's
/// own refusals among them — means the request was refused or failed, and the user may
/// fix it and send it again at once. So does a gRPC call whose head says it failed (a
/// handler's `Err(Status)`, or idem's own refusal).
fn succeeded(response: &Response) -> bool {
    #[cfg(feature = "grpc")]
    if crate::grpc::failed_in_head(response.headers()) {
        return false;
    }
    !(response.status().is_client_error() || response.status().is_server_error())
}

/// The store key of `handler_id` for `client` (and the payload, when fingerprinted).
pub(crate) fn key_for(
    guard: &GuardContext,
    handler_id: &str,
    client: &ClientId,
    payload: Option<&Fingerprint>,
) -> Key {
    let payload: &[u8] = payload.map_or(&[], |fingerprint| fingerprint.as_bytes());
    guard.key(&[
        b"avoid_repeat",
        handler_id.as_bytes(),
        client.as_bytes(),
        payload,
    ])
}

/// Reads the body whole and fingerprints it — what of it `counted` says counts — with the
/// query; puts the same body back in `request`.
pub(crate) async fn fingerprint_payload(
    request: &mut Request,
    counted: &PayloadFingerprint,
) -> Result<Fingerprint, Rejection> {
    let body = read_back(request, None).await?;
    Ok(payload_fingerprint(request.uri(), &body, counted))
}

/// The fingerprint of a request's query and body: what of the body `counted` says counts.
pub(crate) fn payload_fingerprint(
    uri: &Uri,
    body: &[u8],
    counted: &PayloadFingerprint,
) -> Fingerprint {
    let query = uri.query().unwrap_or("").as_bytes();
    Fingerprint::of([query, &counted.counted(body)])
}

/// A held key. Dropped while armed — the handler panicked, or the runtime dropped it while
/// shutting down — it releases the key in the background, so the client can retry at once.
struct Permit<St: Store + Clone> {
    store: St,
    key: Key,
    owner: Owner,
    armed: bool,
}

impl<St: Store + Clone> Permit<St> {
    /// Keeps the key for the rest of its window, or gives it back.
    async fn settle(mut self, keep: bool) {
        self.armed = false;
        if keep {
            return;
        }
        if let Err(error) = self.store.release(&self.key, &self.owner).await {
            // The key still expires at the end of its window.
            throttled::warn!(%error, "idem: could not release a key; it expires with its window");
        }
    }
}

impl<St: Store + Clone> Drop for Permit<St> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Drop cannot wait; without a runtime the key just expires with its window.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, key, owner) = (self.store.clone(), self.key.clone(), self.owner.clone());
        runtime.spawn(async move {
            if let Err(error) = store.release(&key, &owner).await {
                throttled::warn!(%error, "idem: could not release the key of an abandoned request");
            }
        });
    }
}
