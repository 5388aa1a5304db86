//! [`Counting`]: a store wrapper that counts what the suites look at, and stalls or fails
//! what they turn a switch on for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use idem_core::store::{Fencing, Turn};
use idem_core::{Acquire, Begin, FairStore, Fingerprint, Key, Owner, Store, StoreError};
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

/// Forwards each operation listed to the inner store, `name(arguments) -> Output`, after
/// counting the call in `counter` for `, count counter` (before any stall), and counting its result in
/// `counter` when it matches `pattern` for `, then counter if (pattern)`, failing as a
/// store out of reach would (a timeout) while the switch `fault` is on for
/// `, failing while fault`, waiting while the switch `stall` is on for
/// `, waiting while stall`, and, for `, answer held while held`, holding back the store's
/// answer while the switch `held` is on, as a link that stalls once the store applied the
/// operation.
macro_rules! forward {
    ($($op:ident($($arg:ident: $ty:ty),*) -> $out:ty
        $(, count $before:ident)? $(, then $after:ident if ($counted:pat))?
        $(, failing while $fault:ident)? $(, waiting while $stall:ident)?
        $(, answer held while $held:ident)?;)*) => {
        $(async fn $op(&self, $($arg: $ty),*) -> Result<$out, StoreError> {
            $(if self.$fault.load(Ordering::SeqCst) {
                return Err(StoreError::Timeout(Duration::from_millis(100)));
            })?
            $(self.counts.$before.fetch_add(1, Ordering::SeqCst);)?
            $(let _ = self.$stall.subscribe().wait_for(|stalled| !stalled).await;)?
            let result = self.inner.$op($($arg),*).await;
            $(let _ = self.$held.subscribe().wait_for(|stalled| !stalled).await;)?
            $(if matches!(result, $counted) {
                self.counts.$after.fetch_add(1, Ordering::SeqCst);
            })?
            result
        })*
    };
}

impl<S: Store> Store for Counting<S> {
    forward! {
        acquire(key: &Key, owner: &Owner, ttl: Duration, fencing: Fencing) -> Acquire,
            count acquire;
        release(key: &Key, owner: &Owner) -> bool;
        acquire_or_register_waiter(
            key: &Key, owner: &Owner, ttl: Duration, fencing: Fencing, wait: Duration
        ) -> Acquire, count acquire;
        release_and_signal(key: &Key, owner: &Owner) -> bool, then released if (Ok(true));
        wait_for_release(key: &Key, within: Duration) -> bool,
            count wait, then woken if (Ok(true));
        renew(key: &Key, owner: &Owner, ttl: Duration) -> bool, count renew;
        remaining(key: &Key) -> Option<Duration>;
        put_token(scope: &Key, token: &Key, ttl: Duration, keep: usize) -> ();
        consume_token(scope: &Key, token: &Key) -> bool,
            count token_check, answer held while token_checks_stalled;
        has_token(scope: &Key, token: &Key) -> bool,
            count token_check, answer held while token_checks_stalled;
        begin_record(key: &Key, owner: &Owner, fingerprint: &Fingerprint, lease: Duration)
            -> Begin, count record_begin, answer held while record_begins_stalled;
        complete_record(key: &Key, owner: &Owner, response: Bytes, retention: Duration)
            -> bool, waiting while endings_stalled;
        renew_record(key: &Key, owner: &Owner, lease: Duration) -> bool,
            failing while renewals_fail;
        abandon_record(key: &Key, owner: &Owner) -> bool, waiting while endings_stalled;
    }
}

impl<S: FairStore> FairStore for Counting<S> {
    forward! {
        acquire_in_turn(
            key: &Key, owner: &Owner, ttl: Duration, fencing: Fencing, place: Option<Duration>
        ) -> Turn, count acquire, then queued if (Ok(Turn::Queued { .. }));
        wait_for_turn(key: &Key, owner: &Owner, within: Duration) -> bool,
            count turn_waits, then turns if (Ok(true));
        leave_queue(key: &Key, owner: &Owner) -> ();
    }
}
