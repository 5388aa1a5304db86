//! The distributed [`Lock`] on Redis: uncontended acquire + release pairs per second at 50
//! concurrent tasks beside `redis-benchmark` running the same two steps a plain Redis
//! lock takes (`SET key owner NX PX`, then the compare-and-delete script by `EVALSHA`) on
//! the same server in the same run; and the hand-off latency when tasks contend for one
//! lock.
//!
//! Run with `cargo bench -p idem-tests --bench lock`. It starts a `redis-server` of its
//! own and prints markdown tables:
//! - pairs per second, round by round and the median, for `redis-benchmark` (its `SET` and
//!   `EVALSHA` rates combined into pairs: one pair takes `1/set + 1/evalsha` seconds), for
//!   [`Lock`] with a fixed lease, with a watchdog lease (a watchdog task per hold), and for
//!   the two store operations a lock pair is made of, without the `Lock` around them
//!   (`acquire` with [`Fencing::On`], `release_and_signal`); each with its ratio to
//!   `redis-benchmark`;
//! - the Redis commands one lock pair costs, from `INFO commandstats`;
//! - hand-off latency under contention: the time from a holder calling `release` to a
//!   waiting task holding the lock, median and p99, on Redis and in memory.
//!
//! Settings, from the environment: `IDEM_BENCH_TASKS` (default 50, also `redis-benchmark
//! -c`), `IDEM_BENCH_PAIRS` (pairs per round, default 100000, also `redis-benchmark -n`),
//! `IDEM_BENCH_ROUNDS` (default 3). Under `cargo test` (no `--bench` argument) it makes one
//! small round, to check that it works.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_core::{Acquire, Fencing, Key, Lease, Lock, MemoryStore, Owner, RedisStore, Store};
use idem_tests::{RedisServer, benching, env_number};

/// The plain compare-and-delete release script, as `redis-benchmark` runs it.
const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

const LEASE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
struct Settings {
    tasks: usize,
    pairs: usize,
    rounds: usize,
    /// Hand-offs to measure per store.
    hand_offs: usize,
}

impl Settings {
    fn from_env() -> Self {
        if benching() {
            Self {
                tasks: env_number("IDEM_BENCH_TASKS", 50),
                pairs: env_number("IDEM_BENCH_PAIRS", 100_000),
                rounds: env_number("IDEM_BENCH_ROUNDS", 3),
                hand_offs: 2_000,
            }
        } else {
            Self {
                tasks: 10,
                pairs: 1_000,
                rounds: 1,
                hand_offs: 50,
            }
        }
    }
}

fn redis_benchmark_binary() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|dir| dir.join("redis-benchmark"))
        .find(|path| path.is_file())
        .expect(
            "redis-benchmark was not found: this benchmark compares the lock with it. \
             Install it with redis-server (`apt-get install redis-server`, `brew install redis`).",
        )
}

/// Requests per second of one command, as `redis-benchmark --csv` reports it.
fn redis_benchmark(server: &RedisServer, settings: Settings, command: &[&str]) -> f64 {
    let output = Command::new(redis_benchmark_binary())
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-c", &settings.tasks.to_string()])
        .args(["-n", &settings.pairs.to_string()])
        .args(["-r", "1000000", "--csv"])
        .args(command)
        .output()
        .expect("redis-benchmark runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "redis-benchmark failed: {stdout}");
    // `"test","rps",…` then `"SET …","123456.79",…`.
    stdout
        .lines()
        .nth(1)
        .and_then(|line| line.split(',').nth(1))
        .and_then(|rps| rps.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("no requests per second in {stdout:?}"))
}

/// `redis-benchmark`'s rates: `SET NX PX`, the release script, and the pairs per second
/// of the two in turn (one pair takes `1/set + 1/release` seconds).
fn redis_benchmark_pairs(server: &RedisServer, settings: Settings, sha: &str) -> (f64, f64, f64) {
    let set = redis_benchmark(
        server,
        settings,
        &["SET", "lock:__rand_int__", "owner", "NX", "PX", "30000"],
    );
    let release = redis_benchmark(
        server,
        settings,
        &["EVALSHA", sha, "1", "lock:__rand_int__", "owner"],
    );
    (set, release, 1.0 / (1.0 / set + 1.0 / release))
}

/// What one pair of a measured loop does.
#[derive(Debug, Clone, Copy)]
enum Pair {
    Lock(Lease),
    /// The store operations a lock pair is made of, without the `Lock`.
    StoreOperations,
}

impl Pair {
    fn name(self) -> &'static str {
        match self {
            Self::Lock(Lease::Fixed(_)) => "`Lock`, fixed lease",
            Self::Lock(Lease::Watchdog(_)) => "`Lock`, watchdog lease",
            Self::StoreOperations => "store: fenced `acquire` + `release_and_signal`",
        }
    }
}

/// Pairs per second of `pair` at `settings.tasks` tasks, each on its own key (uncontended).
async fn pairs_per_second(store: &RedisStore, settings: Settings, pair: Pair) -> f64 {
    let per_task = settings.pairs / settings.tasks;
    let started = Instant::now();
    let tasks: Vec<_> = (0..settings.tasks)
        .map(|task| {
            let store = store.clone();
            let key = Key::new(format!("bench-{task}")).expect("a key");
            tokio::spawn(async move {
                match pair {
                    Pair::Lock(lease) => {
                        let lock = Lock::new(store, key, lease);
                        for _ in 0..per_task {
                            let guard = lock.try_acquire().await.expect("uncontended");
                            assert!(guard.release().await.expect("release"));
                        }
                    }
                    Pair::StoreOperations => {
                        let owner = Owner::random();
                        for _ in 0..per_task {
                            let acquired = store.acquire(&key, &owner, LEASE, Fencing::On).await;
                            assert!(matches!(acquired, Ok(Acquire::Acquired { .. })));
                            assert!(
                                store
                                    .release_and_signal(&key, &owner)
                                    .await
                                    .expect("release")
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a benchmark task");
    }
    (per_task * settings.tasks) as f64 / started.elapsed().as_secs_f64()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Calls per command between two readings, without the `INFO` that read them.
fn calls_since(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(name, calls)| (name.clone(), calls - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, calls)| *calls > 0)
        .collect()
}

/// Who released the lock last, and when.
type LastRelease = Arc<Mutex<Option<(usize, Instant)>>>;

/// `contenders` tasks take turns on one lock, holding it for a moment and working a
/// moment outside it; each time a task takes the lock from another, the time since that
/// one called `release` is one hand-off.
async fn hand_offs<S: Store + Clone>(store: S, contenders: usize, wanted: usize) -> Vec<Duration> {
    let last_release: LastRelease = Arc::default();
    let samples = Arc::new(Mutex::new(Vec::with_capacity(wanted)));
    let tasks: Vec<_> = (0..contenders)
        .map(|me| {
            let lock = Lock::new(
                store.clone(),
                Key::new("contended").expect("a key"),
                Lease::Watchdog(LEASE),
            );
            let (last_release, samples) = (last_release.clone(), samples.clone());
            tokio::spawn(async move {
                loop {
                    let guard = lock
                        .acquire_within(Duration::from_secs(60))
                        .await
                        .expect("a turn");
                    let now = Instant::now();
                    let previous = *last_release.lock().unwrap();
                    let enough = {
                        let mut samples = samples.lock().unwrap();
                        if let Some((releaser, released_at)) = previous
                            && releaser != me
                        {
                            samples.push(now - released_at);
                        }
                        samples.len() >= wanted
                    };
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    *last_release.lock().unwrap() = Some((me, Instant::now()));
                    assert!(guard.release().await.expect("release"));
                    if enough {
                        return;
                    }
                    // Work outside the lock, so that waiters, not the releaser, take it.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a contender");
    }
    let mut samples = std::mem::take(&mut *samples.lock().unwrap());
    samples.sort();
    samples
}

fn main() {
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let server = RedisServer::start();
    let store = server.store();
    let sha: String = server.query(&["SCRIPT", "LOAD", RELEASE_SCRIPT]);
    let pairs = [
        Pair::Lock(Lease::Fixed(LEASE)),
        Pair::Lock(Lease::Watchdog(LEASE)),
        Pair::StoreOperations,
    ];

    // Warm up: the connection, the scripts, the allocator.
    runtime.block_on(pairs_per_second(&store, settings, pairs[0]));

    let mut benchmark = Vec::new();
    let mut ours: Vec<Vec<f64>> = vec![Vec::new(); pairs.len()];
    println!(
        "## Uncontended lock pairs on Redis, {} tasks, {} pairs a round\n",
        settings.tasks, settings.pairs
    );
    println!(
        "| round | redis-benchmark `SET NX`/s | redis-benchmark `EVALSHA` release/s | redis-benchmark pairs/s | {} |",
        pairs
            .map(|pair| format!("{}, pairs/s (ratio)", pair.name()))
            .join(" | ")
    );
    println!("|---|---|---|---|{}", "---|".repeat(pairs.len()));
    for round in 1..=settings.rounds {
        let (set, release, reference) = redis_benchmark_pairs(&server, settings, &sha);
        benchmark.push(reference);
        let mut cells = Vec::new();
        for (pair, results) in pairs.iter().zip(&mut ours) {
            let rate = runtime.block_on(pairs_per_second(&store, settings, *pair));
            results.push(rate);
            cells.push(format!("{rate:.0} ({:.2})", rate / reference));
        }
        println!(
            "| {round} | {set:.0} | {release:.0} | {reference:.0} | {} |",
            cells.join(" | ")
        );
    }
    let reference = median(&mut benchmark);
    let medians: Vec<String> = ours
        .iter_mut()
        .map(|results| {
            let rate = median(results);
            format!("**{rate:.0} ({:.2})**", rate / reference)
        })
        .collect();
    println!(
        "| median | | | **{reference:.0}** | {} |",
        medians.join(" | ")
    );

    let before = server.command_calls();
    let one_task = Settings {
        tasks: 1,
        pairs: 100,
        ..settings
    };
    runtime.block_on(pairs_per_second(&store, one_task, pairs[0]));
    let per_pair: Vec<String> = calls_since(&before, &server.command_calls())
        .into_iter()
        .map(|(command, calls)| format!("{command} {}", calls as f64 / 100.0))
        .collect();
    println!(
        "\nRedis commands per lock pair (scripts' own commands included): {}",
        per_pair.join(", ")
    );

    println!(
        "\n## Hand-off under contention: `release` → the next task holds the lock\n\n\
         | store | contenders | hand-offs | median | p99 |\n|---|---|---|---|---|"
    );
    for (name, samples) in [
        (
            "RedisStore",
            runtime.block_on(hand_offs(store.clone(), 10, settings.hand_offs)),
        ),
        (
            "MemoryStore",
            runtime.block_on(hand_offs(MemoryStore::new(), 10, settings.hand_offs)),
        ),
    ] {
        println!(
            "| {name} | 10 | {} | {:?} | {:?} |",
            samples.len(),
            percentile(&samples, 50),
            percentile(&samples, 99)
        );
    }
}
