//! What only `RedisStore` has to get right: outages and timeouts, reconnecting, reloading
//! scripts, its key layout and namespaces, Redis Cluster slots, how it lays out an
//! idempotency record, and how many commands an operation costs.
//!
//! One module per topic; this file holds the settings and the helpers they share.

mod command_cost;
mod connections;
mod eviction;
mod failover;
mod key_layout;
mod outages;
mod records;
mod replay_cache;
mod tls;

use std::collections::BTreeMap;
use std::time::Duration;

use idem_core::store::Fencing;
use idem_core::{Acquire, Key, LockStore, Owner, StoreError};
// `RedisServer` is the harness's server process; idem-redis' names where a store finds it.
use idem_redis::RedisServer as Server;
use idem_redis::RedisStore;
use idem_tests::RedisServer;

const TIMEOUT: Duration = Duration::from_millis(300);

/// What the issue allows on top of the store's timeout before a call must have returned.
const SLACK: Duration = Duration::from_millis(100);

const LONG: Duration = Duration::from_secs(60);

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// The commands `server` ran while `work` ran, by name.
async fn commands_during(
    server: &RedisServer,
    work: impl Future<Output = ()>,
) -> BTreeMap<String, u64> {
    let before = server.command_calls();
    work.await;
    server.command_calls_since(&before)
}

/// Command counts by name, as [`commands_during`] answers them.
fn calls<const N: usize>(counts: [(&str, u64); N]) -> BTreeMap<String, u64> {
    counts
        .into_iter()
        .map(|(name, count)| (name.to_owned(), count))
        .collect()
}

/// Acquires `name` for a new owner, unfenced, for [`LONG`]: a store's first use, or a
/// check that it answers.
async fn acquire_anew(store: &RedisStore, name: &str) -> Result<Acquire, StoreError> {
    store
        .acquire(&key(name), &Owner::random(), LONG, Fencing::Off)
        .await
}
