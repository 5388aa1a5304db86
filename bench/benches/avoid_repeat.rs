//! What `#[avoid_repeat]` adds to a request: the same trivial handler through a `Router`
//! with `oneshot`, bare and guarded, on `MemoryStore` and on a real Redis.
//!
//! Every guarded iteration comes from a new client, so each one takes the accept path (a
//! new key), as a stream of distinct users would; the bare baseline sends the same header.
//! The window is 2 s, so the store reaches a steady state in which keys expire as fast as
//! they are made (a 30 s window at these rates would grow the maps for the whole run and
//! time their rehashing instead).
//! `cargo bench -p idem-bench --bench avoid_repeat`

use axum::Router;
use criterion::Criterion;
use idem_bench::{avoid_repeat_app as app, avoid_repeat_request as request};
use tower::ServiceExt;

fn run(c: &mut Criterion, backend: &str, app: Router, runtime: &tokio::runtime::Runtime) {
    let mut group = c.benchmark_group(format!("avoid_repeat/{backend}"));
    for path in ["/bare", "/macro", "/layer"] {
        group.bench_function(path.trim_start_matches('/'), |b| {
            b.to_async(runtime).iter(|| {
                let app = app.clone();
                async move {
                    let response = app.oneshot(request(path)).await.expect("infallible");
                    assert!(
                        response.status().is_success(),
                        "{path}: {}",
                        response.status()
                    );
                }
            });
        });
    }
    group.finish();
}

// Every guarded request leaves a key for the 2 s window: at a million requests a
// second that is two million live keys, over the default capacity of one million.
idem_bench::http_bench_main!(avoid_repeat, capacity = 20_000_000);
