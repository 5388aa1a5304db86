//! Running a handler to its end even when the request that started it goes away.
//!
//! A guard that has spent something for a request — a window taken, a form token
//! consumed, an idempotency record begun — must not let the handler be cancelled half-way
//! when the client disconnects (a browser abandons the first POST of a double click): the
//! work may already have committed while its key, token or record says otherwise.
//!
//! The work runs in the request's own task, as any handler does: no task is spawned and
//! no other thread woken while its client waits for it. Only when the request is dropped
//! before the work ended does the work move into a task of its own, which runs it to its
//! end (`tests::work_runs_in_its_requests_task_until_the_request_is_dropped`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use idem_core::throttled;
use tokio::runtime::Handle;
use tracing::Instrument;

use crate::idem::handlers::Running;

/// Runs `work` to its end, in the request's task while the request is polled, and in a
/// task of its own once the request is dropped before the work ended. A panic in it
/// resumes here.
///
/// Outside a Tokio runtime a dropped request's work cannot run on, and is dropped.
///
/// `work` counts among its runtime's running handlers (`running`, taken by the caller
/// before it moves what it needs into `work`) until it ends, and among the detached ones
/// once its request is dropped: [`Idem::shutdown`](crate::Idem::shutdown) waits for it, and
/// [`IdemBuilder::with_detached_limit`](crate::IdemBuilder::with_detached_limit) bounds
/// how many run detached.
///
/// `work` is boxed here, so that it can move into a task while it is pending, and so that
/// the future of the request holds a pointer to it rather than the work itself (the
/// guards' `the_per_request_future_stays_small` tests).
pub(crate) fn run_to_completion<F>(running: Running, work: F) -> RunToCompletion<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    RunToCompletion {
        work: Some(Box::pin(work)),
        running: Some(running),
        polling: false,
    }
}

/// The future of [`run_to_completion`].
pub(crate) struct RunToCompletion<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    /// `None` once it ended.
    work: Option<Pin<Box<F>>>,
    running: Option<Running>,
    /// Set while `work` is polled: dropped then, it is unwinding from a panic in `work`,
    /// which must not be polled again.
    polling: bool,
}

impl<F: Future + Send + 'static> Future for RunToCompletion<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Every field is `Unpin`: the work is pinned in its box.
        let this = self.get_mut();
        let work = this.work.as_mut().expect("polled after it ended");
        this.polling = true;
        let polled = work.as_mut().poll(cx);
        this.polling = false;
        let output = std::task::ready!(polled);
        this.work = None;
        this.running = None;
        Poll::Ready(output)
    }
}

impl<F: Future + Send + 'static> Drop for RunToCompletion<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let (Some(work), Some(mut running)) = (self.work.take(), self.running.take()) else {
            return;
        };
        if self.polling {
            return;
        }
        let Ok(runtime) = Handle::try_current() else {
            throttled::warn!(
                "idem: a guarded handler was cut off: its request went away outside a Tokio runtime"
            );
            return;
        };
        running.detach();
        // In the request's span, which a task of its own does not enter by itself.
        let work = async move {
            work.await;
            drop(running);
        };
        runtime.spawn(work.in_current_span());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::sync::oneshot;

    use super::*;
    use crate::Idem;

    /// The work of a request its client waits for never leaves the request's task, however
    /// often it waits: no task spawned, no other thread woken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_runs_in_its_requests_task_until_the_request_is_dropped() {
        let idem = Idem::builder().build();
        let request = tokio::spawn({
            let idem = idem.clone();
            async move {
                let outer = tokio::task::id();
                let tasks = run_to_completion(Running::start(&idem), async {
                    let mut tasks = Vec::new();
                    for _ in 0..5 {
                        tasks.push(tokio::task::id());
                        tokio::task::yield_now().await;
                    }
                    tasks
                })
                .await;
                (outer, tasks)
            }
        });
        let (outer, tasks) = request.await.expect("the request ends");
        assert_eq!(
            tasks,
            vec![outer; 5],
            "every poll in the request's own task"
        );
        assert_eq!(idem.detached_handlers(), 0);
    }

    #[tokio::test]
    async fn a_panic_in_the_work_resumes_in_its_request_and_is_not_run_again() {
        let idem = Idem::builder().build();
        let request = tokio::spawn(run_to_completion(Running::start(&idem), async {
            tokio::task::yield_now().await;
            panic!("the handler panicked");
        }));
        assert!(request.await.unwrap_err().is_panic());
        assert_eq!(idem.detached_handlers(), 0, "not moved into a task");
        let drained = idem.shutdown(std::time::Duration::from_millis(100)).await;
        assert_eq!(drained.unfinished, 0, "counted as ended");
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
        // Past its first poll the work is pending on `released`, in the waiter's task; drop
        // the waiter as a client going away would, and the work moves to a task of its own.
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
        assert_eq!(ran.await, 7);
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
        assert_eq!(ran, Some(7));
    }
}
