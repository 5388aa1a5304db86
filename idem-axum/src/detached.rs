//! Running a handler to its end even when the request that started it goes away.
//!
//! A guard that has spent something for a request — a form token consumed, an idempotency
//! record begun — must not let the handler be cancelled half-way when the client
//! disconnects (a browser abandons the first POST of a double click): the work would be
//! lost while its token or record says it was done.
//!
//! The work is polled once where it is, in the request's own task: a request cannot be
//! dropped while it is being polled, and most handlers answer on that first poll (no
//! task, no hand-over, no extra wake-up). One that is still pending after it moves, boxed
//! as it already is, into a task of its own, and the request waits for that task;
//! dropping the wait leaves the task running.

use std::future::{Future, poll_fn};
use std::task::Poll;

use tokio::runtime::Handle;
use tracing::Instrument;

/// Runs `work` to its end, in a task on `runtime` if it does not end on its first poll,
/// and waits for it. A panic in it resumes here; `None` when the runtime cancelled it
/// (shutting down).
///
/// `work` is boxed here, before the returned future is first polled, so that the caller's
/// future holds a pointer to it rather than the work itself.
pub(crate) fn run_to_completion<F>(
    runtime: &Handle,
    work: F,
) -> impl Future<Output = Option<F::Output>> + Send + 'static
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut work = Box::pin(work.in_current_span());
    let runtime = runtime.clone();
    async move {
        if let Poll::Ready(output) = poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await {
            return Some(output);
        }
        match runtime.spawn(work).await {
            Ok(output) => Some(output),
            Err(error) => match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_cancelled) => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn work_that_ends_at_once_runs_in_place() {
        let runtime = Handle::current();
        let outer = tokio::task::try_id();
        let ran_in = run_to_completion(&runtime, async { tokio::task::try_id() }).await;
        assert_eq!(ran_in, Some(outer), "no task of its own was needed");
    }

    #[tokio::test]
    async fn pending_work_goes_on_after_its_waiter_is_dropped() {
        let (started_tx, started) = oneshot::channel::<()>();
        let (release, released) = oneshot::channel::<()>();
        let (done_tx, done) = oneshot::channel::<()>();
        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let work = async move {
            let _ = started_tx.send(());
            released.await.expect("the test releases the work");
            flag.store(true, Ordering::SeqCst);
            let _ = done_tx.send(());
        };
        let waiter = tokio::spawn(async move { run_to_completion(&Handle::current(), work).await });
        // Past its first poll the work is pending on `released`, and was handed to a task
        // of its own in that same poll; drop the waiter as a client going away would.
        started.await.expect("the work started");
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        assert!(!finished.load(Ordering::SeqCst));
        release
            .send(())
            .expect("the work still waits for its release");
        done.await.expect("the work ran to its end");
        assert!(finished.load(Ordering::SeqCst));
    }
}
