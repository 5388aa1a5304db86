//! What the timing tests, the chaos report and the benchmarks measure with.

use std::time::Duration;

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
