//! The core of [idem](https://github.com/idem-rs/idem): atomic stores for stopping
//! duplicate submissions, one-time tokens, idempotency records and distributed locks.
//!
//! Most applications use `idem-axum`, which builds on this crate. Use `idem-core`
//! directly to call a [`Store`] yourself, outside an HTTP handler.
//!
//! A duplicate guard is only as good as the step that decides "first or repeat". A
//! check-then-act ("is there an order already? no → insert") lets two concurrent requests
//! both pass the check. Every decision here is therefore **one atomic operation in a store
//! that all instances share**: `SET key owner NX PX ttl`, a `DEL` that returns 1 exactly
//! once, a Lua compare-and-delete.
//!
//! - [`Store`]: the operations, as the sum of three capabilities, [`LockStore`],
//!   [`TokenStore`] and [`RecordStore`]; [`FairStore`] adds waiting in arrival order.
//! - [`MemoryStore`]: the embedded default, for one process; bounded in memory.
//! - Stores in other crates, written against this crate's public API: `RedisStore`
//!   (crate `idem-redis`) for many processes, Redis Cluster included; `PostgresStore` and
//!   `SqliteStore` (crate `idem-sqlx`) for records that commit with the business data.
//! - [`AnyStore`]: any store behind one concrete type, for code that cannot be generic.
//! - [`Lock`]: a distributed lock over any store — owner tokens, leases with an optional
//!   watchdog, fencing tokens if asked for ([`Lock::fenced`]), reentry, waiting that wakes
//!   on release. Read the
//!   [`lock`] module docs for what it guarantees and what it does not.
//! - `conformance` (feature `conformance`): the suite every store passes, for a store
//!   written outside this crate to run with one line.
//! - [`Key`], [`Owner`], [`Fingerprint`]: what a store is addressed with. Anything a client
//!   sends is hashed into them, so no input can name another key.
//! - `run_once` (feature `run-once`): any async work — a queue consumer's message, a
//!   webhook, a job — run once per key on any store, its result kept and replayed; a
//!   tower layer for services of messages, and batches.
//! - [`payload`]: what of a payload tells one request from another, the one choice of
//!   every guard that fingerprints a body or a message (raw bytes, canonical JSON,
//!   selected JSON fields, none, a function).
//! - [`outbound`]: the `Idempotency-Key`s of a guarded handler's own calls to other
//!   services, derived from its record's key, so that a rerun of the handler sends the
//!   same keys (the client layer of crate `idem-client` sends them).
//!
//! ```
//! use std::time::Duration;
//! use idem_core::{Key, MemoryStore, TokenStore};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_core::StoreError> {
//! let store = MemoryStore::new();
//! let client = Key::hashed(["form-tokens", "client-42"]);
//! let token = Key::hashed(["form-token", "client-42", "k3JhbmRvbQ"]);
//! // The client's newest 16 tokens stay valid.
//! store.put_token(&client, &token, Duration::from_secs(600), 16).await?;
//! assert!(store.consume_token(&client, &token).await?, "the first post consumes the token");
//! assert!(!store.consume_token(&client, &token).await?, "a second post is refused");
//! # Ok(()) }
//! ```

// On docs.rs, items behind a feature say which.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod key;
pub mod lock;
pub mod outbound;
pub mod payload;
#[doc(hidden)]
pub mod record;
#[cfg(feature = "run-once")]
#[cfg_attr(docsrs, doc(cfg(feature = "run-once")))]
pub mod run_once;
pub mod store;
#[doc(hidden)]
pub mod throttled;

// What an application or a store author writes first. Each item is public here only, and
// everything else only in its module (`key`, `lock`, `store`): one path per public item,
// which the public API snapshot in the repository's tests checks.
pub use key::names::{Fingerprint, Key, Owner};
pub use lock::fair::FairLock;
pub use lock::mutex::Lock;
pub use store::any::AnyStore;
pub use store::contract::Store;
pub use store::error::StoreError;
pub use store::fair::FairStore;
pub use store::locks::{Acquire, LockStore};
pub use store::memory::MemoryStore;
pub use store::records::{Begin, RecordState, RecordStore};
pub use store::tokens::TokenStore;

/// What the exported macros expand to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use bytes::Bytes;
    pub use tracing;
}

/// The README's examples, compiled (and run where they can be) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
