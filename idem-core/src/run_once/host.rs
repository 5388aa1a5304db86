//! What a run hosts its record with: the background completions [`RunOnce::drain`]
//! waits for, and the attempt that says whether its work took the record over.
//!
//! [`RunOnce::drain`]: super::RunOnce::drain

use std::future::Future;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use super::Attempt;
use crate::record::Host;

/// The work of a `RunOnce`'s runs that outlives them: completions retried until the
/// store answers, removals.
#[derive(Clone, Debug, Default)]
pub(super) struct Background(TaskTracker);

impl Background {
    pub(super) async fn drain(&self, within: Duration) -> bool {
        // Closed only while waiting, so that runs after this drain are tracked again.
        self.0.close();
        let drained = tokio::time::timeout(within, self.0.wait()).await.is_ok();
        self.0.reopen();
        drained
    }
}

/// One run's host.
#[derive(Clone, Debug)]
pub(super) struct RunHost {
    background: Background,
    attempt: Attempt,
}

impl RunHost {
    pub(super) fn new(background: &Background, attempt: Attempt) -> Self {
        Self {
            background: background.clone(),
            attempt,
        }
    }

    pub(super) fn attempt(&self) -> &Attempt {
        &self.attempt
    }
}

impl Host for RunHost {
    fn spawn<F>(&self, work: F) -> Option<JoinHandle<()>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let runtime = Handle::try_current().ok()?;
        Some(self.background.0.spawn_on(work, &runtime))
    }

    fn taken_over(&self) -> bool {
        self.attempt.taken_over()
    }
}
