//! How many commands an operation costs.

use std::collections::BTreeMap;

use idem_core::store::Fencing;
use idem_core::{Acquire, Key, LockStore, Owner, TokenStore};
use idem_redis::RedisStore;
use idem_tests::RedisServer;

use crate::{LONG, key};

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

/// What 100 acquisitions of free locks by one owner answered, `fencing` or not, and the
/// commands `server` ran for them; a first acquisition before them opens the connection
/// and loads any script.
async fn acquiring_100_free_locks(
    server: &RedisServer,
    store: &RedisStore,
    fencing: Fencing,
) -> (Vec<Acquire>, BTreeMap<String, u64>) {
    let owner = Owner::random();
    store
        .acquire(&key("warm-up"), &owner, LONG, fencing)
        .await
        .unwrap();
    let keys: Vec<Key> = (0..100).map(|i| key(&format!("k{i}"))).collect();
    let mut answers = Vec::new();
    let acquires = async {
        for k in &keys {
            answers.push(store.acquire(k, &owner, LONG, fencing).await.unwrap());
        }
    };
    let commands = commands_during(server, acquires).await;
    (answers, commands)
}

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
    let acquires = async {
        for (k, owner) in &owners {
            store.acquire(k, owner, LONG, Fencing::Off).await.unwrap();
        }
    };
    assert_eq!(
        commands_during(&server, acquires).await,
        calls([("set", 100)])
    );

    for (k, _) in &owners {
        store.put_token(k, k, LONG, 16).await.unwrap();
    }
    // Load the spending script first: that is not the accept path either.
    let warm_up = key("warm-up");
    assert!(!store.consume_token(&warm_up, &warm_up).await.unwrap());
    let spends = async {
        for (k, _) in &owners {
            assert!(store.consume_token(k, k).await.unwrap());
        }
    };
    // One EVALSHA each (one round trip); the script's own commands show too.
    assert_eq!(
        commands_during(&server, spends).await,
        calls([
            ("evalsha", 100),
            ("time", 100),
            ("zrem", 200),
            ("zscore", 100)
        ])
    );

    let releases = async {
        for (k, owner) in &owners {
            assert!(store.release(k, owner).await.unwrap());
        }
    };
    // One EVALSHA each; the script's own GET and DEL show in the statistics too.
    assert_eq!(
        commands_during(&server, releases).await,
        calls([("del", 100), ("evalsha", 100), ("get", 100)])
    );
}

/// Servers before Redis 7.0 refuse `SET … NX … GET`; there `acquire` runs one script doing
/// the same. Forced here on a newer server: one `EVALSHA` per acquisition, whose `GET` and
/// `SET` count too, and never a `SET … GET` of its own.
#[tokio::test]
async fn before_redis_7_acquire_is_one_script() {
    let server = RedisServer::start();
    let store = server.store_with(RedisStore::builder().with_script_acquire(true));
    let (answers, commands) = acquiring_100_free_locks(&server, &store, Fencing::Off).await;
    assert!(
        answers
            .iter()
            .all(|answer| *answer == Acquire::Acquired { fence: None }),
        "{answers:?}"
    );
    assert_eq!(
        commands,
        calls([("evalsha", 100), ("get", 100), ("set", 100)])
    );
}

/// A fenced acquisition of a free lock is one `EVALSHA` calling `SET … NX` and `INCR`
/// only (no `GET` before the `SET`), and the script answers with the bare token: a table
/// reply costs Redis more than a call, and this is the fenced lock's common path.
#[tokio::test]
async fn a_fenced_acquisition_is_one_script_of_two_calls() {
    let server = RedisServer::start();
    let store = server.store();
    let (answers, commands) = acquiring_100_free_locks(&server, &store, Fencing::On).await;
    assert!(
        answers
            .iter()
            .all(|answer| matches!(answer, Acquire::Acquired { fence: Some(_) })),
        "{answers:?}"
    );
    assert_eq!(
        commands,
        calls([("evalsha", 100), ("incr", 100), ("set", 100)])
    );

    let script = include_str!("../../../idem-redis/src/scripts/acquire_fenced.lua");
    let answer = server.command(&[
        "EVAL",
        script,
        "2",
        "{free}:lock",
        "{free}:fence",
        "me",
        "30000",
    ]);
    assert_eq!(answer, redis::Value::Int(1), "the first token, bare");
}
