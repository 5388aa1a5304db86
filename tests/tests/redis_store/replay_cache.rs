//! The process's copy of completed idempotency records it replayed.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use idem_core::{Begin, Fingerprint, Key, Owner, RecordStore};
use idem_redis::RedisStore;
use idem_tests::{RedisServer, eventually};

use crate::{LONG, key};

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
    // The first replay asks Redis, on both stores.
    for store in [&cached, &uncached] {
        let before = server.command_calls();
        assert_eq!(begin(store, &k, &fp).await, completed);
        assert_eq!(server.command_calls_since(&before).get("evalsha"), Some(&1));
    }

    // Later ones: the copy answers the same fingerprint with the response and another
    // with a mismatch, as Redis does, and Redis hears nothing of it.
    let before = server.command_calls();
    for _ in 0..100 {
        assert_eq!(begin(&cached, &k, &fp).await, completed);
        assert_eq!(begin(&cached, &k, &other).await, Begin::Mismatch);
    }
    assert_eq!(server.command_calls_since(&before), BTreeMap::new());

    // Turned off, every replay is a round trip.
    for _ in 0..100 {
        assert_eq!(begin(&uncached, &k, &fp).await, completed);
    }
    assert_eq!(
        server.command_calls_since(&before).get("evalsha"),
        Some(&100)
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
