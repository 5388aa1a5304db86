//! The in-process HTTP benchmarks' runtime and criterion settings.

use std::time::Duration;

use criterion::Criterion;
use tokio::runtime::Runtime;

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

/// The HTTP benchmarks' settings: 1 s of warm-up, 4 s of measurement, 40 samples.
pub fn http_criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(40)
}
