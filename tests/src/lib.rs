//! The harness of idem's cross-crate tests and benchmarks.
//!
//! Tests that need Redis run against a real `redis-server` this harness starts itself
//! ([`RedisServer`], [`RedisCluster`]): its own port, its own data directory, no
//! persistence, killed when the test ends. A missing binary fails the test with a message
//! that says how to install it; nothing is skipped.
//!
//! [`Backend`] gives a suite one store of each kind, so the same test runs against every
//! store.

mod backend;
mod concurrency;
mod redis_server;

pub use backend::{AnyMemoryBackend, Backend, ClusterBackend, MemoryBackend, RedisBackend};
pub use concurrency::{all_at_once, eventually};
pub use redis_server::{RedisCluster, RedisServer, redis_server_binary, unused_port};
