//! A record given back, so that a retry runs afresh: after an attempt that failed, that
//! its host did not keep, or that panicked.

use std::time::Duration;

use super::{Host, Record};
use crate::store::RecordStore;
use crate::throttled;

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
