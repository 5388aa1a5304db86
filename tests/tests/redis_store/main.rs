//! What only `RedisStore` has to get right: outages and timeouts, reconnecting, reloading
//! scripts, its key layout and namespaces, Redis Cluster slots, and how many commands an
//! operation costs.
//!
//! One module per topic; this file holds the settings and the helpers they share.

mod command_cost;
mod connections;
mod eviction;
mod failover;
mod key_layout;
mod outages;
mod replay_cache;
mod tls;

use std::time::Duration;

use idem_core::store::Fencing;
use idem_core::{Acquire, Key, LockStore, Owner, StoreError};
// `RedisServer` is the harness's server process; idem-redis' names where a store finds it.
use idem_redis::RedisServer as Server;
use idem_redis::RedisStore;

const TIMEOUT: Duration = Duration::from_millis(300);

/// What the issue allows on top of the store's timeout before a call must have returned.
const SLACK: Duration = Duration::from_millis(100);

const LONG: Duration = Duration::from_secs(60);

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// Acquires `name` for a new owner, unfenced, for [`LONG`]: a store's first use, or a
/// check that it answers.
async fn acquire_anew(store: &RedisStore, name: &str) -> Result<Acquire, StoreError> {
    store
        .acquire(&key(name), &Owner::random(), LONG, Fencing::Off)
        .await
}
