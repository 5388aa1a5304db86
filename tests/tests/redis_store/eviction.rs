//! Eviction: the server's eviction policy, checked when the store connects, and the
//! store's own token capacity, which evicts the oldest tokens.

use std::time::Duration;

use idem_core::{Acquire, Key, StoreError, TokenStore};
use idem_redis::{EvictionCheck, RedisSetupError, RedisStore, RedisStoreBuilder};
use idem_tests::{RedisCluster, RedisServer, eventually, lazy_store};

use crate::{LONG, Server, TIMEOUT, acquire_anew, key};

/// A store builder set to refuse a server that may evict keys.
fn refusing() -> RedisStoreBuilder {
    RedisStore::builder()
        .with_timeout(TIMEOUT)
        .with_eviction_policy_check(EvictionCheck::Refuse)
}

/// A store set to refuse a server that may evict keys, connected to `server`.
async fn connect_refusing(server: &RedisServer) -> Result<RedisStore, RedisSetupError> {
    refusing().connect(Server::url(server.url())).await
}

/// Checks that `store` takes a new key `name`.
async fn assert_acquires(store: &RedisStore, name: &str) {
    assert!(matches!(
        acquire_anew(store, name).await.unwrap(),
        Acquire::Acquired { .. }
    ));
}

#[tokio::test]
async fn a_server_that_may_evict_keys_is_refused_when_set_to() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let connected = connect_refusing(&server).await;
    match connected {
        Err(error @ RedisSetupError::EvictionPolicy { .. }) => {
            assert!(error.to_string().contains("allkeys-lru"), "{error}");
        }
        other => panic!("expected the policy to be refused, got {other:?}"),
    }

    // Built lazily, the store refuses on first use instead, and writes nothing.
    let lazy = lazy_store(refusing(), Server::url(server.url()));
    for _ in 0..3 {
        let acquired = acquire_anew(&lazy, "evictable").await;
        assert!(
            matches!(
                acquired.as_ref().map_err(StoreError::backend_error::<RedisSetupError>),
                Err(Some(RedisSetupError::EvictionPolicy { policy })) if policy == "allkeys-lru"
            ),
            "{acquired:?}"
        );
    }
    assert_eq!(server.keys(), Vec::<String>::new());

    // Once the server is set right, the same store uses it.
    server.command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    eventually(
        Duration::from_secs(5),
        "the server is used again",
        || async { acquire_anew(&lazy, "evictable").await.is_ok() },
    )
    .await;
}

#[tokio::test]
async fn a_server_that_may_evict_keys_is_used_with_a_warning_by_default() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let store = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .connect(Server::url(server.url()))
        .await
        .expect("warned, not refused");
    assert_acquires(&store, "warned").await;
}

#[tokio::test]
async fn a_noeviction_server_passes_the_check() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let store = connect_refusing(&server).await.expect("noeviction passes");
    assert_acquires(&store, "kept").await;
}

/// As on managed services that disable `CONFIG`: the policy cannot be read, so the check
/// is skipped (and logged), even when set to refuse.
#[tokio::test]
async fn a_server_that_will_not_tell_its_policy_is_used() {
    let server = RedisServer::start_with(&[
        "--maxmemory-policy",
        "allkeys-lru",
        "--rename-command",
        "CONFIG",
        "",
    ]);
    let store = connect_refusing(&server)
        .await
        .expect("an unreadable policy is not a refusal");
    assert_acquires(&store, "unchecked").await;
}

/// Every primary is checked: one node that may evict is enough to refuse the cluster.
#[tokio::test]
async fn a_cluster_with_one_evicting_primary_is_refused_when_set_to() {
    let cluster = RedisCluster::start();
    let pool = || {
        deadpool_redis::cluster::Config::from_urls(cluster.urls())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap()
    };
    let refuse = || {
        RedisStore::builder()
            .with_timeout(Duration::from_secs(2))
            .with_eviction_policy_check(EvictionCheck::Refuse)
    };
    refuse()
        .connect(Server::cluster(pool()))
        .await
        .expect("every primary is noeviction");

    cluster.nodes()[2].command(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
    let connected = refuse().connect(Server::cluster(pool())).await;
    assert!(
        matches!(&connected, Err(RedisSetupError::EvictionPolicy { policy }) if policy == "volatile-ttl"),
        "{connected:?}"
    );
}

/// Puts a token for each of `clients` throwaway clients (`{prefix}-{i}`) at once; not one
/// put may fail for lack of room.
async fn flood(store: &RedisStore, prefix: &str, clients: usize) {
    let puts = idem_tests::all_at_once(clients, |i| {
        let (store, client) = (store.clone(), key(&format!("{prefix}-{i}")));
        async move { store.put_token(&client, &client, LONG, 16).await }
    });
    for put in puts.await {
        put.expect("a put never fails for lack of room");
    }
}

/// Puts a token for the client `name`, in a scope of its own; the client's key.
async fn put_own_token(store: &RedisStore, name: &str) -> Key {
    let client = key(name);
    store.put_token(&client, &client, LONG, 16).await.unwrap();
    client
}

/// Asserts that a client coming after a flood can put a token and spend it.
async fn assert_a_late_token_is_spent(store: &RedisStore) {
    let late = put_own_token(store, "late-client").await;
    assert!(store.consume_token(&late, &late).await.unwrap());
}

/// A flood of tokens from throwaway clients stays within the token capacity: the oldest
/// are evicted, every put succeeds, and a token issued after the flood is spent as usual.
#[tokio::test]
async fn a_token_flood_stays_within_the_token_capacity() {
    let server = RedisServer::start();
    let store = server.store_with(RedisStore::builder().with_token_capacity(640));
    let first = put_own_token(&store, "first-client").await;
    for batch in 0..20 {
        flood(&store, &format!("throwaway-{batch}"), 500).await;
    }
    let held: usize = server
        .keys()
        .iter()
        .filter(|key| key.ends_with(":all"))
        .map(|key| server.query::<usize>(&["ZCARD", key]))
        .sum();
    assert!(held <= 640, "{held} tokens held");
    assert!(held >= 600, "the budget is used, not emptied: {held}");
    let scopes = server
        .keys()
        .iter()
        .filter(|k| k.contains(":scope:"))
        .count();
    assert_eq!(scopes, held, "an evicted token leaves its scope too");
    assert!(
        !store.consume_token(&first, &first).await.unwrap(),
        "the oldest token was evicted"
    );
    assert_a_late_token_is_spent(&store).await;
}

/// In a cluster too: evicting a token reaches into the set of the scope it belonged to,
/// which the script finds by name in its bucket's slot.
#[tokio::test]
async fn in_a_cluster_a_token_flood_evicts_within_each_bucket() {
    let cluster = RedisCluster::start();
    let store = cluster.store_with(RedisStore::builder().with_token_capacity(128));
    let first = put_own_token(&store, "first-client").await;
    flood(&store, "throwaway", 2_000).await;
    let scopes = cluster
        .keys_by_node()
        .iter()
        .filter(|(_, key)| key.contains(":scope:"))
        .count();
    assert!(scopes <= 128, "{scopes} scopes hold tokens");
    assert!(
        !store.consume_token(&first, &first).await.unwrap(),
        "evicted"
    );
    assert_a_late_token_is_spent(&store).await;
}
