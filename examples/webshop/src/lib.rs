//! The example web shop: the first thing to run, and the proof that idem works end to
//! end. A small real application — server-rendered pages, a JSON API, SQLite through
//! sqlx — where every common way a request arrives twice is met by the guard
//! made for it:
//!
//! | route | the duplicate | the guard |
//! |---|---|---|
//! | `POST /orders` | double click, re-POST on refresh, back and submit again | one-time form token ([`idem_axum::VerifyFormTokenLayer`], with replay: a repeat lands on the first post's order) + anti-repeat window ([`idem_axum::AvoidRepeatLayer`], 5 s) |
//! | `POST /api/orders` | a client's retry after a timeout, or after the shop died before answering | `Idempotency-Key` replay ([`idem_axum::IdempotencyLayer`]), the record committed with the order |
//! | `POST /api/payments/callback` | the provider's front- and back-channel notification | idempotency keyed by the body's `source` + `seq`, shared by every caller, the record committed with the payment; unique index |
//! | `PUT /api/accounts/{id}/withdrawals/{ticket_id}` | a retried withdrawal | the ticket is the idempotency key; one outcome row per ticket |
//! | `POST /api/vouchers/{id}/seckill` | a flash-sale buyer's repeated clicks, many buyers at once | a [`idem_axum::lock::Lock`] per user + a conditional `UPDATE` on stock; unique index |
//!
//! The HTTP contract (other tools drive the shop through these paths and shapes):
//!
//! | route | what |
//! |---|---|
//! | `GET /` | HTML product list |
//! | `GET /orders/new?product_id=N` | HTML order form carrying a one-time form token; an unknown product → `404`, and no token issued |
//! | `POST /orders` | form `product_id`, `quantity` + token: `303` to `/orders/{id}`; the same token again from the same browser → the same `303`, replayed (`Idempotent-Replayed: true`); a forged or other browser's token, or a second order from one browser within 5 s → `409` (to a browser, the shop's own page with a way back) |
//! | `GET /orders/{id}` | HTML order page |
//! | `GET /api/orders` | JSON array of every order: `id`, `product_id`, `quantity`, `client` |
//! | `POST /api/orders` | JSON `{product_id, quantity}`, `Idempotency-Key` and `X-User-Id` required: `201` + the order; retries replay it |
//! | `POST /api/payments/callback` | JSON `{source, seq, order_id, amount}`, `seq` a string or an integer (`7` and `"7"` are one delivery, `"007"` another): `200 {"payment_id", "status": "paid"}`, the same for every repeat; the pair with another `order_id` or `amount` → `422`; a body of another shape → `400` naming the field, an `amount` not positive → `422`, both leaving nothing behind |
//! | `POST /api/tickets` | `201 {"ticket_id"}` |
//! | `PUT /api/accounts/{id}/withdrawals/{ticket_id}` | JSON `{amount}`: `200 {ticket_id, amount, balance}` once per ticket and on every retry; insufficient funds → `409` (with `error`), the ticket's outcome for good |
//! | `GET /api/accounts/{id}` | JSON `{id, balance}` |
//! | `POST /api/vouchers/{id}/seckill` | `X-User-Id`: `201` bought, `409` bought already or in progress, `410` sold out |
//! | `GET /api/vouchers/{id}` | JSON `{id, stock, sold}` |
//! | `GET /openapi.json` | the OpenAPI document of every route above, each guarded operation described by the layer that guards it (idem-axum's feature `openapi`): its key header, its refusals, its replay headers, the form's token field |
//! | `GET /metrics` | Prometheus text: idem's `idem_outcomes_total{guard,route,outcome}`, `idem_store_seconds{guard}` (a histogram: `_bucket{le}`, `_sum`, `_count`), `idem_store_errors_total{policy}`, and the rest of idem's (the production guide's dashboard, `ops/grafana/idem.json`, shows them; `tests/dashboard.rs` checks its names against this) |
//!
//! Unknown products, orders, accounts, tickets and vouchers are `404`; malformed input is
//! a `4xx` that changes nothing. Seed data: three products, account 1 with balance 1000,
//! voucher 1 with stock 100.
//!
//! **Who the client is.** One [`idem_axum::Idem`] has one client identity, so the
//! shop's says: the `X-User-Id` header when a request has one (the JSON API), else the
//! browser's session (idem's `SessionClient`). A request with neither gets 400 from the
//! guards that need a client. Form tokens stay in idem's store, keyed by that client, not
//! in the session's data: a session is loaded and saved whole per request, so two
//! concurrent posts of one form would each find the token in their copy.
//!
//! **Sessions.** Browsers' sessions are `tower_sessions` sessions, stored in the shop's
//! own SQLite database (the `tower_sessions` table, created by [`connect`], through
//! `tower-sessions-sqlx-store`), so every instance on one database knows every browser:
//! a form issued by one instance can be posted to another. The shop always has that
//! database, so there is no in-memory variant that two processes could disagree on. Every
//! page request without a session starts one and gives it its id before any guard runs
//! (idem's `ensure_session`), so the first page a browser opens — the order form, say —
//! already belongs to its session and issues its token to it; API paths and `/metrics`
//! start none (an API client without `X-User-Id` would be a new session, and a new row, on
//! every call). The cookie, `shop_session`:
//!
//! | setting | value | why |
//! |---|---|---|
//! | `HttpOnly` | yes | no script on a page can read the session id |
//! | `SameSite` | `Lax` | sent when a link from elsewhere opens the shop, never with another site's posts |
//! | expiry | 24 hours after the browser's last request (`Max-Age`, renewed by every answer) | far longer than a form token's 30 minutes, so no open form outlives its session; each request writes its session's row once to renew it |
//! | `Secure` | no | the shop serves plain HTTP on localhost; behind TLS, set it |
//!
//! A cookie naming no session the shop knows starts a new one. Expired sessions are
//! unusable at once and deleted hourly by the binary ([`Shop::delete_expired_sessions`]).
//!
//! **Where the keys live.** The idempotency records of `POST /api/orders` and
//! `POST /api/payments/callback` are rows of the shop's own database (idem-sqlx's
//! `SqliteStore`, its tables created by [`connect`]), and each handler completes its
//! record in the transaction that writes the order or the payment: a shop that dies
//! after committing an order leaves its stored response committed too, and the client's
//! retry gets that response instead of a second order. Every other guard keeps its keys
//! in the store the shop is given (memory, or Redis), which decides in a fraction of a
//! millisecond and has nothing to commit with.
//!
//! [`Shop`] holds the database and the idem runtimes; [`Shop::router`] is the whole app,
//! its session layer included. Several `Shop`s on one database and one Redis behave as one
//! shop (the tests run two).

mod app;
mod client;
mod db;
mod error;
mod metrics;
mod provider;
mod records;
mod refusal;
mod routes;

pub use app::Shop;
pub use db::connect;
pub use provider::{CRASH_AFTER_CHARGE, PaymentProvider, RANDOM_PAYMENT_KEYS};
