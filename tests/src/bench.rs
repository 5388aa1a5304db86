//! What the in-process HTTP benchmarks (`benches/avoid_repeat.rs`, `form_token.rs`,
//! `idempotency.rs`) share: their runtime, their stores and their criterion settings.

use std::time::Duration;

use criterion::Criterion;
use idem_core::{MemoryStore, RedisStore};
use tokio::runtime::Runtime;

use crate::RedisServer;

/// A runtime with one worker, as the end-to-end benchmark pins its server to one core.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn one_worker_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime")
}

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

/// The HTTP benchmarks' settings: 1 s of warm-up, 4 s of measurement, 40 samples.
pub fn http_criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(40)
}
