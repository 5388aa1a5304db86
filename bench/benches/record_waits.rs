//! Wait latency for a record in progress: from the first attempt's completion to the
//! answer of a second attempt that was waiting for it, on every store, with the waits of
//! main before `RecordStore::wait_for_record` side by side with it.
//!
//! Run with `cargo bench -p idem-bench --bench record_waits` (or, as for the figures in
//! `bench/results/waits.md`, `cargo test -p idem-bench --bench record_waits`: the wait is
//! a matter of milliseconds of sleeping and round trips, not of the build). Each store is
//! the test harness's (`idem_tests`' backends: a Redis and a PostgreSQL server of their
//! own, a SQLite file). The first attempt begins a record; the second finds it in
//! progress and waits, in one of three ways; the first completes it 20–30 ms later (a
//! pseudo-random spread, so that the moment does not fall in step with a poll); the
//! sample is the time from just before the completion (its write and commit included) to
//! the second attempt's `begin_record` answering the stored response.
//!
//! - **polling 10–200 ms**: `run_once`'s `wait_while_in_progress` before: it looked again
//!   after 10 ms, doubling up to 200 ms;
//! - **polling 20 ms**: a form repeat before: it looked again every 20 ms;
//! - **woken**: both now: `wait_for_record`, then one more look.
//!
//! On Redis and PostgreSQL the second attempt runs on another instance's store (its own
//! connections, as another process of the application); on SQLite on the same store (one
//! process: woken) and on another (another process: it polls every 10 ms).
//! `IDEM_BENCH_SAMPLES` samples per case (default 100; 10 under `cargo test` unless set).

use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_bench::{benching, env_number};
use idem_core::conformance::Backend;
use idem_core::{Begin, Fingerprint, Key, Owner, Store};
use idem_tests::{MemoryBackend, PostgresBackend, RedisBackend, SqliteBackend, percentile};
use tokio::sync::oneshot;

const LONG: Duration = Duration::from_secs(60);

/// How the second attempt waits.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    Backoff,
    Every20,
    Woken,
}

const WAYS: [(Waiting, &str); 3] = [
    (Waiting::Backoff, "polling 10–200 ms (run_once before)"),
    (Waiting::Every20, "polling 20 ms (form repeat before)"),
    (Waiting::Woken, "woken (wait_for_record)"),
];

/// The second attempt: looks, tells `looked` once it found the record in progress, waits
/// as `how` says until it gets the stored response; when it got it.
async fn second<S: Store>(
    store: S,
    key: Key,
    how: Waiting,
    looked: oneshot::Sender<()>,
) -> Instant {
    let fingerprint = Fingerprint::of(["bench"]);
    let mut looked = Some(looked);
    let mut pause = Duration::from_millis(10);
    loop {
        match store
            .begin_record(&key, &Owner::random(), &fingerprint, LONG)
            .await
            .expect("begin")
        {
            Begin::Completed { .. } => return Instant::now(),
            Begin::InProgress { remaining } => {
                if let Some(looked) = looked.take() {
                    let _ = looked.send(());
                }
                match how {
                    Waiting::Backoff => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(200));
                    }
                    Waiting::Every20 => tokio::time::sleep(Duration::from_millis(20)).await,
                    Waiting::Woken => {
                        store.wait_for_record(&key, remaining).await.expect("wait");
                    }
                }
            }
            other => panic!("the second attempt found {other:?}"),
        }
    }
}

/// One case's samples, sorted.
async fn samples<S: Store + Clone>(
    first: &S,
    second_store: &S,
    how: Waiting,
    count: usize,
) -> Vec<Duration> {
    let fingerprint = Fingerprint::of(["bench"]);
    let mut spread = 0x2545_f491_4f6c_dd1d_u64;
    let mut waits = Vec::with_capacity(count);
    for i in 0..count {
        let key = Key::hashed([
            "record-waits",
            &format!("{how:?}"),
            &i.to_string(),
            &format!("{:?}", Instant::now()),
        ]);
        let owner = Owner::random();
        let begun = first
            .begin_record(&key, &owner, &fingerprint, LONG)
            .await
            .expect("begin");
        assert_eq!(begun, Begin::Started);
        let (looked, has_looked) = oneshot::channel();
        let waiter = tokio::spawn(second(second_store.clone(), key.clone(), how, looked));
        has_looked.await.expect("the second attempt looks");
        spread ^= spread << 13;
        spread ^= spread >> 7;
        spread ^= spread << 17;
        tokio::time::sleep(Duration::from_micros(20_000 + spread % 10_000)).await;
        let completed_at = Instant::now();
        let response = Bytes::from_static(b"201 Created");
        assert!(
            first
                .complete_record(&key, &owner, response, LONG)
                .await
                .expect("complete")
        );
        let answered_at = waiter.await.expect("the second attempt");
        waits.push(answered_at.saturating_duration_since(completed_at));
    }
    waits.sort();
    waits
}

/// Every way of waiting on `backend`'s stores; a table row per way.
async fn on<B: Backend>(name: &str, other_instance: bool, count: usize) {
    let backend = B::start().await;
    let first = backend.store();
    let second_store = if other_instance {
        backend.store_of_another_instance()
    } else {
        backend.store()
    };
    for (how, label) in WAYS {
        let waits = samples(&first, &second_store, how, count).await;
        println!(
            "| {name} | {label} | {:.2} | {:.2} |",
            ms(percentile(&waits, 50)),
            ms(percentile(&waits, 99)),
        );
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn main() {
    let count = env_number("IDEM_BENCH_SAMPLES", if benching() { 100 } else { 10 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    println!("\n{count} samples a case; milliseconds from the completion to the waiter's answer");
    println!("\n| store | how the second attempt waits | p50 | p99 |");
    println!("|---|---|---|---|");
    runtime.block_on(async {
        on::<MemoryBackend>("memory", false, count).await;
        on::<RedisBackend>("Redis, another instance", true, count).await;
        on::<PostgresBackend>("PostgreSQL, another instance", true, count).await;
        on::<SqliteBackend>("SQLite, same process", false, count).await;
        on::<SqliteBackend>("SQLite, another process", true, count).await;
    });
}
