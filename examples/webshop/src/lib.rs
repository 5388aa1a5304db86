//! The example web shop: the first thing to run, and the proof that idem works end to
//! end. A small real application — server-rendered pages, a JSON API, SQLite through
//! sqlx — where every way the documents say a request arrives twice is met by the guard
//! made for it:
//!
//! | route | the duplicate | the guard |
//! |---|---|---|
//! | `POST /orders` | double click, re-POST on refresh, back and submit again | one-time form token ([`idem_axum::VerifyFormTokenLayer`]) + `#[avoid_repeat]` window |
//! | `POST /api/orders` | a client's retry after a timeout | `Idempotency-Key` replay ([`idem_axum::IdempotencyLayer`]) |
//! | `POST /api/payments/callback` | the provider's front- and back-channel notification | idempotency keyed by the body's `source` + `seq`, shared by every caller; unique index |
//! | `PUT /api/accounts/{id}/withdrawals/{ticket_id}` | a retried withdrawal | the ticket is the idempotency key; one outcome row per ticket |
//! | `POST /api/vouchers/{id}/seckill` | a flash-sale buyer's repeated clicks, many buyers at once | a [`idem_axum::Lock`] per user + a conditional `UPDATE` on stock; unique index |
//!
//! **Who the client is.** One [`idem_axum::Idem`] has one client-key extractor, so the
//! shop's says: the `X-User-Id` header when a request has one (the JSON API), else the
//! anonymous `shop_session` cookie that every page hands out (the browser). A request
//! with neither gets 400 from the guards that need a client. The cookie is set on the very
//! first page a browser opens, and that request already counts as the new session's, so
//! the form token it issues is the browser's.
//!
//! [`Shop`] holds the database and the idem runtime; [`Shop::router`] is the whole app.
//! Several `Shop`s on one database and one Redis behave as one shop (the tests run two).

mod app;
mod client;
mod db;
mod error;
mod routes;

pub use app::Shop;
pub use db::connect;
