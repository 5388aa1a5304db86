//! The harness of idem's cross-crate tests, and of the benchmarks in `bench/`.
//!
//! Tests that need Redis run against a real `redis-server` this harness starts itself
//! ([`RedisServer`], [`RedisCluster`]): its own port, its own data directory, no
//! persistence, killed when the test ends. Tests that need PostgreSQL likewise start a
//! real server of their own ([`PostgresServer`]); SQLite is a file in a temporary
//! directory. A missing binary fails the test with a message that says how to install
//! it; nothing is skipped.
//!
//! [`Backend`] gives a suite one store of each kind, so the same test runs against every
//! store. [`ServerProcess`] runs a server binary (an example's) as a process of its own,
//! for tests that kill it.
//!
//! [`chaos`] is the chaos run: several instances of a purpose-built server on one Redis
//! set-up or one PostgreSQL, duplicates of every guarded kind sent to them while the
//! store, the instances and the link between them fail, and the executions counted from
//! the servers' ledgers.

mod backend;
mod bench_stores;
pub mod chaos;
mod contention;
mod counting;
mod forwarder;
mod held_lock;
mod helper_process;
mod http;
mod postgres_server;
mod redis_sentinel;
mod redis_server;
mod server_process;
mod sql_database;
mod timing;

pub use backend::{
    AnyMemoryBackend, ClusterBackend, MemoryBackend, PostgresBackend, RedisBackend,
    RedisScriptAcquireBackend, SentinelBackend, SqliteBackend,
};
pub use bench_stores::BenchStores;
pub use contention::a_hundred_contenders_never_overlap;
pub use counting::Counting;
pub use forwarder::Forwarder;
pub use held_lock::hold_fenced;
pub use helper_process::{run_helper_process, spawn_piped};
pub use http::{
    Answer, CLIENT, Shop, answer, assert_created_or_in_progress, assert_ran_once,
    assert_refused_page, body_text, count, form_token_in, from_loopback, post_as, problem_code,
    refusal_code, send, shop_on, shop_on_two_instances, u64_field,
};
pub use idem_core::conformance::{Backend, all_at_once, eventually};
pub use postgres_server::{PostgresServer, postgres_bin_dir, postgres_url};
pub use redis_sentinel::{MASTER_NAME, RedisSentinels};
pub use redis_server::{
    RedisCluster, RedisServer, lazy_store, redis_server_binary, unreachable_redis_store,
    unused_port,
};
pub use server_process::{HttpClient, ServerProcess, http_client, send_over_tcp, workspace_binary};
pub use sql_database::{BoxFuture, SqlDatabase, Statements};
pub use timing::{median, micros_since_epoch, percentile};

/// Generates each case — an `async fn case<B: Backend>()` in the calling module — once per
/// store, as a `#[tokio::test]` in a module named after the store (`memory`, `redis`), so
/// an HTTP suite runs every case against `MemoryStore` and a real Redis.
///
/// With `shop_on(app):` before the cases, each is an `async fn case(shop: Shop, app:
/// Router)` instead, given what [`shop_on`]`(app)` makes on a fresh store: the opening
/// most cases share, written once.
#[macro_export]
macro_rules! on_every_store {
    (@tests [] $backend:ty, $($case:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                super::$case::<$backend>().await;
            }
        )+
    };
    (@tests [shop_on($app:ident)] $backend:ty, $($case:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let (_backend, shop, app) = $crate::shop_on::<$backend>(super::$app).await;
                super::$case(shop, app).await;
            }
        )+
    };
    (@stores [$($start:tt)*] $($case:ident),+) => {
        mod memory {
            $crate::on_every_store!(@tests [$($start)*] $crate::MemoryBackend, $($case),+);
        }
        mod redis {
            $crate::on_every_store!(@tests [$($start)*] $crate::RedisBackend, $($case),+);
        }
    };
    (shop_on($app:ident): $($case:ident),+ $(,)?) => {
        $crate::on_every_store!(@stores [shop_on($app)] $($case),+);
    };
    ($($case:ident),+ $(,)?) => {
        $crate::on_every_store!(@stores [] $($case),+);
    };
}

/// The repository README's examples, its quick start among them, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct RepositoryReadme;
