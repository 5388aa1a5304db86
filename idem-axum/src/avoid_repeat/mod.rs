//! The anti-repeat window: `#[avoid_repeat]` and [`AvoidRepeatLayer`].
//!
//! A handler guarded this way refuses a second request **from the same client to the same
//! handler** while the first one's key is held in the store — the user's double click,
//! the browser's re-POST on refresh. The duplicate gets `409 Conflict` with
//! `Retry-After` (the seconds left), and the handler body does not run for it.
//!
//! - The key is the runtime's namespace + the handler's identity + the client
//!   ([`client`](crate::client)), hashed; with [`RepeatKey::ClientAndBody`] also a
//!   fingerprint of the query and body, so a *different* payload from the same client is
//!   not a repeat. The identity is `module_path::fn_name` for the attribute and
//!   `METHOD /matched/{path}` for the layer.
//! - [`Release::Expire`] (default): the key is taken for `timeout` when the request is
//!   accepted — one store round trip, and nothing more — so a resubmission inside the
//!   window is refused. A handler slower than its window should use `Finish`.
//! - [`Release::Finish`]: a lock, released as soon as the response is produced (a second
//!   round trip); `timeout` is then only the lease that frees the key if the process dies.
//! - Whatever the mode, a failed handler — a 5xx response, a panic (under
//!   `CatchPanicLayer`), a future dropped because the client went away — releases the
//!   key at once, so the user can retry.
//! - The key is taken after the handler's extractors succeeded: a request refused for bad
//!   input (400, 413, 415, 422) takes no key.
//! - A store failure follows the runtime's [`StoreFailure`](crate::StoreFailure) policy.
//!
//! ```
//! use std::time::Duration;
//! use axum::{Router, routing::post};
//! use idem_axum::{AvoidRepeatLayer, Idem, Release};
//!
//! let idem = Idem::builder().build();
//! let app: Router = Router::new()
//!     .route("/orders", post(|| async { "created" }))
//!     .route_layer(
//!         AvoidRepeatLayer::new(Duration::from_secs(30))
//!             .with_release(Release::Finish)
//!             .with_message("请勿重复提交"),
//!     )
//!     .layer(idem.layer());
//! ```

mod guard;
pub(crate) mod handler;
mod layer;

use std::borrow::Cow;
use std::time::Duration;

pub use self::layer::{AvoidRepeat, AvoidRepeatLayer, ResponseFuture};

/// When the key of an accepted request is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Release {
    /// The key lives for the whole window after acceptance: repeats inside it are refused.
    #[default]
    Expire,
    /// The key is released when the response is produced: only concurrent repeats are
    /// refused.
    Finish,
}

/// What makes two requests "the same" for the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepeatKey {
    /// The same client to the same handler.
    #[default]
    Client,
    /// The same client to the same handler with the same query and body. The body is read
    /// whole (within the router's `DefaultBodyLimit`) and handed on unchanged.
    ClientAndBody,
}

/// How one guarded handler behaves.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) timeout: Duration,
    pub(crate) release: Release,
    pub(crate) key: RepeatKey,
    pub(crate) message: Option<Cow<'static, str>>,
}

impl Settings {
    fn message(&self) -> Cow<'static, str> {
        self.message.clone().unwrap_or(Cow::Borrowed(
            "This request was already submitted; please wait before repeating it.",
        ))
    }
}
