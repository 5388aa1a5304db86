//! [`Attempt`]: the run that holds a record, as its work sees it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use crate::outbound::{OutboundKey, OutboundKeys};
use crate::{Key, Owner};

tokio::task_local! {
    static CURRENT: Attempt;
}

/// The run that holds a record: its key and owner, to complete the record in the work's
/// own transaction, and the keys of the work's calls to other services.
///
/// Cheap to clone: clones are one attempt.
#[derive(Clone)]
pub struct Attempt(Arc<State>);

struct State {
    key: Key,
    owner: Owner,
    retention: Duration,
    taken_over: AtomicBool,
}

impl Attempt {
    pub(super) fn new(key: &Key, owner: &Owner, retention: Duration) -> Self {
        Self(Arc::new(State {
            key: key.clone(),
            owner: owner.clone(),
            retention,
            taken_over: AtomicBool::new(false),
        }))
    }

    /// The attempt whose work runs in this task, if any: for code behind a
    /// [`RunOnceLayer`](super::RunOnceLayer), which sees only the message, and for code
    /// the work calls without handing it the attempt. Work it spawns into other tasks
    /// gets it passed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use idem_core::MemoryStore;
    /// use idem_core::run_once::{Attempt, RunOnce};
    ///
    /// assert!(Attempt::current().is_none(), "no run here");
    /// let once = RunOnce::new(MemoryStore::new(), "charge");
    /// let key = once
    ///     .run("order-7", "payload", |_| async {
    ///         let attempt = Attempt::current().expect("inside the run");
    ///         Ok::<_, std::io::Error>(attempt.outbound_key("charge").as_str().to_owned())
    ///     })
    ///     .await
    ///     .unwrap();
    /// assert_eq!(key.len(), 32);
    /// # }
    /// ```
    pub fn current() -> Option<Self> {
        CURRENT.try_with(Self::clone).ok()
    }

    /// `work`, with this attempt as [`current`](Self::current) while it runs.
    pub(super) fn scope<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self, work)
    }

    /// The record's key in the store.
    pub fn key(&self) -> &Key {
        &self.0.key
    }

    /// The owner this attempt began the record as: only it can complete the record.
    pub fn owner(&self) -> &Owner {
        &self.0.owner
    }

    /// How long the record keeps the result.
    pub fn retention(&self) -> Duration {
        self.0.retention
    }

    /// The keys of the work's calls to other services, derived from the record's key: a
    /// rerun of the work for the same record (after a crash, once the lease ran out)
    /// sends the same keys, and the services deduplicate its calls. Make one handle per
    /// run and clone it into each call ([`OutboundKeys::next_key`] numbers the calls of
    /// its clones together).
    pub fn outbound_keys(&self) -> OutboundKeys {
        OutboundKeys::new(&self.0.key)
    }

    /// The key of the work's outbound call named `label` (`"charge"`): the same in every
    /// run for this record, another for every label.
    pub fn outbound_key(&self, label: &str) -> OutboundKey {
        OutboundKeys::new(&self.0.key).key(label)
    }

    /// Says that the work completes the record itself, in its own transaction (with
    /// `commit_with_record` of crate `idem-sqlx`): from this call on, the run does not
    /// complete it. [`stored`](Self::stored) says the same. Call it before the
    /// transaction begins when that transaction may fail on the store's database: a
    /// failure then removes the record in the background, without waiting for a store
    /// that is failing.
    ///
    /// A work that takes the record over and answers `Ok` without committing it leaves
    /// it in progress until its lease ends; the next call after that runs the work again.
    pub fn take_over(&self) {
        self.0.taken_over.store(true, Ordering::Relaxed);
    }

    /// The bytes that complete the record with `result`, as the run keeps a result (its
    /// JSON), to commit in the work's own transaction; the record is the work's to
    /// complete from this call on ([`take_over`](Self::take_over)). Return the same
    /// `result` from the work: later calls get it decoded from these bytes.
    ///
    /// # Errors
    ///
    /// `result` could not be serialised.
    pub fn stored<T: Serialize + ?Sized>(&self, result: &T) -> Result<Bytes, serde_json::Error> {
        self.take_over();
        serde_json::to_vec(result).map(Bytes::from)
    }

    pub(super) fn taken_over(&self) -> bool {
        self.0.taken_over.load(Ordering::Relaxed)
    }
}

/// Leaves the owner out: it is what completes the record.
impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("key", &self.0.key)
            .field("retention", &self.0.retention)
            .finish_non_exhaustive()
    }
}
