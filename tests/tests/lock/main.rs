//! The distributed lock suite: every case runs against `MemoryStore`, `MemoryStore` behind
//! `AnyStore`, `RedisStore` on a standalone server, and `RedisStore` on a three-master
//! Redis Cluster. A holder process killed with `SIGKILL` is a Redis-only case: an
//! in-memory lock dies with its process.
//!
//! One module per topic, each listing its cases for every backend; this file holds the
//! suite's macro and what the cases share.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_core::lock::{Fenced, FencingMode, Unfenced};
use idem_core::{Key, Lock, LockStore, Owner, Store};
use idem_tests::{AnyMemoryBackend, Backend, ClusterBackend, MemoryBackend, RedisBackend};

const LONG: Duration = Duration::from_secs(60);

/// Each case, generated once per backend in a module named after it:
/// `lock_suite!(case, …)` lists `async` cases, each given the backend started for it and
/// run as `#[tokio::test]` on a multi-threaded runtime; `lock_suite!(sync: [case, …])`
/// cases that build the runtime (and start the backend) they need, run as plain tests.
macro_rules! lock_suite {
    (sync: [$($sync_case:ident),* $(,)?]) => {
        lock_suite!(@backends [], [$($sync_case),*]);
    };
    ($($case:ident),* $(,)?) => {
        lock_suite!(@backends [$($case),*], []);
    };
    (@backends [$($case:ident),*], [$($sync_case:ident),*]) => {
        lock_suite!(@backend memory, MemoryBackend, [$($case),*], [$($sync_case),*]);
        lock_suite!(@backend any_store, AnyMemoryBackend, [$($case),*], [$($sync_case),*]);
        lock_suite!(@backend redis, RedisBackend, [$($case),*], [$($sync_case),*]);
        lock_suite!(@backend redis_cluster, ClusterBackend, [$($case),*], [$($sync_case),*]);
    };
    (@backend $module:ident, $backend:ident, [$($case:ident),*], [$($sync_case:ident),*]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case(<crate::$backend as idem_tests::Backend>::start().await).await;
                }
            )*
            $(
                #[test]
                fn $sync_case() {
                    super::$sync_case::<crate::$backend>();
                }
            )*
        }
    };
}

/// The body of a case that holds in both modes: `$check` on `$backend` with a plain lock,
/// then with a fenced one, each on a lock name of its own (`$name-plain`, `$name-fenced`).
macro_rules! in_both_modes {
    ($check:ident, $backend:ident, $name:literal) => {{
        $check::<B, Unfenced>(&$backend, concat!($name, "-plain")).await;
        $check::<B, Fenced>(&$backend, concat!($name, "-fenced")).await;
    }};
}

mod contention;
mod fencing;
mod holding;
mod killed_holder;
mod reentry;
mod runtimes;
mod wake_ups;
mod watchdog;

/// What the lock cases need beyond a store: the Redis servers behind it, to look at what
/// they did and to tamper with the lock behind its holder's back.
trait LockBackend: Backend {
    /// The URLs of the Redis nodes; none for memory.
    fn urls(&self) -> Vec<String>;
}

impl LockBackend for MemoryBackend {
    fn urls(&self) -> Vec<String> {
        Vec::new()
    }
}

impl LockBackend for AnyMemoryBackend {
    fn urls(&self) -> Vec<String> {
        Vec::new()
    }
}

impl LockBackend for RedisBackend {
    fn urls(&self) -> Vec<String> {
        vec![self.server.url()]
    }
}

impl LockBackend for ClusterBackend {
    fn urls(&self) -> Vec<String> {
        self.cluster.urls()
    }
}

fn redis_connection(url: &str) -> ::redis::Connection {
    ::redis::Client::open(url)
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .unwrap_or_else(|error| panic!("a connection to {url}: {error}"))
}

/// One `INFO` section of every node, as `name → summed number`.
fn info_numbers(backend: &impl LockBackend, section: &str) -> BTreeMap<String, u64> {
    let mut numbers = BTreeMap::new();
    for url in backend.urls() {
        let info: String = ::redis::cmd("INFO")
            .arg(section)
            .query(&mut redis_connection(&url))
            .expect("INFO");
        for line in info.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            // `cmdstat_set:calls=3,usec=…` counts calls; other sections are `name:number`.
            let value = value
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))
                .unwrap_or(value);
            if let Ok(value) = value.trim().parse::<u64>() {
                *numbers.entry(name.to_owned()).or_default() += value;
            }
        }
    }
    numbers
}

/// Calls of every command the servers ran (scripts' own commands included), without the
/// `INFO` that read them.
fn command_calls(backend: &impl LockBackend) -> BTreeMap<String, u64> {
    info_numbers(backend, "commandstats")
        .into_iter()
        .filter_map(|(name, calls)| Some((name.strip_prefix("cmdstat_")?.to_owned(), calls)))
        .filter(|(name, _)| name != "info")
        .collect()
}

/// Clients blocked in `BLPOP` across the servers; `None` for memory.
fn blocked_clients(backend: &impl LockBackend) -> Option<u64> {
    (!backend.urls().is_empty())
        .then(|| {
            info_numbers(backend, "clients")
                .get("blocked_clients")
                .copied()
        })
        .map(Option::unwrap_or_default)
}

/// Deletes the lock behind its holder's back: `DEL` in Redis (sent to every node; those
/// that do not own the slot refuse it), the owner's own release in memory.
async fn delete_behind_its_back<B: LockBackend>(backend: &B, key: &Key, owner: &Owner) {
    let urls = backend.urls();
    if urls.is_empty() {
        assert!(backend.store().release(key, owner).await.unwrap());
        return;
    }
    let redis_key = format!("idem:{{{key}}}:lock");
    let deleted: i64 = urls
        .iter()
        .filter_map(|url| {
            ::redis::cmd("DEL")
                .arg(&redis_key)
                .query::<i64>(&mut redis_connection(url))
                .ok()
        })
        .sum();
    assert_eq!(deleted, 1, "the lock's key was there to delete");
}

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

async fn is_free(store: &impl Store, key: &Key) -> bool {
    store.remaining(key).await.expect("remaining").is_none()
}

/// How a case makes its locks: the plain lock [`Lock::new`] gives, or a fenced one. Cases
/// that hold in both modes run once with each, on lock names of their own.
trait Mode: FencingMode + Sized {
    fn make<S: Store>(lock: Lock<S>) -> Lock<S, Self>;
}

impl Mode for Unfenced {
    fn make<S: Store>(lock: Lock<S>) -> Lock<S> {
        lock
    }
}

impl Mode for Fenced {
    fn make<S: Store>(lock: Lock<S>) -> Lock<S, Fenced> {
        lock.fenced()
    }
}
