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

/// The `main` of an in-process HTTP bench named `$name`: the bench file's
/// `run(c, backend, app, runtime)` on `app(store)` for the memory store and for Redis, each
/// with room for `$capacity` entries, on [`one_worker_runtime`] under [`http_criterion`].
#[macro_export]
macro_rules! http_bench_main {
    ($name:ident, capacity = $capacity:expr) => {
        fn benches(c: &mut ::criterion::Criterion) {
            let runtime = $crate::one_worker_runtime();
            let stores = ::idem_tests::BenchStores::start($capacity, &runtime);
            run(c, "memory", app(stores.memory.clone()), &runtime);
            run(c, "redis", app(stores.redis.clone()), &runtime);
        }

        ::criterion::criterion_group! {
            name = $name;
            config = $crate::http_criterion();
            targets = benches
        }
        ::criterion::criterion_main!($name);
    };
}
