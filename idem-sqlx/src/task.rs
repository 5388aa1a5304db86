//! [`Background`]: a task a store runs beside its operations (the purge, the listener of
//! PostgreSQL's notifications), stopped with the store.

use std::future::Future;

/// A task of one store (and its clones) on the runtime of the operation that started it;
/// aborted when dropped, that is when the last clone of the store is.
#[derive(Debug)]
pub struct Background(tokio::task::AbortHandle);

impl Background {
    /// Spawns `task` on the current Tokio runtime; `None` outside one.
    pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Option<Self> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(Self(runtime.spawn(task).abort_handle()))
    }

    /// Whether the task has ended (it was aborted, or it ran to its end); for the store's
    /// tests, which run on SQLite.
    #[cfg(all(test, feature = "sqlite"))]
    pub(crate) fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.0.abort();
    }
}
