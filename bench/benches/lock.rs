//! The distributed [`Lock`] on Redis next to a bare redis-rs client sending the same
//! commands, in the same run, round by round; and the hand-off latency when tasks contend
//! for one lock.
//!
//! Run with `cargo bench -p idem-bench --bench lock`. It starts a `redis-server` of its
//! own and prints markdown tables:
//! - lock pairs (acquire + release) per second at 50 tasks, each on a lock name of its
//!   own ("distinct keys") and all on one name ("one hot key"), for four clients on one
//!   multiplexed connection each:
//!   - bare redis-rs, plain: `SET key owner NX PX 30000`, then the compare-and-delete
//!     script by `EVALSHA`, retrying the `SET` at once while the key is taken;
//!   - an unfenced [`Lock`] (`Lock::new`): [`Lock::try_acquire`] on distinct keys,
//!     [`Lock::acquire_within`] on the hot key (waiting in the store for the release);
//!   - the store operations the unfenced lock sends, called directly, to tell the store's
//!     share from the `Lock`'s;
//!   - bare redis-rs, fenced: idem's own fenced acquire script (take the key, `INCR` its
//!     counter) by `EVALSHA`, then the same compare-and-delete;
//!   - bare redis-rs, fenced without Lua: `MULTI`, `SET NX PX GET`, `INCR`, `EXEC` in one
//!     round trip, then the same compare-and-delete (what the script costs over native
//!     commands; idem does not take this path, since an `INCR` spent on every attempt
//!     loses the token a re-entering owner must get back);
//!   - a fenced [`Lock`] (`Lock::new(..).fenced()`), used the same way;
//!
//!   each lock with its ratio to the bare client of its mode in the same round, and the
//!   median of the rounds; the fenced `Lock` over the unfenced one; and per case the CPU
//!   a pair costs this process and redis-server, and Redis's `usec_per_call` per command;
//! - the Redis commands one uncontended pair costs, per mode, from `INFO commandstats`;
//! - hand-off latency under contention: the time from a holder calling `release` to a
//!   waiting task holding the lock, median and p99, on Redis and in memory.
//!
//! Settings, from the environment: `IDEM_BENCH_TASKS` (default 50), `IDEM_BENCH_PAIRS`
//! (pairs per case and round on distinct keys, default 50000; a fifth of it on the hot
//! key), `IDEM_BENCH_ROUNDS` (default 5). Under `cargo test` (no `--bench` argument) it
//! makes one small round, to check that it works.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_bench::{
    CommandStat, benching, command_stats_in_info, cpu_in_info, env_number, process_cpu,
};
use idem_core::lock::{FencingMode, Lease};
use idem_core::store::Fencing;
use idem_core::{Acquire, Key, Lock, LockStore, MemoryStore, Owner, Store};
use idem_redis::RedisStore;
use idem_tests::{RedisServer, median, percentile};
use redis::aio::MultiplexedConnection;

/// The plain compare-and-delete release script a bare Redis lock runs.
const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// idem's fenced acquire script, as the fenced bare client runs it.
const FENCED_ACQUIRE_SCRIPT: &str = include_str!("../../idem-redis/src/scripts/acquire_fenced.lua");

const LEASE: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(60);

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
                pairs: env_number("IDEM_BENCH_PAIRS", 50_000),
                rounds: env_number("IDEM_BENCH_ROUNDS", 5),
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

/// Where the tasks of a case take their locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// Each task a lock name of its own: nobody waits.
    Distinct,
    /// All tasks one name.
    Hot,
}

impl Keys {
    fn name(self, task: usize) -> String {
        match self {
            Self::Distinct => format!("bench-{task}"),
            Self::Hot => "bench-hot".to_owned(),
        }
    }

    fn pairs(self, settings: Settings) -> usize {
        match self {
            Self::Distinct => settings.pairs,
            Self::Hot => (settings.pairs / 5).max(settings.tasks),
        }
    }
}

/// What one case measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    BarePlain,
    LockPlain,
    /// The store operations an unfenced `Lock` pair is made of, without the `Lock`.
    StorePlain,
    BareFenced,
    /// The fenced acquire without Lua: `MULTI`, `SET NX PX GET`, `INCR`, `EXEC`.
    BareFencedMulti,
    LockFenced,
}

impl Client {
    const ALL: [Self; 6] = [
        Self::BarePlain,
        Self::LockPlain,
        Self::StorePlain,
        Self::BareFenced,
        Self::BareFencedMulti,
        Self::LockFenced,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::BarePlain => "bare redis-rs, `SET NX PX` + release script",
            Self::LockPlain => "`Lock` (unfenced)",
            Self::StorePlain => {
                "store alone: `acquire`/`acquire_or_register_waiter` + `release_and_signal`"
            }
            Self::BareFenced => "bare redis-rs, fenced acquire script + release script",
            Self::BareFencedMulti => {
                "bare redis-rs, `MULTI` `SET NX PX GET` `INCR` `EXEC` + release script"
            }
            Self::LockFenced => "`Lock`, `.fenced()`",
        }
    }

    /// The bare client a lock is measured against.
    fn baseline(self) -> Option<Self> {
        match self {
            Self::LockPlain | Self::StorePlain => Some(Self::BarePlain),
            Self::LockFenced => Some(Self::BareFenced),
            Self::BareFencedMulti => Some(Self::BarePlain),
            Self::BarePlain | Self::BareFenced => None,
        }
    }
}

/// The bare client: one multiplexed connection, as the store has, and the two scripts.
struct Bare {
    conn: MultiplexedConnection,
    release: redis::Script,
    fenced_acquire: redis::Script,
}

impl Bare {
    async fn connect(url: &str) -> Arc<Self> {
        let client = redis::Client::open(url).expect("a Redis URL");
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        Arc::new(Self {
            conn,
            release: redis::Script::new(RELEASE_SCRIPT),
            fenced_acquire: redis::Script::new(FENCED_ACQUIRE_SCRIPT),
        })
    }

    /// Takes `key` for `owner` with `MULTI`/`EXEC`, drawing a token from its counter,
    /// trying again at once while another task holds it.
    async fn acquire_multi(&self, key: &str, owner: &str) {
        let mut conn = self.conn.clone();
        loop {
            let (holder, _token): (Option<String>, i64) = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(key)
                .arg(owner)
                .arg("NX")
                .arg("PX")
                .arg(LEASE.as_millis() as u64)
                .arg("GET")
                .cmd("INCR")
                .arg(format!("{key}:fence"))
                .query_async(&mut conn)
                .await
                .expect("MULTI SET INCR EXEC");
            if holder.is_none() {
                return;
            }
        }
    }

    /// Takes `key` for `owner`, trying again at once while another task holds it.
    async fn acquire(&self, key: &str, owner: &str, fenced: bool) {
        let mut conn = self.conn.clone();
        loop {
            let taken = if fenced {
                // The script answers a bare token when it took the lock.
                let answer: redis::Value = self
                    .fenced_acquire
                    .key(key)
                    .key(format!("{key}:fence"))
                    .arg(owner)
                    .arg(LEASE.as_millis() as u64)
                    .invoke_async(&mut conn)
                    .await
                    .expect("the fenced acquire script");
                matches!(answer, redis::Value::Int(_))
            } else {
                let answer: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(owner)
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE.as_millis() as u64)
                    .query_async(&mut conn)
                    .await
                    .expect("SET NX PX");
                answer.is_some()
            };
            if taken {
                return;
            }
        }
    }

    async fn release(&self, key: &str, owner: &str) {
        let mut conn = self.conn.clone();
        let released: i64 = self
            .release
            .key(key)
            .arg(owner)
            .invoke_async(&mut conn)
            .await
            .expect("the release script");
        assert_eq!(released, 1, "released by its holder");
    }
}

/// One lock pair of `lock`: `try_acquire` where nobody else wants the lock, `acquire_within`
/// where others do.
async fn lock_pair<F: FencingMode>(lock: &Lock<RedisStore, F>, keys: Keys) {
    let guard = match keys {
        Keys::Distinct => lock.try_acquire().await.expect("uncontended"),
        Keys::Hot => lock.acquire_within(WAIT).await.expect("a turn"),
    };
    assert!(guard.release().await.expect("release"));
}

/// What [`lock_pair`] sends, without the `Lock`: the same store operations, looping in
/// the store where the lock would wait.
async fn store_pair(store: &RedisStore, key: &Key, owner: &Owner, keys: Keys) {
    loop {
        let acquired = match keys {
            Keys::Distinct => store.acquire(key, owner, LEASE, Fencing::Off).await,
            Keys::Hot => {
                store
                    .acquire_or_register_waiter(key, owner, LEASE, Fencing::Off, WAIT)
                    .await
            }
        };
        match acquired.expect("acquire") {
            Acquire::Held { remaining } => {
                let within = remaining.min(Duration::from_secs(1));
                store.wait_for_release(key, within).await.expect("wait");
            }
            _ => break,
        }
    }
    assert!(store.release_and_signal(key, owner).await.expect("release"));
}

/// Pairs per second of `client` at `settings.tasks` tasks.
async fn pairs_per_second(
    store: &RedisStore,
    bare: &Arc<Bare>,
    settings: Settings,
    client: Client,
    keys: Keys,
) -> f64 {
    let total = keys.pairs(settings);
    // Tasks take pairs from one budget, so a hot key's faster tasks do not wait for slower.
    let left = Arc::new(AtomicUsize::new(total));
    let take = |left: &AtomicUsize| {
        left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    };
    let started = Instant::now();
    let tasks: Vec<_> = (0..settings.tasks)
        .map(|task| {
            let (store, bare, left) = (store.clone(), Arc::clone(bare), Arc::clone(&left));
            let name = keys.name(task);
            tokio::spawn(async move {
                let key = Key::new(name.clone()).expect("a key");
                let plain = Lock::new(store.clone(), key.clone(), Lease::Fixed(LEASE));
                let fenced = Lock::new(store.clone(), key.clone(), Lease::Fixed(LEASE)).fenced();
                let owner = plain.owner().as_str().to_owned();
                // Named as `RedisStore` names its keys, in a namespace of its own.
                let bare_key = format!("bare:{{{name}}}:lock");
                while take(&left) {
                    match client {
                        Client::BarePlain => {
                            bare.acquire(&bare_key, &owner, false).await;
                            bare.release(&bare_key, &owner).await;
                        }
                        Client::BareFenced => {
                            bare.acquire(&bare_key, &owner, true).await;
                            bare.release(&bare_key, &owner).await;
                        }
                        Client::BareFencedMulti => {
                            bare.acquire_multi(&bare_key, &owner).await;
                            bare.release(&bare_key, &owner).await;
                        }
                        Client::LockPlain => lock_pair(&plain, keys).await,
                        Client::StorePlain => {
                            store_pair(&store, &key, plain.owner(), keys).await;
                        }
                        Client::LockFenced => lock_pair(&fenced, keys).await,
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a benchmark task");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// Who released the lock last, and when.
type LastRelease = Arc<Mutex<Option<(usize, Instant)>>>;

/// `contenders` tasks take turns on one plain lock, holding it for a moment and working a
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
                    let guard = lock.acquire_within(WAIT).await.expect("a turn");
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

/// What one case cost in CPU over a run: this process's (the client's), redis-server's,
/// and Redis's own time per command (`INFO commandstats`: calls, microseconds).
#[derive(Debug, Default, Clone)]
struct CpuCost {
    pairs: usize,
    client: Duration,
    server: Duration,
    commands: BTreeMap<String, CommandStat>,
}

impl CpuCost {
    /// Runs `case`, adding what it cost to `self`.
    fn measure<T>(&mut self, server: &RedisServer, pairs: usize, case: impl FnOnce() -> T) -> T {
        let (client, redis, commands) = (process_cpu().0, redis_cpu(server), command_stats(server));
        let answer = case();
        self.pairs += pairs;
        self.client += process_cpu().0.saturating_sub(client);
        self.server += redis_cpu(server).saturating_sub(redis);
        for (name, stat) in command_stats(server) {
            let before = commands.get(&name).copied().unwrap_or_default();
            if name != "info" && stat.calls > before.calls {
                let sum = self.commands.entry(name).or_default();
                sum.calls += stat.calls - before.calls;
                sum.usec += stat.usec - before.usec;
            }
        }
        answer
    }

    /// Microseconds of `cpu` per pair.
    fn per_pair(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e6 / self.pairs.max(1) as f64
    }
}

/// redis-server's CPU time so far (`INFO cpu`, user + system).
fn redis_cpu(server: &RedisServer) -> Duration {
    cpu_in_info(&server.query::<String>(&["INFO", "cpu"]))
}

/// Calls and microseconds of each command so far, from `INFO commandstats`.
fn command_stats(server: &RedisServer) -> BTreeMap<String, CommandStat> {
    command_stats_in_info(&server.query::<String>(&["INFO", "commandstats"]))
}

/// Prints one table: every round's pairs per second, each lock's ratio to its bare
/// client of the same round, and the medians; then what a pair cost in CPU, client and
/// server, and Redis's time per command.
fn pairs_table(
    runtime: &tokio::runtime::Runtime,
    server: &RedisServer,
    store: &RedisStore,
    bare: &Arc<Bare>,
    settings: Settings,
    keys: Keys,
) {
    println!(
        "\n## Lock pairs per second on Redis, {} tasks, {}, {} pairs a case and round\n",
        settings.tasks,
        match keys {
            Keys::Distinct => "distinct keys (`try_acquire`)",
            Keys::Hot => "one hot key (`acquire_within`; bare clients retry the acquire at once)",
        },
        keys.pairs(settings)
    );
    println!(
        "| round | {} |",
        Client::ALL
            .map(|client| match client.baseline() {
                Some(_) => format!("{} (ratio)", client.name()),
                None => client.name().to_owned(),
            })
            .join(" | ")
    );
    println!("|---|{}", "---:|".repeat(Client::ALL.len()));
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); Client::ALL.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); Client::ALL.len()];
    let mut costs: Vec<CpuCost> = vec![CpuCost::default(); Client::ALL.len()];
    let mut fenced_to_plain = Vec::new();
    let position = |wanted: Client| Client::ALL.iter().position(|c| *c == wanted).unwrap();
    for round in 1..=settings.rounds {
        let mut this_round = [0.0; Client::ALL.len()];
        for (i, client) in Client::ALL.iter().enumerate() {
            this_round[i] = costs[i].measure(server, keys.pairs(settings), || {
                runtime.block_on(pairs_per_second(store, bare, settings, *client, keys))
            });
            rates[i].push(this_round[i]);
        }
        fenced_to_plain.push(
            this_round[position(Client::LockFenced)] / this_round[position(Client::LockPlain)],
        );
        let cells: Vec<String> = Client::ALL
            .iter()
            .enumerate()
            .map(|(i, client)| match client.baseline() {
                Some(baseline) => {
                    let ratio = this_round[i] / this_round[position(baseline)];
                    ratios[i].push(ratio);
                    format!("{:.0} ({ratio:.2})", this_round[i])
                }
                None => format!("{:.0}", this_round[i]),
            })
            .collect();
        println!("| {round} | {} |", cells.join(" | "));
    }
    let medians: Vec<String> = Client::ALL
        .iter()
        .enumerate()
        .map(|(i, client)| {
            let rate = median(&rates[i]);
            match client.baseline() {
                Some(_) => format!("**{rate:.0} ({:.2})**", median(&ratios[i])),
                None => format!("**{rate:.0}**"),
            }
        })
        .collect();
    println!(
        "| median (ratio: median of the rounds' ratios) | {} |",
        medians.join(" | ")
    );
    println!(
        "\n`Lock`, `.fenced()` over `Lock` (unfenced): median of the rounds' ratios **{:.2}**",
        median(&fenced_to_plain)
    );
    println!(
        "\nCPU per pair over the rounds, µs: this process (the client), redis-server \
         (`INFO cpu`), and Redis's time per call of each command (`INFO commandstats` \
         `usec_per_call`; a script's calls include the commands it calls)\n\n\
         | case | client | redis-server | usec_per_call |\n|---|---:|---:|---|"
    );
    for (client, cost) in Client::ALL.iter().zip(&costs) {
        let per_call: Vec<String> = cost
            .commands
            .iter()
            .map(|(name, stat)| format!("{name} {:.2}", stat.usec as f64 / stat.calls as f64))
            .collect();
        println!(
            "| {} | {:.2} | {:.2} | {} |",
            client.name(),
            cost.per_pair(cost.client),
            cost.per_pair(cost.server),
            per_call.join(", ")
        );
    }
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

fn main() {
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let server = RedisServer::start();
    let store = server.store();
    let bare = runtime.block_on(Bare::connect(&server.url()));
    // Warm up: the connections, the scripts, the allocator.
    let warm_up = Settings {
        pairs: settings.pairs / 10,
        ..settings
    };
    for client in Client::ALL {
        runtime.block_on(pairs_per_second(
            &store,
            &bare,
            warm_up,
            client,
            Keys::Distinct,
        ));
    }

    pairs_table(&runtime, &server, &store, &bare, settings, Keys::Distinct);
    pairs_table(&runtime, &server, &store, &bare, settings, Keys::Hot);

    let one_task = Settings {
        tasks: 1,
        pairs: 100,
        ..settings
    };
    println!("\n## Redis commands per uncontended pair (scripts' own commands included)\n");
    for client in Client::ALL {
        let before = server.command_calls();
        runtime.block_on(pairs_per_second(
            &store,
            &bare,
            one_task,
            client,
            Keys::Distinct,
        ));
        let per_pair: Vec<String> = calls_since(&before, &server.command_calls())
            .into_iter()
            .map(|(command, calls)| format!("{command} {}", calls as f64 / 100.0))
            .collect();
        println!("- {}: {}", client.name(), per_pair.join(", "));
    }

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
