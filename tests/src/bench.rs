//! What the benchmarks in `benches/` share: for the in-process HTTP ones
//! (`avoid_repeat.rs`, `form_token.rs`, `idempotency.rs`) their runtime, stores and
//! criterion settings; for the harness-less ones (`redis_throughput.rs`, `lock.rs`,
//! `sql_store.rs`) their settings from the command line and the environment.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, Request};
use axum::routing::post;
use criterion::Criterion;
use idem_axum::client::ClientHeader;
use idem_axum::{AvoidRepeatLayer, Idem, avoid_repeat};
use idem_core::MemoryStore;
use idem_core::Store;
use idem_redis::RedisStore;
use tokio::runtime::Runtime;

use crate::RedisServer;

/// The header that names the client in the avoid-repeat benchmark's requests.
const AVOID_REPEAT_CLIENT: HeaderName = HeaderName::from_static("x-client");

async fn bare() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "2s")]
async fn guarded() -> &'static str {
    "ok"
}

/// The router of the avoid-repeat benchmark (`benches/avoid_repeat.rs`, and
/// `src/bin/avoid_repeat_requests.rs` for instruction counts) on `store`: one trivial
/// handler bare (`/bare`), under `#[avoid_repeat]` (`/macro`) and under
/// `AvoidRepeatLayer` (`/layer`), each with a 2 s window.
pub fn avoid_repeat_app<S: Store>(store: S) -> Router {
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(AVOID_REPEAT_CLIENT))
        .build();
    Router::new()
        .route("/bare", post(bare))
        .route("/macro", post(guarded))
        .route(
            "/layer",
            post(bare).route_layer(AvoidRepeatLayer::new(Duration::from_secs(2))),
        )
        .layer(idem.layer())
}

/// A request to `path` of [`avoid_repeat_app`] from a new client every time, so that each
/// guarded one takes the accept path (a new key), as a stream of distinct users would.
///
/// # Panics
///
/// When `path` is not a valid URI path.
pub fn avoid_repeat_request(path: &str) -> Request<Body> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let client = NEXT.fetch_add(1, Ordering::Relaxed);
    Request::post(path)
        .header(&AVOID_REPEAT_CLIENT, client.to_string())
        .body(Body::empty())
        .expect("a valid request")
}

/// A runtime with one worker, as the end-to-end benchmark pins its server to one core.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn one_worker_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The stores a benchmark runs each case on: a `MemoryStore` with room for `capacity`
/// live keys, and a `RedisStore` on a server of its own, stopped when this is dropped.
#[derive(Debug)]
pub struct BenchStores {
    /// The memory store.
    pub memory: MemoryStore,
    /// The Redis store.
    pub redis: RedisStore,
    _server: RedisServer,
}

impl BenchStores {
    /// Starts both; the Redis store is made on `runtime`, where the cases will use it.
    pub fn start(capacity: usize, runtime: &Runtime) -> Self {
        let server = RedisServer::start();
        let redis = runtime.block_on(async { server.store() });
        Self {
            memory: MemoryStore::builder().with_capacity(capacity).build(),
            redis,
            _server: server,
        }
    }
}

/// The HTTP benchmarks' settings: 1 s of warm-up, 4 s of measurement, 40 samples.
pub fn http_criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(40)
}

/// Whether the benchmark runs under `cargo bench`: Cargo passes `--bench` to a
/// harness-less bench only then. Under `cargo test` a benchmark makes one small round, to
/// check that it works.
pub fn benching() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// The number in the environment variable `name`, or `default` when it is not set.
///
/// # Panics
///
/// When it is set to something that is not a number.
pub fn env_number<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
        Err(_) => default,
    }
}

/// How much a harness-less benchmark does: `IDEM_BENCH_TASKS` concurrent tasks,
/// `IDEM_BENCH_OPS` operations per round, `IDEM_BENCH_ROUNDS` rounds.
#[derive(Debug, Clone, Copy)]
pub struct BenchRounds {
    /// Concurrent tasks.
    pub tasks: u64,
    /// Operations per round.
    pub ops: u64,
    /// Rounds.
    pub rounds: usize,
}

impl BenchRounds {
    /// From the environment; by default `tasks` tasks and, under `cargo bench`, 3 rounds
    /// of `ops` operations, under `cargo test` one round of `test_ops`.
    ///
    /// # Panics
    ///
    /// When a setting is not a positive number.
    pub fn from_env(tasks: u64, ops: u64, test_ops: u64) -> Self {
        let (ops, rounds) = if benching() { (ops, 3) } else { (test_ops, 1) };
        let rounds = Self {
            tasks: env_number("IDEM_BENCH_TASKS", tasks),
            ops: env_number("IDEM_BENCH_OPS", ops),
            rounds: env_number("IDEM_BENCH_ROUNDS", rounds),
        };
        assert!(
            rounds.tasks > 0 && rounds.ops > 0 && rounds.rounds > 0,
            "IDEM_BENCH_TASKS, IDEM_BENCH_OPS and IDEM_BENCH_ROUNDS must be positive"
        );
        rounds
    }
}

/// The middle of `values` (the upper of the two middles of an even count), for the
/// medians of a benchmark's rounds.
///
/// # Panics
///
/// When `values` is empty, or two of them do not compare (a NaN).
pub fn median<T: Copy + PartialOrd>(values: &[T]) -> T {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("values that compare"));
    sorted[sorted.len() / 2]
}

/// The `p`th percentile of latencies sorted in ascending order; zero when there are none.
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    match sorted.len() {
        0 => Duration::ZERO,
        n => sorted[(n * p / 100).min(n - 1)],
    }
}

/// The wall clock in microseconds since 1970: a time two processes on one machine can
/// compare.
pub fn micros_since_epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}
