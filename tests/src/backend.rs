//! One store of each kind, with whatever keeps it alive, for suites that run every test
//! against every store.

use idem_core::{AnyStore, MemoryStore, RedisStore, RedisStoreBuilder, Store};

use crate::redis_server::{RedisCluster, RedisServer};

/// A store under test and what it runs on.
pub trait Backend: Send + Sync {
    /// The store.
    type Store: Store + Clone;

    /// Starts the backend (a server, where it needs one).
    fn start() -> Self;

    /// A handle on the store; clones share its data.
    fn store(&self) -> Self::Store;

    /// A store on the same data as another application instance would have it: for Redis
    /// a store with connections of its own; in memory, the same store (two routers in one
    /// process).
    fn store_of_another_instance(&self) -> Self::Store {
        self.store()
    }
}

/// [`MemoryStore`] with the default settings.
#[derive(Debug)]
pub struct MemoryBackend(MemoryStore);

impl Backend for MemoryBackend {
    type Store = MemoryStore;

    fn start() -> Self {
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

    fn start() -> Self {
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

    fn start() -> Self {
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

    fn start() -> Self {
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

    fn start() -> Self {
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
