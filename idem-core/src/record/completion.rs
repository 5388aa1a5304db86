//! A record completed with its attempt's result: stored, again and again while the store
//! cannot answer, and claimed again when its lease ended meanwhile.

use std::time::Duration;

use bytes::Bytes;

use super::{Host, Record};
use crate::store::{Begin, RecordStore, StoreError};
use crate::throttled;

/// What keeping an attempt's result came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// Stored in the attempt's record.
    Stored,
    /// The attempt took the record over, and completes it itself, in its own transaction.
    ByHandler,
    /// Stored after the key was claimed again: the record had ended with its lease.
    ClaimedAgain,
    /// Not known: the store could not answer (the result is stored again in the
    /// background, where there is a runtime to do it).
    Unknown,
    /// The key is another attempt's now: what it stored, if it completed.
    Lost(Option<Bytes>),
}

impl Kept {
    /// Logs it; `again` for a completion retried after the store failed to answer (an
    /// earlier try may have been applied).
    fn log(&self, again: bool) {
        match self {
            Self::Stored => tracing::debug!(again, "idem: result stored"),
            Self::ByHandler => tracing::debug!(
                "idem: the attempt completed the record itself, in its own transaction"
            ),
            Self::ClaimedAgain => throttled::warn!(
                "idem: the record had ended with its lease while the store was unreachable; \
                 the key was free, so it was claimed again and the result stored"
            ),
            Self::Unknown => {}
            Self::Lost(_) if again => throttled::error!(
                "idem: the key was taken by another attempt while this one's result could \
                 not be stored; this attempt's caller already got its own result"
            ),
            Self::Lost(_) => throttled::warn!(
                "idem: the record was taken by another attempt after this one's lease ran \
                 out; its caller gets that attempt's answer"
            ),
        }
    }
}

impl<St: RecordStore + Clone, H: Host> Record<St, H> {
    /// Stores `result` and keeps it for `retention`, and says whether the caller gets its
    /// own result or, the key being answered by another attempt, the answer of that one.
    /// A store with no room for `result` gets `no_room()` instead, a note that it was too
    /// large.
    ///
    /// A store that cannot answer now (Redis restarting, a network fault) gets the
    /// completion again, in the background, until it answers: the attempt has run, and a
    /// record left in progress would let a retry run it a second time once its lease ran
    /// out. The caller gets its result meanwhile ([`Kept::Unknown`]); the host's drain
    /// waits for the completion.
    pub async fn complete<N>(&self, result: Bytes, retention: Duration, no_room: N) -> Kept
    where
        N: Fn() -> Bytes + Send + Sync + 'static,
    {
        match self.keep(&result, retention, &no_room).await {
            Ok(kept) => {
                kept.log(false);
                kept
            }
            Err(error) => {
                throttled::warn!(
                    %error,
                    "idem: the result could not be stored yet; storing it again until the \
                     store answers"
                );
                let record = self.clone();
                self.host().spawn(async move {
                    record
                        .complete_when_the_store_answers(result, retention, no_room)
                        .await;
                });
                Kept::Unknown
            }
        }
    }

    /// Spends what the attempt was to spend, now that its result is stored in its stead.
    async fn spend_late(&self) {
        if let Some(spending) = self.spending_of() {
            spending.spend_late().await;
        }
    }

    /// Keeps the result again and again, ever less often (from 50 ms up to 1 s apart),
    /// until the store answers or `retention` has passed.
    async fn complete_when_the_store_answers<N: Fn() -> Bytes>(
        self,
        result: Bytes,
        retention: Duration,
        no_room: N,
    ) {
        let deadline = tokio::time::Instant::now() + retention;
        let mut pause = Duration::from_millis(50);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            match self.keep(&result, retention, &no_room).await {
                Ok(kept) => return kept.log(true),
                Err(_) if tokio::time::Instant::now() < deadline => {}
                Err(error) => {
                    throttled::error!(
                        %error,
                        "idem: the result could not be stored within its retention; a \
                         retry runs again once the lease ends"
                    );
                    return;
                }
            }
        }
    }

    /// One attempt at keeping the result in the record.
    ///
    /// A record no longer this attempt's (its lease ran out while the store could not be
    /// reached) is claimed again when its key is free, and the result stored in it: a
    /// retry then replays it rather than running the attempt a second time. A key
    /// another attempt took meanwhile is that attempt's, and so is its answer.
    async fn keep<N: Fn() -> Bytes>(
        &self,
        result: &Bytes,
        retention: Duration,
        no_room: &N,
    ) -> Result<Kept, StoreError> {
        // Asked before the store is: the attempt's own transaction, which completed the
        // record, may have used up the store's timeout already (a stalled link), and the
        // answer must not wait for a second one.
        if self.host().taken_over() {
            return Ok(Kept::ByHandler);
        }
        if self
            .try_complete(result.clone(), retention, no_room)
            .await?
        {
            self.spend_late().await;
            return Ok(Kept::Stored);
        }
        // Boxed: the rare way, which inline would size every first attempt's boxed work
        // (`idem-axum`'s `the_boxed_work_stays_small`: 1,040 bytes inline, against 712).
        Box::pin(self.claim_again(result, retention, no_room)).await
    }

    /// Claims the key of a record that ended with its lease, and stores the result in
    /// it; or, the key being another attempt's, says so.
    async fn claim_again<N: Fn() -> Bytes>(
        &self,
        result: &Bytes,
        retention: Duration,
        no_room: &N,
    ) -> Result<Kept, StoreError> {
        let (key, owner) = (self.key(), self.owner());
        let claimed = self
            .store()
            .begin_record(key, owner, self.fingerprint(), self.lease());
        Ok(match claimed.await? {
            Begin::Started => match self
                .try_complete(result.clone(), retention, no_room)
                .await?
            {
                true => {
                    self.spend_late().await;
                    Kept::ClaimedAgain
                }
                false => Kept::Lost(None),
            },
            // This attempt's own result: an earlier try whose answer was lost did store it.
            Begin::Completed { response: stored } if stored == *result => Kept::Stored,
            Begin::Completed { response: stored } => Kept::Lost(Some(stored)),
            Begin::InProgress { .. } | Begin::Mismatch => Kept::Lost(None),
        })
    }

    /// One attempt at completing the record, falling back to the "too large" note when
    /// the store has no room for the result.
    async fn try_complete<N: Fn() -> Bytes>(
        &self,
        result: Bytes,
        retention: Duration,
        no_room: &N,
    ) -> Result<bool, StoreError> {
        let stored = self
            .store()
            .complete_record(self.key(), self.owner(), result, retention)
            .await;
        match stored {
            Err(StoreError::Memory { .. }) => {
                throttled::warn!(
                    "idem: no room to store the result; a note that it was too large is stored instead"
                );
                self.store()
                    .complete_record(self.key(), self.owner(), no_room(), retention)
                    .await
            }
            other => other,
        }
    }
}
