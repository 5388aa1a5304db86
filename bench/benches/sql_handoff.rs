//! Hand-off latency on `PostgresStore`: from a holder letting go to the waiter that was
//! waiting for it getting through, for a lock, a fair lock and an idempotency record in
//! progress.
//!
//! Run with `cargo bench -p idem-bench --bench sql_handoff`. It starts a PostgreSQL server
//! of its own (the test harness's: `fsync`, `synchronous_commit` and `full_page_writes`
//! off) and two stores on it, each with a pool of its own as two instances of an
//! application have: the holder's and the waiter's. Each sample uses a key of its own:
//!
//! - **lock**: the holder takes a `Lock`; the waiter asks for it with `acquire_within`
//!   (and so sleeps in `wait_for_release`); the holder releases it. The hand-off ends when
//!   the waiter's `acquire_within` returns the lock.
//! - **fair lock**: the same with `Lock::fair` (the waiter queues, and sleeps in
//!   `wait_for_turn`).
//! - **record**: the holder begins a record; the waiter's `begin_record` finds it in
//!   progress, and it waits for it to end ([`wait_for_record`]) and asks again; the holder
//!   completes the record. The hand-off ends when the waiter has the stored response.
//!
//! The holder lets go 20–30 ms (a pseudo-random spread, so that the moment does not fall
//! in step with a polling waiter's period) after the waiter started waiting, and the
//! hand-off is timed from just before the holder's call. `IDEM_BENCH_SAMPLES` samples per
//! case and round (default 200; 20 under `cargo test`), `IDEM_BENCH_ROUNDS` rounds (3;
//! 1 under `cargo test`); it prints p50 and p99 per round and their medians.
//!
//! [`wait_for_record`]: idem_sqlx::SqlStore::wait_for_record

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_bench::{benching, env_number};
use idem_core::lock::Lease;
use idem_core::{Begin, Fingerprint, Key, Lock, Owner, RecordStore};
use idem_sqlx::PostgresStore;
use idem_tests::{PostgresServer, median, percentile};

const LONG: Duration = Duration::from_secs(60);
/// How long a waiter may wait for one hand-off before the bench fails.
const WAIT: Duration = Duration::from_secs(10);

const CASES: [&str; 3] = ["lock", "fair lock", "record"];

/// The holder's store and the waiter's, each with a pool of its own.
struct Stores {
    holder: PostgresStore,
    waiter: PostgresStore,
}

type Sample<'a> = Pin<Box<dyn Future<Output = Duration> + Send + 'a>>;

/// A spread of 0–10 ms, from a xorshift generator: no two samples in step.
struct Spread(u64);

impl Spread {
    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_micros(self.0 % 10_000)
    }
}

/// Waits until the waiter has surely started waiting, then times `let_go` until `taken`
/// says when the waiter got through.
async fn timed(
    pause: Duration,
    let_go: impl Future<Output = ()>,
    taken: tokio::task::JoinHandle<Instant>,
) -> Duration {
    tokio::time::sleep(Duration::from_millis(20) + pause).await;
    let started = Instant::now();
    let_go.await;
    let taken = taken.await.expect("the waiter's task");
    taken.duration_since(started)
}

/// One hand-off of a lock (`fair`: a fair lock) on `key`.
fn lock(stores: &Stores, key: Key, fair: bool, pause: Duration) -> Sample<'_> {
    Box::pin(async move {
        let lock =
            |store: &PostgresStore| Lock::new(store.clone(), key.clone(), Lease::Fixed(LONG));
        let (holder, waiter) = (lock(&stores.holder), lock(&stores.waiter));
        let held = if fair {
            holder.fair().try_acquire().await
        } else {
            holder.try_acquire().await
        };
        let held = held.expect("the free lock");
        let waiting = tokio::spawn(async move {
            let guard = if fair {
                waiter.fair().acquire_within(WAIT).await
            } else {
                waiter.acquire_within(WAIT).await
            };
            let taken = Instant::now();
            guard.expect("the lock").release().await.expect("released");
            taken
        });
        let let_go = async move {
            assert!(held.release().await.expect("released"));
        };
        timed(pause, let_go, waiting).await
    })
}

/// Waits for the record `key`, which `begin_record` found in progress, to end.
async fn record_ends(store: &PostgresStore, key: &Key, within: Duration) {
    store
        .wait_for_record(key, within)
        .await
        .expect("wait_for_record");
}

/// One hand-off of an idempotency record on `key`: the waiter has its response.
fn record(stores: &Stores, key: Key, pause: Duration) -> Sample<'_> {
    Box::pin(async move {
        let fingerprint = Fingerprint::of(["POST", "/orders"]);
        let owner = Owner::random();
        let begun = stores.holder.begin_record(&key, &owner, &fingerprint, LONG);
        assert_eq!(begun.await.expect("begin_record"), Begin::Started);
        let waiting = tokio::spawn({
            let (store, key, fingerprint) = (stores.waiter.clone(), key.clone(), fingerprint);
            async move {
                let deadline = Instant::now() + WAIT;
                loop {
                    let owner = Owner::random();
                    let begun = store.begin_record(&key, &owner, &fingerprint, LONG);
                    match begun.await.expect("begin_record") {
                        Begin::Completed { .. } => return Instant::now(),
                        Begin::InProgress { .. } if Instant::now() < deadline => {
                            record_ends(&store, &key, deadline - Instant::now()).await;
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
        });
        let complete = async {
            let done =
                stores
                    .holder
                    .complete_record(&key, &owner, Bytes::from_static(b"201"), LONG);
            assert!(done.await.expect("complete_record"));
        };
        timed(pause, complete, waiting).await
    })
}

/// p50 and p99 of `samples` hand-offs of case `case` in round `round`.
async fn case(stores: &Stores, case: usize, round: usize, samples: usize) -> (Duration, Duration) {
    let mut spread = Spread(0x9E37_79B9_7F4A_7C15 ^ (case * 1_000 + round) as u64);
    let mut handoffs = Vec::with_capacity(samples);
    for i in 0..samples {
        let key = Key::new(format!("handoff-{case}-{round}-{i}")).expect("a valid key");
        let pause = spread.next();
        let handoff = match case {
            0 => lock(stores, key, false, pause).await,
            1 => lock(stores, key, true, pause).await,
            _ => record(stores, key, pause).await,
        };
        handoffs.push(handoff);
    }
    handoffs.sort();
    (percentile(&handoffs, 50), percentile(&handoffs, 99))
}

fn ms(duration: Duration) -> String {
    format!("{:.2}", duration.as_secs_f64() * 1000.0)
}

fn main() {
    let (samples, rounds) = if benching() { (200, 3) } else { (20, 1) };
    let samples = env_number("IDEM_BENCH_SAMPLES", samples);
    let rounds: usize = env_number("IDEM_BENCH_ROUNDS", rounds);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!("{samples} samples per case and round, {rounds} rounds; p50 / p99 in ms");
    let server = PostgresServer::start();
    runtime.block_on(async {
        let stores = Stores {
            holder: server.store().await,
            waiter: server.store().await,
        };
        let mut results = vec![Vec::new(); CASES.len()];
        for round in 0..rounds {
            for (i, result) in results.iter_mut().enumerate() {
                result.push(case(&stores, i, round, samples).await);
            }
        }
        let heads: Vec<String> = (1..=rounds).map(|r| format!("round {r}")).collect();
        println!(
            "\n| case | {} | median p50 | median p99 |",
            heads.join(" | ")
        );
        println!("|---|{}---:|---:|", "---:|".repeat(rounds));
        for (name, per_round) in CASES.iter().zip(&results) {
            let cells: Vec<String> = per_round
                .iter()
                .map(|(p50, p99)| format!("{} / {}", ms(*p50), ms(*p99)))
                .collect();
            let p50 = median(&per_round.iter().map(|r| r.0).collect::<Vec<_>>());
            let p99 = median(&per_round.iter().map(|r| r.1).collect::<Vec<_>>());
            println!(
                "| {name} | {} | {} | {} |",
                cells.join(" | "),
                ms(p50),
                ms(p99)
            );
        }
    });
}
