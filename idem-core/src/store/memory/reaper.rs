//! The background thread that reclaims expired entries of a [`MemoryStore`](super::MemoryStore),
//! so memory returns after a flood even if nobody touches those keys again.
//!
//! A plain thread rather than a task: idem-core runs under any async runtime, or none.

use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread;
use std::time::Duration;

use super::Shared;

/// Stops the thread when dropped, that is when the last clone of the store goes.
#[derive(Debug)]
pub(super) struct Reaper {
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl Reaper {
    /// Starts the thread; `None` (and a warning) if the OS refuses one, in which case
    /// expired entries are reclaimed only when the store is full.
    pub(super) fn spawn(shared: Weak<Shared>, every: Duration) -> Option<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = Arc::clone(&stop);
        let spawned = thread::Builder::new()
            .name("idem-memory-reaper".into())
            .spawn(move || {
                let (stopped, wake) = &*signal;
                loop {
                    // The lock is not held while reclaiming, so dropping the store never
                    // waits for a pass over a large store.
                    let guard = stopped.lock().unwrap_or_else(PoisonError::into_inner);
                    let (guard, _) = wake
                        .wait_timeout_while(guard, every, |stopped| !*stopped)
                        .unwrap_or_else(PoisonError::into_inner);
                    if *guard {
                        return;
                    }
                    drop(guard);
                    match shared.upgrade() {
                        Some(shared) => shared.reclaim_all(),
                        None => return,
                    }
                }
            });
        match spawned {
            Ok(_) => Some(Self { stop }),
            Err(error) => {
                tracing::warn!(%error, "idem: could not start the MemoryStore reaper thread");
                None
            }
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
    }
}
