//! The settings of the benchmarks that run without criterion, from the command line and
//! the environment.

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
