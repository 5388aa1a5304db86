//! Running a handler to its end even when the request that started it goes away.
//!
//! A guard that has spent something for a request — a form token consumed, an idempotency
//! record begun — must not let the handler be cancelled half-way when the client
//! disconnects (a browser abandons the first POST of a double click): the work would be
//! lost while its token or record says it was done. Such guards run the handler as a task
//! of its own and wait for it; dropping the wait leaves the task running.

use std::future::Future;

use tokio::runtime::Handle;
use tracing::Instrument;

/// Runs `work` as a task on `runtime` and waits for it. A panic in it resumes here; `None`
/// when the runtime cancelled it (shutting down).
pub(crate) async fn run_to_completion<F>(runtime: &Handle, work: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match runtime.spawn(work.in_current_span()).await {
        Ok(output) => Some(output),
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_cancelled) => None,
        },
    }
}
