//! One-time form tokens: [`FormToken`] issues one when a form is rendered,
//! [`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer) spends it when the form is posted.
//!
//! A session-token interceptor, as many web frameworks have one: the form page gets a
//! random token, the submission must bring it back, and the token works once. The check
//! *is* the delete: verifying is one atomic delete in the store that
//! answers "deleted" to exactly one caller, never a read followed by a delete, which two
//! concurrent submissions would both pass.
//!
//! **Issue.** Extracting [`FormToken`] draws 128 bits from the operating system's random
//! generator, stores the token for the configured TTL under the client's scope (who the
//! client is: the runtime's [`identity`](crate::identity) key), and gives the handler its
//! [value](crate::FormToken::value), [field name](crate::FormToken::field_name) and a ready,
//! HTML-escaped [hidden input](crate::FormToken::hidden_input). Every rendering issues a new
//! token, so a user with the form open in two tabs can post each once. The store holds a
//! hash of the namespace, client and token — a dump of it yields no usable token.
//!
//! **Bounded.** A client keeps its newest 16 tokens
//! ([`FormTokenConfig::with_tokens_per_client`]); rendering the form once more makes its
//! oldest lapse. And tokens have a budget of their own in the store (its token
//! capacity), apart from anti-repeat windows, idempotency records and locks: a flood of
//! form pages — by one client, or by many throwaway ones, since a client without a cookie
//! is a new client every time — pushes out only other tokens, those that expire soonest
//! first, and never makes another client's guarded request fail. A token pushed out
//! costs its user a form reload, never a duplicate.
//!
//! **Verify.** [`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer), installed with `route_layer`, takes the token
//! from the configured header, or else from the form field of an
//! `application/x-www-form-urlencoded` or `multipart/form-data` body (read whole within
//! a limit, then handed on unchanged, so the handler's `Form` or `Multipart` extractor
//! still works), and spends it:
//!
//! | request | answer | token spent |
//! |---|---|---|
//! | a token issued to this client, not yet spent nor expired | the handler's | yes |
//! | a token unknown, expired, already spent, or issued to another client | 409 [`InvalidFormToken`](crate::RejectionKind::InvalidFormToken) — one answer for all, so it tells nothing | — |
//! | with [replay](crate::VerifyFormTokenLayer::with_replay): a token this client spent on this route | the first submission's response, replayed | — |
//! | with replay: a token whose submission failed (5xx, panic) | the handler's, run again | yes, given back if it fails again |
//! | spent in the handler's transaction: a live token | the handler's, which spends it with its writes | by the handler, at its commit |
//! | no token (no header, no field, or a request without a `Content-Type`) | 400 [`MissingFormToken`](crate::RejectionKind::MissingFormToken) | no |
//! | no token header and a body that is no form (`application/json`, …) | 415 [`UnsupportedMediaType`](crate::RejectionKind::UnsupportedMediaType) | no |
//! | a urlencoded body that is not UTF-8; a multipart body malformed or cut short | 400 [`InvalidBody`](crate::RejectionKind::InvalidBody) | no |
//! | a form body over the limit ([`with_body_limit`](crate::VerifyFormTokenLayer::with_body_limit)) | 413 [`PayloadTooLarge`](crate::RejectionKind::PayloadTooLarge) | no |
//! | the store fails | the runtime's [`StoreFailure`](crate::StoreFailure) policy: 503, or through unverified | no |
//!
//! A body is checked whole before its token is spent, so a submission the handler would
//! refuse anyway does not cost the user the form.
//!
//! **Configuration** lives in two places, by who needs it. What a token *is* — the
//! field name, the header name, the TTL — must be the same for the page that issues it
//! and the route that verifies it, so it is one [`FormTokenConfig`] in the request
//! extensions, put there with axum's [`Extension`](axum::Extension) layer over both (the
//! defaults without it). How one route *verifies* — the body limit, rotation, the 409
//! message — is set on its [`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer).
//!
//! **Replay** (off by default): with
//! [`with_replay(true)`](crate::VerifyFormTokenLayer::with_replay) the token also serves as an
//! idempotency key: the first submission's response is kept for the token's life, and a
//! repeat of the token by its own client gets it again (`Idempotent-Replayed: true`)
//! instead of 409 — the user who double-clicks lands on the page the first click
//! produced. A repeat that arrives while the first still runs waits for it. A submission
//! belongs to its route: the token posted to another route is refused as spent. A
//! submission that fails gives its token back, and the page can be posted again.
//!
//! **Spent in the handler's transaction** (off by default): with
//! [`with_spend_in_transaction(true)`](crate::VerifyFormTokenLayer::with_spend_in_transaction),
//! on a store that keeps tokens and records in the application's own database (the SQL
//! stores of `idem-sqlx`), the layer begins the submission's record and only *looks* at
//! the token; the handler, through its [`FormSubmission`], spends the token, writes the
//! order and stores the response a repeat replays, all in one transaction. Spent before
//! the handler runs, as otherwise, a token outlives a server that dies between the two: a
//! death before the commit leaves the token spent and no order (the repeat gets 409 and
//! the user fills the form again); a death after it leaves the order and no stored page
//! (the repeat waits out the record's lease, then gets 409). In the transaction, the
//! first leaves the token live — the repeat places the order, once the record's lease
//! ([`with_lease`](crate::VerifyFormTokenLayer::with_lease)) has run out — and the
//! second the stored page, which the repeat replays.
//!
//! An anti-repeat window (`#[avoid_repeat]`, [`AvoidRepeatLayer`](crate::AvoidRepeatLayer))
//! is not taken in the transaction, on purpose. It refuses what arrives while it is held,
//! and a key written in an open transaction refuses nobody until the commit: concurrent
//! repeats would all run their handlers up to the key's row and wait there for its lock.
//! Nor does a window need to commit with the data: it promises "not twice within the
//! window", which a window kept beside the data keeps through any crash (taken before the
//! handler, it outlives a server that dies at any point), and once the window has passed a
//! repeat runs, by design. What must commit with the data is what answers a repeat *with
//! the first outcome* — a form submission's or an idempotency key's record.
//!
//! **Rotation** (off by default): with
//! [`with_rotation(true)`](crate::VerifyFormTokenLayer::with_rotation) an accepted submission
//! gets a fresh token for the same client — in the handler's [`FormToken`] extractor and
//! in the response's token header — for a page that stays open and posts again.
//!
//! **Observability.** `tracing` events carry an `idem.outcome` field: `issued`,
//! `accepted` (a token spent), `duplicate` (a token refused), `missing`, `store_error`;
//! with replay also `replayed` and `conflict` (a repeat that waited out the first).
//!
//! **Beside `#[avoid_repeat]`.** Both guards can protect one handler. Put
//! `VerifyFormTokenLayer` outside (added after `AvoidRepeatLayer`, or on a handler with
//! `#[avoid_repeat]`): a request refused for its token then takes no anti-repeat key.
//! Inside, the anti-repeat window is taken first and given back at once when the token
//! is refused (a 4xx), at the cost of a store round trip more.
//!
//! ```
//! use std::time::Duration;
//! use axum::response::Html;
//! use axum::routing::{get, post};
//! use axum::{Extension, Form, Router};
//! use idem_axum::identity::ClientCookie;
//! use idem_axum::{FormToken, FormTokenConfig, Idem, VerifyFormTokenLayer};
//!
//! async fn order_form(token: FormToken) -> Html<String> {
//!     Html(format!(
//!         r#"<form method="post" action="/orders">
//!              <input name="item"> {} <button>Buy</button>
//!            </form>"#,
//!         token.hidden_input()
//!     ))
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Order {
//!     item: String,
//! }
//!
//! async fn place_order(Form(order): Form<Order>) -> String {
//!     format!("ordered {}", order.item)
//! }
//!
//! let idem = Idem::builder()
//!     .with_client_identity(ClientCookie::new("session"))
//!     .build();
//! let app: Router = Router::new()
//!     .route("/orders/new", get(order_form))
//!     .route(
//!         "/orders",
//!         post(place_order).route_layer(VerifyFormTokenLayer::new().with_message("请勿重复提交")),
//!     )
//!     .layer(Extension(FormTokenConfig::new().with_ttl(Duration::from_secs(15 * 60))))
//!     .layer(idem.layer());
//! ```

pub(crate) mod config;
pub(crate) mod extract;
mod field;
pub(crate) mod layer;
mod replay;
mod submission;

pub(crate) use self::config::FormTokenConfig;
pub(crate) use self::extract::FormToken;
pub use self::extract::FormTokenRejection;
pub use self::layer::VerifyFormToken;
pub use self::submission::FormSubmission;
