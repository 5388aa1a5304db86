//! One store of each kind, with whatever keeps it alive, for suites that run every test
//! against every store: each a [`Backend`] of the store conformance suite.

use idem_core::conformance::Backend;
use idem_core::{AnyStore, MemoryStore, RedisStore, RedisStoreBuilder};

use crate::redis_server::{RedisCluster, RedisServer};

/// [`MemoryStore`] with the default settings.
#[derive(Debug)]
pub struct MemoryBackend(MemoryStore);

impl Backend for MemoryBackend {
    type Store = MemoryStore;

    async fn start() -> Self {
        Self(MemoryStore::new())
    }

    fn store(&self) -> MemoryStore {
        self.0.clone()
    }
}

/// [`MemoryStore`] behind [`AnyStore`], to check the erased store forwards every
/// operation.
#[derive(Debug)]
pub struct AnyMemoryBackend(AnyStore);

impl Backend for AnyMemoryBackend {
    type Store = AnyStore;

    async fn start() -> Self {
        Self(AnyStore::new(MemoryStore::new()))
    }

    fn store(&self) -> AnyStore {
        self.0.clone()
    }
}

/// [`RedisStore`] on a standalone server of its own.
#[derive(Debug)]
pub struct RedisBackend {
    /// The server; dropped after the store.
    pub server: RedisServer,
    store: RedisStore,
}

impl Backend for RedisBackend {
    type Store = RedisStore;

    async fn start() -> Self {
        let server = RedisServer::start();
        let store = server.store();
        Self { server, store }
    }

    fn store(&self) -> RedisStore {
        self.store.clone()
    }

    fn store_of_another_instance(&self) -> RedisStore {
        self.server.store()
    }
}

/// [`RedisStore`] on a standalone server of its own, acquiring with the script meant for
/// servers before Redis 7.0 (which refuse `SET … NX … GET`), forced on this newer one.
#[derive(Debug)]
pub struct RedisScriptAcquireBackend {
    /// The server; dropped after the store.
    pub server: RedisServer,
    store: RedisStore,
}

impl RedisScriptAcquireBackend {
    fn builder() -> RedisStoreBuilder {
        RedisStore::builder().with_script_acquire(true)
    }
}

impl Backend for RedisScriptAcquireBackend {
    type Store = RedisStore;

    async fn start() -> Self {
        let server = RedisServer::start();
        let store = server.store_with(Self::builder());
        Self { server, store }
    }

    fn store(&self) -> RedisStore {
        self.store.clone()
    }

    fn store_of_another_instance(&self) -> RedisStore {
        self.server.store_with(Self::builder())
    }
}

/// [`RedisStore`] on a three-master Redis Cluster of its own.
#[derive(Debug)]
pub struct ClusterBackend {
    /// The cluster.
    pub cluster: RedisCluster,
    store: RedisStore,
}

impl Backend for ClusterBackend {
    type Store = RedisStore;

    async fn start() -> Self {
        let cluster = RedisCluster::start();
        let store = cluster.store();
        Self { cluster, store }
    }

    fn store(&self) -> RedisStore {
        self.store.clone()
    }

    fn store_of_another_instance(&self) -> RedisStore {
        self.cluster.store()
    }
}
