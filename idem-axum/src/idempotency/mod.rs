//! Idempotency keys with stored-response replay: [`IdempotencyLayer`].
//!
//! An operation that returns the result of its first call on every call, over HTTP as draft-ietf-httpapi-idempotency-key-header-07
//! and Stripe define it. A client puts a unique `Idempotency-Key` on a request and sends
//! the same key again when it retries; the handler runs once, and every retry gets the
//! first response back.
//!
//! | request | answer |
//! |---|---|
//! | first with this key | the handler runs; its response is stored for 24 h and sent, with `Idempotency-TTL: 86400` when it is kept |
//! | retry after it completed | the stored response, byte for byte, plus `Idempotent-Replayed: true` and `Idempotency-TTL`, then the [hook on replays](crate::IdempotencyLayer::on_replay), if any; the handler does not run |
//! | retry after it completed, its response not replayable to it (too large to keep, its body failed half-way, or [encoded](#content-encoding) in a way it does not accept) | `409 Conflict`, no `Retry-After`; the handler does not run |
//! | retry while the first still runs | `409 Conflict` + `Retry-After` + `Idempotency-TTL` |
//! | same key, same route, another request (path, query, body differ) | `422 Unprocessable Content` |
//! | same key, another route or method | a request of its own: the handler runs |
//! | key malformed | `400 Bad Request` |
//! | key missing, [required](crate::IdempotencyLayer::with_required) | `400 Bad Request`, saying what to send |
//! | key missing, not required | the handler runs, unguarded |
//! | method not guarded (`GET`; by default all but `POST` and `PATCH`) | passed through untouched |
//!
//! Refusals are [`Rejection`](crate::Rejection)s (`application/problem+json`).
//!
//! ```
//! use axum::{Router, routing::post};
//! use idem_axum::{Idem, IdempotencyLayer, identity::ClientHeader};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let idem = Idem::builder()
//!     .with_client_identity(ClientHeader::new(http::HeaderName::from_static("x-api-key")))
//!     .build();
//! let app = Router::new()
//!     .route("/payments", post(|| async { (http::StatusCode::CREATED, "payment 1") }))
//!     .route_layer(IdempotencyLayer::new().with_required(true))
//!     .layer(idem.layer());
//!
//! let pay = || {
//!     http::Request::post("/payments")
//!         .header("x-api-key", "merchant-7")
//!         .header("idempotency-key", "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"")
//!         .body(axum::body::Body::from(r#"{"amount":100}"#))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(pay()).await.unwrap();
//! assert_eq!(first.status(), 201);
//! let retry = app.oneshot(pay()).await.unwrap();
//! assert_eq!(retry.status(), 201);
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # }
//! ```
//!
//! # The key
//!
//! - The `Idempotency-Key` header, as a structured-field string (`"…"`, the draft's form)
//!   or bare (Stripe's); 1–255 printable ASCII characters. Anything else is a 400.
//! - Or a [function of the request](crate::IdempotencyLayer::with_idempotency_key_fn), for callers that
//!   cannot send a header: a payment provider's callback whose `source` and `seq` fields
//!   name one delivery, whichever channel it arrives on.
//! - Keys are scoped by client ([`RecordScope::Client`], the runtime's
//!   [client identity](crate::identity)): two clients may use the same key without meeting.
//!   [`RecordScope::Shared`] makes one key space for everyone, for keys that are unique by
//!   construction (the provider's sequence number) on a route only that caller reaches.
//! - Keys are scoped by route as well, under either scope: a record belongs to one method
//!   and one route, the [`MatchedPath`](axum::extract::MatchedPath) — in full under
//!   `Router::nest`, whose routes all see the same stripped path — or, for a layer around
//!   a whole router, where no route has matched yet, the path the client sent. The same
//!   key sent to `/orders` and to `/refunds` is two operations; neither is ever answered
//!   with the other's response.
//! - A key is bound to the request it first came with: its fingerprint is the method, the
//!   path and query as the client sent them ([`OriginalUri`](axum::extract::OriginalUri),
//!   so a `nest` prefix counts, `/{shop}/orders` included), a SHA-256 of the body — or of
//!   [what of it you choose](crate::IdempotencyLayer::with_payload_fingerprint): canonical
//!   JSON, selected fields, none — and any
//!   [headers you name](crate::IdempotencyLayer::with_fingerprint_headers).
//!
//! # What is stored
//!
//! The status, every header value in order (repeated ones such as `Set-Cookie` kept;
//! hop-by-hop ones such as `Connection` left out) and the body — what the handler
//! produced, and what the first client got — and the trailers, when it ended with some (a
//! gRPC call's `grpc-status` and trailing metadata; see the `grpc` module, with the
//! feature `grpc`).
//!
//! - **Cookies under a shared key**: a [`RecordScope::Shared`] record is replayed to whoever
//!   presents its key, so its stored copy has no `Set-Cookie`: the first client gets its
//!   cookies (a session, say), a replay does not. `Set-Cookie` is the field by which a
//!   response hands one client state of its own; nothing else is left out (the obsolete
//!   `Set-Cookie2` is honoured by no client), and a body written for one caller is that
//!   route's to avoid. Under [`RecordScope::Client`] a replay goes to the same client and
//!   keeps its cookies.
//! - **Statuses**: every response but a 5xx, a 408, a 425 or a 429 is stored
//!   ([`stored_by_default`]; configurable with
//!   [`with_stored_statuses`](crate::IdempotencyLayer::with_stored_statuses)). A response that is
//!   not stored removes the record, so a retry runs the handler again: a server error may
//!   well be transient, and a timeout, a too-early or a rate limit says to come back later
//!   with the same request. Storing the other 4xx is Stripe's behaviour: the request was
//!   handled, and retrying it unchanged would fail the same way.
//! - **Not kept, by the handler's choice**: a response marked with [`DoNotKeep`] (a
//!   request refused by validation before anything was done) is not stored, and its key
//!   is freed: a corrected retry with the same key runs. `Cache-Control: no-store` does
//!   not count: it speaks to HTTP caches, and a payment's answer must be kept whatever
//!   it says to them.
//! - **Request bodies** are read whole before anything is stored, within the router's
//!   `DefaultBodyLimit`: a larger one is a 413 and leaves no record. Put
//!   `DefaultBodyLimit` *outside* this layer (on the router, as axum's docs do), so that
//!   the layer reads within it and refuses an oversize body before it begins a record.
//!   Inside, it is the handler's extractor that refuses: the layer never keeps a 413,
//!   wherever it comes from, so the key is freed either way.
//! - **Responses over the storage limit**
//!   ([`with_max_stored_response`](crate::IdempotencyLayer::with_max_stored_response), 1 MiB by
//!   default) reach the first client whole, streamed as the handler produces them; the
//!   record then keeps only "processed, with status N, too large to replay", and a retry
//!   gets `409 Conflict` *without* `Retry-After`, saying so. The handler never runs twice
//!   for one key: the side effect happened, and the client should look up its result
//!   rather than repeat it.
//! - **A response body that fails half-way** (a stream the handler returned breaks): the
//!   handler has run, so the record keeps "processed, with status N, not replayable", and a
//!   retry gets `409 Conflict` saying so rather than running the handler again. The first
//!   client gets the status, the headers and the bytes the handler produced before the
//!   failure, then the error, which ends its connection, as it would without this layer;
//!   a replay is never a truncated response. It gets them once the body has failed, not
//!   as they were produced: the layer holds a response back until its body has ended
//!   (within the storage limit), because until the record is completed the client may
//!   yet get another answer — the stored response of an attempt that took the key
//!   meanwhile — and one key never answers two ways. The error then comes a moment after
//!   those bytes, so that the server writes them first; what the connection cannot take
//!   at once (a partial body larger than its send buffer) may still be cut short.
//! - The record lives for the [retention](crate::IdempotencyLayer::with_retention) (24 h). In
//!   Redis it survives a restart of the application, and every instance replays it. The
//!   answers about a kept key advertise it, so that a client stops retrying before its key
//!   is forgotten ([the retention, advertised](crate::guide::guards#the-retention-advertised)).
//!
//! # Content encoding
//!
//! Put compression (tower-http's `CompressionLayer`, say) *outside* this layer:
//!
//! ```text
//! Router::new()
//!     .route("/receipts", post(handler).route_layer(IdempotencyLayer::new()))
//!     .layer(CompressionLayer::new())
//! ```
//!
//! Then the stored response is the handler's own, in the identity encoding, and every
//! answer — the first and each replay — is compressed for the `Accept-Encoding` of the
//! request it answers. Inside this layer, compression would store the encoding the
//! *first* client accepted, and a retry without `Accept-Encoding: gzip` would be sent
//! gzip bytes it cannot read. Neither the headers that choose an encoding nor the
//! encoding are part of the fingerprint: a retry that accepts other encodings is the
//! same request.
//!
//! A response stored with a `Content-Encoding` (compression inside this layer, or a
//! handler that encodes) is logged as a warning naming this order, and replayed only to
//! a retry whose `Accept-Encoding` accepts every coding it has: listed with a weight
//! above zero, or covered by `*`. A request without the field is taken to accept none,
//! as compression layers take it. Any other retry gets `409 Conflict` saying which
//! encoding to accept: it cannot read the stored bytes, and the handler never runs twice
//! for one key.
//!
//! # Robustness
//!
//! - **Atomic start**: the in-progress record is created with the fingerprint in one
//!   store operation ([`RecordStore::begin_record`](crate::store::RecordStore::begin_record)); of any number
//!   of concurrent requests with one key exactly one runs the handler.
//! - **Disconnects**: a client that goes away does not cancel the handler: it moves into
//!   a task of its own, finishes, and its response is stored for the retry. Such a
//!   *detached* handler is counted by the runtime, not by anything around the router: at
//!   shutdown [`Idem::shutdown`](crate::Idem::shutdown) waits for it (and refuses new
//!   guarded requests with 503 meanwhile), and
//!   [`with_detached_limit`](crate::IdemBuilder::with_detached_limit) bounds how many run
//!   at once.
//! - **Disconnects before the handler**: a client that goes away while its record is
//!   being begun — the store asked, its answer not back — gives its key back: whether or
//!   not the store began the record, it is removed by the owner drawn for this attempt, in
//!   a task of its own, so that a retry right after runs (or replays) rather than getting
//!   409 until the lease ends. A store that cannot answer the removal (a stalled link) is
//!   asked again, 50 ms to 1 s apart, for up to the lease: the key is free within about a
//!   second of the store answering again, and at the latest when the lease ends, which is
//!   also the bound for a begin that reaches the store only after its removal did (a link
//!   that held it past every retry).
//! - **Long handlers**: the record is in progress for a [lease](crate::IdempotencyLayer::with_lease)
//!   (10 s), renewed every third of it while the handler runs; the lease only matters when
//!   the instance dies mid-request, and then frees the key one lease later. A handler
//!   without a client is not bounded by anything but itself: put a timeout inside this
//!   layer if it can hang.
//! - **Fenced completion, one answer per key**: only the attempt that began a record can
//!   complete it. An attempt whose record ended with its lease (the store unreachable for
//!   longer than the lease) claims the key again when it completes: if the key is free, it
//!   stores its response there, and a retry replays it rather than running the handler
//!   again. If another attempt took the key meanwhile, the key is that attempt's: this
//!   attempt stores nothing, and its client gets the other attempt's stored response —
//!   as a retry of its own would, so in a [content coding](#content-encoding) only if its
//!   `Accept-Encoding` accepts it — or, while that one still runs, `409 Conflict` +
//!   `Retry-After` saying so: never an answer of its own that the key would not replay.
//! - **Panics and errors**: a handler that panics, or a service that returns an error,
//!   removes the record, so a retry runs afresh; the panic then continues to the caller
//!   (to `CatchPanicLayer`, say) as it would without this layer.
//! - **Store failures** follow the runtime's [`StoreFailure`](crate::StoreFailure) policy
//!   before the handler runs: 503 when failing closed, unguarded when failing open. If
//!   the store fails when the response is to be stored (Redis restarting, a network
//!   fault), the client still gets it within the store's timeout, and the response is
//!   stored again in the background, every 50 ms to 1 s, until the store answers (for at
//!   most the retention): a retry meanwhile gets 409, and once the store is back, the
//!   replay — the handler does not run twice. What remains: a store that loses the
//!   record (Redis without persistence), a process that dies before the response is
//!   stored, and a store down for longer than the lease while a retry, reaching it first,
//!   takes the key and runs the handler again (the completion retried in the background
//!   then finds the key taken, after the first client already got its own response) let
//!   a retry run the handler again; a record completed in the
//!   handler's own transaction ([`IdempotencyRecord`]) closes that too. A `MemoryStore`
//!   with no room left for the response keeps the "too large to replay" note instead, so a
//!   retry gets 409 and the handler does not run twice. No request waits longer than the
//!   store's timeout for the store.
//!
//! # One client's flood of new keys
//!
//! Every new key costs a record for the [retention](crate::IdempotencyLayer::with_retention):
//! in a `MemoryStore` 256 bytes plus the stored response, in Redis about as much. A client
//! that sends a new key with every request grows the store by its request rate × the
//! retention. What keeps that from harming others:
//!
//! - **Records have a budget of their own.** Windows, locks and records are never
//!   evicted, and form tokens — which anyone can mint by loading a page — have a separate
//!   budget and cannot eat into theirs. A `MemoryStore` bounds records in entries and in
//!   bytes, stored responses counted; Redis bounds them with `maxmemory` under
//!   `noeviction`. Past the budget a *new* key is refused by the store-failure policy
//!   (503 when failing closed) while replays of stored responses go on.
//! - **Pair the layer with a rate limiter** keyed by the same client identity, in front
//!   of it (for example `tower_governor`'s `GovernorLayer`, keyed by the peer address or
//!   your user id). At R requests a second and a retention T, one client then holds at
//!   most R × T records: 5 requests a second with the default 24 h is 432,000 records,
//!   with `with_retention(Duration::from_secs(3600))` 18,000. Pick T by how long your
//!   clients really retry.
//!
//! idem keeps no per-client quota of records itself. A quota is a count per client read
//! on every first request — a second store operation on the hot path, and in Redis
//! Cluster every record of a client held in one slot — and it stops nothing against a
//! client that mints identities (a fresh cookie, a new free-tier key), which a rate
//! limiter keyed by network address does. The budget is what must survive any flood; the
//! rate limiter is what keeps one client from spending it.
//!
//! Outcomes are logged as `tracing` events with an `idem.outcome` field: `accepted`,
//! `replayed`, `conflict`, `mismatch`, `invalid_key`, `missing_key`, `store_error`.

mod answer;
mod capture;
mod content_coding;
mod do_not_keep;
mod first_run;
mod key_header;
pub(crate) mod layer;
mod on_replay;
mod record;
mod record_keys;
mod retention;
mod stored_response;

use idem_core::payload::PayloadFingerprint;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderName, Method, StatusCode};

pub(crate) use self::answer::{record_key, replay};
pub use self::do_not_keep::DoNotKeep;
pub(crate) use self::first_run::{Began, Record, Spending};
pub(crate) use self::layer::IdempotencyLayer;
pub use self::layer::{Idempotency, stored_by_default};
pub(crate) use self::on_replay::ReplayHook;
pub use self::on_replay::Replayed;
pub use self::record::IdempotencyRecord;
pub use self::record_keys::RecordKeys;
pub(crate) use self::record_keys::tag;
use self::retention::AdvertisedRetention;

/// Whose idempotency keys are kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecordScope {
    /// Each client (as the runtime's [client identity](crate::identity) tells them apart) has
    /// keys of its own, so one client can neither collide with nor probe another's.
    #[default]
    Client,
    /// One key space for all clients, and no client identity needed: for keys unique by
    /// construction, such as a payment provider's callback sequence number that arrives
    /// from several addresses. A replay may go to another caller than the first, so the
    /// stored response keeps no `Set-Cookie`.
    Shared,
}

/// A function from a request to its key.
type KeyFn = dyn Fn(&Parts, &Bytes) -> Option<String> + Send + Sync;

/// Where a request's key comes from.
#[derive(Clone)]
enum KeySource {
    Header,
    Function(Arc<KeyFn>),
}

/// Which guarded methods must carry a key.
#[derive(Debug, Clone)]
enum Required {
    Never,
    Always,
    For(Vec<Method>),
}

/// How one [`IdempotencyLayer`] behaves.
#[derive(Clone)]
pub(crate) struct Settings {
    methods: Vec<Method>,
    required: Required,
    key: KeySource,
    scope: RecordScope,
    fingerprint_headers: Vec<HeaderName>,
    payload: PayloadFingerprint,
    pub(crate) lease: Duration,
    pub(crate) retention: Duration,
    /// The retention as the answers advertise it.
    advertised: AdvertisedRetention,
    /// The application's hook on replayed responses.
    on_replay: Option<ReplayHook>,
    max_stored_response: usize,
    /// Bodies of this many bytes or more are stored compressed; `None`, none is.
    compress_from: Option<usize>,
    stores_status: Arc<dyn Fn(StatusCode) -> bool + Send + Sync>,
    missing_key_message: Option<Cow<'static, str>>,
    key_header: HeaderName,
    replayed_header: HeaderName,
    /// The gRPC methods guarded; other gRPC calls pass through.
    #[cfg(feature = "grpc")]
    grpc_methods: crate::grpc::GrpcMethods,
    /// Which gRPC calls are stored, by their status.
    #[cfg(feature = "grpc")]
    stores_grpc_code: Arc<dyn Fn(crate::grpc::Code) -> bool + Send + Sync>,
}

impl Settings {
    /// The settings of a first attempt whose key is a one-time form token
    /// ([`VerifyFormTokenLayer::with_replay`]):
    /// its response is kept for `retention`, the token's life, unless it is a 5xx.
    /// Held under `lease` while the handler runs, if one is given; else the
    /// [`IdempotencyLayer`]'s default. Its replays go through `on_replay`, if given.
    ///
    /// The retention is not advertised: a browser does not read it, and the token's life
    /// is the form's own.
    pub(crate) fn for_form_submissions(
        retention: Duration,
        lease: Option<Duration>,
        on_replay: Option<ReplayHook>,
    ) -> Arc<Self> {
        let mut settings = Arc::clone(&IdempotencyLayer::new().settings);
        let form = Arc::make_mut(&mut settings);
        form.retention = retention;
        form.advertised = form.advertised.clone().named(None);
        form.on_replay = on_replay;
        if let Some(lease) = lease {
            form.lease = lease;
        }
        settings
    }

    /// Adds the advertised retention to the headers of an answer about a key this layer
    /// keeps: the first response when it is kept, a replay, a retry told the first still
    /// runs.
    pub(crate) fn advertise_retention(&self, headers: &mut HeaderMap) {
        self.advertised.advertise(headers);
    }

    /// Whether the layer guards `request`: a guarded method, and for a gRPC call a guarded
    /// gRPC method.
    fn takes<B>(&self, request: &http::Request<B>) -> bool {
        #[cfg(feature = "grpc")]
        if !self.grpc_methods.take(request) {
            return false;
        }
        self.methods.contains(request.method())
    }

    /// Whether a gRPC call answered with `head` and `trailers` is kept by the gRPC status
    /// policy; any response that is no gRPC call is.
    #[cfg(feature = "grpc")]
    fn keeps_call(&self, head: &http::HeaderMap, trailers: Option<&http::HeaderMap>) -> bool {
        crate::grpc::call_code(head, trailers).is_none_or(|code| {
            let kept = (self.stores_grpc_code)(code);
            if !kept {
                tracing::debug!(?code, "idem: gRPC call not stored (by policy)");
            }
            kept
        })
    }

    fn requires_key(&self, method: &Method) -> bool {
        match &self.required {
            Required::Never => false,
            Required::Always => true,
            Required::For(methods) => methods.contains(method),
        }
    }

    /// What a request without a key is told; `headers`, the request's, tell a gRPC call,
    /// whose key is a metadata entry, from an HTTP request, whose key is a header.
    fn missing_key_message(&self, headers: &HeaderMap) -> Cow<'static, str> {
        if let Some(message) = &self.missing_key_message {
            return message.clone();
        }
        #[cfg(feature = "grpc")]
        if matches!(self.key, KeySource::Header) && crate::grpc::is_grpc(headers) {
            return Cow::Owned(format!(
                "this call needs `{}` metadata: a value unique to this operation, 1 to 255 \
                 printable ASCII characters, sent unchanged with every retry",
                self.key_header
            ));
        }
        #[cfg(not(feature = "grpc"))]
        let _ = headers;
        Cow::Borrowed(match self.key {
            KeySource::Header if self.key_header != key_header::IDEMPOTENCY_KEY => {
                return Cow::Owned(format!(
                    "this request needs a `{}` header: a value unique to this operation, 1 to \
                     255 printable ASCII characters, sent unchanged with every retry",
                    self.key_header
                ));
            }
            KeySource::Header => {
                "this request needs an `Idempotency-Key` header: a value unique to this \
                 operation, 1 to 255 printable ASCII characters, sent unchanged with every \
                 retry, e.g. `Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\"`"
            }
            KeySource::Function(_) => {
                "this request does not carry the fields that identify it, so it cannot be \
                 made idempotent"
            }
        })
    }
}

/// The layer's operations in an OpenAPI document, as its settings make them.
#[cfg(feature = "openapi")]
impl crate::openapi::DescribesGuard for Settings {
    fn guards(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }

    fn operation_guard(&self, method: &Method) -> crate::openapi::OperationGuard {
        use crate::RejectionKind;

        let required = self.requires_key(method);
        let header = matches!(self.key, KeySource::Header).then(|| self.key_header.clone());
        let mut refusals = Vec::new();
        if required {
            refusals.push(RejectionKind::MissingIdempotencyKey);
        }
        if header.is_some() {
            refusals.push(RejectionKind::InvalidIdempotencyKey);
        }
        refusals.extend([
            RejectionKind::IdempotentRequestInProgress,
            RejectionKind::ResponseNotReplayable,
            RejectionKind::IdempotencyKeyReused,
            RejectionKind::PayloadTooLarge,
            RejectionKind::InvalidBody,
        ]);
        refusals.extend(crate::openapi::opening_refusals(
            self.scope == RecordScope::Client,
        ));
        let retention = self
            .advertised
            .name()
            .map(|name| (name.clone(), self.retention.as_secs()));
        let summary = match &header {
            Some(name) => format!(
                "Idempotent: a retry with the same `{name}` gets the first response back{}.",
                if required { " (the header is required)" } else { "; without the header, the request is not guarded" }
            ),
            None => "Idempotent: a retry of the same request, as the server identifies it, gets the first response back.".to_owned(),
        };
        let extension = serde_json::json!({
            "guard": "idempotency-key",
            "keyHeader": header.as_ref().map(HeaderName::as_str),
            "keyRequired": required,
            "replayedHeader": self.replayed_header.as_str(),
            "retentionHeader": retention.as_ref().map(|(name, _)| name.as_str()),
            "retentionSeconds": self.retention.as_secs(),
        });
        crate::openapi::OperationGuard {
            summary,
            key: header.map(|name| crate::openapi::KeyParameter { name, required }),
            refusals,
            replay: Some(self.replay_doc()),
            form_token: None,
            extension,
        }
    }
}

#[cfg(feature = "openapi")]
impl Settings {
    /// How the responses these settings keep are replayed, for an OpenAPI document.
    pub(crate) fn replay_doc(&self) -> crate::openapi::Replay {
        crate::openapi::Replay {
            header: self.replayed_header.clone(),
            retention: self
                .advertised
                .name()
                .map(|name| (name.clone(), self.retention.as_secs())),
            stores: Arc::clone(&self.stores_status),
        }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = match self.key {
            KeySource::Header => "Idempotency-Key header",
            KeySource::Function(_) => "function",
        };
        f.debug_struct("Settings")
            .field("methods", &self.methods)
            .field("required", &self.required)
            .field("key", &key)
            .field("scope", &self.scope)
            .field("fingerprint_headers", &self.fingerprint_headers)
            .field("payload", &self.payload)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("advertised", &self.advertised)
            .field("on_replay", &self.on_replay)
            .field("max_stored_response", &self.max_stored_response)
            .field("compress_from", &self.compress_from)
            .field("missing_key_message", &self.missing_key_message)
            .field("key_header", &self.key_header)
            .field("replayed_header", &self.replayed_header)
            .finish_non_exhaustive()
    }
}
