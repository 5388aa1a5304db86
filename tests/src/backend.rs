//! One store of each kind, with whatever keeps it alive, for suites that run every test
//! against every store: each a [`Backend`] of the store conformance suite.

use idem_core::conformance::Backend;
use idem_core::{AnyStore, MemoryStore};
use idem_redis::RedisStore;
use idem_sqlx::{PostgresStore, SqliteStore};

use crate::postgres_server::PostgresServer;
use crate::redis_sentinel::RedisSentinels;
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

/// A [`Backend`] of [`RedisStore`] on a Redis deployment of its own, kept in the public
/// field named, whose stores (the backend's, and another instance's) are made with the
/// builder given: `redis_backend!(Name { field: Deployment }, builder)`.
macro_rules! redis_backend {
    (
        $(#[$doc:meta])*
        $name:ident { $(#[$field_doc:meta])* $field:ident: $deployment:ident },
        $builder:expr
    ) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name {
            $(#[$field_doc])*
            pub $field: $deployment,
            store: RedisStore,
        }

        impl Backend for $name {
            type Store = RedisStore;

            async fn start() -> Self {
                let $field = $deployment::start();
                let store = $field.store_with($builder);
                Self { $field, store }
            }

            fn store(&self) -> RedisStore {
                self.store.clone()
            }

            fn store_of_another_instance(&self) -> RedisStore {
                self.$field.store_with($builder)
            }
        }
    };
}

redis_backend!(
    /// [`RedisStore`] on a standalone server of its own.
    RedisBackend {
        /// The server; dropped after the store.
        server: RedisServer
    },
    RedisStore::builder()
);

redis_backend!(
    /// [`RedisStore`] on a standalone server of its own, acquiring with the script meant
    /// for servers before Redis 7.0 (which refuse `SET … NX … GET`), forced on this newer
    /// one.
    RedisScriptAcquireBackend {
        /// The server; dropped after the store.
        server: RedisServer
    },
    RedisStore::builder().with_script_acquire(true)
);

redis_backend!(
    /// [`RedisStore`] on a three-master Redis Cluster of its own.
    ClusterBackend {
        /// The cluster.
        cluster: RedisCluster
    },
    RedisStore::builder()
);

/// [`PostgresStore`] on a PostgreSQL server of its own, with idem's tables created.
#[derive(Debug)]
pub struct PostgresBackend {
    store: PostgresStore,
    other: PostgresStore,
    /// The server; dropped after the stores.
    pub server: PostgresServer,
}

impl Backend for PostgresBackend {
    type Store = PostgresStore;

    async fn start() -> Self {
        let server = PostgresServer::start();
        // Up to a thousand operations at once on one pool: on a loaded machine (a load of
        // 12 on 2 cores) 200 waiters for one fair lock outlasted the default timeout of
        // 1 s once in 20 runs, a bound on a request's wait in production, not what the
        // suites test (the same as SQLite's below).
        let builder = || PostgresStore::builder().with_timeout(std::time::Duration::from_secs(10));
        let (store, other) = (
            server.store_with(builder()).await,
            server.store_with(builder()).await,
        );
        Self {
            store,
            other,
            server,
        }
    }

    fn store(&self) -> PostgresStore {
        self.store.clone()
    }

    /// A store with a pool of its own, made when the backend started.
    fn store_of_another_instance(&self) -> PostgresStore {
        self.other.clone()
    }
}

/// [`SqliteStore`] on a database file in a temporary directory of its own, with idem's
/// tables created.
#[derive(Debug)]
pub struct SqliteBackend {
    store: SqliteStore,
    other: SqliteStore,
    /// The directory holding the database file; removed after the stores are dropped.
    pub dir: tempfile::TempDir,
}

impl SqliteBackend {
    /// The database file.
    pub fn path(&self) -> std::path::PathBuf {
        Self::file(&self.dir)
    }

    fn file(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("idem.db")
    }
}

impl Backend for SqliteBackend {
    type Store = SqliteStore;

    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for SQLite");
        // The suites send up to a thousand operations at once through the one connection
        // each store has: on a loaded machine their queue outlasts the default timeout of
        // 1 s, which bounds a request's wait in production, not what the suites test.
        let open = || async {
            let store = SqliteStore::builder()
                .with_timeout(std::time::Duration::from_secs(10))
                .open(Self::file(&dir))
                .await
                .expect("a SQLite database file");
            store.migrate().await.expect("idem's tables");
            store
        };
        let (store, other) = (open().await, open().await);
        Self { store, other, dir }
    }

    fn store(&self) -> SqliteStore {
        self.store.clone()
    }

    /// A store with a connection of its own to the same file, made when the backend
    /// started.
    fn store_of_another_instance(&self) -> SqliteStore {
        self.other.clone()
    }
}

redis_backend!(
    /// [`RedisStore`] through Redis Sentinel, on the master of a set of its own (a master, a
    /// replica, three Sentinels).
    SentinelBackend {
        /// The master, the replica and the Sentinels.
        sentinels: RedisSentinels
    },
    RedisStore::builder()
);
