//! [`MemoryStore`]: the embedded default, for one process.

mod reaper;
mod reminders;
mod shard;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;

use self::reaper::Reaper;
use self::shard::{Entries, Full, Shard};
use super::{Acquire, Begin, Fencing, FencingToken, Store, StoreError, ttl_millis};
use crate::key::{Fingerprint, Key, Owner};

/// Shards split the lock so concurrent requests on different keys rarely wait on each
/// other; 64 is plenty for the cores a single process has.
const SHARDS: usize = 64;

/// Reminders a reclaiming pass handles per hold of a shard's lock, so a pass over a large
/// store never keeps a request waiting long.
const RECLAIM_CHUNK: usize = 256;

/// An in-process [`Store`]: the default when an application runs as one instance.
///
/// Every operation is one critical section under a shard's mutex; no lock is held across
/// an `.await`. Memory is bounded: at most [`capacity`](MemoryStoreBuilder::with_capacity)
/// entries (default 1,000,000) are held. When a new entry would pass it, expired entries
/// are reclaimed first, and if the store is still full the operation fails with
/// [`StoreError::Capacity`] — a flood of unique keys cannot grow memory without bound, and
/// live keys are never evicted to make room (evicting one would let a duplicate through).
///
/// Expired entries are reclaimed by a background thread every
/// [`reclaim_interval`](MemoryStoreBuilder::with_reclaim_interval) (default 1 s), and map
/// capacity is given back once most entries are gone. The thread stops when the last
/// clone of the store is dropped.
///
/// Waiting ([`wait_for_release`](Store::wait_for_release)) parks on a per-key
/// [`tokio::sync::Notify`] that exists only while someone waits; a release wakes one
/// waiter (`notify_one`).
///
/// Fencing tokens come from one counter for the whole store, so they grow strictly for
/// every key, also across expiry, and need no memory per key.
///
/// Clones share the same data.
///
/// ```
/// use std::time::Duration;
/// use idem_core::{Acquire, Fencing, Key, MemoryStore, Owner, Store};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_core::StoreError> {
/// let store = MemoryStore::new();
/// let key = Key::new("checkout:cart-42").unwrap();
/// let first = store.acquire(&key, &Owner::random(), Duration::from_secs(30), Fencing::Off).await?;
/// let second = store.acquire(&key, &Owner::random(), Duration::from_secs(30), Fencing::Off).await?;
/// assert_eq!(first, Acquire::Acquired { fence: None });
/// assert!(matches!(second, Acquire::Held { .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
    _reaper: Option<Arc<Reaper>>,
}

#[derive(Debug)]
struct Shared {
    shards: Box<[Mutex<Shard>]>,
    hasher: foldhash::fast::RandomState,
    entries: Entries,
    last_fence: AtomicU64,
}

impl Shared {
    fn shard(&self, key: &Key) -> MutexGuard<'_, Shard> {
        // `SHARDS` is a power of two, so the low bits pick the shard.
        let index = self.hasher.hash_one(key) as usize & (SHARDS - 1);
        lock(&self.shards[index])
    }

    /// Removes every expired entry and returns spare map capacity.
    ///
    /// Requests never do this on their way (expired entries count as absent to every
    /// operation), so its cost stays off their latency: the reaper thread does it, and a
    /// full store before refusing.
    fn reclaim_all(&self) {
        for shard in &*self.shards {
            while lock(shard).reclaim(Instant::now(), &self.entries, RECLAIM_CHUNK) {}
            lock(shard).shrink();
        }
    }

    fn draw_fence(&self) -> FencingToken {
        FencingToken::new(self.last_fence.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // Nothing in a shard's critical sections panics half-way through a change, so a
    // poisoned shard is still consistent.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemoryStore {
    /// A store with the default settings.
    ///
    /// ```
    /// let store = idem_core::MemoryStore::new();
    /// assert_eq!(store.capacity(), 1_000_000);
    /// ```
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder to set capacity and reclaim interval.
    ///
    /// ```
    /// let store = idem_core::MemoryStore::builder().with_capacity(10_000).build();
    /// assert_eq!(store.capacity(), 10_000);
    /// ```
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder::default()
    }

    /// The most entries the store holds.
    pub fn capacity(&self) -> usize {
        self.shared.entries.capacity()
    }

    /// Entries held now, counting expired ones not reclaimed yet.
    ///
    /// ```
    /// assert_eq!(idem_core::MemoryStore::new().entry_count(), 0);
    /// ```
    pub fn entry_count(&self) -> usize {
        self.shared.entries.held()
    }

    /// Runs `op` on `key`'s shard.
    fn with_shard<T>(&self, key: &Key, op: impl FnOnce(&mut Shard, Instant, &Entries) -> T) -> T {
        let mut shard = self.shared.shard(key);
        // Read the clock under the lock: a caller that waited for it must not judge expiry
        // (or compute a remaining TTL) by an instant older than the last change it sees.
        let now = Instant::now();
        op(&mut shard, now, &self.shared.entries)
    }

    /// Runs `op`, which may add an entry, on `key`'s shard; if the store is full, reclaims
    /// every expired entry and tries once more.
    fn with_room<T>(
        &self,
        key: &Key,
        op: impl Fn(&mut Shard, Instant, &Entries) -> Result<T, Full>,
    ) -> Result<T, StoreError> {
        self.with_shard(key, &op).or_else(|Full| {
            self.shared.reclaim_all();
            self.with_shard(key, &op)
                .map_err(|Full| StoreError::Capacity {
                    capacity: self.capacity(),
                })
        })
    }
}

/// A registered waiter; unregisters when the wait ends, however it ends (woken, timed
/// out, or its future dropped).
struct Waiter<'a> {
    shared: &'a Shared,
    key: &'a Key,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.shared.shard(self.key).unregister_waiter(self.key);
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

fn kept(ttl: Duration) -> Duration {
    Duration::from_millis(ttl_millis(ttl))
}

impl Store for MemoryStore {
    async fn acquire(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Acquire, StoreError> {
        let ttl = kept(ttl);
        let draw = || (fencing == Fencing::On).then(|| self.shared.draw_fence());
        self.with_room(key, |shard, now, entries| {
            shard.acquire(key, owner, ttl, draw, now, entries)
        })
    }

    async fn release(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        Ok(self.with_shard(key, |shard, now, entries| {
            shard.release(key, owner, now, entries)
        }))
    }

    async fn release_and_signal(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        Ok(self.with_shard(key, |shard, now, entries| {
            let released = shard.release(key, owner, now, entries);
            if released {
                shard.signal(key);
            }
            released
        }))
    }

    async fn wait_for_release(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        let Some(notify) = self.with_shard(key, |shard, now, _| shard.register_waiter(key, now))
        else {
            return Ok(true);
        };
        let _registered = Waiter {
            shared: &self.shared,
            key,
        };
        Ok(tokio::time::timeout(kept(within), notify.notified())
            .await
            .is_ok())
    }

    async fn renew(&self, key: &Key, owner: &Owner, ttl: Duration) -> Result<bool, StoreError> {
        let ttl = kept(ttl);
        Ok(self.with_shard(key, |shard, now, _| shard.renew(key, owner, ttl, now)))
    }

    async fn remaining(&self, key: &Key) -> Result<Option<Duration>, StoreError> {
        Ok(self.with_shard(key, |shard, now, _| shard.remaining(key, now)))
    }

    async fn put_token(&self, key: &Key, ttl: Duration) -> Result<(), StoreError> {
        let ttl = kept(ttl);
        self.with_room(key, |shard, now, entries| {
            shard.put_token(key, ttl, now, entries)
        })
    }

    async fn consume_token(&self, key: &Key) -> Result<bool, StoreError> {
        Ok(self.with_shard(key, |shard, now, entries| {
            shard.consume_token(key, now, entries)
        }))
    }

    async fn begin_record(
        &self,
        key: &Key,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, StoreError> {
        let lease = kept(lease);
        self.with_room(key, |shard, now, entries| {
            shard.begin_record(key, owner, fingerprint, lease, now, entries)
        })
    }

    async fn complete_record(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let retention = kept(retention);
        Ok(self.with_shard(key, |shard, now, _| {
            shard.complete_record(key, owner, response, retention, now)
        }))
    }

    async fn renew_record(
        &self,
        key: &Key,
        owner: &Owner,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let lease = kept(lease);
        Ok(self.with_shard(key, |shard, now, _| {
            shard.renew_record(key, owner, lease, now)
        }))
    }

    async fn abandon_record(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        Ok(self.with_shard(key, |shard, now, entries| {
            shard.abandon_record(key, owner, now, entries)
        }))
    }
}

/// Settings for a [`MemoryStore`]; made by [`MemoryStore::builder`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder {
    capacity: usize,
    reclaim_interval: Duration,
}

impl Default for MemoryStoreBuilder {
    fn default() -> Self {
        Self {
            capacity: 1_000_000,
            reclaim_interval: Duration::from_secs(1),
        }
    }
}

impl MemoryStoreBuilder {
    /// The most entries held at once (default 1,000,000; at least 1).
    ///
    /// ```
    /// let store = idem_core::MemoryStore::builder().with_capacity(500).build();
    /// assert_eq!(store.capacity(), 500);
    /// ```
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// How often the background thread reclaims expired entries (default 1 s; at least
    /// 1 ms).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let store = idem_core::MemoryStore::builder()
    ///     .with_reclaim_interval(Duration::from_millis(100))
    ///     .build();
    /// ```
    pub fn with_reclaim_interval(mut self, every: Duration) -> Self {
        self.reclaim_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The store, with its reaper thread started.
    ///
    /// ```
    /// let store = idem_core::MemoryStore::builder().build();
    /// ```
    pub fn build(self) -> MemoryStore {
        let shared = Arc::new(Shared {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: Default::default(),
            entries: Entries::new(self.capacity),
            last_fence: AtomicU64::new(0),
        });
        let reaper = Reaper::spawn(Arc::downgrade(&shared), self.reclaim_interval);
        MemoryStore {
            shared,
            _reaper: reaper.map(Arc::new),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Key {
        Key::hashed([i.to_le_bytes()])
    }

    fn small(capacity: usize) -> MemoryStore {
        // A reaper that never comes during the test, so only the store's own reclaiming
        // is seen.
        MemoryStore::builder()
            .with_capacity(capacity)
            .with_reclaim_interval(Duration::from_secs(3600))
            .build()
    }

    #[tokio::test]
    async fn a_flood_of_live_keys_is_refused_past_capacity() {
        let store = small(100);
        for i in 0..100 {
            store
                .put_token(&key(i), Duration::from_secs(60))
                .await
                .unwrap();
        }
        let err = store
            .acquire(
                &key(1000),
                &Owner::random(),
                Duration::from_secs(60),
                Fencing::Off,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Capacity { capacity: 100 }),
            "{err:?}"
        );
        assert!(matches!(
            store
                .begin_record(
                    &key(1001),
                    &Owner::random(),
                    &Fingerprint::of(["x"]),
                    Duration::from_secs(60)
                )
                .await,
            Err(StoreError::Capacity { .. })
        ));
        assert_eq!(store.entry_count(), 100);
        // Existing entries still work, and freeing one makes room for one.
        assert!(store.consume_token(&key(7)).await.unwrap());
        store
            .put_token(&key(1002), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(
            store
                .put_token(&key(1003), Duration::from_secs(60))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn expired_entries_are_reclaimed_before_refusing() {
        let store = small(100);
        for i in 0..100 {
            store
                .put_token(&key(i), Duration::from_millis(10))
                .await
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(20)); // past every TTL above
        for i in 100..200 {
            store
                .put_token(&key(i), Duration::from_secs(60))
                .await
                .unwrap();
        }
        assert_eq!(store.entry_count(), 100);
    }

    #[tokio::test]
    async fn the_reaper_reclaims_without_any_further_operation() {
        let store = MemoryStore::builder()
            .with_reclaim_interval(Duration::from_millis(10))
            .build();
        for i in 0..10_000 {
            store
                .put_token(&key(i), Duration::from_millis(500))
                .await
                .unwrap();
        }
        assert_eq!(store.entry_count(), 10_000, "all live while inserting");
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.entry_count() > 0 {
            assert!(Instant::now() < deadline, "left: {}", store.entry_count());
            std::thread::sleep(Duration::from_millis(5));
        }
        let spare: usize = store.shared.shards.iter().map(|s| lock(s).capacity()).sum();
        assert!(
            spare < 10_000,
            "map capacity given back, {spare} slots left"
        );
    }

    fn waiters(store: &MemoryStore, key: &Key) -> usize {
        store.shared.shard(key).waiters(key)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_release_wakes_one_waiter_and_leaving_waiters_clean_up() {
        let store = MemoryStore::new();
        let (lock, holder) = (key(1), Owner::random());
        store
            .acquire(&lock, &holder, Duration::from_secs(60), Fencing::On)
            .await
            .unwrap();
        let (woken, mut wakes) = tokio::sync::mpsc::unbounded_channel();
        let waiting: Vec<_> = (0..5)
            .map(|_| {
                let (store, lock, woken) = (store.clone(), lock.clone(), woken.clone());
                tokio::spawn(async move {
                    let signalled = store
                        .wait_for_release(&lock, Duration::from_secs(60))
                        .await
                        .unwrap();
                    woken.send(signalled).unwrap();
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while waiters(&store, &lock) < 5 {
            assert!(Instant::now() < deadline, "waiters registered");
            tokio::task::yield_now().await;
        }

        assert!(store.release_and_signal(&lock, &holder).await.unwrap());
        assert_eq!(wakes.recv().await, Some(true), "one waiter woke");
        // Four stay asleep: a herd would have them all awake well within this.
        let more = tokio::time::timeout(Duration::from_millis(200), wakes.recv()).await;
        assert!(more.is_err(), "a second waiter woke: {more:?}");
        assert_eq!(waiters(&store, &lock), 4);

        for task in waiting {
            task.abort();
            let _ = task.await;
        }
        assert_eq!(waiters(&store, &lock), 0, "cancelled waiters unregister");
    }

    #[tokio::test]
    async fn a_wait_on_a_free_lock_returns_at_once_and_a_held_one_times_out() {
        let store = MemoryStore::new();
        let lock = key(2);
        assert!(
            store
                .wait_for_release(&lock, Duration::from_secs(60))
                .await
                .unwrap(),
            "free already: a release just before the wait is not missed"
        );
        store
            .acquire(
                &lock,
                &Owner::random(),
                Duration::from_secs(60),
                Fencing::On,
            )
            .await
            .unwrap();
        assert!(
            !store
                .wait_for_release(&lock, Duration::from_millis(20))
                .await
                .unwrap()
        );
        assert_eq!(waiters(&store, &lock), 0);
    }

    #[test]
    fn the_reaper_thread_stops_with_the_last_clone() {
        let store = MemoryStore::builder()
            .with_reclaim_interval(Duration::from_millis(1))
            .build();
        let weak = Arc::downgrade(&store.shared);
        let clone = store.clone();
        drop(store);
        assert!(weak.upgrade().is_some(), "a clone keeps the data");
        drop(clone);
        assert!(
            weak.upgrade().is_none(),
            "the reaper does not keep the store alive"
        );
    }
}
