//! How an idempotency record lies in Redis: one string, what the store does with the hashes
//! earlier versions wrote, on a full server, and with replica acknowledgements.

use std::time::Duration;

use bytes::Bytes;
use idem_core::{Begin, Fingerprint, Key, Owner, RecordStore, StoreError};
use idem_redis::{RedisStore, ReplicasBehind};
use idem_tests::RedisServer;

use crate::{LONG, calls, commands_during, key};

/// A fingerprint that redis-cli can spell: 32 times `byte`.
fn fingerprint(byte: u8) -> (Fingerprint, String) {
    let bytes = [byte; 32];
    (
        Fingerprint::from_bytes(bytes),
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

/// What `begin_record` answers a new attempt at `k` with `fp`.
async fn begin(store: &RedisStore, k: &Key, fp: &Fingerprint) -> Result<Begin, StoreError> {
    store.begin_record(k, &Owner::random(), fp, LONG).await
}

fn record_key(k: &Key) -> String {
    format!("idem:{{{}}}:record", k.as_str())
}

#[tokio::test]
async fn a_record_is_one_string_its_state_its_fingerprint_then_owner_or_response() {
    let server = RedisServer::start();
    let store = server.store();
    let (k, owner, (fp, fp_text)) = (key("order-1"), Owner::random(), fingerprint(b'f'));
    let record = record_key(&k);
    assert_eq!(
        store.begin_record(&k, &owner, &fp, LONG).await.unwrap(),
        Begin::Started
    );
    assert_eq!(server.query::<String>(&["TYPE", &record]), "string");
    assert_eq!(
        server.query::<String>(&["GET", &record]),
        format!("r{fp_text}{}", owner.as_str())
    );
    let retention = Duration::from_secs(600);
    let response = Bytes::from_static(b"201\r\n\r\n{\"id\":1}");
    assert!(
        store
            .complete_record(&k, &owner, response.clone(), retention)
            .await
            .unwrap()
    );
    assert_eq!(
        server.query::<Vec<u8>>(&["GET", &record]),
        [b"d", fp_text.as_bytes(), &response].concat()
    );
    let left = server.query::<u64>(&["PTTL", &record]);
    assert!(left > 590_000 && left <= 600_000, "{left} ms left");
}

/// How a record was left in the hash layout that versions before the string wrote.
enum Hash<'a> {
    Running { owner: &'a str },
    Done { response: &'a str },
}

/// Writes `k`'s record as earlier versions did, for `fp`, for a minute.
fn write_hash_record(server: &RedisServer, k: &Key, fp: &str, state: Hash<'_>) {
    let record = record_key(k);
    let (state, field, value) = match state {
        Hash::Running { owner } => ("running", "owner", owner),
        Hash::Done { response } => ("done", "response", response),
    };
    let fields = ["state", state, "fingerprint", fp, field, value];
    server.command(&[&["HSET", record.as_str()][..], &fields].concat());
    server.command(&["PEXPIRE", &record, "60000"]);
}

/// During a rolling upgrade the instances not yet upgraded still write records as hashes:
/// an upgraded one answers them as they would, on either way of beginning a record, and
/// leaves them alone. Only their owners, on the old version, complete them.
#[tokio::test]
async fn records_in_the_hash_layout_of_earlier_versions_are_answered() {
    let server = RedisServer::start();
    let plain = server.store_with(RedisStore::builder().with_replay_cache(0));
    let scripted = server.store_with(RedisStore::builder().with_script_acquire(true));
    let ((fp, fp_text), (other, _)) = (fingerprint(b'f'), fingerprint(b'g'));
    let (running, done) = (key("running"), key("done"));
    write_hash_record(&server, &running, &fp_text, Hash::Running { owner: "old" });
    write_hash_record(&server, &done, &fp_text, Hash::Done { response: "kept" });
    let kept = Begin::Completed {
        response: Bytes::from_static(b"kept"),
    };
    for store in [&plain, &scripted] {
        assert!(matches!(
            begin(store, &running, &fp).await.unwrap(),
            Begin::InProgress { remaining } if remaining > LONG / 2
        ));
        assert_eq!(
            begin(store, &running, &other).await.unwrap(),
            Begin::Mismatch
        );
        assert_eq!(begin(store, &done, &fp).await.unwrap(), kept);
        assert_eq!(begin(store, &done, &other).await.unwrap(), Begin::Mismatch);
        for k in [&running, &done] {
            let owner = Owner::new("old").unwrap();
            let response = Bytes::from_static(b"new");
            assert!(
                !store
                    .complete_record(k, &owner, response, LONG)
                    .await
                    .unwrap()
            );
            assert!(!store.renew_record(k, &owner, LONG).await.unwrap());
            assert!(!store.abandon_record(k, &owner).await.unwrap());
        }
    }
    assert_eq!(
        server.query::<String>(&["TYPE", &record_key(&running)]),
        "hash"
    );
    assert_eq!(
        server.query::<String>(&["HGET", &record_key(&done), "response"]),
        "kept"
    );
    // Once a hash is gone, the key is begun as a string.
    server.command(&["DEL", &record_key(&running)]);
    assert_eq!(
        plain
            .begin_record(&running, &Owner::random(), &fp, LONG)
            .await
            .unwrap(),
        Begin::Started
    );
    assert_eq!(
        server.query::<String>(&["TYPE", &record_key(&running)]),
        "string"
    );
}

/// A full Redis (`maxmemory` reached, `noeviction`) refuses every `SET`, even one that
/// would change nothing: what it holds is then read instead, so replays and refusals go
/// on, while a new record cannot begin.
#[tokio::test]
async fn a_full_redis_still_answers_the_records_it_holds() {
    let server = RedisServer::start();
    let store = server.store_with(RedisStore::builder().with_replay_cache(0));
    let (fp, other, owner) = (
        Fingerprint::of(["a"]),
        Fingerprint::of(["b"]),
        Owner::random(),
    );
    let (done, running) = (key("done"), key("running"));
    store.begin_record(&done, &owner, &fp, LONG).await.unwrap();
    let response = Bytes::from_static(b"stored");
    assert!(
        store
            .complete_record(&done, &owner, response.clone(), LONG)
            .await
            .unwrap()
    );
    store
        .begin_record(&running, &owner, &fp, LONG)
        .await
        .unwrap();

    server.command(&["CONFIG", "SET", "maxmemory", "1"]);
    assert_eq!(
        begin(&store, &done, &fp).await.unwrap(),
        Begin::Completed { response }
    );
    assert_eq!(begin(&store, &done, &other).await.unwrap(), Begin::Mismatch);
    assert!(matches!(
        begin(&store, &running, &fp).await.unwrap(),
        Begin::InProgress { .. }
    ));
    let refused = begin(&store, &key("new"), &fp)
        .await
        .expect_err("a full server");
    let error = refused.backend_error::<redis::RedisError>().unwrap();
    assert_eq!(error.code(), Some("OOM"), "{error}");
    server.command(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(
        begin(&store, &key("new"), &fp).await.unwrap(),
        Begin::Started
    );
}

/// The copy of a replayed record takes the record's time left only if the key still
/// holds the value the replay read: a plain `PTTL` after it could read a record begun
/// since, and keep the copy past the end of the one it copies.
#[tokio::test]
async fn a_copy_takes_the_time_left_of_the_very_record_it_read() {
    let server = RedisServer::start();
    let script = include_str!("../../../idem-redis/src/scripts/completed_remaining.lua");
    let remaining =
        |record: &str, value: &str| server.query::<i64>(&["EVAL", script, "1", record, value]);
    server.command(&["SET", "{k}:record", "d-read", "PX", "60000"]);
    assert!(remaining("{k}:record", "d-read") > 50_000);
    assert_eq!(remaining("{k}:record", "d-begun-since"), -2);
    assert_eq!(remaining("{gone}:record", "d-read"), -2);
    server.command(&["HSET", "{hash}:record", "state", "done"]);
    assert_eq!(remaining("{hash}:record", "d-read"), -2);
}

/// With replica acknowledgements, `begin_record` waits for the replicas only when it
/// begins a record, the one write of it that decides something; finding a record waits
/// for nothing. With no replica at all, a begin is refused, naming the replicas behind.
#[tokio::test]
async fn a_begin_waits_for_replicas_only_when_it_begins_a_record() {
    let server = RedisServer::start();
    let plain = server.store_with(RedisStore::builder().with_replay_cache(0));
    let acked = server.store_with(
        RedisStore::builder()
            .with_replay_cache(0)
            .with_replica_acks(1, Duration::from_millis(50)),
    );
    let (fp, other, owner) = (
        Fingerprint::of(["a"]),
        Fingerprint::of(["b"]),
        Owner::random(),
    );
    let (done, running) = (key("done"), key("running"));
    plain.begin_record(&done, &owner, &fp, LONG).await.unwrap();
    let response = Bytes::from_static(b"stored");
    assert!(
        plain
            .complete_record(&done, &owner, response, LONG)
            .await
            .unwrap()
    );
    plain
        .begin_record(&running, &owner, &fp, LONG)
        .await
        .unwrap();
    acked.begin_record(&done, &owner, &fp, LONG).await.unwrap();

    let found = async {
        for (k, fp) in [
            (&done, &fp),
            (&done, &other),
            (&running, &fp),
            (&running, &other),
        ] {
            begin(&acked, k, fp).await.unwrap();
        }
    };
    assert_eq!(
        commands_during(&server, found).await,
        calls([("pttl", 1), ("set", 4)])
    );
    let begun = async {
        let refused = begin(&acked, &key("new"), &fp)
            .await
            .expect_err("no replica acknowledges");
        assert_eq!(
            refused.backend_error::<ReplicasBehind>(),
            Some(&ReplicasBehind {
                acknowledged: 0,
                wanted: 1
            })
        );
    };
    assert_eq!(
        commands_during(&server, begun).await,
        calls([("set", 1), ("wait", 1)])
    );
}
