//! [`Batch`]: a batch of messages, each run once, and [`BatchReport`], which of them the
//! broker should deliver again.

use std::fmt;
use std::future::Future;

use futures_util::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Attempt, RunError, RunOnce};
use crate::store::RecordStore;

/// A batch of messages to run once each: [`RunOnce::batch`].
pub struct Batch<'a, St, K> {
    once: &'a RunOnce<St>,
    key: K,
    concurrency: usize,
    ordered: bool,
}

impl<St: fmt::Debug, K> fmt::Debug for Batch<'_, St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("once", self.once)
            .field("concurrency", &self.concurrency)
            .field("ordered", &self.ordered)
            .finish_non_exhaustive()
    }
}

/// What one message of a batch came to.
#[derive(Debug)]
pub struct BatchItem<T, E> {
    /// The message's key.
    pub key: String,
    /// Its result, the kept one for a message run before; `None` when it was not run
    /// (an [ordered](Batch::ordered) batch stops at its first failure).
    pub outcome: Option<Result<T, RunError<E>>>,
}

impl<T, E> BatchItem<T, E> {
    /// Whether the message should be delivered again: it failed, or it was not run.
    pub fn failed(&self) -> bool {
        !matches!(self.outcome, Some(Ok(_)))
    }
}

/// What a batch came to, message by message, in the order they were given.
#[derive(Debug)]
pub struct BatchReport<T, E> {
    /// One item per message.
    pub items: Vec<BatchItem<T, E>>,
}

impl<T, E> BatchReport<T, E> {
    /// The keys of the messages to deliver again — what an SQS handler returns as its
    /// `batchItemFailures`, or the messages a stream consumer leaves unacknowledged.
    pub fn failed_keys(&self) -> impl Iterator<Item = &str> {
        self.items
            .iter()
            .filter(|item| item.failed())
            .map(|item| item.key.as_str())
    }

    /// Whether every message ran, or had run before.
    pub fn all_done(&self) -> bool {
        self.items.iter().all(|item| !item.failed())
    }
}

impl<St: RecordStore + Clone> RunOnce<St> {
    /// A batch of messages, each run once under the key `key` gives it (the broker's
    /// message id, or the event's own id).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use idem_core::MemoryStore;
    /// use idem_core::run_once::RunOnce;
    ///
    /// let once = RunOnce::new(MemoryStore::new(), "payments");
    /// let batch = vec![("m-1", 10), ("m-2", -5), ("m-3", 7)];
    /// let report = once
    ///     .batch(|message: &(&str, i32)| message.0.to_owned())
    ///     .run(batch, |(_, cents), _attempt| async move {
    ///         if cents < 0 { Err("a negative amount") } else { Ok(cents) }
    ///     })
    ///     .await;
    /// assert_eq!(report.failed_keys().collect::<Vec<_>>(), ["m-2"]);
    /// # }
    /// ```
    pub fn batch<K>(&self, key: K) -> Batch<'_, St, K> {
        Batch {
            once: self,
            key,
            concurrency: 1,
            ordered: false,
        }
    }
}

impl<St: RecordStore + Clone, K> Batch<'_, St, K> {
    /// Runs up to `concurrency` messages at a time (1, one after another, unless set).
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// For an ordered queue (a FIFO queue, a partition): the messages run one after
    /// another, and the first that fails stops the batch; it and every later message are
    /// reported failed, so that the broker delivers them again in their order.
    #[must_use]
    pub fn ordered(mut self) -> Self {
        self.ordered = true;
        self.concurrency = 1;
        self
    }

    /// Runs each message once, with `work`, and reports each message's outcome.
    pub async fn run<M, T, E, F, Fut>(
        self,
        messages: impl IntoIterator<Item = M>,
        work: F,
    ) -> BatchReport<T, E>
    where
        K: Fn(&M) -> String,
        M: Serialize,
        T: Serialize + DeserializeOwned,
        F: Fn(M, Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (once, key_of, work) = (self.once, &self.key, &work);
        let run_one = |message: M| {
            let key = key_of(&message);
            let fingerprint = once.fingerprint_of(&message);
            async move {
                let outcome = match fingerprint {
                    Ok(fingerprint) => {
                        once.run_on(once.key_of(&key), fingerprint, |attempt| {
                            work(message, attempt)
                        })
                        .await
                    }
                    Err(error) => Err(RunError::Encode(error)),
                };
                BatchItem {
                    key,
                    outcome: Some(outcome),
                }
            }
        };
        let mut messages = messages.into_iter();
        if !self.ordered {
            let runs = futures_util::stream::iter(messages.map(run_one));
            let items = runs.buffered(self.concurrency).collect().await;
            return BatchReport { items };
        }
        let mut items = Vec::new();
        while let Some(message) = messages.next() {
            let item = run_one(message).await;
            let failed = item.failed();
            items.push(item);
            if failed {
                items.extend(messages.map(|message| BatchItem {
                    key: key_of(&message),
                    outcome: None,
                }));
                break;
            }
        }
        BatchReport { items }
    }
}
