//! The guards on [tonic](https://docs.rs/tonic) gRPC services (feature `grpc`).
//!
//! A tonic server is an axum router inside: `tonic::service::Routes::into_axum_router`
//! gives it, the layers go on it as on any router, and
//! `tonic::transport::Server::builder().add_routes(router.into())` serves it. The layers are
//! told which methods they guard, by their full path:
//!
//! ```
//! use idem_axum::identity::ClientHeader;
//! use idem_axum::{Idem, IdempotencyLayer};
//!
//! let idem = Idem::builder()
//!     .with_client_identity(ClientHeader::new(http::HeaderName::from_static("x-api-key")))
//!     .build();
//! // In an application: `Routes::new(PaymentsServer::new(svc)).into_axum_router()`.
//! let router: axum::Router = axum::Router::new()
//!     .layer(IdempotencyLayer::new().with_grpc_methods(["/payments.Payments/Pay"]))
//!     .layer(idem.layer());
//! ```
//!
//! A request is a gRPC call when its `content-type` is `application/grpc` or
//! `application/grpc+…` (gRPC-Web is not: put tonic-web's layer outside the guards, which
//! then see the gRPC call it makes of it). What differs from HTTP:
//!
//! - **Which calls are guarded**: the methods named with
//!   [`IdempotencyLayer::with_grpc_methods`](crate::IdempotencyLayer::with_grpc_methods) or
//!   [`AvoidRepeatLayer::with_grpc_methods`](crate::AvoidRepeatLayer::with_grpc_methods),
//!   which must be unary. Every other gRPC call passes through untouched, streaming ones
//!   included: nothing in a call's head says whether it streams, and a guard would hold a
//!   stream — reading a client's stream whole before the handler runs (a bidirectional
//!   call would wait forever), keeping a server's stream from its client until it ends.
//! - **The key** is the `idempotency-key` metadata entry, read as the header is (quoted or
//!   bare, 1–255 printable ASCII). A record belongs to one method (its path): the same key
//!   on `Pay` and on `Refund` is two calls, even under a `route_layer`, whose matched path
//!   (`/payments.Payments/{*rest}`) names the whole service. The fingerprint is the path
//!   and the request's message bytes, as for a body.
//! - **The client**: [`PeerIp`](crate::identity::PeerIp) reads axum's `ConnectInfo`, which
//!   a tonic server does not set; tell clients apart by a metadata entry
//!   ([`ClientHeader`](crate::identity::ClientHeader)), by what an interceptor put in the
//!   request's extensions ([`ClientExtension`](crate::identity::ClientExtension)), or with
//!   [`IdentifyFn`](crate::identity::IdentifyFn) reading tonic's `TcpConnectInfo`.
//!
//! # Refusals are gRPC statuses
//!
//! A refused gRPC call gets a trailers-only response — HTTP 200, `content-type:
//! application/grpc`, `grpc-status` and `grpc-message` (the rejection's detail) — whatever
//! the runtime's [responder](crate::IdemBuilder::with_responder), which renders HTTP
//! bodies. When the rejection says when to retry, the status carries it twice: a
//! `google.rpc.RetryInfo` in `grpc-status-details-bin` (read by tonic-types'
//! `StatusExt`, grpc-go's `errdetails` and the like) and a `retry-after` metadata entry in
//! whole seconds, for clients that read no details.
//!
//! | refusal | status |
//! |---|---|
//! | the first call with this key still runs | `ABORTED` + retry info |
//! | the key was used with another message to the same method | `FAILED_PRECONDITION` |
//! | the key is malformed, or missing where required | `INVALID_ARGUMENT` |
//! | the store is down and the runtime fails closed | `UNAVAILABLE` + retry info |
//! | the server drains, or runs too many detached handlers | `UNAVAILABLE` + retry info |
//! | an avoid-repeat duplicate inside its window | `ABORTED` + retry info |
//! | the call ran, but its response cannot be replayed (too large to keep, or failed half-way) | `ALREADY_EXISTS` |
//! | the message is over the body limit | `RESOURCE_EXHAUSTED` |
//! | the client cannot be told (its identifying metadata is missing) | `UNAUTHENTICATED` |
//! | the server is set up wrong, or cannot read a stored response | `INTERNAL` |
//!
//! [`RejectionKind::grpc_code`](crate::RejectionKind::grpc_code) has every kind's code. A
//! duplicate inside an avoid-repeat window is `ABORTED`, as in-progress is, and not
//! `ALREADY_EXISTS`: both are HTTP's `409` with `Retry-After`, a conflict in time that
//! ends, after which the call may be made again; `ALREADY_EXISTS` is kept for a call that
//! ran and will never be answered otherwise.
//!
//! # What is stored, and what is not
//!
//! A completed call is stored with its response headers, its messages and its trailers
//! (`grpc-status`, `grpc-message`, custom trailing metadata), and replayed as it was,
//! with `idempotent-replayed: true` among the response's headers (initial metadata).
//!
//! A call that failed is not stored, as an HTTP 5xx is not: its record is removed and a
//! retry with the same key runs again. Which codes count as failed is
//! [`with_stored_grpc_codes`](crate::IdempotencyLayer::with_stored_grpc_codes)'s to say; by
//! default ([`stored_by_default`]) a call is kept when its code is the handler's answer
//! to that message — `OK`, `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`,
//! `PERMISSION_DENIED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNAUTHENTICATED`: sent
//! again unchanged it would be answered the same, the way Stripe keeps a 4xx — and not
//! kept when the code says the call may fare otherwise another time: `CANCELLED`,
//! `UNKNOWN`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`, `ABORTED`, `UNIMPLEMENTED`,
//! `INTERNAL`, `UNAVAILABLE`, `DATA_LOSS`, or a response with no `grpc-status` at all.
//! The code is read from the trailers, or from the head of a trailers-only response (how
//! tonic answers a handler's `Err(Status)`).
//!
//! [`AvoidRepeatLayer`](crate::AvoidRepeatLayer) keeps its window only after a call that
//! succeeded: a trailers-only response with a code other than `OK` (a handler's
//! `Err(Status)`) gives the key back at once, as a 4xx or a 5xx does.

use axum::body::Body;
use axum::response::Response;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Request};
pub use tonic::Code;
use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};

use crate::rejection::{Rejection, RejectionKind};

/// Whether a request or response with these headers is a gRPC call: its `content-type` is
/// `application/grpc`, or that with a subtype (`+proto`) or parameters.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.as_bytes().strip_prefix(b"application/grpc"))
        .is_some_and(|rest| matches!(rest.first(), None | Some(b'+' | b';')))
}

/// The full paths of the gRPC methods a layer guards (`/payments.Payments/Pay`).
#[derive(Debug, Clone, Default)]
pub(crate) struct GrpcMethods(Vec<String>);

impl GrpcMethods {
    /// None: every gRPC call passes through.
    pub(crate) const NONE: Self = Self(Vec::new());

    pub(crate) fn new(methods: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self(methods.into_iter().map(Into::into).collect())
    }

    /// Whether the layer takes `request`: any request that is not a gRPC call, and a call
    /// of a method named here.
    pub(crate) fn take<B>(&self, request: &Request<B>) -> bool {
        !is_grpc(request.headers()) || self.0.iter().any(|path| path == request.uri().path())
    }
}

/// The path of a gRPC call, which is its route: under `route_layer` the matched path of a
/// tonic service (`/payments.Payments/{*rest}`) names all its methods at once.
pub(crate) fn method_path<'a>(headers: &HeaderMap, path: &'a str) -> Option<&'a str> {
    is_grpc(headers).then_some(path)
}

/// The status of the gRPC call a response answers: from the trailers, or from the head of
/// a trailers-only response; `Unknown` when neither has one. `None` for a response that
/// is no gRPC call.
pub(crate) fn call_code(head: &HeaderMap, trailers: Option<&HeaderMap>) -> Option<Code> {
    if !is_grpc(head) {
        return None;
    }
    let status = trailers
        .and_then(|trailers| trailers.get(Status::GRPC_STATUS))
        .or_else(|| head.get(Status::GRPC_STATUS));
    Some(status.map_or(Code::Unknown, |code| Code::from_bytes(code.as_bytes())))
}

/// Whether a response's head says its call failed: a trailers-only response with a code
/// other than `OK`.
pub(crate) fn failed_in_head(head: &HeaderMap) -> bool {
    head.get(Status::GRPC_STATUS)
        .is_some_and(|code| Code::from_bytes(code.as_bytes()) != Code::Ok)
}

/// Whether a call that ended with `code` is stored by default: when the code is the
/// handler's answer to the message, which it would give again (see the
/// [module docs](self#what-is-stored-and-what-is-not)).
///
/// ```
/// use idem_axum::grpc::{Code, stored_by_default};
/// assert!(stored_by_default(Code::Ok));
/// assert!(stored_by_default(Code::InvalidArgument));
/// assert!(!stored_by_default(Code::Unavailable));
/// ```
pub fn stored_by_default(code: Code) -> bool {
    matches!(
        code,
        Code::Ok
            | Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::PermissionDenied
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unauthenticated
    )
}

/// The status a gRPC call gets for `kind`.
pub(crate) fn code_of(kind: RejectionKind) -> Code {
    match kind {
        RejectionKind::IdempotentRequestInProgress | RejectionKind::Duplicate => Code::Aborted,
        RejectionKind::IdempotencyKeyReused | RejectionKind::InvalidFormToken => {
            Code::FailedPrecondition
        }
        RejectionKind::MissingIdempotencyKey
        | RejectionKind::InvalidIdempotencyKey
        | RejectionKind::InvalidBody
        | RejectionKind::MissingFormToken
        | RejectionKind::UnsupportedMediaType => Code::InvalidArgument,
        RejectionKind::StoreUnavailable | RejectionKind::ShuttingDown | RejectionKind::Busy => {
            Code::Unavailable
        }
        RejectionKind::ResponseNotReplayable => Code::AlreadyExists,
        RejectionKind::PayloadTooLarge => Code::ResourceExhausted,
        RejectionKind::MissingClientIdentity => Code::Unauthenticated,
        RejectionKind::ClientIdentityUnavailable
        | RejectionKind::MissingLayer
        | RejectionKind::RuntimeUnavailable
        | RejectionKind::RandomnessUnavailable
        | RejectionKind::UnreadableIdempotencyRecord => Code::Internal,
    }
}

/// The trailers-only response that refuses a gRPC call with `rejection`.
pub(crate) fn refusal(rejection: &Rejection) -> Response {
    let code = code_of(rejection.kind());
    let status = match rejection.retry_after() {
        Some(after) => Status::with_error_details(
            code,
            rejection.detail(),
            ErrorDetails::with_retry_info(Some(after)),
        ),
        None => Status::new(code, rejection.detail()),
    };
    let (mut parts, ()) = status.into_http::<()>().into_parts();
    if let Some(secs) = rejection.retry_after_secs() {
        parts.headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    Response::from_parts(parts, Body::empty())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn content_type(value: &'static str) -> HeaderMap {
        HeaderMap::from_iter([(CONTENT_TYPE, HeaderValue::from_static(value))])
    }

    #[test]
    fn grpc_calls_are_told_by_their_content_type() {
        for grpc in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc(&content_type(grpc)), "{grpc}");
        }
        for other in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/json",
            "application/grpcx",
        ] {
            assert!(!is_grpc(&content_type(other)), "{other}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn a_refusal_is_a_trailers_only_status_with_retry_info() {
        let rejection = Rejection::new(RejectionKind::IdempotentRequestInProgress, "wait")
            .with_retry_after(Duration::from_millis(1500));
        let response = refusal(&rejection);
        assert_eq!(response.status(), 200);
        let headers = response.headers();
        assert_eq!(headers[CONTENT_TYPE], "application/grpc");
        assert_eq!(headers[RETRY_AFTER], "2");
        let status = Status::from_header_map(headers).expect("a status in the head");
        assert_eq!(status.code(), Code::Aborted);
        assert_eq!(status.message(), "wait");
        let retry = status.get_details_retry_info().expect("retry info");
        assert_eq!(retry.retry_delay, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn the_call_code_comes_from_the_trailers_or_the_head() {
        let mut head = content_type("application/grpc");
        let trailers = HeaderMap::from_iter([(Status::GRPC_STATUS, HeaderValue::from(14))]);
        assert_eq!(call_code(&head, Some(&trailers)), Some(Code::Unavailable));
        assert_eq!(call_code(&head, None), Some(Code::Unknown), "no status");
        head.insert(Status::GRPC_STATUS, HeaderValue::from(3));
        assert_eq!(call_code(&head, None), Some(Code::InvalidArgument));
        assert!(failed_in_head(&head));
        assert_eq!(
            call_code(&content_type("text/plain"), Some(&trailers)),
            None
        );
    }
}
