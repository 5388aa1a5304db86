//! [`a_hundred_contenders_never_overlap`]: the mutual-exclusion check the lock suites
//! share, for plain, fenced and fair locks.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use idem_core::Store;
use idem_core::lock::{FencingMode, LockError, LockGuard};
use tokio::sync::Barrier;

/// 100 tasks, each taking a lock through `acquire` (each call makes one task's
/// acquisition, as its own owner), all started at once. Inside the critical section no
/// task may find another, and where `fence` reads a guard's fencing token (`None` for a
/// lock without), tokens must grow from one holder to the next; every task must get its
/// turn.
///
/// # Panics
///
/// When two tasks were inside at once, a token did not grow, or a task got no turn.
pub async fn a_hundred_contenders_never_overlap<S, F, A, Fut>(
    acquire: A,
    fence: fn(&LockGuard<S, F>) -> Option<u64>,
) where
    S: Store,
    F: FencingMode,
    A: Fn() -> Fut,
    Fut: Future<Output = Result<LockGuard<S, F>, LockError>> + Send + 'static,
{
    let inside = Arc::new(AtomicUsize::new(0));
    let (overlaps, entries) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let last_fence = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(100));
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let acquisition = acquire();
            let (inside, overlaps, entries, last_fence, start) = (
                inside.clone(),
                overlaps.clone(),
                entries.clone(),
                last_fence.clone(),
                start.clone(),
            );
            tokio::spawn(async move {
                start.wait().await;
                let guard = acquisition.await.expect("a turn");
                if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                entries.fetch_add(1, Ordering::SeqCst);
                if let Some(fence) = fence(&guard) {
                    let before = last_fence.fetch_max(fence, Ordering::SeqCst);
                    assert!(before < fence, "token {fence} after {before}");
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release().await.expect("release"));
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("no error");
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "entries that found another inside"
    );
    assert_eq!(
        entries.load(Ordering::SeqCst),
        100,
        "every task had its turn"
    );
}
