//! A record given back, so that a retry runs afresh: after an attempt that failed, that
//! its host did not keep, or that panicked.

use std::time::Duration;

use super::{Host, Record};
use crate::store::RecordStore;
use crate::{Key, Owner, throttled};

/// How long [`Record::abandon_taken_over`] waits for the removal before it answers.
const REMOVAL_WAIT: Duration = Duration::from_millis(50);

impl<St: RecordStore + Clone, H: Host> Record<St, H> {
    /// Removes the record, so that a retry runs afresh, once what the attempt spent is
    /// given back.
    pub async fn abandon(&self) {
        if let Some(spending) = self.spending_of() {
            spending.give_back().await;
        }
        if let Err(error) = self.store().abandon_record(self.key(), self.owner()).await {
            throttled::warn!(%error, "idem: could not remove an idempotency record; it ends with its lease");
        }
    }

    /// Removes the record of an attempt that took it over and whose result is not kept
    /// (its transaction failed), in a task of the host's, and waits for the removal for
    /// at most 50 ms: a store that answers removes it well within that, so that a retry
    /// right after the failure runs afresh; one that stalls had likely held the attempt's
    /// transaction up to the store's timeout already, and the answer does not wait out a
    /// second one. Without a runtime (it is shutting down) the record ends with its lease.
    pub async fn abandon_taken_over(&self) {
        let record = self.clone();
        let Some(removal) = self.host().spawn(async move { record.abandon().await }) else {
            return;
        };
        if tokio::time::timeout(REMOVAL_WAIT, removal).await.is_err() {
            throttled::warn!(
                "idem: the store did not remove the record of a failed attempt in time; the \
                 answer goes now, the removal goes on (a retry meanwhile gets 409)"
            );
        }
    }

    /// A guard that removes the record when dropped armed: when the attempt panicked,
    /// unwinding the task that held it. [`AbandonOnDrop::disarm`] once the attempt ended.
    pub fn abandon_on_drop(self) -> AbandonOnDrop<St, H> {
        AbandonOnDrop { record: Some(self) }
    }
}

/// The guard of [`Record::abandon_on_drop`].
#[derive(Debug)]
pub struct AbandonOnDrop<St: RecordStore + Clone, H: Host> {
    /// `None` once disarmed.
    record: Option<Record<St, H>>,
}

impl<St: RecordStore + Clone, H: Host> AbandonOnDrop<St, H> {
    /// The record, which the attempt ended with: nothing is removed on drop.
    pub fn disarm(mut self) -> Record<St, H> {
        self.record.take().expect("armed until disarmed")
    }
}

impl<St: RecordStore + Clone, H: Host> Drop for AbandonOnDrop<St, H> {
    fn drop(&mut self) {
        let Some(record) = self.record.take() else {
            return;
        };
        throttled::error!(
            "idem: the first attempt ended without a result (a panic, or its future was dropped); its idempotency record is removed"
        );
        // Without a runtime (it is shutting down) the record ends with its lease.
        let removing = record.clone();
        record.host().spawn(async move { removing.abandon().await });
    }
}

/// The beginning of a record, until the store answers it.
///
/// Dropped before the answer came (its caller went away while the store was asked), it
/// gives the key back by the owner drawn for it, in a task of the attempt's [`Host`],
/// made for it: the store may have begun the record or not, and a removal by an owner
/// that holds nothing there removes nothing. Left alone, a record begun for nobody would
/// refuse the caller's retries until its lease ends, though nothing runs under it.
///
/// A store that cannot answer the removal (a stalled link) is asked again, ever less
/// often (from 50 ms up to 1 s apart), until it answers or the lease has passed, when the
/// record has ended anyway.
///
/// It holds what the begin needs, rather than a second copy of it: the begin's future
/// grows by a flag, and the begin that is answered allocates nothing for it
/// (`idem-axum`'s `the_per_request_future_stays_small`).
pub(super) struct Unanswered<'a, St, H, F>
where
    St: RecordStore + Clone,
    H: Host,
    F: FnOnce(&Key, &Owner) -> H,
{
    key: &'a Key,
    lease: Duration,
    /// The store, the owner drawn and what makes the attempt's host; `None` once the
    /// store answered.
    begun: Option<(St, Owner, F)>,
}

impl<'a, St, H, F> Unanswered<'a, St, H, F>
where
    St: RecordStore + Clone,
    H: Host,
    F: FnOnce(&Key, &Owner) -> H,
{
    /// The begin of `key` as `owner` on `store`, in progress for `lease`, whose host
    /// `host` makes.
    pub(super) fn new(store: St, key: &'a Key, owner: Owner, lease: Duration, host: F) -> Self {
        Self {
            key,
            lease,
            begun: Some((store, owner, host)),
        }
    }

    /// The store and the owner, to ask the store with.
    pub(super) fn asking(&self) -> (&St, &Owner) {
        let (store, owner, _) = self.begun.as_ref().expect("asked before it is answered");
        (store, owner)
    }

    /// The store answered (or failed to): nothing is given back, and the store, the
    /// owner and what makes the host are the caller's again.
    pub(super) fn answered(mut self) -> (St, Owner, F) {
        self.begun.take().expect("answered once")
    }
}

impl<St, H, F> Drop for Unanswered<'_, St, H, F>
where
    St: RecordStore + Clone,
    H: Host,
    F: FnOnce(&Key, &Owner) -> H,
{
    fn drop(&mut self) {
        let Some((store, owner, host)) = self.begun.take() else {
            return;
        };
        tracing::debug!(
            "idem: the caller went away while its idempotency record was begun; its key is given back"
        );
        let (key, lease) = (self.key.clone(), self.lease);
        // Without a runtime (it is shutting down) the record ends with its lease.
        host(self.key, &owner).spawn(async move { give_back(&store, &key, &owner, lease).await });
    }
}

/// Removes the record `owner` may have begun under `key`, asking again while the store
/// cannot answer, until `lease` has passed.
async fn give_back<St: RecordStore>(store: &St, key: &Key, owner: &Owner, lease: Duration) {
    let deadline = tokio::time::Instant::now() + lease;
    let mut pause = Duration::from_millis(50);
    loop {
        let Err(error) = store.abandon_record(key, owner).await else {
            return;
        };
        if tokio::time::Instant::now() + pause >= deadline {
            throttled::warn!(
                %error,
                "idem: the key of a request gone while its record was begun could not be \
                 given back; a record begun for it has ended with its lease"
            );
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}
