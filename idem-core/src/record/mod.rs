//! The life of an idempotency record, apart from what runs under it: begun (or found
//! there), held while its attempt runs — its lease renewed, the attempt run to its end —,
//! then ended one of two ways: completed with what the attempt produced, or given back so
//! that a retry runs afresh.
//!
//! It knows nothing of HTTP. `idem-axum`'s guards (`IdempotencyLayer` on HTTP and gRPC,
//! a form token with replay) run their attempts on it, each with a [`Host`] of its own:
//! what counts the work that outlives a request, and what the attempt's own work did with
//! the record.
//!
//! - [`Record::begin`] begins the record of a key, or finds the one there ([`Began`]);
//! - [`Record::renewing`] renews its lease for as long as a piece of work waits;
//! - [`Record::complete`] stores the result — again, in the background, while the store
//!   cannot answer; claimed again when its lease ended meanwhile ([`Kept`]);
//! - [`Record::abandon`] gives back what the attempt spent ([`Spending`]) and removes the
//!   record; [`Record::abandon_on_drop`] does so when the attempt panics.
//!
//! Not a stable API yet: the building block of the guards, for the run-once API to come.

mod abandonment;
mod completion;
mod renewal;
#[cfg(test)]
mod tests;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;

pub use self::abandonment::AbandonOnDrop;
use self::abandonment::Unanswered;
pub use self::completion::Kept;
pub use self::renewal::Renewing;
use crate::store::{Begin, RecordStore, StoreError};
use crate::{Fingerprint, Key, Owner};

/// What runs a record's attempt: where its work that outlives the caller runs, and what
/// the attempt's own work did with the record.
pub trait Host: Send + Sync + 'static {
    /// Runs `work` — a completion retried until the store answers, a removal — in a task
    /// of its own that the host's drain waits for; `None`, and nothing run, when there is
    /// no runtime to run it (it is shutting down: the record then ends with its lease).
    fn spawn<F>(&self, work: F) -> Option<JoinHandle<()>>
    where
        F: Future<Output = ()> + Send + 'static;

    /// Whether the attempt took the record over, to complete it in its own transaction:
    /// from then on the record is left to it.
    fn taken_over(&self) -> bool {
        false
    }
}

/// What an attempt spends to be let run (a form token). Spent before the attempt runs,
/// it is given back before the record is removed: a retry of the failed attempt then
/// finds it again, and no retry can begin the record before it is back. Left to the
/// attempt, to spend in its own transaction, it is spent after the result is stored when
/// the attempt left the record to the host.
pub trait Spending: Send + Sync + 'static {
    /// Gives back what was spent before the attempt ran; a failure is logged, not
    /// returned: the record goes either way.
    fn give_back(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// Spends what the attempt was to spend, now that its result is stored in its stead;
    /// a failure is logged.
    fn spend_late(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// What beginning a record came to.
pub enum Began<St, H> {
    /// No record existed: the caller holds one now, and runs first.
    First(Record<St, H>),
    /// An attempt with this key completed: what it stored.
    Completed(Bytes),
    /// An attempt with this key still runs; its lease has this long left.
    InProgress(Duration),
    /// The key belongs to an attempt with another fingerprint.
    Mismatch,
}

impl<St, H> fmt::Debug for Began<St, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::First(_) => f.write_str("First"),
            Self::Completed(stored) => f.debug_tuple("Completed").field(&stored.len()).finish(),
            Self::InProgress(remaining) => f.debug_tuple("InProgress").field(remaining).finish(),
            Self::Mismatch => f.write_str("Mismatch"),
        }
    }
}

/// An in-progress record an attempt began, with its [`Host`].
///
/// Shared behind one `Arc`: an attempt's work holds it twice (renewing its lease, and
/// abandoning it on a panic), and `idem-axum` boxes that work per first request
/// (`idem-axum`'s `the_boxed_work_stays_small`).
pub struct Record<St, H>(Arc<State<St, H>>);

impl<St, H> Clone for Record<St, H> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

struct State<St, H> {
    /// Typed: its calls' futures are this store's own.
    store: St,
    key: Key,
    owner: Owner,
    fingerprint: Fingerprint,
    lease: Duration,
    spending: Option<Box<dyn Spending>>,
    host: H,
}

impl<St, H: fmt::Debug> fmt::Debug for Record<St, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("key", &self.0.key)
            .field("host", &self.0.host)
            .finish_non_exhaustive()
    }
}

impl<St: RecordStore + Clone, H: Host> Record<St, H> {
    /// Begins the record `key` on `store` for an attempt with `fingerprint`, in progress
    /// for `lease`, or finds the one there. The attempt's [`Host`] is made, by `host`, only
    /// when the record is begun, from the record's key and the owner drawn for it.
    ///
    /// Dropped before the store answered (its caller went away), it gives the key back by
    /// that owner, in a task of a host made for it, asking again while the store cannot
    /// answer, for up to the lease: whether or not the store began the record, a retry
    /// then finds the key free rather than in progress for a lease.
    ///
    /// An `async` block, which holds its arguments once, where an `async fn` would hold
    /// them twice (`idem-axum`'s `the_per_request_future_stays_small`); the owner is drawn
    /// when the future is made.
    ///
    /// # Errors
    ///
    /// The store's, when it cannot answer.
    pub fn begin(
        store: St,
        key: &Key,
        fingerprint: &Fingerprint,
        lease: Duration,
        host: impl FnOnce(&Key, &Owner) -> H,
    ) -> impl Future<Output = Result<Began<St, H>, StoreError>> {
        let unanswered = Unanswered::new(store, key, Owner::random(), lease, host);
        async move {
            let (store, owner) = unanswered.asking();
            let begun = store.begin_record(key, owner, fingerprint, lease).await;
            let (store, owner, host) = unanswered.answered();
            Ok(match begun? {
                Begin::Started => Began::First(Self(Arc::new(State {
                    host: host(key, &owner),
                    store,
                    key: key.clone(),
                    owner,
                    fingerprint: *fingerprint,
                    lease,
                    spending: None,
                }))),
                Begin::Completed { response } => Began::Completed(response),
                Begin::InProgress { remaining } => Began::InProgress(remaining),
                Begin::Mismatch => Began::Mismatch,
            })
        }
    }

    /// This record, with what the attempt spends given back whenever it is abandoned, and
    /// spent late when its result is stored in the attempt's stead.
    ///
    /// In place while this is the record's only copy, as it is right after it was begun:
    /// no second shared state (`tests::spending_is_set_in_place`).
    pub fn spending(mut self, spending: impl Spending) -> Self
    where
        H: Clone,
    {
        let spending = Some(Box::new(spending) as Box<dyn Spending>);
        if let Some(state) = Arc::get_mut(&mut self.0) {
            state.spending = spending;
            return self;
        }
        let state = &self.0;
        Self(Arc::new(State {
            store: state.store.clone(),
            key: state.key.clone(),
            owner: state.owner.clone(),
            fingerprint: state.fingerprint,
            lease: state.lease,
            spending,
            host: state.host.clone(),
        }))
    }
}

impl<St, H> Record<St, H> {
    /// The record's key in the store.
    pub fn key(&self) -> &Key {
        &self.0.key
    }

    /// The owner the record was begun as: only it can complete, renew or remove it.
    pub fn owner(&self) -> &Owner {
        &self.0.owner
    }

    /// The fingerprint the record was begun with.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.0.fingerprint
    }

    /// How long the record stays in progress without a renewal.
    pub fn lease(&self) -> Duration {
        self.0.lease
    }

    /// The attempt's host.
    pub fn host(&self) -> &H {
        &self.0.host
    }

    /// The store the record is in.
    pub fn store(&self) -> &St {
        &self.0.store
    }

    fn spending_of(&self) -> Option<&dyn Spending> {
        self.0.spending.as_deref()
    }
}
