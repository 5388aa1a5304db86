//! How many commands an operation costs.

use std::collections::BTreeMap;

use bytes::Bytes;
use idem_core::store::Fencing;
use idem_core::{Acquire, Begin, Fingerprint, Key, LockStore, Owner, RecordStore, TokenStore};
use idem_redis::RedisStore;
use idem_tests::RedisServer;

use crate::{LONG, calls, commands_during, key};

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
    // Spent again (the second post of a double click): a look, no clock and no removal,
    // in the token's bucket and then in its bucket of before the buckets were placed.
    let respends = async {
        for (k, _) in &owners {
            assert!(!store.consume_token(k, k).await.unwrap());
        }
    };
    assert_eq!(
        commands_during(&server, respends).await,
        calls([("evalsha", 200), ("zscore", 200)])
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

/// The commands of 100 first requests on `store`, each beginning a record of its own
/// (named after `prefix`) and completing it; one before them loads the script.
async fn first_requests(
    server: &RedisServer,
    store: &RedisStore,
    prefix: &str,
) -> BTreeMap<String, u64> {
    let fingerprint = Fingerprint::of(["POST", "/payments", "", "{}"]);
    let first_request = |name: String| async move {
        let (k, owner) = (key(&name), Owner::random());
        let begun = store.begin_record(&k, &owner, &fingerprint, LONG).await;
        assert_eq!(begun.unwrap(), Begin::Started);
        let response = Bytes::from_static(b"200 ok");
        assert!(
            store
                .complete_record(&k, &owner, response, LONG)
                .await
                .unwrap()
        );
    };
    first_request(format!("{prefix}-warm-up")).await;
    let requests = async {
        for i in 0..100 {
            first_request(format!("{prefix}-{i}")).await;
        }
    };
    commands_during(server, requests).await
}

/// A first request of `IdempotencyLayer`: its begin is the one command
/// `SET record <in progress> NX PX lease GET`, its completion one script whose only calls
/// are the `GET` that checks the owner and the `SET` that stores the response.
#[tokio::test]
async fn a_first_request_is_one_command_and_one_script_of_two_calls() {
    let server = RedisServer::start();
    let store = server.store();
    assert_eq!(
        first_requests(&server, &store, "set").await,
        calls([("evalsha", 100), ("get", 100), ("set", 200)])
    );
    // Before Redis 7.0 (forced here) the begin is a script doing the same `GET` and `SET`.
    let scripted = server.store_with(RedisStore::builder().with_script_acquire(true));
    assert_eq!(
        first_requests(&server, &scripted, "script").await,
        calls([("evalsha", 200), ("get", 200), ("set", 200)])
    );
}

/// Two records of `owner`, for `fp`: `done` completed with `stored`, `running` begun.
async fn a_done_and_a_running_record(store: &RedisStore, owner: &Owner, fp: &Fingerprint) {
    let (done, running) = (key("done"), key("running"));
    for k in [&done, &running] {
        let begun = store.begin_record(k, owner, fp, LONG).await.unwrap();
        assert_eq!(begun, Begin::Started);
    }
    let response = Bytes::from_static(b"stored");
    let completed = store.complete_record(&done, owner, response, LONG).await;
    assert!(completed.unwrap());
}

/// A record found costs its `SET … GET` alone, but one in progress, whose time left is
/// a `PTTL` more.
#[tokio::test]
async fn a_record_found_is_one_command() {
    let server = RedisServer::start();
    // Without the copy of replayed records, which would answer the replay itself.
    let store = server.store_with(RedisStore::builder().with_replay_cache(0));
    let (fp, other) = (Fingerprint::of(["a"]), Fingerprint::of(["b"]));
    a_done_and_a_running_record(&store, &Owner::random(), &fp).await;
    let (done, running) = (key("done"), key("running"));
    let cases = [
        (&done, &fp, calls([("set", 1)])),
        (&done, &other, calls([("set", 1)])),
        (&running, &other, calls([("set", 1)])),
        (&running, &fp, calls([("pttl", 1), ("set", 1)])),
    ];
    let mut answers = Vec::new();
    for (k, fingerprint, sent) in cases {
        let before = server.command_calls();
        let owner = Owner::random();
        answers.push(
            store
                .begin_record(k, &owner, fingerprint, LONG)
                .await
                .unwrap(),
        );
        let since = server.command_calls_since(&before);
        assert_eq!(since, sent, "{k:?} {fingerprint:?}");
    }
    assert!(
        matches!(
            answers.as_slice(),
            [
                Begin::Completed { response },
                Begin::Mismatch,
                Begin::Mismatch,
                Begin::InProgress { .. },
            ] if response == "stored"
        ),
        "{answers:?}"
    );
}

/// Renewing and abandoning a record are a script of two calls each: the `GET` that checks
/// the owner, and the change.
#[tokio::test]
async fn renewing_or_abandoning_a_record_is_one_script_of_two_calls() {
    let server = RedisServer::start();
    let store = server.store();
    let owner = Owner::random();
    a_done_and_a_running_record(&store, &owner, &Fingerprint::of(["a"])).await;
    // Load the renewing and abandoning scripts.
    let warm_up = key("warm-up");
    assert!(!store.renew_record(&warm_up, &owner, LONG).await.unwrap());
    assert!(!store.abandon_record(&warm_up, &owner).await.unwrap());

    let running = key("running");
    let renew = async { assert!(store.renew_record(&running, &owner, LONG).await.unwrap()) };
    assert_eq!(
        commands_during(&server, renew).await,
        calls([("evalsha", 1), ("get", 1), ("pexpire", 1)])
    );
    let abandon = async { assert!(store.abandon_record(&running, &owner).await.unwrap()) };
    assert_eq!(
        commands_during(&server, abandon).await,
        calls([("del", 1), ("evalsha", 1), ("get", 1)])
    );
}
