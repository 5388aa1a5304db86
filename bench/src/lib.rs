//! What idem's benchmarks share: for the in-process HTTP ones (`benches/avoid_repeat.rs`,
//! `benches/form_token.rs`, `benches/idempotency.rs`) their runtime, criterion settings and
//! `Idem`, and the avoid-repeat and idempotency benches' routers; the HTTP bench server's
//! routes (`src/main.rs`), which `src/bin/guard_requests.rs` sends the same requests to
//! in-process for CPU profiles (`bench/profile.sh`), and the bare redis-rs baselines of
//! its Redis cases; for the harness-less ones
//! (`benches/redis_throughput.rs`, `benches/lock.rs`, `benches/fair_lock.rs`,
//! `benches/sql_store.rs`, `benches/capacity.rs`) their settings from the command line and
//! the environment, and what they read about the processes they run.
//!
//! The servers the benchmarks run against (`redis-server`, PostgreSQL) are started by the
//! test harness, `idem-tests`, as the suites' are.

mod avoid_repeat_app;
mod bare_redis;
mod behind_idem;
mod guard_cases;
mod idempotency_app;
mod in_process;
mod measure;
mod rounds;

pub use avoid_repeat_app::{avoid_repeat_app, avoid_repeat_request};
pub use bare_redis::{bare_redis_connection, bare_redis_routes};
pub use behind_idem::{CLIENT, behind_idem, bench_idem};
pub use guard_cases::{guard_cases, unguarded_routes};
pub use idempotency_app::{idempotency_app, idempotency_request};
pub use in_process::{http_criterion, one_worker_runtime};
pub use measure::{
    CommandStat, REDIS_BENCHMARK_HINT, command_stats_in_info, cpu_in_info, info_field, pin,
    process_cpu, redis_benchmark_binary, requests_per_second, resident_bytes,
};
pub use rounds::{BenchRounds, benching, env_number};
