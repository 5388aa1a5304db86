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
//! - [`Store`]: the operations, as a trait.
//! - [`MemoryStore`]: the embedded default, for one process; bounded in memory.
//! - `RedisStore` (feature `redis`, on by default): for many processes, Redis Cluster
//!   included.
//! - [`AnyStore`]: any store behind one concrete type, for code that cannot be generic.
//! - [`Lock`]: a distributed lock over any store — owner tokens, leases with an optional
//!   watchdog, fencing tokens if asked for ([`Lock::fenced`]), reentry, waiting that wakes
//!   on release. Read the
//!   [`lock`] module docs for what it guarantees and what it does not.
//! - `conformance` (feature `conformance`): the suite every store passes, for a store
//!   written outside this crate to run with one line.
//! - [`Key`], [`Owner`], [`Fingerprint`]: what a store is addressed with. Anything a client
//!   sends is hashed into them, so no input can name another key.
//!
//! ```
//! use std::time::Duration;
//! use idem_core::{Key, MemoryStore, Store};
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
mod key;
pub mod lock;
pub mod store;

pub use key::{Fingerprint, Key, KeyError, Owner};
pub use lock::{
    FairLock, Fenced, FencingMode, Lease, Lock, LockError, LockGuard, LockLost, Unfenced,
};
pub use store::{
    Acquire, AnyStore, Begin, BoxError, FairStore, Fencing, FencingToken, MemoryStore,
    MemoryStoreBuilder, RELEASE_POLL_INTERVAL, Store, StoreError, Turn,
};
#[cfg(feature = "redis")]
pub use store::{EvictionCheck, RedisSetupError, RedisStore, RedisStoreBuilder, ReplicasBehind};

/// The README's examples, compiled (and run where they can be) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
