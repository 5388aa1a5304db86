//! The store conformance suite (`idem_core::conformance`) on every store of this
//! repository: `MemoryStore`, `MemoryStore` behind `AnyStore`, `RedisStore` on a
//! standalone server and on a three-master Redis Cluster, `PostgresStore` on a PostgreSQL
//! server and `SqliteStore` on a database file; the cases that acquire also run against
//! `RedisStore` taking keys the way it does on servers before Redis 7.0.
//!
//! The stores that implement `FairStore` (all but `AnyStore`) also run the fair-lock
//! cases (`idem_core::conformance::fair`). On Redis Cluster they check that a release,
//! which names the head's wake-up list inside its script, stays in the lock's slot; the
//! SQL stores (PostgreSQL woken by `NOTIFY`, SQLite polling) pass the same cases.

mod memory {
    idem_core::store_conformance!(idem_tests::MemoryBackend);
    idem_core::fair_store_conformance!(idem_tests::MemoryBackend);
}

mod any_store {
    idem_core::store_conformance!(idem_tests::AnyMemoryBackend);
}

mod redis {
    idem_core::store_conformance!(idem_tests::RedisBackend);
    idem_core::fair_store_conformance!(idem_tests::RedisBackend);
}

mod redis_sentinel {
    idem_core::store_conformance!(idem_tests::SentinelBackend);
}

mod redis_cluster {
    idem_core::store_conformance!(idem_tests::ClusterBackend);
    idem_core::fair_store_conformance!(idem_tests::ClusterBackend);
}

mod postgres {
    idem_core::store_conformance!(idem_tests::PostgresBackend);
    idem_core::fair_store_conformance!(idem_tests::PostgresBackend);
}

mod sqlite {
    idem_core::store_conformance!(idem_tests::SqliteBackend);
    idem_core::fair_store_conformance!(idem_tests::SqliteBackend);
}

mod redis_script_acquire {
    idem_core::store_conformance!(
        idem_tests::RedisScriptAcquireBackend:
        one_winner_among_1000_concurrent_acquires,
        a_non_owner_cannot_release_or_renew,
        the_owner_releases_and_renews,
        the_same_owner_reenters_without_changing_the_hold,
        expiry_frees_a_lock,
        locks_tokens_and_records_do_not_collide,
    );
}
