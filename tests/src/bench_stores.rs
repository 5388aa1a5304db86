//! The stores a benchmark runs each case on.

use idem_core::MemoryStore;
use idem_redis::RedisStore;
use tokio::runtime::Runtime;

use crate::RedisServer;

/// The stores a benchmark runs each case on: a `MemoryStore` with room for `capacity`
/// live keys, and a `RedisStore` on a server of its own, stopped when this is dropped.
#[derive(Debug)]
pub struct BenchStores {
    /// The memory store.
    pub memory: MemoryStore,
    /// The Redis store.
    pub redis: RedisStore,
    _server: RedisServer,
}

impl BenchStores {
    /// Starts both; the Redis store is made on `runtime`, where the cases will use it.
    pub fn start(capacity: usize, runtime: &Runtime) -> Self {
        let server = RedisServer::start();
        let redis = runtime.block_on(async { server.store() });
        Self {
            memory: MemoryStore::builder().with_capacity(capacity).build(),
            redis,
            _server: server,
        }
    }
}
