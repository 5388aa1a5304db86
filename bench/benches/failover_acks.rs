//! What replica acknowledgements cost in a failover, measured: a Redis master, one replica
//! and three Sentinels (all started here, on loopback), and a writer taking a fresh key
//! through the Sentinels every 10 ms, as a guard deciding requests does. The master is
//! killed; the Sentinels promote the replica; after `rejoin_ms` the killed master is
//! started again as the new master's replica. Prints, per round and set-up (no acks;
//! `with_replica_acks(1, 100 ms)`), how long the writes were refused and why.
//!
//! Without acks the writes fail only until the store finds the promoted master. With acks
//! the promoted master has no replica to acknowledge anything until the old one is back
//! and in sync, so every write that decides something is refused until then: the window
//! is the failover plus the time until a replica rejoins.
//!
//! `cargo bench -p idem-bench --bench failover_acks`; `IDEM_ROUNDS` (default 3) and
//! `IDEM_REJOIN_MS` (default 5000) set the rounds and the killed master's absence.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idem_core::store::Fencing;
use idem_core::{Key, LockStore, Owner};
use idem_redis::RedisStore;
use idem_tests::RedisSentinels;

/// How often the writer takes a key.
const EVERY: Duration = Duration::from_millis(10);

/// The store's timeout, as in the chaos runs.
const TIMEOUT: Duration = Duration::from_millis(500);

/// One write: when it started (since the kill; negative before it), and whether it was
/// decided.
struct Write {
    at: f64,
    ok: bool,
}

#[tokio::main]
async fn main() {
    let setting = |name: &str, default: u64| {
        std::env::var(name).map_or(default, |value| {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{name} is a number"))
        })
    };
    let rounds = setting("IDEM_ROUNDS", 3);
    let rejoin = Duration::from_millis(setting("IDEM_REJOIN_MS", 5000));
    println!(
        "| set-up | round | failover (kill → promoted) | writes refused from → to (s after the kill) | refused until promoted | refused after | replica back (s after the kill) |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|");
    for round in 1..=rounds {
        for acks in [false, true] {
            measure(round, acks, rejoin).await;
        }
    }
}

async fn measure(round: u64, acks: bool, rejoin: Duration) {
    let sentinels = RedisSentinels::start();
    let mut builder = RedisStore::builder().with_timeout(TIMEOUT);
    if acks {
        builder = builder.with_replica_acks(1, Duration::from_millis(100));
    }
    let store = sentinels.store_with(builder);
    let key = |n: u64| Key::new(format!("w{n}")).expect("a key");
    for n in 0..100 {
        if store
            .acquire(
                &key(n),
                &Owner::random(),
                Duration::from_secs(60),
                Fencing::Off,
            )
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(EVERY).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let killed_at = Instant::now() + Duration::from_secs(1);
    let writer = tokio::spawn({
        let (store, stop) = (store.clone(), Arc::clone(&stop));
        async move {
            let mut writes = Vec::new();
            let mut n = 1_000;
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let at = if started >= killed_at {
                    started.duration_since(killed_at).as_secs_f64()
                } else {
                    -killed_at.duration_since(started).as_secs_f64()
                };
                n += 1;
                let owner = Owner::random();
                let written = store
                    .acquire(&key(n), &owner, Duration::from_secs(60), Fencing::Off)
                    .await;
                writes.push(Write {
                    at,
                    ok: written.is_ok(),
                });
                tokio::time::sleep(EVERY).await;
            }
            writes
        }
    });
    tokio::time::sleep_until(killed_at.into()).await;
    let (failover, back) = tokio::task::spawn_blocking(move || {
        let mut sentinels = sentinels;
        let failover = sentinels.fail_over();
        std::thread::sleep(rejoin);
        sentinels.rejoin(|port| port);
        let back = killed_at.elapsed();
        std::thread::sleep(Duration::from_secs(1));
        drop(sentinels);
        (failover, back)
    })
    .await
    .expect("the failover");
    stop.store(true, Ordering::SeqCst);
    let writes = writer.await.expect("the writer");
    let refused: Vec<&Write> = writes.iter().filter(|w| w.at >= 0.0 && !w.ok).collect();
    let span = match (refused.first(), refused.last()) {
        (Some(first), Some(last)) => format!("{:.2} → {:.2}", first.at, last.at),
        _ => "none".to_owned(),
    };
    // Refusals while the Sentinels had not yet promoted the replica, and after: with
    // acks, the second are the price of a master without a replica.
    let promoted = failover.as_secs_f64();
    let count = |until: bool| {
        let (refused, sent) = writes
            .iter()
            .filter(|w| w.at >= 0.0 && (w.at < promoted) == until)
            .fold((0, 0), |(refused, sent), w| {
                (refused + usize::from(!w.ok), sent + 1)
            });
        format!("{refused} of {sent}")
    };
    println!(
        "| {} | {round} | {promoted:.2} s | {span} | {} | {} | {:.2} |",
        if acks {
            "acks (1 replica, 100 ms)"
        } else {
            "no acks"
        },
        count(true),
        count(false),
        back.as_secs_f64(),
    );
}
