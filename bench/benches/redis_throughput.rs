//! Throughput of [`RedisStore`] acquire + release at 50 concurrent tasks, beside
//! `redis-benchmark -c 50 -t set` measured against the same server in the same run.
//!
//! Run with `cargo bench -p idem-bench --bench redis_throughput`. It starts a
//! `redis-server` of its own, then alternates, round by round, `redis-benchmark` and our
//! loop (tasks on a multi-thread tokio runtime sharing one [`RedisStore`], each pair an
//! `acquire` with [`Fencing::Off`] on a fresh key and its `release`), and prints markdown
//! tables:
//! - operations per second (an acquire and a release count one each), pairs per second,
//!   and our ratio to `redis-benchmark`, round by round and the median;
//! - CPU time per operation, of redis-server (`INFO cpu`) and of the client (this process
//!   or `redis-benchmark`, from `/proc/self/stat`), since on a small machine both share
//!   the same cores;
//! - the Redis commands one pair costs, from `INFO commandstats`.
//!
//! Settings, from the environment: `IDEM_BENCH_TASKS` (default 50, also `redis-benchmark
//! -c`), `IDEM_BENCH_OPS` (operations per round, default 200000, also `redis-benchmark
//! -n`), `IDEM_BENCH_ROUNDS` (default 3). Under `cargo test` (no `--bench` argument) it
//! makes one small round, to check that it works.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem_bench::{
    BenchRounds, CommandStat, REDIS_BENCHMARK_HINT, command_stats_in_info, cpu_in_info,
    process_cpu, redis_benchmark_binary, requests_per_second,
};
use idem_core::store::Fencing;
use idem_core::{Acquire, Key, LockStore, Owner};
use idem_redis::RedisStore;
use idem_tests::{RedisServer, median};

const LOCK_TTL: Duration = Duration::from_secs(30);

/// An acquire and a release make a pair.
fn pairs(settings: BenchRounds) -> u64 {
    assert!(
        settings.ops >= 2,
        "IDEM_BENCH_OPS must be at least 2: a pair"
    );
    settings.ops / 2
}

/// `SET` requests per second, as `redis-benchmark -q` reports them.
fn run_redis_benchmark(binary: &Path, server: &RedisServer, settings: BenchRounds) -> f64 {
    let output = Command::new(binary)
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-c", &settings.tasks.to_string()])
        .args(["-n", &settings.ops.to_string()])
        .args(["-t", "set", "-q"])
        .output()
        .unwrap_or_else(|error| panic!("could not run {}: {error}", binary.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "redis-benchmark failed ({}): {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    requests_per_second(&stdout)
        .unwrap_or_else(|| panic!("no \"requests per second\" in redis-benchmark's {stdout:?}"))
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

/// `pairs` acquire + release pairs on fresh keys, spread over `tasks` tasks; the time
/// they took.
async fn run_ours(store: &RedisStore, tasks: u64, pairs: u64) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let store = store.clone();
            // The first `pairs % tasks` tasks take one pair more, so the total is exact.
            let share = pairs / tasks + u64::from(task < pairs % tasks);
            tokio::spawn(async move {
                // Keys are fresh, so one owner per task is as good as one per request, and
                // keeps the OS random generator out of the loop.
                let owner = Owner::random();
                for _ in 0..share {
                    let n = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
                    let key = Key::hashed([n.to_le_bytes()]);
                    let acquired = store
                        .acquire(&key, &owner, LOCK_TTL, Fencing::Off)
                        .await
                        .expect("acquire");
                    assert_eq!(acquired, Acquire::Acquired { fence: None });
                    assert!(store.release(&key, &owner).await.expect("release"));
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("a benchmark task");
    }
    start.elapsed()
}

/// What the server and the machine have done so far; the difference of two readings is
/// what happened in between.
#[derive(Debug, Clone, Default)]
struct Reading {
    /// `INFO commandstats`: calls and microseconds per command.
    commands: BTreeMap<String, CommandStat>,
    /// redis-server's CPU time, user and system (`INFO cpu`).
    server_cpu: Duration,
    /// This process' CPU time.
    own_cpu: Duration,
    /// The CPU time of this process' finished children (`redis-benchmark`).
    children_cpu: Duration,
}

impl Reading {
    fn take(server: &RedisServer) -> Self {
        let (own_cpu, children_cpu) = process_cpu();
        Self {
            commands: command_stats(server),
            server_cpu: server_cpu(server),
            own_cpu,
            children_cpu,
        }
    }

    /// Adds `later - self` to `total`.
    fn add_delta(&self, later: &Self, total: &mut Self) {
        for (name, stat) in &later.commands {
            let earlier = self.commands.get(name).copied().unwrap_or_default();
            let sum = total.commands.entry(name.clone()).or_default();
            sum.calls += stat.calls - earlier.calls;
            sum.usec += stat.usec - earlier.usec;
        }
        total.server_cpu += later.server_cpu.saturating_sub(self.server_cpu);
        total.own_cpu += later.own_cpu.saturating_sub(self.own_cpu);
        total.children_cpu += later.children_cpu.saturating_sub(self.children_cpu);
    }
}

fn command_stats(server: &RedisServer) -> BTreeMap<String, CommandStat> {
    // `RedisServer::command_calls` reads only the calls; the microseconds show where the
    // server's time goes.
    command_stats_in_info(&server.query::<String>(&["INFO", "commandstats"]))
}

fn server_cpu(server: &RedisServer) -> Duration {
    cpu_in_info(&server.query::<String>(&["INFO", "cpu"]))
}

/// The share of CPU time, over all cores, that the hypervisor gave to someone else
/// (`steal`) and that nobody used (`idle`), between two readings of `/proc/stat`.
#[derive(Debug, Clone, Copy)]
struct MachineShares {
    steal: f64,
    idle: f64,
}

fn cpu_counters() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let total = stat.lines().next()?.strip_prefix("cpu ")?;
    total
        .split_whitespace()
        .map(|field| field.parse().ok())
        .collect()
}

fn machine_shares(before: &[u64], after: &[u64]) -> Option<MachineShares> {
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let delta = |i: usize| Some(after.get(i)?.saturating_sub(*before.get(i)?) as f64);
    let total: f64 = (0..8).map(delta).sum::<Option<f64>>()?;
    (total > 0.0).then_some(MachineShares {
        steal: delta(7)? / total,
        idle: (delta(3)? + delta(4)?) / total,
    })
}

fn main() {
    let settings = BenchRounds::from_env(50, 200_000, 2_000);
    // Before starting the server: exiting here leaves no redis-server behind.
    let Some(redis_benchmark) = redis_benchmark_binary() else {
        eprintln!("{REDIS_BENCHMARK_HINT}");
        std::process::exit(1);
    };
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store = server.store();
    // Connects and loads the release script, so no round pays for either.
    runtime.block_on(run_ours(&store, settings.tasks, settings.tasks));

    let pairs = pairs(settings);
    let (mut theirs, mut ours) = (Vec::new(), Vec::new());
    let (mut theirs_total, mut ours_total) = (Reading::default(), Reading::default());
    let machine_before = cpu_counters();
    for _ in 0..settings.rounds {
        let before = Reading::take(&server);
        theirs.push(run_redis_benchmark(&redis_benchmark, &server, settings));
        let between = Reading::take(&server);
        let elapsed = runtime.block_on(run_ours(&store, settings.tasks, pairs));
        let after = Reading::take(&server);
        before.add_delta(&between, &mut theirs_total);
        between.add_delta(&after, &mut ours_total);
        ours.push(2.0 * pairs as f64 / elapsed.as_secs_f64());
    }
    let machine = machine_before
        .zip(cpu_counters())
        .and_then(|(before, after)| machine_shares(&before, &after));

    println!(
        "RedisStore acquire (Fencing::Off, fresh key) + release, {} tasks, {} operations a \
         round; `redis-benchmark -c {} -n {} -t set`\n",
        settings.tasks, settings.ops, settings.tasks, settings.ops
    );
    println!(
        "| round | redis-benchmark SET/s | ours ops/s | ours pairs/s | ratio ours/redis-benchmark |"
    );
    println!("|---|---:|---:|---:|---:|");
    let ratios: Vec<f64> = ours.iter().zip(&theirs).map(|(o, t)| o / t).collect();
    for (round, ((theirs, ours), ratio)) in theirs.iter().zip(&ours).zip(&ratios).enumerate() {
        let ours_pairs = ours / 2.0;
        println!(
            "| {} | {theirs:.0} | {ours:.0} | {ours_pairs:.0} | {ratio:.2} |",
            round + 1
        );
    }
    // Each round's ratio compares two runs seconds apart, so its median shrugs off the
    // machine's slow drifts better than a ratio of the two medians would.
    println!(
        "| **median** | {:.0} | {:.0} | {:.0} | **{:.2}** |",
        median(&theirs),
        median(&ours),
        median(&ours) / 2.0,
        median(&ratios)
    );

    let ops_total = (settings.ops * settings.rounds as u64) as f64;
    let pairs_total = (pairs * settings.rounds as u64) as f64;
    let per_op = |cpu: Duration, ops: f64| cpu.as_secs_f64() * 1e6 / ops;
    println!(
        "\nCPU time per operation (all rounds; a SET for redis-benchmark, an acquire or a \
         release for ours)\n"
    );
    println!("| client | redis-server µs/op | client µs/op |");
    println!("|---|---:|---:|");
    println!(
        "| redis-benchmark | {:.2} | {:.2} |",
        per_op(theirs_total.server_cpu, ops_total),
        per_op(theirs_total.children_cpu, ops_total)
    );
    println!(
        "| ours | {:.2} | {:.2} |",
        per_op(ours_total.server_cpu, 2.0 * pairs_total),
        per_op(ours_total.own_cpu, 2.0 * pairs_total)
    );
    if let Some(MachineShares { steal, idle }) = machine {
        println!(
            "\nWhole run, all cores: {:.1}% stolen by the hypervisor, {:.1}% idle.",
            steal * 100.0,
            idle * 100.0
        );
    }

    println!(
        "\nRedis commands per acquire + release pair ({pairs_total} pairs, `INFO \
         commandstats` around each of our rounds)\n"
    );
    println!("| command | calls per pair | server µs per call | sent by |");
    println!("|---|---:|---:|---|");
    let named = [
        ("set", "client: `acquire` (`SET NX PX GET`)"),
        ("evalsha", "client: `release` (release.lua)"),
        ("get", "release.lua, inside `EVALSHA` (not a round trip)"),
        ("del", "release.lua, inside `EVALSHA` (not a round trip)"),
    ];
    for (name, sent_by) in named {
        let stat = ours_total.commands.get(name).copied().unwrap_or_default();
        println!(
            "| `{name}` | {:.3} | {:.2} | {sent_by} |",
            stat.calls as f64 / pairs_total,
            stat.usec as f64 / stat.calls.max(1) as f64
        );
    }
    let others: u64 = ours_total
        .commands
        .iter()
        .filter(|(name, _)| !named.iter().any(|(known, _)| name == known))
        .map(|(_, stat)| stat.calls)
        .sum();
    println!(
        "\nOther commands in the same windows, in all: {others} (this bench's own `INFO` \
         calls)."
    );
}
