//! [`Counting`]: a store wrapper that counts what the suites look at, and stalls or fails
//! what they turn a switch on for.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use idem_core::store::Turn;
use idem_core::{FairStore, LockStore, RecordStore, StoreError, TokenStore};
use tokio::sync::watch;

/// A store that counts the calls that matter to the lock, and forwards everything.
#[derive(Debug, Clone)]
pub struct Counting<S> {
    inner: S,
    counts: Arc<Counts>,
    renewals_fail: Arc<AtomicBool>,
    endings_stalled: Arc<watch::Sender<bool>>,
    token_checks_stalled: Arc<watch::Sender<bool>>,
    record_begins_stalled: Arc<watch::Sender<bool>>,
}

/// Declares `Counts`, one counter a line, and the accessor of each:
/// `accessor: counter, "what it counts";`.
macro_rules! counts {
    ($($accessor:ident: $counter:ident, $doc:literal;)*) => {
        #[derive(Debug, Default)]
        struct Counts {
            $($counter: AtomicUsize,)*
        }

        impl<S> Counting<S> {
            $(#[doc = $doc]
            pub fn $accessor(&self) -> usize {
                self.counts.$counter.load(Ordering::SeqCst)
            })*
        }
    };
}

counts! {
    acquires: acquire, "Acquisition attempts, plain or fair.";
    renewals: renew, "Renewals (a watchdog's).";
    waits: wait, "Waits for a release, however they ended.";
    wakes: woken, "Waits that ended woken, not timed out.";
    releases: released, "Releases that freed the lock.";
    queued: queued, "Fair attempts answered [`Turn::Queued`].";
    turn_waits: turn_waits, "Waits for a turn, however they ended.";
    turns: turns, "Waits for a turn that ended handed the turn, not timed out.";
    token_checks: token_check, "Form tokens spent or looked at, counted as they start.";
    record_begins: record_begin, "Idempotency records begun (or found), counted as they start.";
    record_removals: record_removal, "Removals of idempotency records, counted once the store answered them or failed.";
}

impl<S> Counting<S> {
    /// Wraps `inner`, all counts at zero.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            counts: Arc::default(),
            renewals_fail: Arc::default(),
            endings_stalled: Arc::new(watch::Sender::new(false)),
            token_checks_stalled: Arc::new(watch::Sender::new(false)),
            record_begins_stalled: Arc::new(watch::Sender::new(false)),
        }
    }

    /// From now on (`true`) or no longer, every completion and removal of an idempotency
    /// record waits, as on a stalled link, until the switch is turned off again; then it
    /// is forwarded.
    pub fn stall_record_endings(&self, stall: bool) {
        self.endings_stalled.send_replace(stall);
    }

    /// From now on (`true`) or no longer, every spending of a form token and every look
    /// at one is applied by the store, and its answer held back, as on a link that stalls
    /// on the way back, until the switch is turned off again.
    /// [`token_checks`](Self::token_checks) counts them as they start.
    pub fn stall_token_checks(&self, stall: bool) {
        self.token_checks_stalled.send_replace(stall);
    }

    /// From now on (`true`) or no longer, every beginning of an idempotency record is
    /// applied by the store, and its answer held back, as on a link that stalls on the way
    /// back, until the switch is turned off again. [`record_begins`](Self::record_begins)
    /// counts them as they start.
    pub fn stall_record_begins(&self, stall: bool) {
        self.record_begins_stalled.send_replace(stall);
    }

    /// From now on (`true`) or no longer, every renewal of an idempotency record fails
    /// as a store out of reach would, while everything else is forwarded: the record
    /// ends with its lease.
    pub fn fail_record_renewals(&self, fail: bool) {
        self.renewals_fail.store(fail, Ordering::SeqCst);
    }
}

impl<S> Counting<S> {
    /// What comes before the inner store is asked `op`: a failure, for the operations a
    /// switch fails, then the count of the call, then a stall while its switch is on.
    async fn before(&self, op: &str) -> Result<(), StoreError> {
        if op == "renew_record" && self.renewals_fail.load(Ordering::SeqCst) {
            return Err(StoreError::Timeout(Duration::from_millis(100)));
        }
        let counter = match op {
            "acquire" | "acquire_or_register_waiter" | "acquire_in_turn" => {
                Some(&self.counts.acquire)
            }
            "wait_for_release" => Some(&self.counts.wait),
            "renew" => Some(&self.counts.renew),
            "consume_token" | "has_token" => Some(&self.counts.token_check),
            "begin_record" => Some(&self.counts.record_begin),
            "wait_for_turn" => Some(&self.counts.turn_waits),
            _ => None,
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::SeqCst);
        }
        if matches!(op, "complete_record" | "abandon_record") {
            let _ = self
                .endings_stalled
                .subscribe()
                .wait_for(|stalled| !stalled)
                .await;
        }
        Ok(())
    }

    /// What comes after the inner store answered `op` with `answer` (`None` for an
    /// error): the answer held back while its switch is on, then counted where it counts.
    async fn after(&self, op: &str, answer: Option<&(dyn Any + Send + Sync)>) {
        let held = match op {
            "consume_token" | "has_token" => Some(&self.token_checks_stalled),
            "begin_record" => Some(&self.record_begins_stalled),
            _ => None,
        };
        if let Some(held) = held {
            let _ = held.subscribe().wait_for(|stalled| !stalled).await;
        }
        let yes = answer.and_then(<dyn Any + Send + Sync>::downcast_ref::<bool>) == Some(&true);
        let counter = match op {
            "release_and_signal" if yes => Some(&self.counts.released),
            "wait_for_release" if yes => Some(&self.counts.woken),
            "wait_for_turn" if yes => Some(&self.counts.turns),
            "abandon_record" => Some(&self.counts.record_removal),
            "acquire_in_turn"
                if matches!(
                    answer.and_then(<dyn Any + Send + Sync>::downcast_ref::<Turn>),
                    Some(Turn::Queued { .. })
                ) =>
            {
                Some(&self.counts.queued)
            }
            _ => None,
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Implements every capability, [`FairStore`] too, for [`Counting`] from
/// [`idem_core::store_operations!`], each operation forwarded to the inner store between
/// [`Counting::before`] and [`Counting::after`].
macro_rules! forward {
    (
        capabilities { $($cap:ident { $($ops:tt)* })* }
        fair { $($fair:ident { $($fair_ops:tt)* })* }
    ) => {
        $(forward!(@impl $cap { $($ops)* });)*
        $(forward!(@impl $fair { $($fair_ops)* });)*
    };
    (@impl $cap:ident {
        $($op:ident($($r:ident: &$rt:ty),*; $($v:ident: $vt:ty),*) -> $out:ty;)*
    }) => {
        impl<S: $cap> $cap for Counting<S> {
            $(async fn $op(&self, $($r: &$rt,)* $($v: $vt,)*) -> Result<$out, StoreError> {
                self.before(stringify!($op)).await?;
                let result = self.inner.$op($($r,)* $($v,)*).await;
                let answer = result.as_ref().ok().map(|answer| answer as &(dyn Any + Send + Sync));
                self.after(stringify!($op), answer).await;
                result
            })*
        }
    };
}

idem_core::store_operations!(forward);
