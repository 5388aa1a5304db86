//! The fair-lock conformance suite (`idem_core::conformance::fair`) on every store of this
//! repository that implements `FairStore`: `MemoryStore`; `RedisStore` on a standalone
//! server and on a three-master Redis Cluster (where a release computes the head's wake-up
//! list inside its script: the case that wakes the head checks that it stays in the lock's
//! slot); and `PostgresStore` and `SqliteStore`, whose queue is a table and whose waiters
//! poll (the case that wakes the head checks that only the head sees its turn).

mod memory {
    idem_core::fair_store_conformance!(idem_tests::MemoryBackend);
}

mod redis {
    idem_core::fair_store_conformance!(idem_tests::RedisBackend);
}

mod redis_cluster {
    idem_core::fair_store_conformance!(idem_tests::ClusterBackend);
}

mod postgres {
    idem_core::fair_store_conformance!(idem_tests::PostgresBackend);
}

mod sqlite {
    idem_core::fair_store_conformance!(idem_tests::SqliteBackend);
}
