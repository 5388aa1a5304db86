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
use idem_core::{Fingerprint, Key, Store, StoreError, throttled};
use tracing::Instrument;

use super::first_run::{Began, Record};
use super::record_keys::{self, tag};
use super::stored_response::{self, Replay};
use super::{KeySource, RecordScope, Settings, content_coding, key_header};
use crate::future::{Inner, ResponseFuture};
use crate::guard::GuardContext;
use crate::idem::OnStore;
use crate::identity::{ClientId, ClientRequest};
use crate::outcome::{self, Guard, Outcome, Reporter};
use crate::rejection::{Rejection, RejectionKind};
use crate::request_body::{Unread, read_whole};

/// How long a client that met a running attempt is told to wait: the attempt's lease
/// says only when a *dead* attempt frees the key, not when a live one will finish.
const RETRY_IN_PROGRESS: Duration = Duration::from_secs(1);

/// Answers one request of a guarded method.
///
/// What the request's head decides is decided here, before any future: a request that
/// needs no guard is handed on, and a refusal is ready at once. Only a guarded request
/// gets the future of [`Attempt::answer`], on the runtime's store typed, which is boxed
/// per request (`tests::the_per_request_future_stays_small`).
pub(super) fn answer<S: Inner>(
    settings: Arc<Settings>,
    inner: S,
    request: Request,
) -> ResponseFuture<S::Future> {
    let reporter = Reporter::of(Guard::Idempotency, &ClientRequest::from_request(&request));
    let span = reporter.span(route_of(&request), None);
    let opened = span.in_scope(|| Attempt::open(settings, inner, &request, reporter));
    match opened {
        Opened::Guarded(attempt, in_header) => {
            let (parts, unread) = read_whole(request, None);
            let store = attempt.guard.store().clone();
            store.typed(Guarded {
                attempt,
                in_header,
                parts,
                unread,
                span,
            })
        }
        Opened::Unguarded(mut inner) => ResponseFuture::unguarded(inner.call(request)),
        Opened::Refused(refusal) => ResponseFuture::ready(Ok(refusal)),
    }
}

/// A guarded request, to be answered on the runtime's store once it is typed.
struct Guarded<S> {
    attempt: Attempt<S>,
    in_header: KeyInHeader,
    parts: Parts,
    unread: Unread,
    span: tracing::Span,
}

impl<S: Inner> OnStore for Guarded<S> {
    type Output = ResponseFuture<S::Future>;

    fn on<St: Store + Clone>(self, store: St, waits: bool) -> Self::Output {
        let Self {
            attempt,
            in_header,
            parts,
            unread,
            span,
        } = self;
        ResponseFuture::guarded(
            attempt
                .answer(store, in_header, parts, unread)
                .instrument(span),
            waits,
        )
    }
}

/// One request the layer guards, as its steps share it.
struct Attempt<S> {
    guard: GuardContext,
    settings: Arc<Settings>,
    reporter: Reporter,
    inner: S,
}

/// What the head of a request decides.
enum Opened<S> {
    /// It is guarded, with what its key header said.
    Guarded(Attempt<S>, KeyInHeader),
    /// It carries no key and needs none: it passes unguarded.
    Unguarded(S),
    /// It is refused.
    Refused(Response),
}

/// What the key header of a request said.
enum KeyInHeader {
    /// The key.
    Found(String),
    /// Nothing: the key is to be found in the body.
    LookInBody,
    /// Nothing, and no key is needed.
    Absent,
}

impl<S: Inner> Attempt<S> {
    /// The opening, from the request's head alone: the runtime and the key header.
    fn open(settings: Arc<Settings>, inner: S, request: &Request, reporter: Reporter) -> Opened<S> {
        let view = ClientRequest::from_request(request);
        let guard = match GuardContext::of(&view) {
            Ok(guard) => guard,
            Err(refusal) => return Opened::Refused(refusal),
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Opened::Refused(guard.refuse(runtime_unavailable()));
        }
        let in_header = match key_in_header(&settings, request, &reporter) {
            Ok(KeyInHeader::Absent) => return Opened::Unguarded(inner),
            Ok(in_header) => in_header,
            Err(rejection) => return Opened::Refused(guard.refuse(rejection)),
        };
        let attempt = Self {
            guard,
            settings,
            reporter,
            inner,
        };
        Opened::Guarded(attempt, in_header)
    }

    /// Reads the body, finds the key, begins the record and runs or answers by what it
    /// found. One `async` block awaits every step, and the steps that need not wait are
    /// plain functions: nested `async fn`s would each keep their arguments twice in this
    /// future. The head and the unread body are the block's own, used in place; as an
    /// `async fn` the future would hold them twice (`tests::the_per_request_future_stays_small`:
    /// 872 bytes; 1,136 as an `async fn` when this measured 856).
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn's future would hold its arguments twice"
    )]
    fn answer<St: Store + Clone>(
        self,
        store: St,
        in_header: KeyInHeader,
        parts: Parts,
        unread: Unread,
    ) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
        async move {
            let body = match unread.read().await {
                Ok(body) => body,
                Err(rejection) => return Ok(self.guard.refuse(rejection)),
            };
            let Some(key) = self.key(in_header, &parts, &body) else {
                if self.settings.requires_key(&parts.method) {
                    return Ok(self.guard.refuse(missing_key(
                        &self.settings,
                        &parts.headers,
                        &self.reporter,
                    )));
                }
                return pass(self.inner, rebuild(parts, body)).await;
            };
            let (record_key, fingerprint) = match self.identity(&parts, &body, &key) {
                Ok(identity) => identity,
                Err(refusal) => return Ok(refusal),
            };
            let started = Instant::now();
            let began = Record::begin_on(
                store,
                &self.guard,
                &self.reporter,
                &record_key,
                &fingerprint,
                &self.settings,
                &parts.headers,
            )
            .await;
            self.reporter.store_latency(started.elapsed());
            match self.decide(began, &parts.headers) {
                Decided::Run(record) => record.run(self.inner, rebuild(parts, body)).await,
                Decided::Answered(response) => Ok(response),
                Decided::Pass => pass(self.inner, rebuild(parts, body)).await,
            }
        }
    }

    /// The request's key: the one its header carried, or else the one its body holds.
    fn key(&self, in_header: KeyInHeader, parts: &Parts, body: &Bytes) -> Option<String> {
        match in_header {
            KeyInHeader::Found(key) => Some(key),
            KeyInHeader::LookInBody | KeyInHeader::Absent => {
                key_in_body(&self.settings, parts, body)
            }
        }
    }

    /// The store key of the record of `key` for this request — for its client, under
    /// [`RecordScope::Client`] — and the fingerprint that tells it from another request
    /// with the same key.
    ///
    /// # Errors
    ///
    /// The refusal for a client that cannot be told.
    #[expect(
        clippy::result_large_err,
        reason = "the refusal is the response, given back as it is on this rare path"
    )]
    fn identity(
        &self,
        parts: &Parts,
        body: &Bytes,
        key: &str,
    ) -> Result<(Key, Fingerprint), Response> {
        let view = ClientRequest::from_parts(parts);
        let record_key = match self.settings.scope {
            RecordScope::Client => {
                let client = self.guard.identify(&view)?;
                outcome::record_client(&tracing::Span::current(), &client);
                record_key(&self.guard, tag::IDEMPOTENCY, Some(&client), &view, key)
            }
            RecordScope::Shared => {
                record_key(&self.guard, tag::SHARED_IDEMPOTENCY, None, &view, key)
            }
        };
        let body = self.settings.payload.counted(body);
        let fingerprint = fingerprint(&view, &body, &self.settings.fingerprint_headers);
        Ok((record_key, fingerprint))
    }

    /// What beginning the record found decides: the request runs as the first of its
    /// key, is answered (a replay, a refusal), or, the store failing open, passes.
    fn decide<St: Store + Clone>(
        &self,
        began: Result<Began<St>, StoreError>,
        request: &HeaderMap,
    ) -> Decided<St> {
        let refusal = match began {
            Ok(Began::First(record)) => {
                self.reporter.report(Outcome::Accepted);
                return Decided::Run(record);
            }
            Ok(Began::Completed(stored)) => {
                let replayed = replay(
                    &self.guard,
                    &self.settings,
                    &self.reporter,
                    &stored,
                    request,
                );
                return Decided::Answered(replayed);
            }
            Ok(Began::InProgress(remaining)) => {
                self.reporter.report(Outcome::Conflict);
                // The one refusal a client retries under the same key: it learns there how
                // long that key is kept.
                let mut refused = self.guard.refuse(in_progress(remaining));
                self.settings.advertise_retention(refused.headers_mut());
                return Decided::Answered(refused);
            }
            Ok(Began::Mismatch) => {
                self.reporter.report(Outcome::Mismatch);
                reused()
            }
            Err(error) => {
                let what = "begin an idempotency record";
                return match self.guard.on_store_error(&error, what) {
                    Err(refusal) => Decided::Answered(refusal),
                    Ok(()) => Decided::Pass,
                };
            }
        };
        Decided::Answered(self.guard.refuse(refusal))
    }
}

/// What a request whose record was begun comes to.
enum Decided<St: Store> {
    /// It runs, as the first of its key.
    Run(Record<St>),
    /// It is answered without running.
    Answered(Response),
    /// It passes unguarded: the store failed, and the runtime fails open.
    Pass,
}

/// Hands the request to the inner service unguarded. Boxed: it is the rare way out, and
/// inline it would size every guarded request's future
/// (`tests::the_per_request_future_stays_small`).
fn pass<S: Inner>(mut inner: S, request: Request) -> Pin<Box<S::Future>> {
    Box::pin(inner.call(request))
}

/// The refusal of a request that reaches the layer outside a Tokio runtime.
fn runtime_unavailable() -> Rejection {
    throttled::error!("idem: IdempotencyLayer runs outside a Tokio runtime");
    Rejection::new(
        RejectionKind::RuntimeUnavailable,
        "the server runs IdempotencyLayer outside a Tokio runtime",
    )
}

/// What the `Idempotency-Key` header says, checked before the body is read.
///
/// # Errors
///
/// The refusal for a malformed key, or a missing one where it is required.
fn key_in_header(
    settings: &Settings,
    request: &Request,
    reporter: &Reporter,
) -> Result<KeyInHeader, Rejection> {
    let KeySource::Header = settings.key else {
        return Ok(KeyInHeader::LookInBody);
    };
    match key_header::from_headers(request.headers(), &settings.key_header) {
        Ok(Some(key)) => Ok(KeyInHeader::Found(key)),
        Ok(None) if settings.requires_key(request.method()) => {
            Err(missing_key(settings, request.headers(), reporter))
        }
        Ok(None) => Ok(KeyInHeader::Absent),
        Err(invalid) => {
            reporter.report(Outcome::Invalid);
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

/// The store key of the record `key` names, in `namespace`. A record belongs to one
/// endpoint: the same key sent to another route (or with another method) is another
/// operation, never a replay of this one's response. With a `client` it belongs to that
/// client too.
pub(crate) fn record_key(
    guard: &GuardContext,
    namespace: &[u8],
    client: Option<&ClientId>,
    request: &ClientRequest<'_>,
    key: &str,
) -> Key {
    let (method, route) = (request.method(), route(request));
    let namespace_of_runtime = guard.idem().namespace();
    record_keys::derive(namespace_of_runtime, namespace, client, method, route, key)
}

/// The response an earlier request with this key stored, or the refusal that says why it
/// cannot be given; reported as a replay to `reporter`. A response given carries the
/// advertised retention, then goes through the application's hook.
pub(crate) fn replay(
    guard: &GuardContext,
    settings: &Settings,
    reporter: &Reporter,
    stored: &Bytes,
    request: &HeaderMap,
) -> Response {
    let rejection = match stored_response::decode(stored) {
        Ok(Replay::Response(mut response)) => {
            reporter.report(Outcome::Replayed);
            let replayed_header = &settings.replayed_header;
            if *replayed_header != stored_response::IDEMPOTENT_REPLAYED {
                let headers = response.headers_mut();
                if let Some(marker) = headers.remove(&stored_response::IDEMPOTENT_REPLAYED) {
                    headers.insert(replayed_header.clone(), marker);
                }
            }
            match content_coding::unaccepted(response.headers(), request) {
                None => {
                    settings.advertise_retention(response.headers_mut());
                    if let Some(hook) = &settings.on_replay {
                        hook.adjust(&mut response, request);
                    }
                    return response;
                }
                Some(coding) => not_acceptable(response.status(), &coding),
            }
        }
        Ok(Replay::TooLarge { status }) => {
            reporter.report(Outcome::Replayed);
            not_replayable(status, "was too large to keep")
        }
        Ok(Replay::Failed { status }) => {
            reporter.report(Outcome::Replayed);
            not_replayable(status, "failed while it was sent")
        }
        Err(unreadable) => {
            throttled::error!(%unreadable, "idem: a stored response cannot be replayed");
            Rejection::new(
                RejectionKind::UnreadableIdempotencyRecord,
                "the stored response of this idempotency key cannot be read by this server; \
                 the request was processed and is not run again",
            )
        }
    };
    guard.refuse(rejection)
}

/// The answer to a retry of a request that ran (with `status`) but whose response `why`
/// and cannot be replayed.
fn not_replayable(status: StatusCode, why: &str) -> Rejection {
    Rejection::new(
        RejectionKind::ResponseNotReplayable,
        format!(
            "the request with this idempotency key was already processed (status {}), but \
             its response {why} and cannot be replayed; look up its result instead of \
             retrying",
            status.as_u16()
        ),
    )
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

fn missing_key(settings: &Settings, headers: &HeaderMap, reporter: &Reporter) -> Rejection {
    reporter.report(Outcome::Missing);
    Rejection::new(
        RejectionKind::MissingIdempotencyKey,
        settings.missing_key_message(headers),
    )
}

fn rebuild(parts: Parts, body: Bytes) -> Request {
    Request::from_parts(parts, Body::from(body))
}

/// The URI the client sent: a router that `nest`s strips its prefix from the request's
/// own URI before the route's layers see it.
fn original_uri<'a>(request: &ClientRequest<'a>) -> &'a Uri {
    request
        .extensions()
        .get::<OriginalUri>()
        .map_or(request.uri(), |original| &original.0)
}

/// The route of a request still whole, for its span.
fn route_of(request: &Request) -> &str {
    match request.extensions().get::<MatchedPath>() {
        Some(matched) => matched.as_str(),
        None => request.uri().path(),
    }
}

/// The route a request was sent to: a gRPC call's method path, else the path pattern it
/// matched, in full under `nest`; a layer around a whole router runs before any route
/// matched, and then it is the path.
fn route<'a>(request: &ClientRequest<'a>) -> &'a str {
    outcome::matched_route(request).unwrap_or_else(|| original_uri(request).path())
}

/// What makes two requests with one key the same request: method, path and query as the
/// client sent them, body, and the chosen headers (each with its number of values, so
/// values cannot shift between headers).
fn fingerprint(request: &ClientRequest<'_>, body: &[u8], headers: &[HeaderName]) -> Fingerprint {
    let uri = original_uri(request);
    let fields = [
        request.method().as_str().as_bytes(),
        uri.path().as_bytes(),
        uri.query().unwrap_or("").as_bytes(),
        body,
    ]
    .map(Cow::Borrowed);
    let chosen = headers.iter().flat_map(|name| {
        let values = request.headers().get_all(name);
        let count = values.iter().count() as u64;
        std::iter::once(Cow::Owned(count.to_be_bytes().to_vec()))
            .chain(values.iter().map(|value| Cow::Borrowed(value.as_bytes())))
    });
    Fingerprint::of(fields.into_iter().chain(chosen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IdempotencyLayer;

    /// The future of a guarded request on `store`, as the layer boxes it.
    fn guarded_future_size<St: Store + Clone>(store: St) -> usize {
        let mut request = Request::post("/orders")
            .header("idempotency-key", "\"k-1\"")
            .body(Body::empty())
            .expect("a valid request");
        request
            .extensions_mut()
            .insert(crate::Idem::new(idem_core::MemoryStore::new()));
        let settings = IdempotencyLayer::new().settings;
        let reporter = Reporter::of(Guard::Idempotency, &ClientRequest::from_request(&request));
        let Opened::Guarded(attempt, in_header) =
            Attempt::open(settings, axum::Router::new(), &request, reporter)
        else {
            panic!("a request with a key is guarded");
        };
        let (parts, unread) = read_whole(request, None);
        std::mem::size_of_val(&attempt.answer(store, in_header, parts, unread))
    }

    /// The layer's per-request future, boxed for every guarded request, is measured with
    /// `size_of_val` in a debug build with a `Router` as the inner service, on the store it
    /// is typed for: 856 bytes on `MemoryStore` (872 on a store behind `AnyStore`; 880 and
    /// 896 with the feature `metrics`, whose reporter holds the route's label; 840 and 856
    /// before the reporter), under glibc's 1,032-byte per-thread cache; 912 with the record's begin an `async fn`, which
    /// holds its arguments twice (872 before the begin gave its key back when dropped).
    /// A `RedisStore` call's future is larger, and sizes only the requests on Redis.
    #[tokio::test]
    async fn the_per_request_future_stays_small() {
        let size = guarded_future_size(idem_core::MemoryStore::new());
        assert!(size <= 900, "the per-request future grew to {size} bytes");
        let any = guarded_future_size(idem_core::AnyStore::new(idem_core::MemoryStore::new()));
        assert!(any <= 900, "on a custom store it grew to {any} bytes");
    }
}
