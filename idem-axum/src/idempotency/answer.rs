//! One guarded request, from its key to its answer: refused, replayed, or run as the
//! first attempt of its key.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{MatchedPath, OriginalUri, Request};
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderName, StatusCode, Uri};
use idem_core::{Begin, Fingerprint, Key, Owner, Store};
use tracing::Instrument;

use super::first_run::{Record, run_first};
use super::record::IdempotencyRecord;
use super::stored_response::{self, Replay};
use super::{KeySource, RecordScope, Settings, content_coding, key_header};
use crate::client::ClientRequest;
use crate::future::Inner;
use crate::guard::GuardContext;
use crate::outcome::{self, Guard, Outcome};
use crate::rejection::{Rejection, RejectionKind};
use crate::request_body::read_whole;

/// How long a client that met a running attempt is told to wait: the attempt's lease
/// says only when a *dead* attempt frees the key, not when a live one will finish.
const RETRY_IN_PROGRESS: Duration = Duration::from_secs(1);

/// Answers one request of a guarded method.
///
/// An `async move` block rather than an `async fn`, and its steps plain functions where
/// they need not wait: an `async fn` keeps its arguments twice in its future (as
/// arguments and as the locals they move into), each nested one again, and this future is
/// boxed for every guarded request (BENCHMARKS.md, "HTTP end to end", has what the size
/// costs).
pub(super) fn answer<S: Inner>(
    settings: Arc<Settings>,
    inner: S,
    request: Request,
) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
    let span = outcome::span(Guard::Idempotency, route_of(&request), None);
    async move {
        let guard = match GuardContext::of(&ClientRequest::from_request(&request)) {
            Ok(guard) => guard,
            Err(refusal) => return Ok(refusal),
        };
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::error!("idem: IdempotencyLayer runs outside a Tokio runtime");
            return Ok(guard.refuse(Rejection::new(
                RejectionKind::RuntimeUnavailable,
                "the server runs IdempotencyLayer outside a Tokio runtime",
            )));
        }
        let in_header = match key_in_header(&settings, &request) {
            Ok(Some(in_header)) => in_header,
            Ok(None) => return pass(inner, request).await,
            Err(rejection) => return Ok(guard.refuse(rejection)),
        };
        let (parts, reading) = read_whole(request);
        let body = match reading.await {
            Ok(body) => body,
            Err(rejection) => return Ok(guard.refuse(rejection)),
        };
        let key = match in_header.or_else(|| key_in_body(&settings, &parts, &body)) {
            Some(key) => key,
            None if settings.requires_key(&parts.method) => {
                return Ok(guard.refuse(missing_key(&settings)));
            }
            None => return pass(inner, rebuild(parts, body)).await,
        };
        let record_key = match record_key(&guard, &settings, &parts, &key) {
            Ok(record_key) => record_key,
            Err(refusal) => return Ok(refusal),
        };
        let fingerprint = fingerprint(&parts, &body, &settings.fingerprint_headers);
        let owner = Owner::random();
        let started = Instant::now();
        let begun = guard
            .store()
            .begin_record(&record_key, &owner, &fingerprint, settings.lease)
            .await;
        outcome::store_latency(Guard::Idempotency, started.elapsed());
        match begun {
            Ok(Begin::Started) => {
                outcome::report(Guard::Idempotency, Outcome::Accepted);
                let handle = IdempotencyRecord::new(
                    record_key,
                    owner,
                    settings.retention,
                    settings.scope,
                    settings.max_stored_response,
                );
                let record = Record::new(guard.store().clone(), handle);
                match run_first(settings, record, inner, rebuild(parts, body)).await {
                    Ok(answered) => answered,
                    Err(rejection) => Ok(guard.refuse(rejection)),
                }
            }
            Ok(Begin::Completed { response }) => Ok(replay(
                &guard,
                &response,
                &parts.headers,
                &settings.replayed_header,
            )),
            Ok(Begin::InProgress { remaining }) => {
                outcome::report(Guard::Idempotency, Outcome::Conflict);
                Ok(guard.refuse(in_progress(remaining)))
            }
            Ok(Begin::Mismatch) => {
                outcome::report(Guard::Idempotency, Outcome::Mismatch);
                Ok(guard.refuse(reused()))
            }
            Err(error) => match guard.on_store_error(&error, "begin an idempotency record") {
                Err(refusal) => Ok(refusal),
                Ok(()) => pass(inner, rebuild(parts, body)).await,
            },
        }
    }
    .instrument(span)
}

/// Hands the request to the inner service unguarded. Boxed: it is the rare way out, and
/// its future inline would make every guarded request's future larger.
fn pass<S: Inner>(mut inner: S, request: Request) -> Pin<Box<S::Future>> {
    Box::pin(inner.call(request))
}

/// What the `Idempotency-Key` header says, checked before the body is read: `Some` of the
/// key it carries (`None` inside when the key is to come from the body), or `None` when
/// the request carries no key and needs none, and passes unguarded.
///
/// # Errors
///
/// The refusal for a malformed key, or a missing one where it is required.
fn key_in_header(
    settings: &Settings,
    request: &Request,
) -> Result<Option<Option<String>>, Rejection> {
    let KeySource::Header = settings.key else {
        return Ok(Some(None));
    };
    match key_header::from_headers(request.headers(), &settings.key_header) {
        Ok(Some(key)) => Ok(Some(Some(key))),
        Ok(None) if settings.requires_key(request.method()) => Err(missing_key(settings)),
        Ok(None) => Ok(None),
        Err(invalid) => {
            outcome::report(Guard::Idempotency, Outcome::Invalid);
            tracing::debug!(%invalid, "idem: the idempotency key is malformed");
            Err(Rejection::new(
                RejectionKind::InvalidIdempotencyKey,
                invalid.to_string(),
            ))
        }
    }
}

/// The key the layer's key function finds in the head and the whole body, if it has one.
fn key_in_body(settings: &Settings, parts: &Parts, body: &Bytes) -> Option<String> {
    match &settings.key {
        KeySource::Function(key_of) => key_of(parts, body),
        KeySource::Header => None,
    }
}

/// The store key of the record for `key`. A record belongs to one endpoint: the same key
/// sent to another route (or with another method) is another operation, never a replay of
/// this one's response. Under [`RecordScope::Client`] it belongs to one client too.
#[expect(
    clippy::result_large_err,
    reason = "the refusal is the response, given back as it is on this rare path"
)]
fn record_key(
    guard: &GuardContext,
    settings: &Settings,
    parts: &Parts,
    key: &str,
) -> Result<Key, Response> {
    let (method, route) = (parts.method.as_str().as_bytes(), route(parts).as_bytes());
    Ok(match settings.scope {
        RecordScope::Client => {
            let client = guard.identify(&ClientRequest::from_parts(parts))?;
            outcome::record_client(&tracing::Span::current(), &client);
            guard.key(&[
                b"idempotency",
                client.as_bytes(),
                method,
                route,
                key.as_bytes(),
            ])
        }
        RecordScope::Shared => guard.key(&[b"idempotency:shared", method, route, key.as_bytes()]),
    })
}

/// The response an earlier request with this key stored, or the refusal that says why it
/// cannot be given.
pub(crate) fn replay(
    guard: &GuardContext,
    stored: &Bytes,
    request: &HeaderMap,
    replayed_header: &HeaderName,
) -> Response {
    let rejection = match stored_response::decode(stored) {
        Ok(Replay::Response(mut response)) => {
            if *replayed_header != stored_response::IDEMPOTENT_REPLAYED {
                let headers = response.headers_mut();
                if let Some(marker) = headers.remove(&stored_response::IDEMPOTENT_REPLAYED) {
                    headers.insert(replayed_header.clone(), marker);
                }
            }
            match content_coding::unaccepted(response.headers(), request) {
                None => {
                    outcome::report(Guard::Idempotency, Outcome::Replayed);
                    return response;
                }
                Some(coding) => not_acceptable(response.status(), &coding),
            }
        }
        Ok(Replay::TooLarge { status }) => {
            outcome::report(Guard::Idempotency, Outcome::Replayed);
            Rejection::new(
                RejectionKind::ResponseNotReplayable,
                format!(
                    "the request with this idempotency key was already processed (status {}), \
                     but its response was too large to keep and cannot be replayed; look up \
                     its result instead of retrying",
                    status.as_u16()
                ),
            )
        }
        Err(unreadable) => {
            tracing::error!(%unreadable, "idem: a stored response cannot be replayed");
            Rejection::new(
                RejectionKind::UnreadableIdempotencyRecord,
                "the stored response of this idempotency key cannot be read by this server; \
                 the request was processed and is not run again",
            )
        }
    };
    guard.refuse(rejection)
}

/// The answer to a retry while the first request with its key still runs.
fn in_progress(remaining: Duration) -> Rejection {
    Rejection::new(
        RejectionKind::IdempotentRequestInProgress,
        "a request with this idempotency key is still being processed; retry once it has \
         completed",
    )
    .with_retry_after(remaining.min(RETRY_IN_PROGRESS))
}

/// The answer to a key sent again with another request.
fn reused() -> Rejection {
    Rejection::new(
        RejectionKind::IdempotencyKeyReused,
        "this idempotency key was already used for a different request (its path, query, body \
         or compared headers differ); use a new key for a new request",
    )
}

/// The answer to a retry that does not accept the content coding its stored response
/// has (a compression layer inside this one encoded it for the first client): the bytes
/// would be unreadable to it, and the handler does not run twice for one key.
fn not_acceptable(status: StatusCode, coding: &str) -> Rejection {
    outcome::report(Guard::Idempotency, Outcome::Replayed);
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
    outcome::report(Guard::Idempotency, Outcome::Missing);
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

/// The route of a request still whole, for its span.
fn route_of(request: &Request) -> &str {
    match request.extensions().get::<MatchedPath>() {
        Some(matched) => matched.as_str(),
        None => request.uri().path(),
    }
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
