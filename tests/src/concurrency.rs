//! Real concurrency for tests: many tasks released at once, and waiting for a condition
//! with a deadline instead of sleeping and hoping.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

/// Runs `task(i)` for `count` tasks on the runtime's workers, all released at once by a
/// barrier, and returns their results in order.
///
/// # Panics
///
/// When a task panics.
pub async fn all_at_once<T, F, Fut>(count: usize, task: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let start = Arc::new(Barrier::new(count));
    let handles: Vec<_> = (0..count)
        .map(|i| {
            let start = Arc::clone(&start);
            let work = task(i);
            tokio::spawn(async move {
                start.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(count);
    for handle in handles {
        results.push(handle.await.expect("task completes"));
    }
    results
}

/// Waits for `condition`, checking every 5 ms.
///
/// # Panics
///
/// When `within` passes first, naming `what` was awaited.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
