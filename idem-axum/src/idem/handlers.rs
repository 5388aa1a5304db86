//! The guarded handlers a runtime has running: how many, how many of them outlived their
//! request, and the drain that waits for them at shutdown.
//!
//! A guard that has taken its key runs the handler to its end even when the client goes
//! away (see [`detached`](crate::detached)). Such a handler is no longer counted by
//! anything around the router — a concurrency limit frees its slot, axum's graceful
//! shutdown does not wait for it — so the runtime counts it here: the drain waits for it,
//! and a bound on how many may run detached refuses new guarded requests above it.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idem_core::throttled;
use tokio::sync::Notify;

use super::Idem;
use crate::guard::shutting_down;
use crate::outcome;
use crate::rejection::{Rejection, RejectionKind};

/// How many detached handlers a runtime lets run before it refuses new guarded requests
/// (it refuses them while more run), unless set with [`IdemBuilder::with_detached_limit`](crate::IdemBuilder::with_detached_limit).
pub(crate) const DEFAULT_DETACHED_LIMIT: usize = 1_024;

/// How long a client refused by the bound is told to wait.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The counts of one runtime's guarded handlers.
pub(crate) struct Handlers {
    /// Handlers started and not yet ended, whether their client waits or not.
    running: AtomicUsize,
    /// Of those, the ones whose request went away.
    detached: AtomicUsize,
    /// Handlers ended since the runtime was built.
    ended: AtomicU64,
    /// Set by [`Idem::shutdown`]: no new guarded request is let in.
    draining: AtomicBool,
    /// Woken when the last running handler ends.
    idle: Notify,
    detached_limit: usize,
}

impl Handlers {
    pub(crate) fn new(detached_limit: usize) -> Self {
        Self {
            running: AtomicUsize::new(0),
            detached: AtomicUsize::new(0),
            ended: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            idle: Notify::new(),
            detached_limit,
        }
    }

    /// The refusal of a new guarded request, if the runtime is draining or has more
    /// detached handlers than its limit.
    pub(crate) fn admit(&self) -> Result<(), Rejection> {
        if self.draining.load(Ordering::Acquire) {
            outcome::unadmitted("shutting_down");
            return Err(shutting_down());
        }
        if self.detached.load(Ordering::Relaxed) > self.detached_limit {
            outcome::unadmitted("busy");
            throttled::warn!(
                limit = self.detached_limit,
                "idem: more handlers run for clients that went away than the runtime's \
                 limit; new guarded requests are refused until some end"
            );
            return Err(Rejection::new(
                RejectionKind::Busy,
                "the server is still finishing earlier requests; please retry shortly",
            )
            .with_retry_after(RETRY_AFTER));
        }
        Ok(())
    }

    pub(crate) fn detached(&self) -> usize {
        self.detached.load(Ordering::Relaxed)
    }

    fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    fn ended(&self) -> u64 {
        self.ended.load(Ordering::Relaxed)
    }

    fn report_detached(&self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("idem_detached_handlers").set(self.detached() as f64);
    }

    /// Waits until no handler runs, for at most `grace`, refusing new guarded requests
    /// from now on.
    pub(crate) async fn drain(&self, grace: Duration) -> Drained {
        self.draining.store(true, Ordering::Release);
        let (started, ended_before) = (Instant::now(), self.ended());
        let idle = async {
            loop {
                let notified = self.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.running() == 0 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(grace, idle).await;
        let drained = Drained {
            finished: self.ended() - ended_before,
            unfinished: self.running(),
            took: started.elapsed(),
        };
        if drained.unfinished > 0 {
            tracing::error!(%drained, "idem: handlers still running at the end of the drain are cut off");
        } else {
            tracing::info!(%drained, "idem: drained");
        }
        drained
    }
}

/// What [`Idem::shutdown`] found: the guarded handlers that ended while it waited, and
/// the ones still running when its grace ran out (the process cuts them off when it
/// exits; their records end with their leases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drained {
    /// Handlers that ended during the drain.
    pub finished: u64,
    /// Handlers still running when the grace ran out: 0 unless it ran out.
    pub unfinished: usize,
    /// How long the drain took.
    pub took: Duration,
}

impl fmt::Display for Drained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} handlers finished, {} unfinished, in {:?}",
            self.finished, self.unfinished, self.took
        )
    }
}

/// One guarded handler, counted as running from its start to its end, and as detached
/// from the moment its request went away.
pub(crate) struct Running {
    idem: Idem,
    detached: bool,
}

impl Running {
    pub(crate) fn start(idem: &Idem) -> Self {
        idem.handlers().running.fetch_add(1, Ordering::AcqRel);
        Self {
            idem: idem.clone(),
            detached: false,
        }
    }

    /// The handler's request went away: it runs on, detached, until it ends.
    pub(crate) fn detach(&mut self) {
        if !self.detached {
            self.detached = true;
            let handlers = self.idem.handlers();
            handlers.detached.fetch_add(1, Ordering::Relaxed);
            handlers.report_detached();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let handlers = self.idem.handlers();
        if self.detached {
            handlers.detached.fetch_sub(1, Ordering::Relaxed);
            handlers.report_detached();
        }
        handlers.ended.fetch_add(1, Ordering::Relaxed);
        if handlers.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            handlers.idle.notify_waiters();
        }
    }
}
