//! How many commands an operation costs.

use std::collections::BTreeMap;

use idem_core::{Acquire, Fencing, Key, Owner, RedisStore, Store};
use idem_tests::RedisServer;

use crate::{LONG, key};

#[tokio::test]
async fn the_accept_path_costs_one_command() {
    let server = RedisServer::start();
    let store = server.store();
    // Open the connection and load the release script first: neither is the accept path.
    store
        .release(&key("warm-up"), &Owner::random())
        .await
        .unwrap();

    let owners: Vec<(Key, Owner)> = (0..100)
        .map(|i| (Key::hashed([format!("k{i}")]), Owner::random()))
        .collect();
    let before = server.command_calls();
    for (k, owner) in &owners {
        store.acquire(k, owner, LONG, Fencing::Off).await.unwrap();
    }
    assert_eq!(
        server.command_calls_since(&before),
        BTreeMap::from([("set".to_owned(), 100)])
    );

    for (k, _) in &owners {
        store.put_token(k, k, LONG, 16).await.unwrap();
    }
    // Load the spending script first: that is not the accept path either.
    let warm_up = key("warm-up");
    assert!(!store.consume_token(&warm_up, &warm_up).await.unwrap());
    let before = server.command_calls();
    for (k, _) in &owners {
        assert!(store.consume_token(k, k).await.unwrap());
    }
    // One EVALSHA each (one round trip); the script's own commands show too.
    assert_eq!(
        server.command_calls_since(&before),
        BTreeMap::from([
            ("evalsha".to_owned(), 100),
            ("time".to_owned(), 100),
            ("zrem".to_owned(), 200),
            ("zscore".to_owned(), 100),
        ])
    );

    let before = server.command_calls();
    for (k, owner) in &owners {
        assert!(store.release(k, owner).await.unwrap());
    }
    // One EVALSHA each; the script's own GET and DEL show in the statistics too.
    assert_eq!(
        server.command_calls_since(&before),
        BTreeMap::from([
            ("del".to_owned(), 100),
            ("evalsha".to_owned(), 100),
            ("get".to_owned(), 100)
        ])
    );
}

/// Servers before Redis 7.0 refuse `SET … NX … GET`; there `acquire` runs one script doing
/// the same. Forced here on a newer server: one `EVALSHA` per acquisition, whose `GET` and
/// `SET` count too, and never a `SET … GET` of its own.
#[tokio::test]
async fn before_redis_7_acquire_is_one_script() {
    let server = RedisServer::start();
    let store = server.store_with(RedisStore::builder().with_script_acquire(true));
    let owner = Owner::random();
    // Opens the connection, checks the server and loads the script.
    store
        .acquire(&key("warm-up"), &owner, LONG, Fencing::Off)
        .await
        .unwrap();

    let keys: Vec<Key> = (0..100).map(|i| key(&format!("k{i}"))).collect();
    let before = server.command_calls();
    for k in &keys {
        assert_eq!(
            store.acquire(k, &owner, LONG, Fencing::Off).await.unwrap(),
            Acquire::Acquired { fence: None }
        );
    }
    assert_eq!(
        server.command_calls_since(&before),
        BTreeMap::from([
            ("evalsha".to_owned(), 100),
            ("get".to_owned(), 100),
            ("set".to_owned(), 100)
        ])
    );
}
