//! Duplicate-submission protection and idempotency for [axum](https://docs.rs/axum)
//! services, on one instance or many.
//!
//! Users double-click "Buy", browsers re-POST on refresh, payment providers deliver the
//! same callback twice, mobile clients retry after a timeout whose first attempt
//! succeeded. idem makes each of these run the handler once, with a single atomic
//! operation in a store every instance shares.
//!
//! 1. Build an [`Idem`] runtime — its store ([`MemoryStore`] by default; `RedisStore`, with
//!    the feature `redis`, for several instances), who the client is ([`identity`]), the
//!    store-failure policy — and install it with [`Idem::layer`].
//! 2. Guard handlers with `#[avoid_repeat(timeout = "30s")]` or routes with
//!    [`AvoidRepeatLayer`]: a repeat from the same client inside the window gets 409.
//! 3. Give forms a one-time token with the [`FormToken`] extractor and spend it on submit
//!    with [`VerifyFormTokenLayer`]: the form is accepted once ([`form_token`]).
//! 4. Make API requests idempotent with [`IdempotencyLayer`]: a retry with the same
//!    `Idempotency-Key` gets the first response back, and the handler runs once
//!    ([`idempotency`]).
//!    With the feature `grpc`, it and [`AvoidRepeatLayer`] guard the unary methods of a
//!    tonic gRPC service too, and refuse with gRPC statuses (the `grpc` module).
//! 5. Serialise work across instances with a distributed [`Lock`](lock::Lock) (owner
//!    tokens, watchdog renewal, fencing tokens with `.fenced()`), re-exported from
//!    `idem_core` in [`lock`].
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::{Router, routing::post};
//! use idem_axum::{Idem, avoid_repeat};
//!
//! #[avoid_repeat(timeout = "30s", message = "请勿重复提交")]
//! async fn place_order() -> &'static str {
//!     "order placed"
//! }
//!
//! # async fn serve() -> std::io::Result<()> {
//! let idem = Idem::builder().build(); // MemoryStore, clients by peer IP
//! let app = Router::new().route("/orders", post(place_order)).layer(idem.layer());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! ```
//!
//! Every refusal is a [`Rejection`]: `application/problem+json` by default, a small HTML
//! page for browsers, replaceable with [`IdemBuilder::with_responder`]. Every guarded
//! request runs in an `idem` `tracing` span (guard, route, client hashed, outcome, store
//! latency), and each decision is an event — a refused duplicate, a replay, a conflict or
//! a mismatch at `info`, the rest at `debug`; with the feature `metrics` they are also
//! counters and a latency histogram ([`outcome`] lists them). What goes wrong for one
//! request (a store failure, a refusal for `busy`) is a warning, written at most once
//! every 10 seconds with the count of the rest, so that a flood writes a few lines
//! ([logs](guide::production#logs)).
//!
//! The [`guide`] says what the guards promise as a whole, which store keeps which promise,
//! what each refusal means, and what to set before production.
//!
//! The root holds what an application writes; the rest is grouped by module: [`store`]
//! (the store capabilities and their operations, for code that calls a store itself), [`lock`],
//! [`identity`] (who the client is), [`guard`] (for a guard of your own), and the modules of
//! each guard with its service and settings.

// On docs.rs, items behind a feature say which.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
mod macros;

pub mod avoid_repeat;
mod detached;
#[cfg(test)]
mod field_lines;
pub mod form_token;
pub mod future;
#[cfg(feature = "grpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
pub mod grpc;
pub mod guard;
pub mod guide;
mod idem;
pub mod idempotency;
pub mod identity;
#[cfg(feature = "openapi")]
#[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
pub mod openapi;
pub mod outcome;
mod rejection;
mod request_body;
mod store_failure;

pub use avoid_repeat::layer::AvoidRepeatLayer;
pub use avoid_repeat::settings::{Release, RepeatBy};
pub use form_token::config::FormTokenConfig;
pub use form_token::extract::FormToken;
pub use form_token::layer::VerifyFormTokenLayer;
pub use idem::{Drained, Idem, IdemBuilder, IdemLayer, IdemService, IdemStore};
pub use idem_core::MemoryStore;
#[cfg(feature = "macros")]
pub use idem_macros::avoid_repeat;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use idem_redis::{RedisServer, RedisStore};
pub use idempotency::layer::IdempotencyLayer;
pub use rejection::{Rejection, RejectionKind};
pub use store_failure::StoreFailure;

/// The stores and what they are addressed with: the [`Store`](store::Store) trait and its
/// operations' answers, for code that calls a store itself, and the stores' builders and
/// errors.
///
/// An application that only guards its handlers needs none of this but the store it
/// picks, which the crate root re-exports ([`MemoryStore`], and with
/// the feature `redis` `RedisStore` and the `RedisServer` it connects to).
pub mod store {
    pub use idem_core::key::KeyError;
    pub use idem_core::store::*;
    pub use idem_core::{
        Acquire, AnyStore, Begin, FairStore, Fingerprint, Key, LockStore, Owner, RecordState,
        RecordStore, Store, StoreError, TokenStore,
    };
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use idem_redis::{EvictionCheck, RedisSetupError, RedisStoreBuilder, ReplicasBehind};
}

/// What of a body tells one request from another, re-exported from `idem_core`: the
/// choice [`IdempotencyLayer::with_payload_fingerprint`] and
/// [`AvoidRepeatLayer::with_payload_fingerprint`] take.
pub mod payload {
    pub use idem_core::payload::*;
}

/// The distributed lock, re-exported from `idem_core`: see
/// [`idem_core::lock`] for what it guarantees and what it does not.
pub mod lock {
    pub use idem_core::lock::*;
    pub use idem_core::{FairLock, Lock};
}

/// What `#[avoid_repeat]` expands to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::avoid_repeat::attribute::{
        AvoidRepeatContext, Counted, Last, Payload, ReadPayload, Spec, Via, WithContext, run,
    };
    pub use crate::{Release, RepeatBy};
    pub use axum::response::Response;
}

/// The README's examples, compiled (and run where they can be) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
