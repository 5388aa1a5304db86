//! Duplicate-submission protection and idempotency for [axum](https://docs.rs/axum)
//! services, on one instance or many.
//!
//! Users double-click "Buy", browsers re-POST on refresh, payment providers deliver the
//! same callback twice, mobile clients retry after a timeout whose first attempt
//! succeeded. idem makes each of these run the handler once, with a single atomic
//! operation in a store every instance shares.
//!
//! 1. Build an [`Idem`] runtime — its store ([`MemoryStore`] by default, `RedisStore` for
//!    several instances), who the client is ([`client`]), the store-failure policy — and
//!    install it with [`Idem::layer`].
//! 2. Guard handlers with `#[avoid_repeat(timeout = "30s")]` or routes with
//!    [`AvoidRepeatLayer`]: a repeat from the same client inside the window gets 409.
//! 3. Give forms a one-time token with the [`FormToken`] extractor and spend it on submit
//!    with [`VerifyFormTokenLayer`]: the form is accepted once ([`form_token`]).
//! 4. Make API requests idempotent with [`IdempotencyLayer`]: a retry with the same
//!    `Idempotency-Key` gets the first response back, and the handler runs once
//!    ([`idempotency`]).
//! 5. Serialise work across instances with a distributed [`Lock`] (owner tokens, fencing
//!    tokens, watchdog renewal), re-exported from `idem_core`.
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
//! page for browsers, replaceable with [`IdemBuilder::with_responder`]. Outcomes are
//! logged as `tracing` events with an `idem.outcome` field (`accepted`, `duplicate`,
//! `store_error`, and for idempotency `replayed`, `conflict`, `mismatch`; each module's
//! docs list its own).

pub mod avoid_repeat;
mod body;
pub mod client;
mod detached;
pub mod form_token;
pub mod idempotency;
mod rejection;
mod response_future;
mod runtime;

pub use avoid_repeat::{AvoidRepeatLayer, Release, RepeatKey};
pub use form_token::{FormToken, FormTokenConfig, VerifyFormTokenLayer};
pub use idem_core::{
    Acquire, AnyStore, Begin, Fencing, FencingToken, Fingerprint, Key, KeyError, MemoryStore,
    MemoryStoreBuilder, Owner, Store, StoreError,
};
#[cfg(feature = "redis")]
pub use idem_core::{EvictionCheck, RedisSetupError, RedisStore, RedisStoreBuilder};
pub use idem_core::{Lease, Lock, LockError, LockGuard, LockLost};
#[cfg(feature = "macros")]
pub use idem_macros::avoid_repeat;
pub use idempotency::IdempotencyLayer;
pub use rejection::{Rejection, RejectionKind};
pub use runtime::{Idem, IdemBuilder, IdemLayer, IdemService, StoreFailure};

/// What `#[avoid_repeat]` expands to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::avoid_repeat::handler::{
        AvoidRepeatContext, Last, LastParts, Payload, Spec, WithContext, run,
    };
    pub use crate::avoid_repeat::{Release, RepeatKey};
    pub use axum::response::Response;
}
