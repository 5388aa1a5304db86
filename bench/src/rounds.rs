//! How much a harness-less benchmark does, from the command line and the environment.

use std::str::FromStr;

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
