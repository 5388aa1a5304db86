//! [`Rejection`]: every answer idem gives instead of running a handler.
//!
//! One type for all guards, with [`status`](Rejection::status) and [`IntoResponse`]. By
//! default it is an RFC 9457 `application/problem+json` body, or a small HTML page when
//! the client prefers `text/html` (a browser submitting a form). Replace both with
//! [`IdemBuilder::with_responder`](crate::IdemBuilder::with_responder). With the feature
//! `grpc`, a gRPC call is refused with a gRPC status instead (the `grpc` module's table).
//!
//! | kind | status | when |
//! |---|---|---|
//! | [`Duplicate`](RejectionKind::Duplicate) | 409 + `Retry-After` | the same client repeats a request while its key is held |
//! | [`StoreUnavailable`](RejectionKind::StoreUnavailable) | 503 + `Retry-After` | the store failed and the policy is to fail closed |
//! | [`MissingClientIdentity`](RejectionKind::MissingClientIdentity) | 400 | the request lacks what identifies its client (a header, a cookie) |
//! | [`ClientIdentityUnavailable`](RejectionKind::ClientIdentityUnavailable) | 500 | the server is not set up to identify clients (no `ConnectInfo`, no user extension) |
//! | [`PayloadTooLarge`](RejectionKind::PayloadTooLarge) | 413 | a body that must be read whole is over the limit |
//! | [`InvalidBody`](RejectionKind::InvalidBody) | 400 | a body that must be read whole could not be read |
//! | [`MissingLayer`](RejectionKind::MissingLayer) | 500 | a guard runs without [`Idem::layer`](crate::Idem::layer) on the router |
//! | [`RuntimeUnavailable`](RejectionKind::RuntimeUnavailable) | 500 | [`IdempotencyLayer`] runs outside a Tokio runtime, which it needs to renew a running request's record |
//! | [`ShuttingDown`](RejectionKind::ShuttingDown) | 503 + `Retry-After` | the server is draining ([`Idem::shutdown`](crate::Idem::shutdown)), or the runtime cancelled an accepted request's handler while shutting down |
//! | [`Busy`](RejectionKind::Busy) | 503 + `Retry-After` | more handlers run for clients that went away than [`IdemBuilder::with_detached_limit`](crate::IdemBuilder::with_detached_limit) lets run |
//! | [`MissingFormToken`](RejectionKind::MissingFormToken) | 400 | a guarded form is posted without its one-time token |
//! | [`InvalidFormToken`](RejectionKind::InvalidFormToken) | 409 | a form token that is unknown, expired, already spent or another client's (one answer for all) |
//! | [`UnsupportedMediaType`](RejectionKind::UnsupportedMediaType) | 415 | a body a guard must read is of a type it cannot (a form token in a JSON body) |
//! | [`RandomnessUnavailable`](RejectionKind::RandomnessUnavailable) | 500 | the operating system's random generator failed, so no token could be drawn |
//! | [`MissingIdempotencyKey`](RejectionKind::MissingIdempotencyKey) | 400 | a request that must carry an idempotency key has none |
//! | [`InvalidIdempotencyKey`](RejectionKind::InvalidIdempotencyKey) | 400 | an `Idempotency-Key` header that is not 1–255 printable ASCII, quoted or bare |
//! | [`IdempotentRequestInProgress`](RejectionKind::IdempotentRequestInProgress) | 409 + `Retry-After` | a retry while the first request with its key is still running |
//! | [`IdempotencyKeyReused`](RejectionKind::IdempotencyKeyReused) | 422 | an idempotency key sent again with a different request |
//! | [`ResponseNotReplayable`](RejectionKind::ResponseNotReplayable) | 409 | a retry of a request whose response was too large to store, whose body failed while it was sent, or is stored in a content coding the retry does not accept (it ran; it is not run again) |
//! | [`UnreadableIdempotencyRecord`](RejectionKind::UnreadableIdempotencyRecord) | 500 | a stored response this server cannot read (another release's format) |

mod missing_layer;
mod render;

use std::borrow::Cow;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::StatusCode;

pub(crate) use self::missing_layer::impl_layer_extractor;
pub(crate) use self::render::escape_html;
pub(crate) use self::render::prefers_html;

/// The page of the guide that explains every refusal, on docs.rs, for this release: a
/// refusal's problem `type` is this followed by its code, the anchor of its section.
macro_rules! refusals_page {
    () => {
        concat!(
            "https://docs.rs/idem-axum/",
            env!("CARGO_PKG_VERSION"),
            "/idem_axum/guide/refusals/index.html#"
        )
    };
}

/// `code` and `type_uri`, from one list of every kind and its code, so the two cannot
/// disagree; each URI is a constant, built at compile time.
macro_rules! codes {
    ($($kind:ident => $code:literal,)*) => {
        /// A stable identifier: the anchor of the kind's section in the
        /// [refusals guide](crate::guide::refusals), and the end of the problem's `type`.
        ///
        /// ```
        /// assert_eq!(idem_axum::RejectionKind::Duplicate.code(), "duplicate-request");
        /// ```
        pub fn code(self) -> &'static str {
            match self {
                $(Self::$kind => $code,)*
            }
        }

        /// The problem's `type`: the URL of the kind's section in the
        /// [refusals guide](crate::guide::refusals) on docs.rs, for this release of
        /// idem-axum, so a client (or its developer) can read what the refusal means and
        /// what to do next.
        ///
        /// ```
        /// let uri = idem_axum::RejectionKind::Duplicate.type_uri();
        /// assert!(uri.starts_with("https://docs.rs/idem-axum/"));
        /// assert!(uri.ends_with("/idem_axum/guide/refusals/index.html#duplicate-request"));
        /// ```
        pub fn type_uri(self) -> &'static str {
            match self {
                $(Self::$kind => concat!(refusals_page!(), $code),)*
            }
        }

        /// Every kind, in the order declared.
        #[cfg(test)]
        const ALL: &'static [Self] = &[$(Self::$kind,)*];
    };
}

/// What kind of rejection, and so which status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionKind {
    /// A repeat of a request whose key is still held: 409.
    Duplicate,
    /// The store failed and the runtime fails closed: 503.
    StoreUnavailable,
    /// The request does not carry what identifies its client: 400.
    MissingClientIdentity,
    /// The server cannot identify clients as configured: 500.
    ClientIdentityUnavailable,
    /// A body that must be read whole is larger than allowed: 413.
    PayloadTooLarge,
    /// A body that must be read whole could not be read: 400.
    InvalidBody,
    /// The [`Idem`](crate::Idem) layer is not installed: 500.
    MissingLayer,
    /// A guard that needs a Tokio runtime runs outside one: 500.
    RuntimeUnavailable,
    /// The server is draining ([`Idem::shutdown`](crate::Idem::shutdown)), or the runtime
    /// cancelled an accepted request's handler while shutting down: 503.
    ShuttingDown,
    /// More handlers run for clients that went away than the runtime lets run
    /// ([`IdemBuilder::with_detached_limit`](crate::IdemBuilder::with_detached_limit)): 503.
    Busy,
    /// A guarded form is posted without its one-time token: 400.
    MissingFormToken,
    /// A form token that is unknown, expired, already spent or issued to another client:
    /// 409.
    InvalidFormToken,
    /// A body a guard must read is of a type it cannot read: 415.
    UnsupportedMediaType,
    /// The operating system's random generator failed: 500.
    RandomnessUnavailable,
    /// A request that must carry an idempotency key has none: 400.
    MissingIdempotencyKey,
    /// An `Idempotency-Key` header that is malformed: 400.
    InvalidIdempotencyKey,
    /// The first request with this idempotency key is still running: 409.
    IdempotentRequestInProgress,
    /// The idempotency key was first used with a different request: 422.
    IdempotencyKeyReused,
    /// The request with this idempotency key ran, but its response was too large to
    /// store, or is stored in a content coding this retry does not accept: 409.
    ResponseNotReplayable,
    /// The stored response of this idempotency key cannot be read: 500.
    UnreadableIdempotencyRecord,
}

impl RejectionKind {
    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            Self::Duplicate => StatusCode::CONFLICT,
            Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::MissingClientIdentity | Self::InvalidBody => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::ClientIdentityUnavailable | Self::MissingLayer | Self::RuntimeUnavailable => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Self::ShuttingDown | Self::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Self::MissingFormToken => StatusCode::BAD_REQUEST,
            Self::InvalidFormToken => StatusCode::CONFLICT,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RandomnessUnavailable => StatusCode::INTERNAL_SERVER_ERROR,
            Self::MissingIdempotencyKey | Self::InvalidIdempotencyKey => StatusCode::BAD_REQUEST,
            Self::IdempotentRequestInProgress | Self::ResponseNotReplayable => StatusCode::CONFLICT,
            Self::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::UnreadableIdempotencyRecord => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The status a gRPC call refused with this kind gets (see [`grpc`](crate::grpc)).
    ///
    /// ```
    /// use idem_axum::{RejectionKind, grpc::Code};
    /// assert_eq!(RejectionKind::IdempotencyKeyReused.grpc_code(), Code::FailedPrecondition);
    /// ```
    #[cfg(feature = "grpc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
    pub fn grpc_code(self) -> crate::grpc::Code {
        crate::grpc::code_of(self)
    }

    /// A short, fixed summary (the problem's `title`).
    pub fn title(self) -> &'static str {
        match self {
            Self::Duplicate => "Duplicate request",
            Self::StoreUnavailable => "Duplicate protection unavailable",
            Self::MissingClientIdentity => "Client identity missing",
            Self::ClientIdentityUnavailable => "Client identity not configured",
            Self::PayloadTooLarge => "Payload too large",
            Self::InvalidBody => "Invalid request body",
            Self::MissingLayer => "idem layer missing",
            Self::RuntimeUnavailable => "Async runtime unavailable",
            Self::ShuttingDown => "Server shutting down",
            Self::Busy => "Server busy finishing earlier requests",
            Self::MissingFormToken => "Form token missing",
            Self::InvalidFormToken => "Form already submitted or expired",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::RandomnessUnavailable => "Randomness unavailable",
            Self::MissingIdempotencyKey => "Idempotency key missing",
            Self::InvalidIdempotencyKey => "Invalid idempotency key",
            Self::IdempotentRequestInProgress => "Request in progress",
            Self::IdempotencyKeyReused => "Idempotency key reused",
            Self::ResponseNotReplayable => "Response not replayable",
            Self::UnreadableIdempotencyRecord => "Stored response unreadable",
        }
    }

    codes! {
        Duplicate => "duplicate-request",
        StoreUnavailable => "store-unavailable",
        MissingClientIdentity => "missing-client-identity",
        ClientIdentityUnavailable => "client-identity-unavailable",
        PayloadTooLarge => "payload-too-large",
        InvalidBody => "invalid-body",
        MissingLayer => "missing-layer",
        RuntimeUnavailable => "runtime-unavailable",
        ShuttingDown => "shutting-down",
        Busy => "busy",
        MissingFormToken => "missing-form-token",
        InvalidFormToken => "invalid-form-token",
        UnsupportedMediaType => "unsupported-media-type",
        RandomnessUnavailable => "randomness-unavailable",
        MissingIdempotencyKey => "missing-idempotency-key",
        InvalidIdempotencyKey => "invalid-idempotency-key",
        IdempotentRequestInProgress => "request-in-progress",
        IdempotencyKeyReused => "idempotency-key-reused",
        ResponseNotReplayable => "response-not-replayable",
        UnreadableIdempotencyRecord => "unreadable-idempotency-record",
    }
}

/// An answer given instead of running the handler.
///
/// ```
/// use axum::response::IntoResponse;
/// use idem_axum::{Rejection, RejectionKind};
///
/// let rejection = Rejection::new(RejectionKind::Duplicate, "请勿重复提交");
/// assert_eq!(rejection.status(), http::StatusCode::CONFLICT);
/// let response = rejection.into_response();
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
#[derive(Debug, Clone)]
pub struct Rejection {
    kind: RejectionKind,
    detail: Cow<'static, str>,
    retry_after: Option<Duration>,
    prefers_html: bool,
}

impl Rejection {
    /// A rejection of `kind` explained by `detail`.
    ///
    /// ```
    /// let r = idem_axum::Rejection::new(idem_axum::RejectionKind::Duplicate, "Already submitted");
    /// assert_eq!(r.detail(), "Already submitted");
    /// ```
    pub fn new(kind: RejectionKind, detail: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            retry_after: None,
            prefers_html: false,
        }
    }

    /// Says when to try again (the `Retry-After` header, in whole seconds, rounded up).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = idem_axum::Rejection::new(idem_axum::RejectionKind::Duplicate, "wait")
    ///     .with_retry_after(Duration::from_millis(1500));
    /// assert_eq!(r.retry_after_secs(), Some(2));
    /// ```
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Renders as HTML rather than problem JSON.
    ///
    /// ```
    /// let r = idem_axum::Rejection::new(idem_axum::RejectionKind::Duplicate, "wait").with_html(true);
    /// assert!(r.prefers_html());
    /// ```
    pub fn with_html(mut self, html: bool) -> Self {
        self.prefers_html = html;
        self
    }

    /// The kind.
    pub fn kind(&self) -> RejectionKind {
        self.kind
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The explanation shown to the client.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// When to try again, if the rejection says.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|after| after.as_secs() + u64::from(after.subsec_nanos() > 0))
            .map(|secs| secs.max(1))
    }

    /// Whether the client asked for HTML (its `Accept` ranks `text/html` above JSON).
    pub fn prefers_html(&self) -> bool {
        self.prefers_html
    }
}

/// The title and the detail: `Duplicate request: 请勿重复提交`.
impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.title(), self.detail)
    }
}

impl std::error::Error for Rejection {}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        render::render(&self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_is_an_error_that_says_what_and_why() {
        let rejection = Rejection::new(RejectionKind::Duplicate, "请勿重复提交");
        assert_eq!(rejection.to_string(), "Duplicate request: 请勿重复提交");
        let error: Box<dyn std::error::Error + Send + Sync> = Box::new(rejection);
        assert!(error.source().is_none());
    }

    /// Each kind's problem `type` points at a section of the refusals guide that exists:
    /// rustdoc gives a heading whose text is the code that code as its anchor, so a
    /// renamed or missing section fails here rather than sending clients to the page's top.
    #[test]
    fn every_type_uri_names_a_section_of_the_refusals_guide() {
        let page = include_str!("../guide/refusals.md");
        let page_url = concat!(
            "https://docs.rs/idem-axum/",
            env!("CARGO_PKG_VERSION"),
            "/idem_axum/guide/refusals/index.html"
        );
        for &kind in RejectionKind::ALL {
            let (url, anchor) = kind.type_uri().split_once('#').expect("an anchor");
            assert_eq!(url, page_url, "{kind:?}");
            assert_eq!(anchor, kind.code(), "{kind:?}");
            let heading = format!("## {anchor}");
            let sections = page
                .lines()
                .filter(|line| line.trim_end() == heading)
                .count();
            assert_eq!(
                sections, 1,
                "{kind:?}: the refusals guide needs one `{heading}`"
            );
        }
    }
}
