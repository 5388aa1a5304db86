//! Proof by crash of the consumer. Two producers send orders to the stream while two
//! consumers (this crate's binary, processes of their own) bill them, and the test
//! `SIGKILL`s consumers at random points, starting a new one (a new name in the group)
//! for each one killed. Each kill is one of, in turn:
//!
//! - right after its transaction committed, before its `XACK`, on its 1st to 3rd billing;
//! - right after the provider answered a charge, before the transaction, likewise;
//! - a `SIGKILL` from this test 50–500 ms after the consumer started: anywhere.
//!
//! The first two go through the consumer's test-only switch (`IDEM_EXAMPLE_CRASH_AT`).
//! Then the producers stop, two consumers that are not killed take over what the dead
//! left pending (`XAUTOCLAIM`) and read the rest, until the group has nothing pending or
//! unread, and the test counts each order's rows in the consumer's database and its
//! payments in the provider's (the payments example, a process of its own):
//!
//! - with idem, every order has one row and one payment: none applied twice, none lost;
//! - without idem, none is lost either (delivery is at least once), but a kill after the
//!   commit applies its message twice, and one after the charge charges it twice.
//!
//! `IDEM_CONSUMER_CRASHES` sets the kills per mode (default 6), `IDEM_CONSUMER_SEED` the
//! seed of the draws (printed); `scripts/consumer-crash.sh` runs 100.

#![cfg(unix)]

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use example_consumer::{CRASH_AT, FIELD, GROUP, Order, STREAM};
use idem_sqlx::SqliteStore;
use idem_sqlx::sqlx::{self, SqlitePool};
use idem_tests::{RedisServer, ServerProcess, eventually, workspace_binary};
use redis::AsyncTypedCommands;

const SIGKILL: i32 = 9;

/// The consumers' record lease: a dead consumer's messages are taken over after twice this.
const LEASE_MS: &str = "300";

/// How often each producer sends an order.
const PACE: Duration = Duration::from_millis(25);

/// What a run of kills came to.
#[derive(Debug, Default)]
struct Tally {
    /// Kills by point: after the commit, after the charge, anywhere (by this test).
    kills: [usize; 3],
    produced: usize,
    /// Orders with more than one row.
    applied_twice: usize,
    /// Orders with more than one payment at the provider.
    charged_twice: usize,
    /// Orders with no row.
    lost: usize,
    took: Duration,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [commit, charge, anywhere] = self.kills;
        write!(
            f,
            "{} kills ({commit} after the commit, {charge} after the charge, {anywhere} anywhere), \
             {} orders: {} applied twice, {} charged twice, {} lost ({:.1} s)",
            commit + charge + anywhere,
            self.produced,
            self.applied_twice,
            self.charged_twice,
            self.lost,
            self.took.as_secs_f64()
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_idem_killed_consumers_apply_every_message_once() {
    let tally = kill_consumers("idem").await;
    println!("consumers with idem: {tally}");
    assert_eq!(
        (tally.applied_twice, tally.charged_twice, tally.lost),
        (0, 0, 0),
        "{tally:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_idem_killed_consumers_apply_messages_twice() {
    let tally = kill_consumers("plain").await;
    println!("consumers without idem: {tally}");
    assert_eq!(tally.lost, 0, "delivery is at least once: {tally:?}");
    assert!(tally.kills[0] > 0 && tally.applied_twice > 0, "{tally:?}");
    assert!(tally.charged_twice > 0, "{tally:?}");
}

/// Kills consumers of `mode` while the producers send, lets the group drain, and counts
/// each order's effects.
async fn kill_consumers(mode: &str) -> Tally {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (db, payments_db) = (
        dir.path().join("consumer.db"),
        dir.path().join("payments.db"),
    );
    let provider = start_provider(&payments_db);
    // The file exists, in WAL mode, before the consumers start, as a deploy would leave it:
    // processes that switch a new file to WAL at once may fail with "database is locked".
    SqliteStore::open(&db)
        .await
        .expect("the consumers' database");
    let seed = std::env::var("IDEM_CONSUMER_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("{mode}: seed {seed}");
    let mut draws = fastrand::Rng::with_seed(seed);
    let target = std::env::var("IDEM_CONSUMER_CRASHES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(6);

    let started = Instant::now();
    let producing = Arc::new(AtomicBool::new(true));
    let producers: Vec<_> = (0..2)
        .map(|producer| tokio::spawn(produce(redis.url(), producer, Arc::clone(&producing))))
        .collect();
    let mut tally = Tally::default();
    let mut started_consumers = 0;
    let mut start = |to_die: bool| {
        started_consumers += 1;
        let name = format!("consumer-{started_consumers}");
        let crash = to_die.then_some(started_consumers % 3);
        Consumer::start(&name, mode, &redis, &db, &provider, crash, &mut draws)
    };
    let mut consumers = [start(true), start(true)];
    let mut last_kill = Instant::now();
    while tally.kills.iter().sum::<usize>() < target {
        for consumer in &mut consumers {
            if let Some(point) = consumer.killed() {
                tally.kills[point] += 1;
                last_kill = Instant::now();
                *consumer = start(true);
            }
        }
        assert!(
            last_kill.elapsed() < Duration::from_secs(30),
            "no consumer reached its kill in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The survivors are killed where they are, then the producers stop.
    for consumer in &mut consumers {
        if consumer.killed().is_none() {
            consumer.child.kill().expect("SIGKILL");
            tally.kills[2] += 1;
        }
    }
    producing.store(false, Ordering::Relaxed);
    let mut orders = Vec::new();
    for producer in producers {
        orders.extend(producer.await.expect("the producer ran"));
    }
    tally.produced = orders.len();

    let _drainers = [start(false), start(false)];
    drained(&redis).await;
    tally.took = started.elapsed();
    let rows = counts(
        &db,
        "SELECT order_id, COUNT(*) FROM paid_orders GROUP BY order_id",
    )
    .await;
    let payments = counts(
        &payments_db,
        "SELECT account, COUNT(*) FROM payments GROUP BY account",
    )
    .await;
    for order in &orders {
        let applied = rows.get(&order.id).copied().unwrap_or(0);
        tally.lost += usize::from(applied == 0);
        tally.applied_twice += usize::from(applied > 1);
        tally.charged_twice += usize::from(payments.get(&order.customer).copied().unwrap_or(0) > 1);
    }
    tally
}

/// A consumer process, killed (`SIGKILL`) when dropped if it still runs.
struct Consumer {
    child: Child,
    /// Where it is to die: 0 after the commit, 1 after the charge (by its switch), 2 when
    /// this test kills it, at `deadline`. `None`: it is not to die.
    crash: Option<(usize, Instant)>,
}

impl Consumer {
    /// Starts consumer `name`; with `crash`, the point it is to die at (0, 1, 2: see
    /// [`Consumer::crash`]).
    fn start(
        name: &str,
        mode: &str,
        redis: &RedisServer,
        db: &Path,
        provider: &ServerProcess,
        crash: Option<usize>,
        draws: &mut fastrand::Rng,
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_example-consumer"));
        command
            .args(["--name", name, "--mode", mode, "--lease-ms", LEASE_MS])
            .args(["--redis", &redis.url(), "--provider", provider.base()])
            .arg("--db")
            .arg(db)
            .env_remove(CRASH_AT)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match crash {
            Some(0) => command.env(CRASH_AT, format!("after-commit:{}", draws.u32(1..=3))),
            Some(1) => command.env(CRASH_AT, format!("after-charge:{}", draws.u32(1..=3))),
            _ => &mut command,
        };
        let deadline = Instant::now() + Duration::from_millis(draws.u64(50..=500));
        let child = command.spawn().expect("the consumer starts");
        Self {
            child,
            crash: crash.map(|point| (point, deadline)),
        }
    }

    /// The point it died at, once it has died by its switch or been killed at its deadline.
    ///
    /// # Panics
    ///
    /// When it ended otherwise: by an error, or at a kill it was not given.
    fn killed(&mut self) -> Option<usize> {
        let (point, deadline) = self.crash?;
        if point == 2 && Instant::now() >= deadline {
            self.child.kill().expect("SIGKILL");
        }
        let status = self.child.try_wait().expect("its status")?;
        assert_eq!(
            status.signal(),
            Some(SIGKILL),
            "killed, not ended: {status:?}"
        );
        Some(point)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Already ended is fine: there is nothing else to stop.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends orders to the stream, one every [`PACE`], until `producing` is false; returns them.
async fn produce(redis: String, producer: usize, producing: Arc<AtomicBool>) -> Vec<Order> {
    let client = redis::Client::open(redis).expect("a Redis URL");
    let mut redis = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis");
    let mut orders = Vec::new();
    while producing.load(Ordering::Relaxed) {
        let n = orders.len();
        let order = Order {
            id: format!("order-{producer}-{n}"),
            customer: format!("customer-{producer}-{n}"),
            amount: 100 + i64::try_from(n).expect("a small number"),
        };
        let json = serde_json::to_string(&order).expect("JSON");
        redis
            .xadd(STREAM, "*", &[(FIELD, json)])
            .await
            .expect("XADD");
        orders.push(order);
        tokio::time::sleep(PACE).await;
    }
    orders
}

/// Waits until the group has read every message and has none pending.
async fn drained(redis: &RedisServer) {
    let client = redis::Client::open(redis.url()).expect("a Redis URL");
    let redis = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis");
    eventually(Duration::from_secs(60), "the group drains", || {
        let mut redis = redis.clone();
        async move {
            let groups = redis.xinfo_groups(STREAM).await.expect("XINFO GROUPS");
            let group = groups.groups.iter().find(|group| group.name == GROUP);
            group.is_some_and(|group| group.pending == 0 && group.lag == Some(0))
        }
    })
    .await;
}

/// The payments example on `db`, its records in the database, each attempt's key held for
/// 1 s without a renewal (a charge a kill cut off may hold its key up to that long).
fn start_provider(db: &Path) -> ServerProcess {
    let mut provider = Command::new(workspace_binary("example-payments", "example-payments"));
    provider
        .args(["--port", "0", "--lease-ms", "1000", "--db"])
        .arg(db)
        .env_remove("IDEM_REDIS_URL")
        .env_remove("IDEM_EXAMPLE_CRASH_AFTER_COMMIT");
    ServerProcess::start(provider)
}

/// `query`'s rows of (name, count) in the SQLite file `db`.
async fn counts(db: &Path, query: &str) -> HashMap<String, usize> {
    let pool = SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .expect("the database");
    let rows: Vec<(String, i64)> = sqlx::query_as(query)
        .fetch_all(&pool)
        .await
        .expect("counts");
    pool.close().await;
    rows.into_iter()
        .map(|(name, count)| (name, usize::try_from(count).expect("a count")))
        .collect()
}
