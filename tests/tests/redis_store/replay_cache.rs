//! The process's copy of completed idempotency records it replayed.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use idem_core::{Begin, Fingerprint, Key, Owner, RecordStore};
use idem_redis::RedisStore;
use idem_tests::{RedisServer, eventually};

use crate::{LONG, calls, key};

/// What `begin_record` answers a new attempt at `k` with `fp`.
async fn begin(store: &RedisStore, k: &Key, fp: &Fingerprint) -> Begin {
    store
        .begin_record(k, &Owner::random(), fp, LONG)
        .await
        .unwrap()
}

/// Completes the record `k` for `fp` with `response`, kept for `retention`.
async fn complete(
    store: &RedisStore,
    k: &Key,
    fp: &Fingerprint,
    response: &'static [u8],
    retention: Duration,
) {
    let owner = Owner::random();
    assert_eq!(
        store.begin_record(k, &owner, fp, LONG).await.unwrap(),
        Begin::Started
    );
    assert!(
        store
            .complete_record(k, &owner, Bytes::from_static(response), retention)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_replayed_record_is_answered_again_without_a_round_trip() {
    let server = RedisServer::start();
    let (cached, uncached) = (
        server.store(),
        server.store_with(RedisStore::builder().with_replay_cache(0)),
    );
    let (k, fp, other) = (
        key("replayed"),
        Fingerprint::of(["body"]),
        Fingerprint::of(["another body"]),
    );
    complete(&cached, &k, &fp, b"stored", LONG).await;
    let completed = Begin::Completed {
        response: Bytes::from_static(b"stored"),
    };
    // The first replay asks Redis, on both stores: the `SET … NX … GET` that finds the
    // record and, only for the store that copies it, the record's time left, read with its
    // value in one script.
    // Both stores connected, and the script loaded, first.
    let warm_up = key("warm-up");
    complete(&cached, &warm_up, &fp, b"stored", LONG).await;
    for store in [&cached, &uncached] {
        assert!(matches!(
            begin(store, &warm_up, &fp).await,
            Begin::Completed { .. }
        ));
    }
    let before = server.command_calls();
    assert_eq!(begin(&uncached, &k, &fp).await, completed);
    assert_eq!(server.command_calls_since(&before), calls([("set", 1)]));
    let before = server.command_calls();
    assert_eq!(begin(&cached, &k, &fp).await, completed);
    assert_eq!(
        server.command_calls_since(&before),
        calls([("evalsha", 1), ("get", 1), ("pttl", 1), ("set", 1)])
    );

    // Later ones: the copy answers the same fingerprint with the response and another
    // with a mismatch, as Redis does, and Redis hears nothing of it.
    let before = server.command_calls();
    for _ in 0..100 {
        assert_eq!(begin(&cached, &k, &fp).await, completed);
        assert_eq!(begin(&cached, &k, &other).await, Begin::Mismatch);
    }
    assert_eq!(server.command_calls_since(&before), BTreeMap::new());

    // Turned off, every replay is a round trip, of one command.
    for _ in 0..100 {
        assert_eq!(begin(&uncached, &k, &fp).await, completed);
    }
    assert_eq!(server.command_calls_since(&before), calls([("set", 100)]));
}

/// A request that begins a record pays nothing for the copy: the store with a copy sends
/// what the store without one sends.
#[tokio::test]
async fn the_copy_costs_a_first_request_nothing() {
    let server = RedisServer::start();
    let (cached, uncached) = (
        server.store(),
        server.store_with(RedisStore::builder().with_replay_cache(0)),
    );
    let mut sent = Vec::new();
    for (name, store) in [("cached", &cached), ("uncached", &uncached)] {
        // Open the connection and load the completing script first.
        complete(
            store,
            &key(&format!("{name}-warm-up")),
            &Fingerprint::of(["body"]),
            b"ok",
            LONG,
        )
        .await;
        let before = server.command_calls();
        for i in 0..100 {
            let k = key(&format!("{name}-{i}"));
            complete(store, &k, &Fingerprint::of(["body"]), b"stored", LONG).await;
        }
        sent.push(server.command_calls_since(&before));
    }
    assert_eq!(sent[0], sent[1]);
    assert_eq!(
        sent[0],
        calls([("evalsha", 100), ("get", 100), ("set", 200)])
    );
}

#[tokio::test]
async fn a_copied_record_ends_no_later_than_in_redis() {
    let server = RedisServer::start();
    let store = server.store();
    let (k, fp) = (key("short-lived"), Fingerprint::of(["body"]));
    complete(&store, &k, &fp, b"stored", Duration::from_millis(300)).await;
    assert!(matches!(
        begin(&store, &k, &fp).await,
        Begin::Completed { .. }
    ));
    let record = format!("idem:{{{}}}:record", k.as_str());
    eventually(
        Duration::from_secs(5),
        "the record expires in Redis",
        || async { server.query::<i64>(&["EXISTS", &record]) == 0 },
    )
    .await;
    // The moment Redis no longer has it, neither has the copy: the key runs afresh.
    assert_eq!(begin(&store, &k, &fp).await, Begin::Started);
}
