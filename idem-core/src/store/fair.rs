//! [`FairStore`]: the store operations a [`FairLock`](crate::FairLock) is built from — a
//! queue of waiters per lock, served in arrival order.

use std::future::Future;
use std::time::Duration;

use super::{Acquire, Fencing, FencingToken, LockStore, RELEASE_POLL_INTERVAL, StoreError};
use crate::key::{Key, Owner};

/// A [`Store`](crate::Store) that keeps, beside each lock, a queue of the owners waiting for it, and
/// grants the lock in the order they queued: the operations of a
/// [`FairLock`](crate::FairLock).
///
/// Implemented by [`MemoryStore`](crate::MemoryStore); `idem-redis` implements it for
/// `RedisStore` (standalone and Cluster), `idem-sqlx` for its SQL stores. [`AnyStore`](crate::AnyStore)
/// does not: a fair lock is made on the concrete store.
///
/// # The queue
///
/// Each waiter holds a **place**, which lapses a given time after the waiter last renewed
/// it (every [`acquire_in_turn`](FairStore::acquire_in_turn) that queues renews it). A
/// waiter that dies stops renewing, and its place lapses: it holds up the waiters behind
/// it for at most that long, as an ephemeral node does in ZooKeeper. Lapsed places are
/// dropped when they reach the head of the queue; a place that lapsed further back keeps
/// its rank if its waiter comes back first.
///
/// # What a store implementing it promises
///
/// - Each operation is one atomic step, over the lock and its queue together (in Redis,
///   keys under one hash tag, so one cluster slot).
/// - [`acquire_in_turn`](FairStore::acquire_in_turn) grants a free lock only to the owner
///   at the head of the queue, or to anyone when the queue is empty: a newcomer never
///   takes the lock past a waiter.
/// - [`release_and_signal`](LockStore::release_and_signal) of a lock whose queue has a live
///   head hands the turn to that head, and to it only: one release, one wake-up, to the
///   one waiter that can take the lock. A store whose
///   [`wait_for_turn`](FairStore::wait_for_turn) polls (the default) signals nothing.
/// - Everyone who takes a lock name must take it through a [`FairLock`](crate::FairLock):
///   a plain [`acquire`](LockStore::acquire) does not look at the queue.
pub trait FairStore: LockStore {
    /// One atomic step on `key` and its queue:
    ///
    /// 1. drops the lapsed places at the head of the queue;
    /// 2. if `owner` holds `key`: [`Turn::Reentered`], nothing else changes;
    /// 3. if `key` is free and the queue is empty or `owner` is its head: takes `key` for
    ///    `owner` for `ttl`, drawing a fencing token with [`Fencing::On`] as
    ///    [`acquire`](LockStore::acquire) does, removes `owner`'s place and any turn left for
    ///    it: [`Turn::Acquired`];
    /// 4. else, with `place` = `Some(lapse)`: queues `owner` at the back (or, if it has a
    ///    place, keeps it) and sets its place to lapse `lapse` from now;
    ///    with `None` it queues nothing: [`Turn::Queued`] either way.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer (or, for [`MemoryStore`](crate::MemoryStore), is full).
    fn acquire_in_turn(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        place: Option<Duration>,
    ) -> impl Future<Output = Result<Turn, StoreError>> + Send;

    /// Waits until a release hands `owner` the turn on `key`, or `within` has passed.
    /// `true` when handed the turn (a hint: the caller then calls
    /// [`acquire_in_turn`](FairStore::acquire_in_turn), which decides), `false` when the
    /// time ran out. A turn handed before the wait began is not lost: the wait returns at
    /// once.
    ///
    /// By default it sleeps for `within`, at most [`RELEASE_POLL_INTERVAL`], and is
    /// `false`: the lock then polls with [`acquire_in_turn`](FairStore::acquire_in_turn),
    /// which keeps the order, not the "one release, one wake-up". A store that can signal
    /// overrides it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn wait_for_turn(
        &self,
        key: &Key,
        owner: &Owner,
        within: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (key, owner);
        async move {
            tokio::time::sleep(within.min(RELEASE_POLL_INTERVAL)).await;
            Ok(false)
        }
    }

    /// Gives up `owner`'s place in `key`'s queue, and any turn left for it. If `owner` was
    /// the head and `key` is free, the turn passes to the new head, so that a waiter giving
    /// up does not strand those behind it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn leave_queue(
        &self,
        key: &Key,
        owner: &Owner,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// What [`FairStore::acquire_in_turn`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// The key was free and it was the caller's turn; the key is now the caller's.
    Acquired {
        /// The fencing token, with [`Fencing::On`].
        fence: Option<FencingToken>,
    },
    /// The key was already the caller's (same [`Owner`]); nothing changed.
    Reentered {
        /// How long it stays held.
        remaining: Duration,
        /// The fencing token of the current hold, with [`Fencing::On`].
        fence: Option<FencingToken>,
    },
    /// Someone else holds the key, or waits ahead of the caller.
    Queued {
        /// The caller's place is at the head of the queue: the next release is its turn.
        next: bool,
        /// How long the holder's lease has left; `None` when the key is free (and waiters
        /// ahead of the caller are about to take it).
        remaining: Option<Duration>,
    },
}

impl Turn {
    /// The same answer as an [`Acquire`], with `Queued` as [`Acquire::Held`] (for as long
    /// as the holder's lease, or zero when the key is free).
    pub fn into_acquire(self) -> Acquire {
        match self {
            Self::Acquired { fence } => Acquire::Acquired { fence },
            Self::Reentered { remaining, fence } => Acquire::Reentered { remaining, fence },
            Self::Queued { remaining, .. } => Acquire::Held {
                remaining: remaining.unwrap_or_default(),
            },
        }
    }
}
