//! Running a handler to its end even when the request that started it goes away.
//!
//! A guard that has spent something for a request — a window taken, a form token
//! consumed, an idempotency record begun — must not let the handler be cancelled half-way
//! when the client disconnects (a browser abandons the first POST of a double click): the
//! work may already have committed while its key, token or record says otherwise.
//!
//! The work is polled once where it is, in the request's own task: a request cannot be
//! dropped while it is being polled, and most handlers answer on that first poll, which
//! then needs no task (`tests::work_that_ends_at_once_runs_in_place`; BENCHMARKS.md, §7
//! "One shape for every guard", has what it saves). Work still pending after it moves into
//! a task of its own, and the request waits for that task: dropping the wait leaves the
//! task running.

use std::future::{Future, poll_fn};
use std::task::Poll;

use tokio::runtime::Handle;
use tracing::Instrument;

use crate::guard::shutting_down;
use crate::idem::handlers::Running;
use crate::rejection::Rejection;

/// Runs `work` to its end — in place if it ends on its first poll, else in a task of its
/// own — and waits for it. A panic in it resumes here.
///
/// Outside a Tokio runtime nothing can run detached, and `work` runs in place.
///
/// `work` counts among its runtime's running handlers (`running`, taken by the caller
/// before it moves what it needs into `work`) until it ends, and among the detached ones
/// once its request stops waiting: [`Idem::shutdown`](crate::Idem::shutdown) waits for it, and
/// [`IdemBuilder::with_detached_limit`](crate::IdemBuilder::with_detached_limit) bounds
/// how many run detached.
///
/// `work` is boxed here, before the returned future is first polled, so that the future
/// of the request waiting for it holds a pointer to it rather than the work itself (the
/// guards' `the_per_request_future_stays_small` tests).
///
/// # Errors
///
/// The refusal for a request whose work the runtime cancelled while shutting down.
pub(crate) fn run_to_completion<F>(
    mut running: Running,
    work: F,
) -> impl Future<Output = Result<F::Output, Rejection>> + Send + 'static
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut work = Box::pin(work.in_current_span());
    async move {
        let Ok(runtime) = Handle::try_current() else {
            return Ok(work.await);
        };
        if let Poll::Ready(output) = poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await {
            return Ok(output);
        }
        let _waiting = running.in_task();
        let task = runtime.spawn(async move {
            let output = work.await;
            drop(running);
            output
        });
        match task.await {
            Ok(output) => Ok(output),
            Err(error) => match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_cancelled) => Err(shutting_down()),
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
    use crate::Idem;

    #[tokio::test]
    async fn work_that_ends_at_once_runs_in_place() {
        let outer = tokio::task::try_id();
        let ran_in = run_to_completion(Running::start(&Idem::builder().build()), async {
            tokio::task::try_id()
        })
        .await;
        assert_eq!(ran_in.ok(), Some(outer), "no task of its own was needed");
    }

    #[tokio::test]
    async fn work_goes_on_after_its_waiter_is_dropped_and_counts_as_detached() {
        let idem = Idem::builder().build();
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
        let waiter = tokio::spawn(run_to_completion(Running::start(&idem), work));
        // Past its first poll the work is pending on `released`, and was handed to a task
        // of its own in that same poll; drop the waiter as a client going away would.
        started.await.expect("the work started");
        assert_eq!(
            idem.detached_handlers(),
            0,
            "its request still waits for it"
        );
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        assert!(!finished.load(Ordering::SeqCst));
        assert_eq!(idem.detached_handlers(), 1, "it runs on, detached");
        release
            .send(())
            .expect("the work still waits for its release");
        done.await.expect("the work ran to its end");
        assert!(finished.load(Ordering::SeqCst));
        let drained = idem.shutdown(std::time::Duration::from_secs(5)).await;
        assert_eq!(idem.detached_handlers(), 0, "it ended");
        assert_eq!(drained.unfinished, 0);
    }

    #[tokio::test]
    async fn work_whose_request_waits_is_not_detached() {
        let idem = Idem::builder().build();
        let ran = run_to_completion(Running::start(&idem), async {
            tokio::task::yield_now().await;
            7
        });
        assert_eq!(ran.await.ok(), Some(7));
        assert_eq!(idem.detached_handlers(), 0);
    }

    #[tokio::test]
    async fn the_drain_waits_for_detached_work_and_reports_it() {
        let idem = Idem::builder().build();
        let (release, released) = oneshot::channel::<()>();
        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let work = async move {
            released.await.expect("the test releases the work");
            flag.store(true, Ordering::SeqCst);
        };
        let waiter = tokio::spawn(run_to_completion(Running::start(&idem), work));
        tokio::task::yield_now().await;
        waiter.abort();
        let _ = waiter.await;
        let draining = tokio::spawn({
            let idem = idem.clone();
            async move { idem.shutdown(std::time::Duration::from_secs(30)).await }
        });
        // The drain refuses new guarded requests as soon as it starts, and waits.
        while idem.handlers().admit().is_ok() {
            tokio::task::yield_now().await;
        }
        assert!(
            !draining.is_finished(),
            "the drain waits for the detached work"
        );
        release.send(()).expect("the work waits for its release");
        let drained = draining.await.expect("the drain ends");
        assert!(finished.load(Ordering::SeqCst), "the work ran to its end");
        assert_eq!((drained.finished, drained.unfinished), (1, 0));
    }

    #[tokio::test]
    async fn a_drain_whose_grace_runs_out_reports_what_still_runs() {
        let idem = Idem::builder().build();
        let waiter = tokio::spawn(run_to_completion(
            Running::start(&idem),
            std::future::pending::<()>(),
        ));
        tokio::task::yield_now().await;
        waiter.abort();
        let _ = waiter.await;
        let drained = idem.shutdown(std::time::Duration::from_millis(50)).await;
        assert_eq!((drained.finished, drained.unfinished), (0, 1));
    }

    #[test]
    fn outside_a_runtime_the_work_runs_in_place() {
        let ran = futures_util::FutureExt::now_or_never(run_to_completion(
            Running::start(&Idem::builder().build()),
            async { 7 },
        ));
        assert_eq!(ran.map(Result::ok), Some(Some(7)));
    }
}
