//! The fair lock ([`Lock::fair`]) next to the plain [`Lock`] under the same contention:
//! what arrival order costs in throughput and hand-off, and what it buys in the longest
//! wait.
//!
//! Run with `cargo bench -p idem-bench --bench fair_lock`. It starts a `redis-server` of
//! its own and prints a markdown table per store (Redis, memory): `IDEM_BENCH_TASKS`
//! tasks (default 20) contend for one lock name for `IDEM_BENCH_SECONDS` seconds
//! (default 3) per mode and round, over `IDEM_BENCH_ROUNDS` rounds (default 3), the two
//! modes one after the other in each round. Each task, in a loop: asks for the lock
//! (`acquire_within`), holds it 100 µs (a busy wait), releases it, and then either works
//! 1 ms outside it ("steady": most contenders wait, not all) or asks again at once
//! ("saturated": a releaser may take the lock straight back, which a plain lock allows
//! and a fair one does not). Per mode, the medians over the rounds of:
//! - acquisitions per second;
//! - hand-off: from a holder calling `release` to another task holding the lock, p50 and
//!   p99;
//! - wait: from asking to holding, p50, p99 and the longest of any caller;
//! - the fewest and the most acquisitions of one task in a round.
//!
//! Under `cargo test` (no `--bench` argument) it makes one short round, to check that it
//! works.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_bench::{benching, env_number};
use idem_core::lock::{Lease, LockError, LockGuard};
use idem_core::{FairStore, Key, Lock, MemoryStore};
use idem_redis::RedisStore;
use idem_tests::{RedisServer, median, percentile};

const LEASE: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(120);
/// How long a holder keeps the lock: a busy wait, since a timer this short would sleep a
/// millisecond.
const HOLD: Duration = Duration::from_micros(100);

#[derive(Debug, Clone, Copy)]
struct Settings {
    tasks: usize,
    duration: Duration,
    rounds: usize,
}

/// What a task does between releasing the lock and asking for it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outside {
    /// Works 1 ms (a timer), so most contenders are waiting, but not all.
    Steady,
    /// Asks again at once: every contender always wants the lock, and a releaser may take
    /// it straight back.
    Saturated,
}

impl Outside {
    const ALL: [Self; 2] = [Self::Steady, Self::Saturated];

    fn describe(self) -> &'static str {
        match self {
            Self::Steady => "each works 1 ms between holds",
            Self::Saturated => "each asks again at once",
        }
    }

    async fn work(self) {
        match self {
            Self::Steady => tokio::time::sleep(Duration::from_millis(1)).await,
            Self::Saturated => tokio::task::yield_now().await,
        }
    }
}

impl Settings {
    fn from_env() -> Self {
        if benching() {
            Self {
                tasks: env_number("IDEM_BENCH_TASKS", 20),
                duration: Duration::from_secs(env_number("IDEM_BENCH_SECONDS", 3)),
                rounds: env_number("IDEM_BENCH_ROUNDS", 3),
            }
        } else {
            Self {
                tasks: 4,
                duration: Duration::from_millis(200),
                rounds: 1,
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Fair,
}

impl Mode {
    const ALL: [Self; 2] = [Self::Plain, Self::Fair];

    fn name(self) -> &'static str {
        match self {
            Self::Plain => "`Lock` (plain)",
            Self::Fair => "`Lock::fair`",
        }
    }

    async fn acquire<S: FairStore>(self, store: S, key: Key) -> Result<LockGuard<S>, LockError> {
        let lock = Lock::new(store, key, Lease::Fixed(LEASE));
        match self {
            Self::Plain => lock.acquire_within(WAIT).await,
            Self::Fair => lock.fair().acquire_within(WAIT).await,
        }
    }
}

/// What one round of one mode measured.
#[derive(Debug, Default)]
struct Round {
    acquisitions_per_second: f64,
    hand_offs: Vec<Duration>,
    waits: Vec<Duration>,
    fewest: usize,
    most: usize,
}

/// Who released the lock last, and when.
type LastRelease = Arc<Mutex<Option<(usize, Instant)>>>;

async fn round<S: FairStore + Clone>(
    store: S,
    mode: Mode,
    outside: Outside,
    settings: Settings,
    name: &str,
) -> Round {
    let key = Key::new(name).expect("a key");
    let last_release: LastRelease = Arc::default();
    let started = Instant::now();
    let until = started + settings.duration;
    let tasks: Vec<_> = (0..settings.tasks)
        .map(|me| {
            let (store, key, last_release) = (store.clone(), key.clone(), last_release.clone());
            tokio::spawn(async move {
                let (mut hand_offs, mut waits, mut in_time) = (Vec::new(), Vec::new(), 0);
                while Instant::now() < until {
                    let asked = Instant::now();
                    let guard = mode
                        .acquire(store.clone(), key.clone())
                        .await
                        .expect("a turn");
                    let now = Instant::now();
                    waits.push(now - asked);
                    if now < until {
                        in_time += 1;
                    }
                    if let Some((releaser, released_at)) = *last_release.lock().unwrap()
                        && releaser != me
                    {
                        hand_offs.push(now - released_at);
                    }
                    let holding = Instant::now();
                    while holding.elapsed() < HOLD {
                        std::hint::spin_loop();
                    }
                    *last_release.lock().unwrap() = Some((me, Instant::now()));
                    assert!(guard.release().await.expect("release"));
                    outside.work().await;
                }
                (hand_offs, waits, in_time)
            })
        })
        .collect();
    let mut round = Round {
        fewest: usize::MAX,
        ..Round::default()
    };
    let mut acquired = 0;
    for task in tasks {
        let (hand_offs, waits, in_time) = task.await.expect("a contender");
        round.hand_offs.extend(hand_offs);
        round.waits.extend(waits);
        round.fewest = round.fewest.min(in_time);
        round.most = round.most.max(in_time);
        acquired += in_time;
    }
    round.acquisitions_per_second = acquired as f64 / settings.duration.as_secs_f64();
    round.hand_offs.sort();
    round.waits.sort();
    round
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

fn table<S: FairStore + Clone>(
    runtime: &tokio::runtime::Runtime,
    store: &S,
    store_name: &str,
    outside: Outside,
    settings: Settings,
) {
    println!(
        "\n## {store_name}: {} tasks on one lock, {}; {:?} per mode and round, {} rounds (medians)\n\n\
         | mode | acquisitions/s | hand-off p50 | hand-off p99 | wait p50 | wait p99 | longest wait | fewest / most per task |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|",
        settings.tasks,
        outside.describe(),
        settings.duration,
        settings.rounds
    );
    let mut rounds: Vec<(Mode, Round)> = Vec::new();
    for r in 0..settings.rounds {
        for mode in Mode::ALL {
            let name = format!("fairness-{outside:?}-{r}-{mode:?}");
            let measured = runtime.block_on(round(store.clone(), mode, outside, settings, &name));
            rounds.push((mode, measured));
        }
    }
    for mode in Mode::ALL {
        let of_mode: Vec<&Round> = rounds
            .iter()
            .filter(|(m, _)| *m == mode)
            .map(|(_, r)| r)
            .collect();
        let pick = |f: &dyn Fn(&Round) -> Duration| {
            ms(median(&of_mode.iter().map(|r| f(r)).collect::<Vec<_>>()))
        };
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} / {} |",
            mode.name(),
            median(
                &of_mode
                    .iter()
                    .map(|r| r.acquisitions_per_second)
                    .collect::<Vec<_>>()
            ),
            pick(&|r| percentile(&r.hand_offs, 50)),
            pick(&|r| percentile(&r.hand_offs, 99)),
            pick(&|r| percentile(&r.waits, 50)),
            pick(&|r| percentile(&r.waits, 99)),
            pick(&|r| r.waits.last().copied().unwrap_or_default()),
            median(&of_mode.iter().map(|r| r.fewest).collect::<Vec<_>>()),
            median(&of_mode.iter().map(|r| r.most).collect::<Vec<_>>()),
        );
    }
}

fn main() {
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let server = RedisServer::start();
    let redis: RedisStore = server.store();
    for outside in Outside::ALL {
        table(&runtime, &redis, "RedisStore", outside, settings);
        table(
            &runtime,
            &MemoryStore::new(),
            "MemoryStore",
            outside,
            settings,
        );
    }
}
