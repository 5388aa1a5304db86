//! [`LockStore`]: the operations of anti-repeat windows and locks, and [`Acquire`], what
//! taking a key found.

use std::future::Future;
use std::time::Duration;

use super::{Fencing, FencingToken, StoreError, poll_until};
#[cfg(doc)]
use crate::MemoryStore;
use crate::key::{Key, Owner};
#[cfg(doc)]
use crate::store::RELEASE_POLL_INTERVAL;

/// Keys held by one owner for a while: what anti-repeat windows (`#[avoid_repeat]`,
/// `AvoidRepeatLayer`) and locks ([`Lock`](crate::Lock)) are made of.
///
/// One of the capabilities a [`Store`](crate::Store) is the sum of. Each operation is one
/// atomic step in the store.
pub trait LockStore: std::fmt::Debug + Send + Sync + 'static {
    /// Takes `key` for `owner` for `ttl`, unless someone holds it.
    ///
    /// With [`Fencing::On`] a fresh acquisition also draws a [`FencingToken`] larger than
    /// every token drawn for this key before, also after the key expired in between.
    /// Re-acquiring a key this owner already holds is [`Acquire::Reentered`]; it does not
    /// change the key's TTL.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer (or, for [`MemoryStore`], is full).
    fn acquire(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send;

    /// Frees `key` if `owner` holds it. `true` if it did; `false` (and nothing changed) if
    /// the key is free or held by someone else.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn release(
        &self,
        key: &Key,
        owner: &Owner,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// [`acquire`](LockStore::acquire), and when another owner holds `key`
    /// ([`Acquire::Held`]), counts the caller as a waiter for up to `wait`, in the same
    /// atomic step, so that the next [`release_and_signal`](LockStore::release_and_signal) of
    /// `key` leaves a wake-up for it. A caller that gets `Held` goes on to
    /// [`wait_for_release`](LockStore::wait_for_release) for at most `wait`.
    ///
    /// Registering in the step that saw the key held is what makes a wake-up impossible to
    /// miss: a release either came before that step (which then took the key, or saw it
    /// taken again by someone else) or after it (and signals). A registration is never
    /// taken back: a waiter that leaves without being woken leaves one wake-up unused,
    /// which wakes a later waiter once for nothing; it lapses after `wait` at the latest.
    ///
    /// By default it is [`acquire`](LockStore::acquire): a store whose
    /// [`wait_for_release`](LockStore::wait_for_release) registers the waiter itself (atomically
    /// with seeing the key held) or polls has nothing to do here. A store that overrides
    /// one of this, [`release_and_signal`](LockStore::release_and_signal) and
    /// [`wait_for_release`](LockStore::wait_for_release) overrides the three, and a wrapper
    /// store forwards the three, or its lock waiters are never signalled and wake only by
    /// their fallback poll.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer (or, for [`MemoryStore`], is full).
    fn acquire_or_register_waiter(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send {
        let _ = wait;
        self.acquire(key, owner, ttl, fencing)
    }

    /// Frees `key` like [`release`](LockStore::release), and if it did and a waiter is
    /// registered, signals **one** caller of [`wait_for_release`](LockStore::wait_for_release)
    /// on `key`.
    ///
    /// A separate operation so that [`release`](LockStore::release), on the anti-repeat path
    /// where nobody waits, stays one plain compare-and-delete. Still one atomic step: the
    /// delete, the look at the waiters and the signal happen together or not at all. A
    /// release nobody waits for signals nothing and leaves nothing behind, so it costs what
    /// a [`release`](LockStore::release) costs, give or take one read inside the step.
    ///
    /// By default it is [`release`](LockStore::release) and signals nothing, which suits the
    /// default [`wait_for_release`](LockStore::wait_for_release) (it looks at the key rather
    /// than waiting for a signal).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn release_and_signal(
        &self,
        key: &Key,
        owner: &Owner,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.release(key, owner)
    }

    /// Waits until a [`release_and_signal`](LockStore::release_and_signal) of `key` wakes this
    /// caller, or `within` has passed. `true` when woken, `false` when the time ran out.
    ///
    /// - A release signals only waiters that registered: by
    ///   [`acquire_or_register_waiter`](LockStore::acquire_or_register_waiter) answering
    ///   [`Acquire::Held`], or (in stores that do it that way, such as [`MemoryStore`]) by
    ///   this call, atomically with seeing the key held — it is `true` at once when the key
    ///   is free.
    /// - One signal wakes **one** waiter, so a release does not stampede every waiter into
    ///   the store at once.
    /// - A signal given for a registered waiter that has not started waiting yet is not
    ///   lost: it wakes the next waiter to arrive (typically that one). A release that
    ///   nobody registered for wakes nobody, now or later.
    /// - `true` is a hint, not a promise that the key is free: a signal can be stale, or
    ///   someone else can take the key first. Callers try to acquire again.
    /// - A key that expires, rather than being released, signals nobody: waiters pass a
    ///   `within` no longer than the key's remaining TTL to notice that.
    ///
    /// Needs a Tokio runtime with its timer enabled. `RedisStore` waits with `BLPOP` on a
    /// connection of its own, never on the one its other operations share.
    ///
    /// By default it asks [`remaining`](LockStore::remaining) every
    /// [`RELEASE_POLL_INTERVAL`] (and once more at the end of `within`) and is `true` as
    /// soon as the key is free: every waiter then sees the same release, so a store with
    /// many waiters per key overrides this and
    /// [`release_and_signal`](LockStore::release_and_signal) with a real signal.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn wait_for_release(
        &self,
        key: &Key,
        within: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        poll_until(within, move || async move {
            Ok(self.remaining(key).await?.is_none())
        })
    }

    /// Sets the TTL of `key` to `ttl` from now if `owner` holds it. `true` if it did.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn renew(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// How long `key` stays held, or `None` if it is free.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn remaining(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Duration>, StoreError>> + Send;
}

/// What [`LockStore::acquire`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The key was free and is now ours.
    Acquired {
        /// The fencing token, with [`Fencing::On`].
        fence: Option<FencingToken>,
    },
    /// The key was already ours (same [`Owner`]); nothing changed.
    Reentered {
        /// How long it stays held.
        remaining: Duration,
        /// The fencing token of the current hold, with [`Fencing::On`].
        fence: Option<FencingToken>,
    },
    /// Someone else holds the key.
    Held {
        /// How long it stays held.
        remaining: Duration,
    },
}
