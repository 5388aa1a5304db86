//! [`IdempotencyLayer`] and the service it makes.

use idem_core::payload::PayloadFingerprint;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, Method, StatusCode};

use super::answer::answer;
use super::on_replay::{ReplayHook, Replayed};
use super::retention::AdvertisedRetention;
use super::{KeySource, RecordScope, Required, Settings, key_header, stored_response};

/// Makes the requests of the routes below it idempotent with the `Idempotency-Key`
/// header; see the [module docs](crate::idempotency).
///
/// ```
/// use axum::{Router, routing::post};
/// use idem_axum::{Idem, IdempotencyLayer};
///
/// let idem = Idem::builder().build();
/// let app: Router = Router::new()
///     .route("/payments", post(|| async { "paid" }))
///     .route_layer(IdempotencyLayer::new().with_required(true))
///     .layer(idem.layer());
/// ```
#[derive(Debug, Clone)]
pub struct IdempotencyLayer {
    pub(super) settings: Arc<Settings>,
}

impl Default for IdempotencyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl IdempotencyLayer {
    /// Guards `POST` and `PATCH` requests that carry an `Idempotency-Key`; keys scoped by
    /// client; a lease of 10 s, responses kept 24 h, up to 1 MiB each; every response
    /// stored but a 5xx and the transient 408, 425 and 429 ([`stored_by_default`]).
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new();
    /// ```
    pub fn new() -> Self {
        let retention = Duration::from_secs(24 * 60 * 60);
        Self {
            settings: Arc::new(Settings {
                methods: vec![Method::POST, Method::PATCH],
                required: Required::Never,
                key: KeySource::Header,
                scope: RecordScope::Client,
                fingerprint_headers: Vec::new(),
                payload: PayloadFingerprint::Raw,
                lease: Duration::from_secs(10),
                retention,
                advertised: AdvertisedRetention::new(retention),
                on_replay: None,
                max_stored_response: 1024 * 1024,
                compress_from: None,
                stores_status: Arc::new(stored_by_default),
                missing_key_message: None,
                key_header: key_header::IDEMPOTENCY_KEY.clone(),
                replayed_header: stored_response::IDEMPOTENT_REPLAYED.clone(),
                #[cfg(feature = "grpc")]
                grpc_methods: crate::grpc::GrpcMethods::NONE,
                #[cfg(feature = "grpc")]
                stores_grpc_code: Arc::new(crate::grpc::stored_by_default),
            }),
        }
    }

    fn settings(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    /// The methods that are guarded (default `POST` and `PATCH`); others pass through
    /// untouched.
    ///
    /// ```
    /// use http::Method;
    /// let layer = idem_axum::IdempotencyLayer::new().with_methods([Method::POST, Method::PUT, Method::DELETE]);
    /// ```
    pub fn with_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.settings().methods = methods.into_iter().collect();
        self
    }

    /// Whether a guarded request without a key is refused with 400 (default `false`: it
    /// runs unguarded, as the draft allows).
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new().with_required(true);
    /// ```
    pub fn with_required(mut self, required: bool) -> Self {
        self.settings().required = if required {
            Required::Always
        } else {
            Required::Never
        };
        self
    }

    /// Requires a key for these methods only; other guarded methods run unguarded
    /// without one. Methods named here are guarded too.
    ///
    /// ```
    /// use http::Method;
    /// let layer = idem_axum::IdempotencyLayer::new().with_required_for([Method::POST]);
    /// ```
    pub fn with_required_for(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods: Vec<Method> = methods.into_iter().collect();
        let settings = self.settings();
        for method in &methods {
            if !settings.methods.contains(method) {
                settings.methods.push(method.clone());
            }
        }
        settings.required = Required::For(methods);
        self
    }

    /// Takes the key from the request instead of the `Idempotency-Key` header: `key`
    /// gets the request head and its whole body, and returns `None` when the request
    /// carries no key. Its value is hashed, so any string will do.
    ///
    /// For a payment provider's callback, whose `source` and `seq` fields name one
    /// delivery however often it is sent:
    ///
    /// ```
    /// #[derive(serde::Deserialize)]
    /// struct Callback { source: String, seq: u64 }
    ///
    /// let layer = idem_axum::IdempotencyLayer::new()
    ///     .with_idempotency_key_fn(|_head, body| {
    ///         let callback: Callback = serde_json::from_slice(body).ok()?;
    ///         Some(format!("{}:{}", callback.source, callback.seq))
    ///     })
    ///     .with_required(true);
    /// ```
    pub fn with_idempotency_key_fn<F>(mut self, key: F) -> Self
    where
        F: Fn(&Parts, &Bytes) -> Option<String> + Send + Sync + 'static,
    {
        self.settings().key = KeySource::Function(Arc::new(key));
        self
    }

    /// Whose keys are separate (default [`RecordScope::Client`]).
    ///
    /// ```
    /// use idem_axum::idempotency::RecordScope;
    /// let layer = idem_axum::IdempotencyLayer::new().with_record_scope(RecordScope::Shared);
    /// ```
    pub fn with_record_scope(mut self, scope: RecordScope) -> Self {
        self.settings().scope = scope;
        self
    }

    /// Request headers that belong to the fingerprint besides the method, path, query
    /// and body (default none), such as `Content-Type` or an API version header.
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new().with_fingerprint_headers([http::header::CONTENT_TYPE]);
    /// ```
    pub fn with_fingerprint_headers(
        mut self,
        headers: impl IntoIterator<Item = HeaderName>,
    ) -> Self {
        self.settings().fingerprint_headers = headers.into_iter().collect();
        self
    }

    /// What of the body tells one request from another with the same key (default
    /// [`PayloadFingerprint::Raw`], the bytes as sent): [`CanonicalJson`] for clients
    /// that serialise one object with its keys in another order, [`JsonFields`] to leave
    /// a timestamp or a nonce out, [`Ignored`] when the key alone names the request.
    /// The method, the path, the query and the [headers named](Self::with_fingerprint_headers)
    /// count whatever the choice. Checked on every way a request can go — a first run, a
    /// repeat while the first runs, a replay — as the store compares fingerprints in the
    /// step that begins the record.
    ///
    /// [`CanonicalJson`]: PayloadFingerprint::CanonicalJson
    /// [`JsonFields`]: PayloadFingerprint::JsonFields
    /// [`Ignored`]: PayloadFingerprint::Ignored
    ///
    /// ```
    /// use idem_axum::payload::PayloadFingerprint;
    /// let layer = idem_axum::IdempotencyLayer::new()
    ///     .with_payload_fingerprint(PayloadFingerprint::json_fields(["/amount", "/currency"]));
    /// ```
    pub fn with_payload_fingerprint(mut self, payload: PayloadFingerprint) -> Self {
        self.settings().payload = payload;
        self
    }

    /// How long an in-progress record lasts without renewal (default 10 s): what
    /// frees a key whose instance died mid-request. A running handler renews it every
    /// third of it. Keep it well above the store's timeout.
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new().with_lease(std::time::Duration::from_secs(30));
    /// ```
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.settings().lease = lease;
        self
    }

    /// How long a completed response is replayed (default 24 h). Advertised to clients
    /// in whole seconds ([`with_retention_header`](Self::with_retention_header)).
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new().with_retention(std::time::Duration::from_secs(3600));
    /// ```
    pub fn with_retention(mut self, retention: Duration) -> Self {
        let settings = self.settings();
        settings.retention = retention;
        settings.advertised = settings.advertised.clone().of(retention);
        self
    }

    /// The header that tells a client how long its key is kept (default
    /// `Idempotency-TTL`, the [retention](Self::with_retention) in whole seconds), or
    /// `None` to send none. It is sent on the first response when it is kept, on every
    /// replay and on the `409` that says the first request still runs — the answers
    /// about a key the layer holds — and on no other refusal. See
    /// [the retention, advertised](crate::guide::guards#the-retention-advertised).
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new()
    ///     .with_retention_header(Some(http::HeaderName::from_static("x-idempotency-ttl")));
    /// ```
    pub fn with_retention_header(mut self, name: Option<HeaderName>) -> Self {
        let settings = self.settings();
        settings.advertised = settings.advertised.clone().named(name);
        self
    }

    /// A hook on every replayed response, run before it is sent: it may change the
    /// replay's headers (add one, log the first request's id), never the stored response,
    /// its status or body, and it cannot run the handler (see [`Replayed`]). It replaces
    /// any hook set before; responses of a first run do not go through it.
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new().on_replay(|replayed| {
    ///     tracing::info!(status = %replayed.status(), "idempotent replay");
    /// });
    /// ```
    pub fn on_replay<F>(mut self, hook: F) -> Self
    where
        F: Fn(&mut Replayed<'_>) + Send + Sync + 'static,
    {
        self.settings().on_replay = Some(ReplayHook::new(hook));
        self
    }

    /// The largest response body that is stored, in bytes (default 1 MiB). A larger one
    /// is sent to its client as usual and recorded as "too large": retries get 409 and
    /// the handler never runs again for that key.
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new().with_max_stored_response(64 * 1024);
    /// ```
    pub fn with_max_stored_response(mut self, bytes: usize) -> Self {
        self.settings().max_stored_response = bytes;
        self
    }

    /// Stores a response body of `from` bytes or more compressed, with zstd (level 1),
    /// when that makes it smaller (default: off). A body already coded
    /// (`Content-Encoding`) is stored as it is. Replays are the same bytes either way.
    ///
    /// Memory against CPU: a typical 201 with a 512-byte JSON body is stored in 388
    /// bytes rather than 549, and a completed record holds about a fifth less in each
    /// store (Redis 806 → 614 bytes, PostgreSQL 833 → 675, `MemoryStore` 861 → 701);
    /// compressing it costs the first request about 52,000 instructions (more than the
    /// rest of the layer), and each replay about 16,000 to decompress. Worth it when
    /// records are kept long and memory sizes the store; 256 bytes is the smallest
    /// threshold that pays (below it zstd saves a few dozen bytes).
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new().with_compression(256);
    /// ```
    pub fn with_compression(mut self, from: usize) -> Self {
        self.settings().compress_from = Some(from);
        self
    }

    /// Which response statuses are stored and replayed (default: [`stored_by_default`],
    /// all but a 5xx, 408, 425 and 429). A response that is not stored removes its record,
    /// so a retry runs the handler again.
    ///
    /// ```
    /// use http::StatusCode;
    /// use idem_axum::idempotency::stored_by_default;
    /// // Also let a request that met a conflict be retried with the same key.
    /// let layer = idem_axum::IdempotencyLayer::new().with_stored_statuses(|status| {
    ///     stored_by_default(status) && status != StatusCode::CONFLICT
    /// });
    /// ```
    pub fn with_stored_statuses<F>(mut self, stores: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.settings().stores_status = Arc::new(stores);
        self
    }

    define_with_grpc_methods!(
        /// The gRPC methods guarded, by their full path (`/payments.Payments/Pay`); default
        /// none. Name unary methods only: every other gRPC call passes through untouched,
        /// streaming ones included (see [`grpc`](crate::grpc)).
        ///
        /// ```
        /// let layer = idem_axum::IdempotencyLayer::new()
        ///     .with_grpc_methods(["/payments.Payments/Pay", "/payments.Payments/Refund"]);
        /// ```
    );

    /// Which gRPC calls are stored and replayed, by the status they ended with (default
    /// [`stored_by_default`](crate::grpc::stored_by_default): `OK` and the codes that
    /// answer the message itself, such as `INVALID_ARGUMENT`). A call that is not stored
    /// removes its record, so a retry runs the handler again. The HTTP status of a gRPC
    /// response (200) goes through [`with_stored_statuses`](Self::with_stored_statuses)
    /// as well.
    ///
    /// ```
    /// use idem_axum::grpc::{Code, stored_by_default};
    /// // Let a call that found nothing run again under its key.
    /// let layer = idem_axum::IdempotencyLayer::new()
    ///     .with_stored_grpc_codes(|code| stored_by_default(code) && code != Code::NotFound);
    /// ```
    #[cfg(feature = "grpc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
    pub fn with_stored_grpc_codes<F>(mut self, stores: F) -> Self
    where
        F: Fn(crate::grpc::Code) -> bool + Send + Sync + 'static,
    {
        self.settings().stores_grpc_code = Arc::new(stores);
        self
    }

    /// The header a request's key is read from (default `Idempotency-Key`), for an API
    /// that already names it otherwise (`X-Idempotency-Key`, `Idempotent-Key`).
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new()
    ///     .with_key_header(http::HeaderName::from_static("x-idempotency-key"));
    /// ```
    pub fn with_key_header(mut self, name: HeaderName) -> Self {
        self.settings().key_header = name;
        self
    }

    /// The header that marks a replayed response (default `Idempotent-Replayed: true`).
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new()
    ///     .with_replayed_header(http::HeaderName::from_static("x-idempotent-replayed"));
    /// ```
    pub fn with_replayed_header(mut self, name: HeaderName) -> Self {
        self.settings().replayed_header = name;
        self
    }

    /// The detail of the 400 a request without a required key gets (default: what the
    /// `Idempotency-Key` header must hold, or for a [key function](Self::with_idempotency_key_fn) a
    /// generic sentence — say there which fields identify a request).
    ///
    /// ```
    /// let layer = idem_axum::IdempotencyLayer::new().with_missing_key_message("send `source` and `seq`");
    /// ```
    pub fn with_missing_key_message(mut self, message: impl Into<Cow<'static, str>>) -> Self {
        self.settings().missing_key_message = Some(message.into());
        self
    }
}

/// Its key header, required or not, its refusals and its replay headers.
#[cfg(feature = "openapi")]
#[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
impl crate::openapi::DocumentedGuard for IdempotencyLayer {
    fn guard_doc(&self) -> crate::openapi::GuardDoc {
        crate::openapi::GuardDoc::new(self.settings.clone())
    }
}

define_guard_service!(
    /// Guards `inner` with `layer`'s settings.
    ///
    /// ```
    /// use idem_axum::{IdempotencyLayer, idempotency::Idempotency};
    /// let service = Idempotency::new(axum::Router::<()>::new(), IdempotencyLayer::new());
    /// ```
    IdempotencyLayer => Idempotency
);

impl_guard_service!(Idempotency, answer, |settings, request| settings
    .takes(request));

/// Whether [`IdempotencyLayer`] stores a response with `status` unless
/// [`with_stored_statuses`](IdempotencyLayer::with_stored_statuses) says otherwise: every
/// status but a server error (5xx) and the three a retry of the same request may get past,
/// 408 Request Timeout, 425 Too Early and 429 Too Many Requests. Kept, they would refuse
/// the retry for the whole retention. (A 413 from a body limit is never kept, whatever
/// the policy.)
///
/// ```
/// use http::StatusCode;
/// use idem_axum::idempotency::stored_by_default;
/// assert!(stored_by_default(StatusCode::CREATED));
/// assert!(stored_by_default(StatusCode::UNPROCESSABLE_ENTITY));
/// assert!(!stored_by_default(StatusCode::TOO_MANY_REQUESTS));
/// assert!(!stored_by_default(StatusCode::SERVICE_UNAVAILABLE));
/// ```
pub fn stored_by_default(status: StatusCode) -> bool {
    !status.is_server_error()
        && !matches!(
            status,
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_EARLY | StatusCode::TOO_MANY_REQUESTS
        )
}
