//! [`Counting`]: a store wrapper that counts what the lock suites look at.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use idem_core::store::{Fencing, Turn};
use idem_core::{Acquire, Begin, FairStore, Fingerprint, Key, Owner, Store, StoreError};

/// A store that counts the calls that matter to the lock, and forwards everything.
#[derive(Debug, Clone)]
pub struct Counting<S> {
    inner: S,
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    acquire: AtomicUsize,
    renew: AtomicUsize,
    wait: AtomicUsize,
    woken: AtomicUsize,
    released: AtomicUsize,
    queued: AtomicUsize,
    turn_waits: AtomicUsize,
    turns: AtomicUsize,
}

impl<S> Counting<S> {
    /// Wraps `inner`, all counts at zero.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            counts: Arc::default(),
        }
    }

    /// Acquisition attempts, plain or fair.
    pub fn acquires(&self) -> usize {
        self.counts.acquire.load(Ordering::SeqCst)
    }

    /// Renewals (a watchdog's).
    pub fn renewals(&self) -> usize {
        self.counts.renew.load(Ordering::SeqCst)
    }

    /// Waits for a release, however they ended.
    pub fn waits(&self) -> usize {
        self.counts.wait.load(Ordering::SeqCst)
    }

    /// Waits that ended woken, not timed out.
    pub fn wakes(&self) -> usize {
        self.counts.woken.load(Ordering::SeqCst)
    }

    /// Releases that freed the lock.
    pub fn releases(&self) -> usize {
        self.counts.released.load(Ordering::SeqCst)
    }

    /// Fair attempts answered [`Turn::Queued`].
    pub fn queued(&self) -> usize {
        self.counts.queued.load(Ordering::SeqCst)
    }

    /// Waits for a turn, however they ended.
    pub fn turn_waits(&self) -> usize {
        self.counts.turn_waits.load(Ordering::SeqCst)
    }

    /// Waits for a turn that ended handed the turn, not timed out.
    pub fn turns(&self) -> usize {
        self.counts.turns.load(Ordering::SeqCst)
    }
}

impl<S: Store> Store for Counting<S> {
    async fn acquire(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Acquire, StoreError> {
        self.counts.acquire.fetch_add(1, Ordering::SeqCst);
        self.inner.acquire(key, owner, ttl, fencing).await
    }

    async fn release(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        self.inner.release(key, owner).await
    }

    async fn acquire_or_register_waiter(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        wait: Duration,
    ) -> Result<Acquire, StoreError> {
        self.counts.acquire.fetch_add(1, Ordering::SeqCst);
        self.inner
            .acquire_or_register_waiter(key, owner, ttl, fencing, wait)
            .await
    }

    async fn release_and_signal(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let released = self.inner.release_and_signal(key, owner).await;
        if matches!(released, Ok(true)) {
            self.counts.released.fetch_add(1, Ordering::SeqCst);
        }
        released
    }

    async fn wait_for_release(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        self.counts.wait.fetch_add(1, Ordering::SeqCst);
        let woken = self.inner.wait_for_release(key, within).await;
        if matches!(woken, Ok(true)) {
            self.counts.woken.fetch_add(1, Ordering::SeqCst);
        }
        woken
    }

    async fn renew(&self, key: &Key, owner: &Owner, ttl: Duration) -> Result<bool, StoreError> {
        self.counts.renew.fetch_add(1, Ordering::SeqCst);
        self.inner.renew(key, owner, ttl).await
    }

    async fn remaining(&self, key: &Key) -> Result<Option<Duration>, StoreError> {
        self.inner.remaining(key).await
    }

    async fn put_token(
        &self,
        scope: &Key,
        token: &Key,
        ttl: Duration,
        keep: usize,
    ) -> Result<(), StoreError> {
        self.inner.put_token(scope, token, ttl, keep).await
    }

    async fn consume_token(&self, scope: &Key, token: &Key) -> Result<bool, StoreError> {
        self.inner.consume_token(scope, token).await
    }

    async fn begin_record(
        &self,
        key: &Key,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, StoreError> {
        self.inner
            .begin_record(key, owner, fingerprint, lease)
            .await
    }

    async fn complete_record(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        self.inner
            .complete_record(key, owner, response, retention)
            .await
    }

    async fn renew_record(
        &self,
        key: &Key,
        owner: &Owner,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        self.inner.renew_record(key, owner, lease).await
    }

    async fn abandon_record(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        self.inner.abandon_record(key, owner).await
    }
}

impl<S: FairStore> FairStore for Counting<S> {
    async fn acquire_in_turn(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        place: Option<Duration>,
    ) -> Result<Turn, StoreError> {
        self.counts.acquire.fetch_add(1, Ordering::SeqCst);
        let turn = self
            .inner
            .acquire_in_turn(key, owner, ttl, fencing, place)
            .await;
        if matches!(turn, Ok(Turn::Queued { .. })) {
            self.counts.queued.fetch_add(1, Ordering::SeqCst);
        }
        turn
    }

    async fn wait_for_turn(
        &self,
        key: &Key,
        owner: &Owner,
        within: Duration,
    ) -> Result<bool, StoreError> {
        self.counts.turn_waits.fetch_add(1, Ordering::SeqCst);
        let handed = self.inner.wait_for_turn(key, owner, within).await;
        if matches!(handed, Ok(true)) {
            self.counts.turns.fetch_add(1, Ordering::SeqCst);
        }
        handed
    }

    async fn leave_queue(&self, key: &Key, owner: &Owner) -> Result<(), StoreError> {
        self.inner.leave_queue(key, owner).await
    }
}
