//! One guarded request, from its key to its answer: refused, replayed, or run as the
//! first attempt of its key.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{MatchedPath, OriginalUri, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, StatusCode, Uri};
use idem_core::{Begin, Fingerprint, Owner, Store};
use tower_service::Service;

use super::execution::{self, Record};
use super::stored::{self, Replay};
use super::{KeyScope, KeySource, Settings, encoding, key};
use crate::body::read_whole;
use crate::client::ClientRequest;
use crate::rejection::{Rejection, RejectionKind, prefers_html};
use crate::runtime::Idem;

/// How long a client that met a running attempt is told to wait: the attempt's lease
/// says only when a *dead* attempt frees the key, not when a live one will finish.
const RETRY_IN_PROGRESS: Duration = Duration::from_secs(1);

/// Answers one request of a guarded method.
///
/// An `async move` block rather than an `async fn`: an `async fn` keeps its arguments
/// twice in its future (as arguments and as the locals they are moved into), and this
/// future is boxed for every guarded request (1 KB instead of 1.3 KB).
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn's future would hold its arguments twice"
)]
pub(super) fn attempt<S>(
    settings: Arc<Settings>,
    inner: S,
    request: Request,
) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static
where
    S: Service<Request, Response = Response> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    async move {
        let html = prefers_html(request.headers());
        let idem = match Idem::from_extensions(request.extensions()) {
            Ok(idem) => idem,
            Err(rejection) => return Ok(rejection.with_html(html).into_response()),
        };
        let refuse = |rejection: Rejection| Ok(idem.respond(rejection.with_html(html)));
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!("idem: IdempotencyLayer runs outside a Tokio runtime");
            return Ok(StatusCode::INTERNAL_SERVER_ERROR.into_response());
        };

        let header_key = match settings.key {
            KeySource::Header => match key::from_headers(request.headers()) {
                Ok(Some(key)) => Some(key),
                Ok(None) if settings.requires_key(request.method()) => {
                    return refuse(missing_key(&settings));
                }
                Ok(None) => return pass(inner, request).await,
                Err(invalid) => {
                    tracing::debug!(idem.outcome = "invalid_key", %invalid);
                    return refuse(Rejection::new(
                        RejectionKind::InvalidIdempotencyKey,
                        invalid.to_string(),
                    ));
                }
            },
            KeySource::Function(_) => None,
        };
        let (parts, reading) = read_whole(request);
        let body = match reading.await {
            Ok(body) => body,
            Err(rejection) => return refuse(rejection),
        };
        let key = match (header_key, &settings.key) {
            (Some(key), _) => key,
            (None, KeySource::Function(key_of)) => match key_of(&parts, &body) {
                Some(key) => key,
                None if settings.requires_key(&parts.method) => {
                    return refuse(missing_key(&settings));
                }
                None => return pass(inner, rebuild(parts, body)).await,
            },
            (None, KeySource::Header) => return pass(inner, rebuild(parts, body)).await,
        };
        // The record belongs to one endpoint: the same key sent to another route (or with
        // another method) is another operation, never a replay of this one's response.
        let store_key = {
            let (method, route) = (parts.method.as_str().as_bytes(), route(&parts).as_bytes());
            match settings.scope {
                KeyScope::Client => match idem.client_id(&ClientRequest::from_parts(&parts)) {
                    Ok(client) => idem.key(&[
                        b"idempotency",
                        client.as_bytes(),
                        method,
                        route,
                        key.as_bytes(),
                    ]),
                    Err(rejection) => return refuse(rejection),
                },
                KeyScope::Shared => {
                    idem.key(&[b"idempotency:shared", method, route, key.as_bytes()])
                }
            }
        };
        let fingerprint = fingerprint(&parts, &body, &settings.fingerprint_headers);

        let owner = Owner::random();
        let begun = idem
            .store()
            .begin_record(&store_key, &owner, &fingerprint, settings.lease)
            .await;
        match begun {
            Ok(Begin::Started) => {
                tracing::debug!(idem.outcome = "accepted");
                let record = Record::new(idem.store().clone(), store_key, owner);
                execution::run_first(&runtime, settings, record, inner, rebuild(parts, body)).await
            }
            Ok(Begin::Completed { response }) => match stored::decode(&response) {
                Ok(Replay::Response(response)) => {
                    match encoding::unaccepted(response.headers(), &parts.headers) {
                        None => {
                            tracing::debug!(idem.outcome = "replayed");
                            Ok(response)
                        }
                        Some(coding) => refuse(not_acceptable(response.status(), &coding)),
                    }
                }
                Ok(Replay::TooLarge { status }) => {
                    tracing::debug!(idem.outcome = "replayed", too_large = true);
                    refuse(Rejection::new(
                        RejectionKind::ResponseNotReplayable,
                        format!(
                            "the request with this idempotency key was already processed (status \
                             {}), but its response was too large to keep and cannot be replayed; \
                             look up its result instead of retrying",
                            status.as_u16()
                        ),
                    ))
                }
                Err(unreadable) => {
                    tracing::error!(%unreadable, "idem: a stored response cannot be replayed");
                    refuse(Rejection::new(
                        RejectionKind::UnreadableIdempotencyRecord,
                        "the stored response of this idempotency key cannot be read by this \
                         server; the request was processed and is not run again",
                    ))
                }
            },
            Ok(Begin::InProgress { remaining }) => {
                tracing::debug!(idem.outcome = "conflict");
                refuse(
                    Rejection::new(
                        RejectionKind::IdempotentRequestInProgress,
                        "a request with this idempotency key is still being processed; retry \
                         once it has completed",
                    )
                    .with_retry_after(remaining.min(RETRY_IN_PROGRESS)),
                )
            }
            Ok(Begin::Mismatch) => {
                tracing::debug!(idem.outcome = "mismatch");
                refuse(Rejection::new(
                    RejectionKind::IdempotencyKeyReused,
                    "this idempotency key was already used for a different request (its path, \
                     query, body or compared headers differ); use a new key for a new request",
                ))
            }
            Err(error) => match idem.store_failed(&error, "begin an idempotency record") {
                Err(rejection) => refuse(rejection),
                Ok(()) => pass(inner, rebuild(parts, body)).await,
            },
        }
    }
}

/// Hands the request to the inner service unguarded. Boxed: it is the rare way out, and
/// its future inline would make every guarded request's future larger.
fn pass<S>(mut inner: S, request: Request) -> Pin<Box<S::Future>>
where
    S: Service<Request, Response = Response>,
{
    Box::pin(inner.call(request))
}

/// The answer to a retry that does not accept the content coding its stored response
/// has (a compression layer inside this one encoded it for the first client): the bytes
/// would be unreadable to it, and the handler does not run twice for one key.
fn not_acceptable(status: StatusCode, coding: &str) -> Rejection {
    tracing::debug!(idem.outcome = "replayed", unaccepted_encoding = coding);
    Rejection::new(
        RejectionKind::ResponseNotReplayable,
        format!(
            "the request with this idempotency key was already processed (status {}), but its \
             stored response is encoded as `{coding}`, which this request does not accept; \
             retry with `Accept-Encoding: {coding}`",
            status.as_u16()
        ),
    )
}

fn missing_key(settings: &Settings) -> Rejection {
    tracing::debug!(idem.outcome = "missing_key");
    Rejection::new(
        RejectionKind::MissingIdempotencyKey,
        settings.missing_key_message(),
    )
}

fn rebuild(parts: Parts, body: Bytes) -> Request {
    Request::from_parts(parts, Body::from(body))
}

/// The URI the client sent: a router that `nest`s strips its prefix from the request's
/// own URI before the route's layers see it.
fn original_uri(parts: &Parts) -> &Uri {
    parts
        .extensions
        .get::<OriginalUri>()
        .map_or(&parts.uri, |original| &original.0)
}

/// The route a request was sent to: the path pattern it matched, in full under `nest`; a
/// layer around a whole router runs before any route matched, and then it is the path.
fn route(parts: &Parts) -> &str {
    match parts.extensions.get::<MatchedPath>() {
        Some(matched) => matched.as_str(),
        None => original_uri(parts).path(),
    }
}

/// What makes two requests with one key the same request: method, path and query as the
/// client sent them, body, and the chosen headers (each with its number of values, so
/// values cannot shift between headers).
fn fingerprint(parts: &Parts, body: &[u8], headers: &[HeaderName]) -> Fingerprint {
    let uri = original_uri(parts);
    let fields = [
        parts.method.as_str().as_bytes(),
        uri.path().as_bytes(),
        uri.query().unwrap_or("").as_bytes(),
        body,
    ]
    .map(Cow::Borrowed);
    let chosen = headers.iter().flat_map(|name| {
        let values = parts.headers.get_all(name);
        let count = values.iter().count() as u64;
        std::iter::once(Cow::Owned(count.to_be_bytes().to_vec()))
            .chain(values.iter().map(|value| Cow::Borrowed(value.as_bytes())))
    });
    Fingerprint::of(fields.into_iter().chain(chosen))
}
