//! The anti-repeat window: `#[avoid_repeat]` and [`AvoidRepeatLayer`](crate::AvoidRepeatLayer).
//!
//! A handler guarded this way refuses a second request **from the same client to the same
//! handler** while the first one's key is held in the store — the user's double click,
//! the browser's re-POST on refresh. The duplicate gets `409 Conflict` with
//! `Retry-After` (the seconds left), and the handler body does not run for it.
//!
//! - The key is the runtime's namespace + the handler's identity + the client
//!   ([`identity`](crate::identity)), hashed; with [`RepeatBy::ClientAndBody`] also a
//!   fingerprint of the query and body, so a *different* payload from the same client is
//!   not a repeat. The identity is `module_path::fn_name` for the attribute and
//!   `METHOD /matched/{path}` for the layer.
//! - [`Release::Expire`] (default): the key is taken for `timeout` when the request is
//!   accepted — one store round trip, and nothing more — so a resubmission inside the
//!   window is refused. A handler slower than its window should use `Finish`.
//! - [`Release::Finish`]: a lock, released as soon as the handler has produced its
//!   response (a second round trip); `timeout` is then only the lease that frees the key
//!   if the process dies.
//! - **Once the key is taken, the handler runs to its end**, in a task of its own from
//!   the moment the client goes away: the browser abandons the first POST of
//!   a double click, and that POST may already have committed. In `Expire` mode an
//!   abandoned request keeps its window; in `Finish` mode its key is released when the
//!   handler really finishes, not when the client leaves.
//! - **Only a success keeps the key.** A response of 1xx–3xx keeps it for the window
//!   (`Expire`). Any 4xx or 5xx releases it at once, and so does a panic (under
//!   `CatchPanicLayer`): the request was refused or failed, and the user may fix it and
//!   send it again. That covers a 400 or 422 the handler returns for bad input, an
//!   extractor's refusal under [`AvoidRepeatLayer`](crate::AvoidRepeatLayer) (which takes the key before the
//!   route's extractors run), a 404 or 409 of the handler's own, and the refusals of
//!   idem guards inside this one.
//! - The attribute takes the key only after the handler's extractors succeeded: a request
//!   they refuse (400, 413, 415, 422) takes no key at all.
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

pub(crate) mod attribute;
pub(crate) mod layer;
pub(crate) mod settings;
mod window;

pub use self::layer::AvoidRepeat;
pub(crate) use self::settings::{Release, RepeatBy, Settings};
