//! The Redis store of [idem](https://github.com/idem-rs/idem): [`RedisStore`], for an
//! application that runs as several instances behind a load balancer, on
//! [deadpool-redis](https://docs.rs/deadpool-redis) and [redis-rs](https://docs.rs/redis).
//!
//! It implements `idem-core`'s [`Store`](idem_core::Store) and
//! [`FairStore`](idem_core::FairStore) with one atomic step per operation (one command or
//! one Lua script), and passes the same conformance suite as every other store of idem.
//! Most applications reach it through `idem-axum`'s feature `redis`, which re-exports
//! what this crate makes public.
//!
//! - [`RedisStore::builder`] takes the settings (namespace, timeout, token capacity,
//!   replica acknowledgements, the in-process copy of replayed records), and
//!   [`RedisStoreBuilder::connect`] finishes it with the [`RedisServer`] to use: a URL,
//!   an application's pool, a Redis Cluster pool or the sentinels of a Sentinel
//!   deployment.
//! - `connect` reaches the server and checks it at once (its version, and its eviction
//!   policy: see [`EvictionCheck`]), so a wrong address or an unfit server fails at start
//!   with a [`RedisSetupError`]; [`with_lazy_connect`](RedisStoreBuilder::with_lazy_connect)
//!   leaves both to the first operation, for an application that must start while Redis
//!   is down.
//! - Feature `tls`: `rediss://` URLs (rustls), trusting the system's roots, or a CA of the
//!   application's own with [`RedisServer::url_with_ca`].
//! - Feature `metrics`: the counter `idem_replay_cache_hits_total` (through the
//!   [`metrics`](https://docs.rs/metrics) facade), the replays the in-process copy answered
//!   without asking Redis; `idem-axum`'s feature `metrics` turns it on.
//!
//! ```no_run
//! use std::time::Duration;
//! use idem_core::{Key, LockStore, Owner};
//! use idem_core::store::Fencing;
//! use idem_redis::{RedisServer, RedisStore};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::builder()
//!     .with_namespace("shop")
//!     .connect(RedisServer::url("redis://127.0.0.1:6379"))
//!     .await?;
//! let key = Key::new("invoice-run")?;
//! store.acquire(&key, &Owner::random(), Duration::from_secs(30), Fencing::Off).await?;
//! # Ok(()) }
//! ```
//!
//! Run it on a Redis with `maxmemory-policy noeviction`: every key the store writes has a
//! TTL, so under any other policy Redis may evict a live window, record or lock, and the
//! duplicate it stood for gets through. [`RedisStore`] lists the keys it writes, the
//! servers it runs on and what it costs per operation.

// On docs.rs, items behind a feature say which.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod call;
mod connection;
mod error;
mod fair;
mod record;
mod replay_cache;
mod server;
mod store;
mod token_buckets;

pub use builder::{RedisServer, RedisStoreBuilder};
pub use error::{RedisSetupError, ReplicasBehind};
pub use server::EvictionCheck;
pub use store::RedisStore;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
