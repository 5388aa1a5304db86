//! The requests of `benches/avoid_repeat.rs` on `MemoryStore`, without criterion: `n`
//! requests to one of its routes, to count what they cost under
//! `valgrind --tool=callgrind`, whose instruction counts do not move with the other work
//! on the machine as wall time does. Run it for two values of `n` and divide the
//! difference by theirs, so start-up and shut-down cancel out.
//!
//! `avoid_repeat_requests <bare|macro|layer> <n>`

use idem_axum::MemoryStore;
use idem_bench::{avoid_repeat_app, avoid_repeat_request as request};
use tower::ServiceExt;

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: avoid_repeat_requests <bare|macro|layer> <n>";
    let path = format!("/{}", args.next().expect(usage));
    let n: u64 = args.next().and_then(|n| n.parse().ok()).expect(usage);
    let runtime = idem_bench::one_worker_runtime();
    // Room for every key of the run.
    let app = avoid_repeat_app(MemoryStore::builder().with_capacity(20_000_000).build());
    runtime.block_on(async {
        for _ in 0..n {
            let response = app
                .clone()
                .oneshot(request(&path))
                .await
                .expect("infallible");
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
        }
    });
}
