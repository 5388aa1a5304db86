//! Latency of one call of each [`Store`] operation, one caller at a time, on
//! [`MemoryStore`] and on [`RedisStore`](idem_redis::RedisStore) (against a `redis-server`
//! this bench starts on a free loopback port).
//!
//! Run with `cargo bench -p idem-bench --bench store`; `BENCHMARKS.md` at the repository
//! root holds the figures and how to read them.
//!
//! Cases about a fresh key take a new [`Key`] every iteration, so what is timed is the path
//! a new request takes, not a key already held being refused. Keys are built in criterion's
//! untimed setup: [`Key::hashed`] is a SHA-256, and its cost is the `key/hashed` line, not
//! part of any store figure. `redis/round_trip_set` is one bare `SET` on a redis-rs
//! connection, without the store: the floor under every Redis figure on this machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use idem_core::store::Fencing;
use idem_core::{Acquire, Begin, Fingerprint, Key, MemoryStore, Owner, Store};
use idem_tests::RedisServer;
use tokio::runtime::Runtime;

/// A typical anti-repeat window, and a typical lock lease.
const LOCK_TTL: Duration = Duration::from_secs(30);
/// How long an issued form token stays valid.
const TOKEN_TTL: Duration = Duration::from_secs(30 * 60);
/// The lease of an in-progress idempotency record.
const LEASE: Duration = Duration::from_secs(30);
/// Retention of the records completed on fresh keys. The real default is 24 h, but at
/// half a million pairs per second that fills `MemoryStore`'s default capacity (1,000,000
/// entries) within seconds and the case would time `StoreError::Capacity`; 100 ms keeps
/// the live set small, so steady-state expiry is part of what is timed.
const SHORT_RETENTION: Duration = Duration::from_millis(100);
/// Retention of the one record the replay case reads back: the real default.
const RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// A stored response of a typical JSON API (status, a few headers, a small body).
const RESPONSE_LEN: usize = 512;

static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

/// A key no earlier iteration, case or run of this process has used.
fn fresh_key() -> Key {
    Key::hashed([NEXT_KEY.fetch_add(1, Ordering::Relaxed).to_le_bytes()])
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

/// Every case against the stores `new_store` makes, one new store per case, so what one
/// case leaves behind (expiry reminders, fencing counters, records) does not weigh on the
/// next.
fn store_cases<S: Store>(
    c: &mut Criterion,
    runtime: &Runtime,
    backend: &str,
    mut new_store: impl FnMut() -> S,
) {
    let mut group = c.benchmark_group(backend);
    let owner = &Owner::random();
    let rival = &Owner::random();
    let fingerprint = &Fingerprint::of(["POST", "/payments", "", r#"{"amount":10}"#]);
    let response = Bytes::from(vec![b'x'; RESPONSE_LEN]);

    for (name, fencing) in [
        ("acquire+release", Fencing::Off),
        ("acquire_fenced+release", Fencing::On),
    ] {
        let store = &new_store();
        group.bench_function(name, |b| {
            b.to_async(runtime).iter_batched(
                fresh_key,
                |key| async move {
                    let acquired = store
                        .acquire(&key, owner, LOCK_TTL, fencing)
                        .await
                        .expect("acquire");
                    assert!(matches!(acquired, Acquire::Acquired { .. }), "{acquired:?}");
                    assert!(store.release(&key, owner).await.expect("release"));
                },
                BatchSize::SmallInput,
            );
        });
    }

    let store = &new_store();
    let held = &fresh_key();
    runtime
        .block_on(store.acquire(held, owner, LOCK_TTL * 100, Fencing::Off))
        .expect("acquire the key the case finds held");
    group.bench_function("acquire_held", |b| {
        b.to_async(runtime).iter(|| async move {
            let refused = store
                .acquire(held, rival, LOCK_TTL, Fencing::Off)
                .await
                .expect("acquire");
            assert!(matches!(refused, Acquire::Held { .. }), "{refused:?}");
        });
    });

    let store = &new_store();
    group.bench_function("put_token+consume_token", |b| {
        b.to_async(runtime).iter_batched(
            fresh_key,
            |key| async move {
                // A client of its own per token, as a form page each for many clients.
                store
                    .put_token(&key, &key, TOKEN_TTL, 16)
                    .await
                    .expect("put_token");
                assert!(
                    store
                        .consume_token(&key, &key)
                        .await
                        .expect("consume_token")
                );
            },
            BatchSize::SmallInput,
        );
    });

    let store = &new_store();
    group.bench_function("begin_record+complete_record", |b| {
        b.to_async(runtime).iter_batched(
            || (fresh_key(), response.clone()),
            |(key, response)| async move {
                let begun = store
                    .begin_record(&key, owner, fingerprint, LEASE)
                    .await
                    .expect("begin_record");
                assert_eq!(begun, Begin::Started);
                assert!(
                    store
                        .complete_record(&key, owner, response, SHORT_RETENTION)
                        .await
                        .expect("complete_record")
                );
            },
            BatchSize::SmallInput,
        );
    });

    let store = &new_store();
    let done = &fresh_key();
    runtime.block_on(async {
        store
            .begin_record(done, owner, fingerprint, LEASE)
            .await
            .expect("begin the record the case replays");
        store
            .complete_record(done, owner, response.clone(), RETENTION)
            .await
            .expect("complete the record the case replays");
    });
    group.bench_function("begin_record_replay", |b| {
        b.to_async(runtime).iter(|| async move {
            let replay = store
                .begin_record(done, rival, fingerprint, LEASE)
                .await
                .expect("begin_record");
            assert!(matches!(replay, Begin::Completed { .. }), "{replay:?}");
        });
    });

    group.finish();
}

/// One thread runs both the timed future and redis-rs' connection task, so a figure is the
/// store's cost and the round trip, without wake-ups across worker threads.
fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn memory(c: &mut Criterion) {
    store_cases(c, &runtime(), "memory", MemoryStore::new);
}

fn redis(c: &mut Criterion) {
    let server = RedisServer::start();
    let runtime = runtime();
    // The floor under every Redis figure: one bare command, one round trip, on a redis-rs
    // connection without the store.
    let client = redis::Client::open(server.url()).expect("the test server's URL");
    let conn = runtime
        .block_on(client.get_multiplexed_async_connection())
        .expect("a connection to the test server");
    c.bench_function("redis/round_trip_set", |b| {
        b.to_async(&runtime).iter(|| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("SET")
                    .arg("round-trip")
                    .arg(1)
                    .query_async::<()>(&mut conn)
                    .await
                    .expect("SET");
            }
        });
    });
    store_cases(c, &runtime, "redis", || {
        server.command(&["FLUSHALL"]);
        server.store()
    });
}

fn key(c: &mut Criterion) {
    let mut n = 0_u64;
    c.bench_function("key/hashed", |b| {
        b.iter(|| {
            n += 1;
            Key::hashed([n.to_le_bytes()])
        });
    });
}

criterion_group! {
    name = benches;
    config = config();
    targets = key, memory, redis
}
criterion_main!(benches);
