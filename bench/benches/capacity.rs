//! The measurements behind the capacity model (`idem-axum/src/guide/capacity.md`;
//! BENCHMARKS.md section 16): what one guarded request costs the store it runs on, in
//! commands, CPU time, statements and memory, for every guard.
//!
//! Run with `bash bench/capacity.sh`, which writes `bench/results/capacity.md`, or with
//! `cargo bench -p idem-bench --bench capacity`. Each guarded request here is the store
//! calls its guard makes, in order, without HTTP around them (the guard's own code is in
//! `idem-axum`):
//!
//! - avoid_repeat expire: `acquire` (no fencing) of a new key for the 2 s window;
//! - avoid_repeat finish: the same, then `release`;
//! - form token: `put_token` (the page), then `consume_token` (the post), 10,000 clients;
//! - idempotency first request: `begin_record` of a new key, then `complete_record` with
//!   a 512-byte response;
//! - idempotency replay: `begin_record` of one of 1,000 completed records, once each
//!   before the run (on Redis: with the default replay copy, and without it);
//! - lock: `Lock::new` with a fixed lease, `try_acquire`, `release`.
//!
//! Parts (`IDEM_CAPACITY`, comma-separated; default all):
//!
//! - `redis`: the commands each request sends (a `MONITOR` of 200 requests: round trips,
//!   scripts, the calls inside them); redis-server's CPU time per request (`INFO cpu`) with
//!   `IDEM_BENCH_TASKS` tasks (default 50) sharing one `RedisStore`, with eight times as
//!   many, and with one replica attached; and `redis-benchmark` on the same server, one
//!   `SET … NX PX … GET`
//!   and one `EVALSHA` of `complete_record.lua` on a missing record (a script's least:
//!   one `GET`) per request on random keys, unpipelined and 16 deep, to bracket what
//!   batching changes. redis-server is pinned to CPU 1 and this
//!   process (and `redis-benchmark`, and the replica) to CPU 0 with `taskset`, where the
//!   machine has two CPUs.
//! - `postgres`: requests per second of each guard on `PostgresStore` with PostgreSQL's
//!   own durability (`fsync`, `synchronous_commit`, `full_page_writes` on), 16 tasks on the
//!   store's pool (10 connections), beside a bare single-row `INSERT` at the same
//!   concurrency, and the transaction ids each request consumes (its writing statements).
//! - `memory`: bytes per live entry of each kind: `MemoryStore` (`bytes_held` and the
//!   growth of the process' resident memory, one child process per kind and repeat),
//!   Redis (`used_memory` growth per entry, and `MEMORY USAGE` of a sample key), and
//!   PostgreSQL (`pg_table_size` and `pg_indexes_size` per row), and SQLite (the
//!   database file's pages in use per entry). A completed record
//!   holds what `IdempotencyLayer` stores for a typical JSON answer: `201 Created`,
//!   `Content-Type: application/json` and a 512-byte order (`bench/src/order.json`).
//!   `IDEM_CAPACITY_KINDS` (comma-separated `Debug` names, e.g. `RecordCompleted`)
//!   measures only those kinds.
//!
//! Every figure is taken `IDEM_BENCH_ROUNDS` times (default 3) and printed as the median
//! with the lowest and highest. `IDEM_BENCH_OPS` (default 100,000) is the requests per
//! case and round on Redis; PostgreSQL runs a twentieth of it; memory fills
//! `IDEM_CAPACITY_ENTRIES` entries per kind (default 1,000,000 in memory, a tenth of it
//! in Redis and PostgreSQL). Under `cargo test` (no `--bench` argument) every part makes
//! one small round, to check that it works.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::future::Future;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_bench::{
    BenchRounds, REDIS_BENCHMARK_HINT, benching, cpu_in_info, env_number, info_field, pin,
    process_cpu, redis_benchmark_binary, requests_per_second, resident_bytes,
};
use idem_core::Lock;
use idem_core::lock::Lease;
use idem_core::store::Fencing;
use idem_core::{Acquire, Begin, Fingerprint, Key, MemoryStore, Owner, Store, TokenStore};
use idem_redis::RedisStore;
use idem_tests::{PostgresServer, RedisServer, median};
use tokio::runtime::Runtime;

/// An `#[avoid_repeat]` window, and a lock's lease, as the HTTP bench sets them.
const WINDOW: Duration = Duration::from_secs(2);
/// A form token's life and how many a client keeps: the defaults.
const TOKEN_TTL: Duration = Duration::from_secs(30 * 60);
const TOKENS_PER_CLIENT: usize = 16;
/// The clients whose tokens the form-token requests spread over.
const CLIENTS: u64 = 10_000;
/// A first attempt's lease: the default.
const LEASE: Duration = Duration::from_secs(10);
/// How long a completed record is kept here: long enough to outlive a run.
const RETENTION: Duration = Duration::from_secs(3600);
/// The stored response of every record.
const RESPONSE_LEN: usize = 512;
/// The completed records the replays ask for.
const REPLAYED: u64 = 1_000;

/// The body of the typical JSON answer a completed record keeps in the memory part.
const ORDER_JSON: &str = include_str!("../src/order.json");

/// What `IdempotencyLayer` stores for a `201 Created` answer with
/// `Content-Type: application/json` and [`ORDER_JSON`]: one request through the layer on a
/// `MemoryStore`, then its record read back, in a thread of its own (the callers run
/// inside a runtime).
fn typical_record() -> Bytes {
    static RECORD: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    let stored = || {
        use axum::http::{Method, Request, StatusCode, header::CONTENT_TYPE};
        use idem_axum::identity::ClientId;
        use idem_core::{RecordState, RecordStore};
        use tower::ServiceExt;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async {
            let idem = idem_bench::bench_idem(MemoryStore::new());
            let answer = || async {
                let json = [(CONTENT_TYPE, "application/json")];
                (StatusCode::CREATED, json, ORDER_JSON)
            };
            let route = axum::routing::post(answer).route_layer(idem_axum::IdempotencyLayer::new());
            let app = axum::Router::new()
                .route("/orders", route)
                .layer(idem.layer());
            let request = Request::post("/orders")
                .header(&idem_bench::CLIENT, "client-1")
                .header("idempotency-key", "k-1")
                .body(axum::body::Body::empty())
                .expect("a request");
            let answered = app.oneshot(request).await.expect("an answer");
            assert_eq!(answered.status(), StatusCode::CREATED);
            let client = ClientId::new("client-1");
            let keys = idem.record_keys();
            let key = keys.idempotency(&Method::POST, "/orders", Some(&client), "k-1");
            match idem.store().record_state(&key).await {
                Ok(Some(RecordState::Completed { response, .. })) => response,
                other => panic!("the record of the typical answer: {other:?}"),
            }
        })
    };
    RECORD
        .get_or_init(|| std::thread::spawn(stored).join().expect("the record"))
        .clone()
}

/// The child process' environment variable: the kind of entry to fill a `MemoryStore`
/// with, then report on.
const MEMORY_CHILD: &str = "IDEM_CAPACITY_MEMORY_CHILD";

/// What one guarded request asks of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    Expire,
    Finish,
    FormToken,
    First,
    Replay,
    Lock,
}

impl Guard {
    fn name(self) -> &'static str {
        match self {
            Self::Expire => "avoid_repeat expire",
            Self::Finish => "avoid_repeat finish",
            Self::FormToken => "form token issue+verify",
            Self::First => "idempotency first request",
            Self::Replay => "idempotency replay",
            Self::Lock => "lock acquire+release",
        }
    }
}

/// What the requests of one case and round share.
struct Work {
    /// Makes this round's keys its own.
    salt: Owner,
    fingerprint: Fingerprint,
    response: Bytes,
    /// The completed records a replay asks for.
    completed: Arc<Vec<Key>>,
}

impl Work {
    fn new(completed: &Arc<Vec<Key>>) -> Arc<Self> {
        Arc::new(Self {
            salt: Owner::random(),
            fingerprint: Fingerprint::of(["POST", "/orders", r#"{"item":"book"}"#]),
            response: Bytes::from(vec![b'x'; RESPONSE_LEN]),
            completed: Arc::clone(completed),
        })
    }

    /// The `n`th new key of this round, hashed as a guard hashes its key parts.
    fn key(&self, n: u64) -> Key {
        Key::hashed([self.salt.as_str().as_bytes(), &n.to_le_bytes()])
    }
}

/// Sends request `n` of `guard`: the store calls the guard makes, checking each answer.
async fn request<S: Store + Clone>(guard: Guard, store: &S, work: &Work, n: u64) {
    match guard {
        Guard::Expire | Guard::Finish => {
            let (key, owner) = (work.key(n), Owner::random());
            let taken = store.acquire(&key, &owner, WINDOW, Fencing::Off).await;
            assert!(matches!(taken, Ok(Acquire::Acquired { .. })), "{taken:?}");
            if guard == Guard::Finish {
                assert_eq!(store.release(&key, &owner).await.ok(), Some(true));
            }
        }
        Guard::FormToken => {
            let client = (n % CLIENTS).to_le_bytes();
            let scope = Key::hashed([b"form_tokens".as_slice(), &client]);
            let token = work.key(n);
            let put = store.put_token(&scope, &token, TOKEN_TTL, TOKENS_PER_CLIENT);
            put.await.expect("put_token");
            assert_eq!(store.consume_token(&scope, &token).await.ok(), Some(true));
        }
        Guard::First => {
            let (key, owner) = (work.key(n), Owner::random());
            let begun = store.begin_record(&key, &owner, &work.fingerprint, LEASE);
            assert!(matches!(begun.await, Ok(Begin::Started)));
            let done = store.complete_record(&key, &owner, work.response.clone(), RETENTION);
            assert_eq!(done.await.ok(), Some(true));
        }
        Guard::Replay => {
            let key = &work.completed[(n % work.completed.len() as u64) as usize];
            let owner = Owner::random();
            let begun = store.begin_record(key, &owner, &work.fingerprint, LEASE);
            assert!(matches!(begun.await, Ok(Begin::Completed { .. })));
        }
        Guard::Lock => {
            let lock = Lock::new(store.clone(), work.key(n), Lease::Fixed(WINDOW));
            let held = lock.try_acquire().await.expect("a free lock");
            assert_eq!(held.release().await.ok(), Some(true));
        }
    }
}

/// Completes [`REPLAYED`] records on `store` for the replays to ask for.
async fn completed_records<S: Store + Clone>(store: &S) -> Arc<Vec<Key>> {
    let work = Work::new(&Arc::new(Vec::new()));
    for n in 0..REPLAYED {
        request(Guard::First, store, &work, n).await;
    }
    Arc::new((0..REPLAYED).map(|n| work.key(n)).collect())
}

/// Runs `op(context, n)` for `n` in `0..count` from `tasks` tasks, each running its share
/// one after the other; the time it took.
async fn spread<T, F, Fut>(context: T, tasks: u64, count: u64, op: F) -> Duration
where
    T: Clone + Send + 'static,
    F: Fn(T, u64) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks.min(count))
        .map(|task| {
            let context = context.clone();
            tokio::spawn(async move {
                let mut n = task;
                while n < count {
                    op(context.clone(), n).await;
                    n += tasks;
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("a bench task");
    }
    started.elapsed()
}

/// Sends requests `0..requests` of `guard` from `tasks` tasks; the time they took.
async fn run<S: Store + Clone>(
    guard: Guard,
    store: &S,
    work: &Arc<Work>,
    tasks: u64,
    requests: u64,
) -> Duration {
    let context = (store.clone(), Arc::clone(work));
    spread(
        context,
        tasks,
        requests,
        move |(store, work), n| async move {
            request(guard, &store, &work, n).await;
        },
    )
    .await
}

/// Figures of several rounds, shown as the median with the lowest and highest.
#[derive(Debug, Default, Clone)]
struct Spread(Vec<f64>);

impl Spread {
    fn push(&mut self, value: f64) {
        self.0.push(value);
    }

    fn median(&self) -> f64 {
        if self.0.is_empty() {
            f64::NAN
        } else {
            median(&self.0)
        }
    }

    /// `median [lowest–highest]`, with `decimals` decimals.
    fn show(&self, decimals: usize) -> String {
        let (low, high) = self
            .0
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                (l.min(v), h.max(v))
            });
        format!(
            "{:.decimals$} [{low:.decimals$}–{high:.decimals$}]",
            self.median()
        )
    }
}

/// What runs the requests: a runtime, the settings, and the rounds to take.
struct Bench {
    runtime: Runtime,
    settings: BenchRounds,
}

impl Bench {
    fn new(settings: BenchRounds) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        Self { runtime, settings }
    }
}

fn main() {
    if let Ok(kind) = std::env::var(MEMORY_CHILD) {
        memory_child(&kind);
        return;
    }
    let settings = BenchRounds::from_env(50, 100_000, 1_000);
    let parts = std::env::var("IDEM_CAPACITY").unwrap_or_else(|_| "redis,postgres,memory".into());
    let parts: Vec<&str> = parts.split(',').map(str::trim).collect();
    println!(
        "Capacity measurements: {} round(s), {} tasks; {}.\n",
        settings.rounds,
        settings.tasks,
        machine()
    );
    if parts.contains(&"redis") {
        redis_part(settings);
    }
    if parts.contains(&"postgres") {
        postgres_part(settings);
    }
    if parts.contains(&"memory") {
        memory_part(settings);
    }
}

/// The machine, as the report states it.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!(
        "{cpus} CPU(s), load average {} at the start",
        load.join(" ")
    )
}

// ---------------------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------------------

/// A Redis case: a guard, and whether the store keeps its copy of replayed records.
#[derive(Debug, Clone, Copy)]
struct RedisCase {
    guard: Guard,
    replay_copy: bool,
}

impl RedisCase {
    const ALL: [Self; 7] = [
        Self::of(Guard::Expire),
        Self::of(Guard::Finish),
        Self::of(Guard::FormToken),
        Self::of(Guard::First),
        Self::of(Guard::Replay),
        Self {
            guard: Guard::Replay,
            replay_copy: false,
        },
        Self::of(Guard::Lock),
    ];

    const fn of(guard: Guard) -> Self {
        Self {
            guard,
            replay_copy: true,
        }
    }

    fn name(self) -> String {
        let copy = if self.replay_copy || self.guard != Guard::Replay {
            ""
        } else {
            ", without the replay copy"
        };
        format!("{}{copy}", self.guard.name())
    }
}

/// The Redis stores of a run: with the replay copy (the default) and without it, with the
/// completed records each one's replays ask for.
struct RedisStores {
    copying: RedisStore,
    plain: RedisStore,
    completed: Arc<Vec<Key>>,
}

impl RedisStores {
    fn store(&self, case: RedisCase) -> &RedisStore {
        if case.replay_copy {
            &self.copying
        } else {
            &self.plain
        }
    }
}

fn redis_part(settings: BenchRounds) {
    let Some(redis_benchmark) = redis_benchmark_binary() else {
        eprintln!("{REDIS_BENCHMARK_HINT}");
        std::process::exit(1);
    };
    // Before the server starts, so that it, the runtime and every child start on CPU 0.
    let own_core = pin(std::process::id(), 0);
    let server = RedisServer::start();
    let pinned = own_core && pin(redis_pid(&server), 1);
    let bench = Bench::new(settings);
    let stores = bench.runtime.block_on(async {
        let copying = server.store();
        let plain = server.store_with(RedisStore::builder().with_replay_cache(0));
        let completed = completed_records(&copying).await;
        RedisStores {
            copying,
            plain,
            completed,
        }
    });
    let version = info_text(&server, "server");
    println!(
        "## Redis\n\nredis-server {}, no persistence; {}.\n",
        info_string(&version, "redis_version"),
        if pinned {
            "redis-server pinned to CPU 1; this process, its runtime, `redis-benchmark` and \
             the replica to CPU 0 (`taskset`)"
        } else {
            "not pinned (one CPU, or no `taskset`)"
        }
    );
    commands_per_request(&bench, &server, &stores);
    let tasks = settings.tasks;
    let alone = redis_cpu_per_request(&bench, &server, &stores, tasks);
    let deeper = redis_cpu_per_request(&bench, &server, &stores, tasks * 8);
    let replica = {
        let port = server.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        wait_for_replica(&server, &replica);
        let runs = redis_cpu_per_request(&bench, &server, &stores, tasks);
        drop(replica);
        runs
    };
    redis_cpu_table(settings, [&alone, &deeper, &replica]);
    redis_benchmark_bracket(settings, &server, &redis_benchmark);
    token_buckets_per_master(&bench, &server, &stores.copying);
    // The memory part starts its own servers, unpinned.
    if own_core {
        unpin(std::process::id());
    }
}

fn info_text(server: &RedisServer, section: &str) -> String {
    server.query::<String>(&["INFO", section])
}

fn info_string(info: &str, name: &str) -> String {
    info.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(field, _)| *field == name)
        .map_or_else(String::new, |(_, value)| value.trim().to_owned())
}

fn redis_pid(server: &RedisServer) -> u32 {
    let pid = info_field(&info_text(server, "server"), "process_id");
    pid.expect("INFO server has process_id") as u32
}

fn redis_cpu(server: &RedisServer) -> Duration {
    cpu_in_info(&info_text(server, "cpu"))
}

/// Lets every thread of `pid` run on every online CPU again.
fn unpin(pid: u32) {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let unpinned = Command::new("taskset")
        .args(["-a", "-p", "-c", online.trim(), &pid.to_string()])
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(unpinned, "could not unpin process {pid} from CPU 0");
}

/// Waits until `replica` has synchronised with `master`, and pins it next to the client.
fn wait_for_replica(master: &RedisServer, replica: &RedisServer) {
    pin(redis_pid(replica), 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let link = info_string(&info_text(replica, "replication"), "master_link_status");
        let replicas = info_field(&info_text(master, "replication"), "connected_slaves");
        if link == "up" && replicas == Some(1.0) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the replica did not synchronise within 30 s");
}

/// The commands 200 requests of each case send, by a `MONITOR` of them: top-level (round
/// trips) and inside scripts, by name.
fn commands_per_request(bench: &Bench, server: &RedisServer, stores: &RedisStores) {
    const SAMPLED: u64 = 200;
    println!(
        "### Commands per request\n\nA `MONITOR` of {SAMPLED} requests of each case, one at a \
         time; top-level commands are round trips, the calls inside scripts are marked \
         `[0 lua]`.\n"
    );
    println!(
        "| case | round trips | of which scripts (`EVALSHA`) | calls inside scripts | by name |"
    );
    println!("|---|---:|---:|---:|---|");
    for case in RedisCase::ALL {
        let store = stores.store(case);
        let work = Work::new(&stores.completed);
        // Every replayed record replayed once, as the copying store keeps it from then on,
        // and every script loaded: the monitored requests are those of a running server.
        bench.runtime.block_on(async {
            let warm_up = if case.guard == Guard::Replay {
                REPLAYED
            } else {
                10
            };
            for n in 0..warm_up {
                request(case.guard, store, &Work::new(&stores.completed), n).await;
            }
        });
        let lines = monitored(server, || {
            bench.runtime.block_on(async {
                for n in 0..SAMPLED {
                    request(case.guard, store, &work, n).await;
                }
            });
        });
        let mut names: BTreeMap<(bool, String), u64> = BTreeMap::new();
        for line in lines.lines() {
            let mut fields = line.split_whitespace().skip(1);
            let (Some("[0"), Some(origin), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let name = name.trim_matches('"').to_lowercase();
            *names.entry((origin != "lua]", name)).or_default() += 1;
        }
        let per = |calls: u64| calls as f64 / SAMPLED as f64;
        let count = |top: bool| -> u64 {
            names
                .iter()
                .filter(|((t, _), _)| *t == top)
                .map(|(_, n)| n)
                .sum()
        };
        let scripts = names
            .get(&(true, "evalsha".to_owned()))
            .copied()
            .unwrap_or(0);
        let mut by_name = String::new();
        for ((top, name), calls) in &names {
            let place = if *top { "" } else { " (in a script)" };
            let _ = write!(
                by_name,
                "{}`{name}` {:.2}{place}",
                if by_name.is_empty() { "" } else { ", " },
                per(*calls)
            );
        }
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {} |",
            case.name(),
            per(count(true)),
            per(scripts),
            per(count(false)),
            if by_name.is_empty() {
                "none".into()
            } else {
                by_name
            }
        );
    }
    println!();
}

/// What `MONITOR` printed while `during` ran.
fn monitored(server: &RedisServer, during: impl FnOnce()) -> String {
    let file = tempfile::NamedTempFile::new().expect("a file for MONITOR's output");
    let mut monitor = Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.port().to_string(),
            "monitor",
        ])
        .stdout(file.reopen().expect("MONITOR's output file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-cli (apt-get install redis-tools) runs MONITOR");
    // MONITOR answers OK once it is watching; until then a command would go unseen.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(file.path())
        .unwrap_or_default()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "MONITOR did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    during();
    // The last command's line reaches the file a moment after its answer.
    std::thread::sleep(Duration::from_millis(300));
    monitor.kill().expect("stop MONITOR");
    monitor.wait().expect("MONITOR's end");
    std::fs::read_to_string(file.path()).expect("MONITOR's output")
}

/// One round of one case: requests per second, redis-server's and the client's CPU per
/// request in µs, and the share of a core redis-server was busy.
#[derive(Debug, Default, Clone)]
struct CpuRuns {
    rate: Spread,
    redis_us: Spread,
    client_us: Spread,
    busy: Spread,
}

/// Every case, round after round, from `tasks` tasks: redis-server's CPU per request.
fn redis_cpu_per_request(
    bench: &Bench,
    server: &RedisServer,
    stores: &RedisStores,
    tasks: u64,
) -> Vec<CpuRuns> {
    let settings = bench.settings;
    let mut runs = vec![CpuRuns::default(); RedisCase::ALL.len()];
    for _ in 0..settings.rounds {
        for (case, runs) in RedisCase::ALL.iter().zip(&mut runs) {
            let (store, work) = (stores.store(*case), Work::new(&stores.completed));
            let (redis_before, (own_before, _)) = (redis_cpu(server), process_cpu());
            let sent = run(case.guard, store, &work, tasks, settings.ops);
            let took = bench.runtime.block_on(sent);
            let (redis_after, (own_after, _)) = (redis_cpu(server), process_cpu());
            let per_request = |cpu: Duration| cpu.as_secs_f64() * 1e6 / settings.ops as f64;
            let redis = redis_after.saturating_sub(redis_before);
            runs.rate.push(settings.ops as f64 / took.as_secs_f64());
            runs.redis_us.push(per_request(redis));
            runs.client_us
                .push(per_request(own_after.saturating_sub(own_before)));
            runs.busy.push(redis.as_secs_f64() / took.as_secs_f64());
        }
    }
    runs
}

/// The CPU runs' table: `tasks` tasks, eight times as many, and `tasks` with a replica.
fn redis_cpu_table(settings: BenchRounds, [alone, deeper, replica]: [&[CpuRuns]; 3]) {
    let (tasks, more) = (settings.tasks, settings.tasks * 8);
    println!(
        "### redis-server CPU per request\n\n{tasks} tasks sharing one `RedisStore` (one \
         multiplexed connection), {} requests per case and round; redis-server's CPU time \
         (`INFO cpu`, user + system) and this process' (`/proc/self/stat`) over the run, per \
         request. \"Busy\" is redis-server's CPU time over the run's wall time. The ceiling \
         is one core's second over redis-server's CPU per request. Then the same with \
         {more} tasks (more requests in flight on the connection, so more of them share \
         each read and write), and with {tasks} tasks and one replica attached (on CPU 0).\n",
        settings.ops
    );
    println!(
        "| case | requests/s | redis-server busy | redis-server µs/request | ceiling requests/s \
         | client µs/request | {more} tasks: requests/s | busy | redis-server µs/request \
         | ceiling | with a replica: redis-server µs/request | ceiling |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // Under a microsecond is redis-server's own background work over a run that sent it
    // nothing: no ceiling of its making.
    let ceiling = |runs: &CpuRuns| {
        let us = runs.redis_us.median();
        if us < 1.0 {
            "— (no command)".to_owned()
        } else {
            format!("{:.0}", 1e6 / us)
        }
    };
    for (i, case) in RedisCase::ALL.iter().enumerate() {
        let (alone, deeper, replica) = (&alone[i], &deeper[i], &replica[i]);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            case.name(),
            alone.rate.show(0),
            alone.busy.show(2),
            alone.redis_us.show(2),
            ceiling(alone),
            alone.client_us.show(2),
            deeper.rate.show(0),
            deeper.busy.show(2),
            deeper.redis_us.show(2),
            ceiling(deeper),
            replica.redis_us.show(2),
            ceiling(replica),
        );
    }
    println!();
}

/// `redis-benchmark` on the server: a plain `SET … NX PX … GET` and an `EVALSHA` of
/// `complete_record.lua` on random keys, where no record is (its `GET` alone), one request
/// in flight per connection and 16.
fn redis_benchmark_bracket(settings: BenchRounds, server: &RedisServer, binary: &Path) {
    let complete_record = server.query::<String>(&[
        "SCRIPT",
        "LOAD",
        include_str!("../../idem-redis/src/scripts/complete_record.lua"),
    ]);
    let owner = "#0123456789abcdef0123456789abcdef";
    let response = "r".repeat(48);
    let commands: [(&str, Vec<&str>); 2] = [
        (
            "`SET key owner NX PX 2000 GET` (avoid_repeat, a lock)",
            vec![
                "SET",
                "idem:{__rand_int__}:lock",
                owner,
                "NX",
                "PX",
                "2000",
                "GET",
            ],
        ),
        (
            "`EVALSHA` complete_record.lua on a missing record (a script's least)",
            vec![
                "EVALSHA",
                complete_record.as_str(),
                "1",
                "idem:{__rand_int__}:record",
                owner,
                response.as_str(),
                "5000",
            ],
        ),
    ];
    println!(
        "### `redis-benchmark` on the same server\n\n`redis-benchmark -c {} -r 1000000000 -P \
         <depth>` (on CPU 0), each command on random keys, {} rounds; the server flushed \
         before each.\n",
        settings.tasks, settings.rounds
    );
    println!(
        "| command | in flight per connection | requests/s | redis-server busy \
         | redis-server µs/request | client µs/request |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, command) in &commands {
        for (depth, requests) in [(1, settings.ops * 2), (16, settings.ops * 10)] {
            let mut runs = CpuRuns::default();
            for _ in 0..settings.rounds {
                server.command(&["FLUSHALL"]);
                let (redis_before, (_, children_before)) = (redis_cpu(server), process_cpu());
                let started = Instant::now();
                let output = Command::new(binary)
                    .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
                    .args([
                        "-c",
                        &settings.tasks.to_string(),
                        "-n",
                        &requests.to_string(),
                    ])
                    .args(["-r", "1000000000", "-P", &depth.to_string(), "-q"])
                    .args(command)
                    .output()
                    .expect("redis-benchmark runs");
                let took = started.elapsed();
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(output.status.success(), "redis-benchmark failed: {stdout}");
                let (redis_after, (_, children_after)) = (redis_cpu(server), process_cpu());
                let per = |cpu: Duration| cpu.as_secs_f64() * 1e6 / requests as f64;
                let redis = redis_after.saturating_sub(redis_before);
                runs.rate
                    .push(requests_per_second(&stdout).expect("a rate from redis-benchmark"));
                runs.redis_us.push(per(redis));
                runs.client_us
                    .push(per(children_after.saturating_sub(children_before)));
                runs.busy.push(redis.as_secs_f64() / took.as_secs_f64());
            }
            println!(
                "| {name} | {depth} | {} | {} | {} | {} |",
                runs.rate.show(0),
                runs.busy.show(2),
                runs.redis_us.show(2),
                runs.client_us.show(2)
            );
        }
    }
    server.command(&["FLUSHALL"]);
    println!();
}

/// The cluster slot of `key` (CRC16/XMODEM of its hash tag, modulo 16,384).
fn slot(key: &str) -> u16 {
    let tagged = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map_or(key, |(tag, _)| if tag.is_empty() { key } else { tag });
    crc16::State::<crc16::XMODEM>::calculate(tagged.as_bytes()) % 16_384
}

/// How the form tokens' buckets spread over the masters of a cluster whose slots are split
/// evenly (as `redis-cli --cluster create` splits them): a master's share of token traffic
/// is its buckets over all. The buckets are read from the keys `store` makes for 3,200
/// clients (each of 64 buckets is missed with odds of about e⁻⁵⁰), beside the 64 tags
/// `tokens/0` … `tokens/63` of versions before the buckets were placed.
fn token_buckets_per_master(bench: &Bench, server: &RedisServer, store: &RedisStore) {
    server.command(&["FLUSHALL"]);
    bench.runtime.block_on(async {
        for client in 0..3_200 {
            let client = Key::new(format!("client-{client}")).expect("a key");
            store
                .put_token(&client, &client, Duration::from_secs(60), 16)
                .await
                .expect("a put");
        }
    });
    let placed: BTreeSet<String> = server
        .keys()
        .into_iter()
        .filter_map(|key| key.strip_suffix(":all").map(str::to_owned))
        .collect();
    server.command(&["FLUSHALL"]);
    let earlier: Vec<String> = (0..64)
        .map(|bucket| format!("idem:{{tokens/{bucket}}}"))
        .collect();
    println!(
        "### Form-token buckets per master\n\n`RedisStore` keeps every token in one of its \
         buckets, one hash tag each, so token traffic reaches that many slots. With the \
         16,384 slots split evenly over the masters, the most buckets one master holds, and \
         its share ÷ an even share: the {} buckets of this release (placed on evenly spaced \
         slots), and the 64 tags `tokens/0` … `tokens/63` of earlier versions:\n",
        placed.len()
    );
    assert_eq!(
        slot("123456789"),
        0x31c3,
        "CRC16/XMODEM of the check string"
    );
    println!(
        "| masters | placed: busiest master | its share ÷ even | earlier: busiest master | its share ÷ even |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let busiest = |buckets: &mut dyn Iterator<Item = &String>, masters: u32| {
        let mut held = vec![0_u32; masters as usize];
        let mut count = 0;
        for bucket in buckets {
            held[(u32::from(slot(bucket)) * masters / 16_384) as usize] += 1;
            count += 1;
        }
        let most = held.iter().copied().max().unwrap_or(0);
        (
            most,
            f64::from(most) * f64::from(masters) / f64::from(count.max(1)),
        )
    };
    for masters in [2_u32, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64] {
        let (placed_most, placed_share) = busiest(&mut placed.iter(), masters);
        let (earlier_most, earlier_share) = busiest(&mut earlier.iter(), masters);
        println!(
            "| {masters} | {placed_most} | {placed_share:.2} | {earlier_most} | {earlier_share:.2} |"
        );
    }
    println!();
}

// ---------------------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------------------

fn postgres_part(settings: BenchRounds) {
    let server = PostgresServer::start_durable();
    let bench = Bench::new(settings);
    let requests = (settings.ops / 20).max(1);
    let tasks = 16;
    let (store, completed, version) = bench.runtime.block_on(async {
        let store = server.store().await;
        sqlx::query("CREATE TABLE capacity_bare (k text PRIMARY KEY)")
            .execute(store.pool())
            .await
            .expect("the bare table");
        let version: (String,) = sqlx::query_as("SHOW server_version")
            .fetch_one(store.pool())
            .await
            .expect("the server's version");
        let completed = completed_records(&store).await;
        (store, completed, version.0)
    });
    println!(
        "## PostgreSQL\n\nPostgreSQL {version}, `fsync`, `synchronous_commit` and \
         `full_page_writes` on (the harness's durable server, its data in a temporary \
         directory on this machine's disk); {tasks} tasks on the store's pool of 10 \
         connections, {requests} requests per case and round. Each store operation is one \
         statement in a transaction of its own; \"transactions\" counts the transaction \
         ids a case consumed (`pg_current_xact_id()` before and after), one per writing \
         statement.\n"
    );
    let guards = [
        Guard::Expire,
        Guard::Finish,
        Guard::FormToken,
        Guard::First,
        Guard::Replay,
        Guard::Lock,
    ];
    let cases: Vec<PgCase> = BARE
        .iter()
        .map(|(name, sql)| PgCase::Bare(name, sql))
        .chain(guards.map(PgCase::Guard))
        .collect();
    let mut rates = vec![Spread::default(); cases.len()];
    let mut xids = vec![Spread::default(); cases.len()];
    let xact_id = |pool: &sqlx::PgPool| {
        let pool = pool.clone();
        async move {
            let id: (i64,) = sqlx::query_as("SELECT pg_current_xact_id()::text::bigint")
                .fetch_one(&pool)
                .await
                .expect("a transaction id");
            id.0
        }
    };
    for _ in 0..settings.rounds {
        for (i, case) in cases.iter().enumerate() {
            let work = Work::new(&completed);
            let (took, consumed) = bench.runtime.block_on(async {
                let before = xact_id(store.pool()).await;
                let took = match *case {
                    PgCase::Guard(guard) => run(guard, &store, &work, tasks, requests).await,
                    PgCase::Bare(_, sql) => {
                        let context = (store.pool().clone(), Arc::clone(&work));
                        let statement = move |(pool, work), n| bare(sql, pool, work, n);
                        spread(context, tasks, requests, statement).await
                    }
                };
                // Less the id this query itself takes.
                (took, xact_id(store.pool()).await - before - 1)
            });
            rates[i].push(requests as f64 / took.as_secs_f64());
            xids[i].push(consumed as f64 / requests as f64);
        }
    }
    println!(
        "| case | statements per request (from the code) | transactions per request \
         | requests/s | statements/s |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (i, case) in cases.iter().enumerate() {
        let statements = match case {
            PgCase::Bare(..) | PgCase::Guard(Guard::Expire | Guard::Replay) => 1.0,
            PgCase::Guard(_) => 2.0,
        };
        let name = match case {
            PgCase::Bare(name, _) => name,
            PgCase::Guard(guard) => guard.name(),
        };
        println!(
            "| {name} | {statements:.0} | {} | {} | {:.0} |",
            xids[i].show(2),
            rates[i].show(0),
            rates[i].median() * statements
        );
    }
    println!();
}

/// The baselines of the PostgreSQL part: a bare single-row `INSERT`, and the same with a
/// `pg_notify` (on a channel nobody listens to), as the statements that wake waiters do.
const BARE: [(&str, &str); 2] = [
    (
        "bare single-row INSERT",
        "INSERT INTO capacity_bare (k) VALUES ($1)",
    ),
    (
        "bare single-row INSERT with a pg_notify",
        "WITH woken AS (SELECT pg_notify('capacity', $1)) \
         INSERT INTO capacity_bare (k) SELECT $1 FROM woken",
    ),
];

/// A case of the PostgreSQL part: a bare statement (its name and SQL) or a guard.
#[derive(Debug, Clone, Copy)]
enum PgCase {
    Bare(&'static str, &'static str),
    Guard(Guard),
}

/// Runs the single-row statement `sql` with request `n`'s new key bound to `$1`.
async fn bare(sql: &'static str, pool: sqlx::PgPool, work: Arc<Work>, n: u64) {
    let key = work.key(n).as_str().to_owned();
    let done = sqlx::query(sql).bind(key).execute(&pool).await;
    done.expect("a bare statement");
}

// ---------------------------------------------------------------------------------------
// Memory per live entry
// ---------------------------------------------------------------------------------------

/// A kind of entry a guard leaves in the store while it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// An `#[avoid_repeat]` window, or a plain lock.
    Window,
    /// A fenced lock (and, on Redis, its fencing counter).
    FencedLock,
    /// A one-time form token, 16 to a client.
    Token,
    /// A record whose first attempt runs.
    RecordRunning,
    /// A completed record with its 512-byte response.
    RecordCompleted,
}

impl Entry {
    /// The kinds `IDEM_CAPACITY_KINDS` names, or all.
    fn chosen() -> Vec<Self> {
        let kinds = std::env::var("IDEM_CAPACITY_KINDS").unwrap_or_default();
        Self::ALL
            .into_iter()
            .filter(|entry| kinds.is_empty() || kinds.split(',').any(|k| k == format!("{entry:?}")))
            .collect()
    }

    const ALL: [Self; 5] = [
        Self::Window,
        Self::FencedLock,
        Self::Token,
        Self::RecordRunning,
        Self::RecordCompleted,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Window => "window (avoid_repeat, a plain lock)",
            Self::FencedLock => "fenced lock",
            Self::Token => "form token (16 per client)",
            Self::RecordRunning => "record, first attempt running",
            Self::RecordCompleted => "record, completed (512-byte JSON response)",
        }
    }

    fn parse(name: &str) -> Self {
        *Self::ALL
            .iter()
            .find(|entry| format!("{entry:?}") == name)
            .unwrap_or_else(|| panic!("no entry kind {name:?}"))
    }

    /// Puts entry `n` of this kind in `store`.
    async fn put<S: Store>(self, store: &S, work: &Work, n: u64) {
        let (key, owner) = (work.key(n), Owner::random());
        match self {
            Self::Window | Self::FencedLock => {
                let fencing = if self == Self::Window {
                    Fencing::Off
                } else {
                    Fencing::On
                };
                let taken = store.acquire(&key, &owner, RETENTION, fencing).await;
                assert!(matches!(taken, Ok(Acquire::Acquired { .. })), "{taken:?}");
            }
            Self::Token => {
                let client = (n / TOKENS_PER_CLIENT as u64).to_le_bytes();
                let scope = Key::hashed([work.salt.as_str().as_bytes(), &client]);
                let put = store.put_token(&scope, &key, TOKEN_TTL, TOKENS_PER_CLIENT);
                put.await.expect("put_token");
            }
            Self::RecordRunning | Self::RecordCompleted => {
                let begun = store.begin_record(&key, &owner, &work.fingerprint, RETENTION);
                assert!(matches!(begun.await, Ok(Begin::Started)));
                if self == Self::RecordCompleted {
                    // A response of its own, as every request's is: a clone would share one
                    // buffer among all the records of a `MemoryStore`.
                    let response = Bytes::copy_from_slice(&typical_record());
                    let done = store.complete_record(&key, &owner, response, RETENTION);
                    assert_eq!(done.await.ok(), Some(true));
                }
            }
        }
    }
}

/// Puts entries `0..count` of `entry` in `store` from `tasks` tasks.
async fn fill<S: Store + Clone>(entry: Entry, store: &S, tasks: u64, count: u64) -> Arc<Work> {
    let work = Work::new(&Arc::new(Vec::new()));
    let context = (store.clone(), Arc::clone(&work));
    spread(context, tasks, count, move |(store, work), n| async move {
        entry.put(&store, &work, n).await;
    })
    .await;
    work
}

fn memory_part(settings: BenchRounds) {
    let entries: u64 = env_number(
        "IDEM_CAPACITY_ENTRIES",
        if benching() { 1_000_000 } else { 10_000 },
    );
    println!("## Memory per live entry\n");
    memory_store_sizes(settings, entries);
    redis_sizes(settings, (entries / 10).max(1));
    postgres_sizes(settings, (entries / 10).max(1));
    sqlite_sizes(settings, (entries / 10).max(1));
}

/// One child process per kind and round, each filling a `MemoryStore` of its own.
fn memory_store_sizes(settings: BenchRounds, entries: u64) {
    println!(
        "### `MemoryStore`\n\n{entries} entries of each kind in a store of their own, in a \
         process of their own (one worker thread), {} rounds: what the store counts \
         (`bytes_held`, and the tokens' `token_count`) and how far the process' resident \
         memory (`VmRSS`) grew, per entry.\n",
        settings.rounds
    );
    println!("| entry | counted bytes per entry (`bytes_held`) | resident bytes per entry |");
    println!("|---|---:|---:|");
    let exe = std::env::current_exe().expect("this benchmark's path");
    for entry in Entry::chosen() {
        let (mut counted, mut resident) = (Spread::default(), Spread::default());
        for _ in 0..settings.rounds {
            let output = Command::new(&exe)
                .env(MEMORY_CHILD, format!("{entry:?}"))
                .env("IDEM_CAPACITY_ENTRIES", entries.to_string())
                .output()
                .expect("the memory child runs");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "the memory child failed: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let figures: Vec<f64> = stdout
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            let [held, grown] = figures[..] else {
                panic!("the memory child said {stdout:?}");
            };
            counted.push(held / entries as f64);
            resident.push(grown / entries as f64);
        }
        let counted = if entry == Entry::Token {
            "— (tokens are counted apart)".into()
        } else {
            counted.show(0)
        };
        println!("| {} | {counted} | {} |", entry.name(), resident.show(0));
    }
    println!();
}

/// In a child process: fills a `MemoryStore` with entries of `kind`, then prints the
/// bytes it counts for them and how far the resident memory grew.
fn memory_child(kind: &str) {
    let entry = Entry::parse(kind);
    let entries: u64 = env_number("IDEM_CAPACITY_ENTRIES", 1_000_000);
    let room = usize::try_from(entries).expect("entries fit") * 2;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store = MemoryStore::builder()
        .with_capacity(room)
        .with_token_capacity(room)
        .with_max_bytes(usize::MAX / 2)
        .build();
    if entry == Entry::RecordCompleted {
        // Made before the count starts: its runtime and thread are not an entry's.
        typical_record();
    }
    let before = resident_bytes();
    runtime.block_on(fill(entry, &store, 1, entries));
    let grown = resident_bytes().saturating_sub(before);
    let held = if entry == Entry::Token {
        assert_eq!(store.token_count() as u64, entries);
        0
    } else {
        assert_eq!(store.entry_count() as u64, entries);
        store.bytes_held()
    };
    println!("{held} {grown}");
}

/// Redis: `used_memory` before and after `entries` entries of each kind, and `MEMORY
/// USAGE` of one key of the kinds whose key name this bench can spell.
fn redis_sizes(settings: BenchRounds, entries: u64) {
    let server = RedisServer::start();
    let bench = Bench::new(settings);
    let store = server.store();
    println!(
        "### Redis\n\n{entries} entries of each kind through `RedisStore`, {} rounds, the \
         server flushed before each: how far `used_memory` grew, per entry, and `MEMORY \
         USAGE … SAMPLES 0` of one entry's keys.\n",
        settings.rounds
    );
    println!("| entry | `used_memory` growth per entry | `MEMORY USAGE` of its keys |");
    println!("|---|---:|---:|");
    let used = || info_field(&info_text(&server, "memory"), "used_memory").expect("used_memory");
    for entry in Entry::chosen() {
        let (mut grown, mut usage) = (Spread::default(), String::from("—"));
        for _ in 0..settings.rounds {
            server.command(&["FLUSHALL"]);
            let before = used();
            let work = bench
                .runtime
                .block_on(fill(entry, &store, settings.tasks, entries));
            grown.push((used() - before) / entries as f64);
            let key = work.key(0);
            let named =
                |suffix: &str| format!("{}:{{{}}}:{suffix}", store.namespace(), key.as_str());
            let keys = match entry {
                Entry::Window => vec![named("lock")],
                Entry::FencedLock => vec![named("lock"), named("fence")],
                Entry::RecordRunning | Entry::RecordCompleted => vec![named("record")],
                Entry::Token => Vec::new(),
            };
            if !keys.is_empty() {
                let bytes: i64 = keys
                    .iter()
                    .map(|key| server.query::<i64>(&["MEMORY", "USAGE", key, "SAMPLES", "0"]))
                    .sum();
                usage = bytes.to_string();
            }
        }
        println!("| {} | {} | {usage} |", entry.name(), grown.show(0));
    }
    println!();
}

/// PostgreSQL: the tables' bytes per row after `entries` entries of each kind.
fn postgres_sizes(settings: BenchRounds, entries: u64) {
    let server = PostgresServer::start();
    let bench = Bench::new(settings);
    let store = bench.runtime.block_on(server.store());
    println!(
        "### PostgreSQL\n\n{entries} entries of each kind through `PostgresStore` (16 tasks), \
         {} rounds, the tables emptied (`TRUNCATE`) before each: `pg_table_size` (the heap, \
         with its TOAST and free-space maps) and `pg_indexes_size` of the kind's table, per \
         row. A completed record was first written running, then updated: its table holds \
         the dead version until a vacuum makes the room reusable.\n",
        settings.rounds
    );
    println!("| entry | table | heap bytes per row | index bytes per row | total bytes per row |");
    println!("|---|---|---:|---:|---:|");
    for entry in Entry::chosen() {
        let table = match entry {
            Entry::Window | Entry::FencedLock => "idem_locks",
            Entry::Token => "idem_tokens",
            Entry::RecordRunning | Entry::RecordCompleted => "idem_records",
        };
        let (mut heap, mut index) = (Spread::default(), Spread::default());
        for _ in 0..settings.rounds {
            let (table_bytes, index_bytes) = bench.runtime.block_on(async {
                sqlx::query("TRUNCATE idem_locks, idem_tokens, idem_records")
                    .execute(store.pool())
                    .await
                    .expect("TRUNCATE");
                fill(entry, &store, 16, entries).await;
                let sizes: (i64, i64) = sqlx::query_as(&format!(
                    "SELECT pg_table_size('{table}'), pg_indexes_size('{table}')"
                ))
                .fetch_one(store.pool())
                .await
                .expect("the table's size");
                sizes
            });
            heap.push(table_bytes as f64 / entries as f64);
            index.push(index_bytes as f64 / entries as f64);
        }
        println!(
            "| {} | `{table}` | {} | {} | {:.0} |",
            entry.name(),
            heap.show(0),
            index.show(0),
            heap.median() + index.median()
        );
    }
    println!();
}

/// SQLite: how far the database file grew (pages in use, after a checkpoint of the
/// write-ahead log), per entry, a fresh file for each kind and round.
fn sqlite_sizes(settings: BenchRounds, entries: u64) {
    let bench = Bench::new(settings);
    println!(
        "### SQLite\n\n{entries} entries of each kind through `SqliteStore` (16 tasks), {} \
         rounds, a new database file for each: the pages in use (`page_count` − \
         `freelist_count`, × `page_size`, after `wal_checkpoint(TRUNCATE)`) it grew by, per \
         entry: the table and its indexes.\n",
        settings.rounds
    );
    println!("| entry | bytes per entry |");
    println!("|---|---:|");
    for entry in Entry::chosen() {
        let mut grown = Spread::default();
        for round in 0..settings.rounds {
            let dir = std::env::temp_dir().join(format!(
                "idem-capacity-{}-{round}-{entry:?}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).expect("a temporary directory");
            let bytes = bench.runtime.block_on(async {
                let store = idem_sqlx::SqliteStore::open(dir.join("idem.db"))
                    .await
                    .expect("SQLite opens");
                store.migrate().await.expect("the schema");
                let used = || async {
                    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                        .execute(store.pool())
                        .await
                        .expect("a checkpoint");
                    let (pages, free, size): (i64, i64, i64) = sqlx::query_as(
                        "SELECT (SELECT page_count FROM pragma_page_count()),
                            (SELECT freelist_count FROM pragma_freelist_count()),
                            (SELECT page_size FROM pragma_page_size())",
                    )
                    .fetch_one(store.pool())
                    .await
                    .expect("the file's pages");
                    (pages - free) * size
                };
                let before = used().await;
                fill(entry, &store, 16, entries).await;
                used().await - before
            });
            std::fs::remove_dir_all(&dir).expect("the directory removed");
            grown.push(bytes as f64 / entries as f64);
        }
        println!("| {} | {} |", entry.name(), grown.show(0));
    }
    println!();
}
