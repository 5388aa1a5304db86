//! The client side of [idem](https://github.com/idem-rs/idem): a tower layer (and, with
//! the feature `reqwest`, a `reqwest-middleware` middleware) that gives a non-idempotent
//! request an `Idempotency-Key`, retries it safely, and inside a handler guarded by
//! idem's `IdempotencyLayer` derives the key from the handler's own record.
//!
//! idem's guards protect a service from its clients' retries; this crate protects the
//! services *it* calls from its own. A handler that charges a payment provider and dies
//! before its record is complete runs again when its client retries: with a fresh key
//! the provider charges twice, with the key derived from the record it answers the
//! second run with the first charge.
//!
//! # What the layer does
//!
//! A request of a keyed method (`POST` and `PATCH`;
//! [`RetryPolicy::with_methods`]) goes out with an `Idempotency-Key`, chosen once before
//! its first attempt:
//!
//! | the request carries | its key |
//! |---|---|
//! | an `Idempotency-Key` header | that one |
//! | an [`OutboundKey`] extension (`record.outbound_key("charge")`) | that one |
//! | an [`OutboundKeys`] extension (`record.outbound_keys()`) | the next key for its method and URI ([`OutboundKeys::next_key`]) |
//! | nothing | a random one (a version 4 UUID) |
//!
//! and the same request, key and body, is sent again when the answer says the downstream
//! did not take it or has not finished it:
//!
//! | answer | retried | why it is safe |
//! |---|---|---|
//! | the inner service's error (connection refused, reset, closed before the answer) | yes | the downstream may have run the request, but it holds its outcome under the key |
//! | `503 Service Unavailable` | yes | the downstream refused it, or holds its outcome under the key |
//! | `409` problem (`application/problem+json`) whose `type` is idem's `https://docs.rs/idem-axum/<release>/idem_axum/guide/refusals/index.html#request-in-progress` (any release's: "the first request with this key still runs") | yes | the retry gets the first run's stored answer |
//! | `409` that is not a problem document, with `Retry-After` (the Idempotency-Key draft's answer to a concurrent request) | yes | as above |
//! | any other `409` problem (idem's `duplicate-request` of an avoid-repeat window, `response-not-replayable`) | no | a retry after the window would run the request again |
//! | anything else (`2xx`, `4xx`, `500`, `502`, …) | no | it is the request's outcome |
//!
//! Retries wait as long as `Retry-After` says (seconds or an HTTP date), and at least a
//! backoff drawn at random between zero and a ceiling that doubles with each retry ("full
//! jitter", so many clients refused at once do not come back at once); they stop at
//! [`RetryPolicy::with_max_attempts`] attempts, at [`RetryPolicy::with_max_elapsed`]
//! (a wait that would end later is not begun) or sooner at the key's retention when an
//! answer to retry advertises it (`Idempotency-TTL`, as idem-axum sends it, or [the
//! header a server renamed it to](RetryPolicy::with_retention_header): past it the
//! server may have forgotten the key), and when the [retry
//! budget](RetryPolicy::with_budget) is spent. What is left then is returned: the last
//! answer, or [`Error::Transport`]. Requests of other methods pass through, sent once.
//!
//! Every retry is only as safe as the downstream's deduplication by key: point the layer
//! at services that honour `Idempotency-Key` (an idem-guarded service, Stripe, Adyen…).
//!
//! # The body
//!
//! The tower layer buffers the request's body, up to [`RetryPolicy::with_max_body`]
//! (1 MiB), and sends every attempt a [`Full`](http_body_util::Full) copy: any body type
//! works, and a larger body fails with [`Error::BodyTooLarge`] before anything is sent.
//! The reqwest middleware needs a body reqwest can clone (bytes, a string, JSON, a form;
//! not a stream).
//!
//! # Inside a guarded handler
//!
//! Explicitly: the handler extracts its `IdempotencyRecord` (crate `idem-axum`) and puts
//! `record.outbound_key("charge")` (a key per label) or `record.outbound_keys()` (a
//! handle that numbers unlabelled calls) into the outbound request's extensions. Nothing
//! is scoped around handlers that make no outbound call, so they pay nothing. Give each
//! call a label when one run makes several **concurrent** calls to one method and URI
//! with different bodies: on a rerun they may start in another order (see
//! [`idem_core::outbound`]).
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use idem_client::{IdempotentRetryLayer, RetryPolicy};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # async fn charge(record: idem_axum::idempotency::IdempotencyRecord) -> Result<(), idem_client::Error> {
//! let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let client = ServiceBuilder::new()
//!     .layer(IdempotentRetryLayer::new(RetryPolicy::new()))
//!     .service(hyper);
//!
//! let mut request = http::Request::post("http://payments.internal/payments")
//!     .header("content-type", "application/json")
//!     .body(Full::new(Bytes::from_static(br#"{"account":"alice","amount":1200}"#)))
//!     .expect("a request");
//! // The same key in every run of this handler for this record.
//! request.extensions_mut().insert(record.outbound_key("charge"));
//! let response = client.oneshot(request).await?;
//! # let _ = response;
//! # Ok(()) }
//! ```
//!
//! The crate depends on `idem-core` only: a handler on another framework derives its
//! keys with [`OutboundKeys::new`] from its own record's key.

// On docs.rs, items behind a feature say which.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod key;
mod layer;
mod policy;
#[cfg(feature = "reqwest")]
mod reqwest;

pub use error::{BoxError, Error};
pub use idem_core::outbound::{OutboundKey, OutboundKeys};
pub use layer::{IdempotentRetry, IdempotentRetryLayer, ResponseBody};
pub use policy::RetryPolicy;
#[cfg(feature = "reqwest")]
pub use reqwest::IdempotentRetryMiddleware;

/// The README's examples, compiled (and run where they can be) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
