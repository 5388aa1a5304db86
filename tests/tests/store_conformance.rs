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

/// A module per store, named first, running each suite listed on the store's backend.
macro_rules! suites {
    ($($module:ident: $backend:ident => $($suite:ident),+;)*) => {
        $(mod $module {
            $(idem_core::$suite!(idem_tests::$backend);)+
        })*
    };
}

suites! {
    memory: MemoryBackend => store_conformance, fair_store_conformance;
    any_store: AnyMemoryBackend => store_conformance;
    redis: RedisBackend => store_conformance, fair_store_conformance;
    redis_sentinel: SentinelBackend => store_conformance;
    redis_cluster: ClusterBackend => store_conformance, fair_store_conformance;
    postgres: PostgresBackend => store_conformance, fair_store_conformance;
    sqlite: SqliteBackend => store_conformance, fair_store_conformance;
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
