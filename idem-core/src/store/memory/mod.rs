//! [`MemoryStore`]: the embedded default, for one process.

mod packed;
mod queue;
mod reaper;
mod reminders;
mod shard;
mod tokens;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use self::packed::{Moment, Packed};
use self::reaper::Reaper;
use self::shard::{Entries, Full, RecordSignal, Shard};
use super::{
    Acquire, Begin, FairStore, Fencing, FencingToken, LockStore, RecordState, RecordStore,
    StoreError, TokenStore, Turn, ttl_millis,
};
use crate::key::{Fingerprint, Key, Owner};

/// Shards split the lock so concurrent requests on different keys rarely wait on each
/// other; 64 is plenty for the cores a single process has.
const SHARDS: usize = 64;

/// Reminders a reclaiming pass handles per hold of a shard's lock, so a pass over a large
/// store never keeps a request waiting long.
const RECLAIM_CHUNK: usize = 256;

/// An in-process [`Store`](crate::Store): the default when an application runs as one instance.
///
/// Every operation is one critical section under a shard's mutex; no lock is held across
/// an `.await`.
///
/// Memory is bounded, with two budgets that cannot take from each other:
///
/// - **Windows, locks and records**: at most
///   [`capacity`](MemoryStoreBuilder::with_capacity) entries (default 1,000,000) and
///   [`max_bytes`](MemoryStoreBuilder::with_max_bytes) bytes (default 512 MiB; each entry
///   counts 256 bytes, a record also its stored response). When a new entry, or a
///   response, would pass either, expired entries are reclaimed first, and if the store
///   is still full the operation fails with [`StoreError::Capacity`] or
///   [`StoreError::Memory`]. These are never evicted to make room: evicting one would let
///   a duplicate through.
/// - **One-time tokens**: at most
///   [`token_capacity`](MemoryStoreBuilder::with_token_capacity) (default 250,000), and
///   each scope only its newest few (the `keep` of [`TokenStore::put_token`]). When the budget
///   is full the oldest tokens are evicted — within each of the store's 64 shards, which
///   a client's tokens share — so a flood of form pages, by one client or by many
///   throwaway ones, costs other clients at most a form reload and never a guarded
///   request.
///
/// Expired entries are reclaimed by a background thread every
/// [`reclaim_interval`](MemoryStoreBuilder::with_reclaim_interval) (default 1 s), and map
/// capacity is given back once most entries are gone. The thread stops when the last
/// clone of the store is dropped.
///
/// Waiting ([`wait_for_release`](LockStore::wait_for_release)) registers the waiter under the
/// shard's mutex, atomically with seeing the key held, and parks on a per-key
/// [`tokio::sync::Notify`] that exists only while someone waits; a release wakes one
/// waiter (`notify_one`), and a release nobody waits for finds no `Notify` and signals
/// nothing. Waiting for a record ([`wait_for_record`](RecordStore::wait_for_record)) is
/// the same, except that its ending (completed, abandoned or removed) wakes every waiter,
/// each of which then finds the stored response; a lease that runs out wakes nobody, so
/// a waiter waits at most the lease's remaining time.
///
/// Fencing tokens come from one counter for the whole store, so they grow strictly for
/// every key, also across expiry, and need no memory per key. The counter starts at the
/// wall clock's nanoseconds since 1970, so a process that restarts draws tokens above all
/// it drew before (unless its clock was set back by more than it drew, or it drew more
/// than one token per nanosecond on average), and a resource that kept the last fence it
/// saw accepts the new holder's writes.
///
/// Clones share the same data.
///
/// ```
/// use std::time::Duration;
/// use idem_core::{Acquire, Key, LockStore, MemoryStore, Owner};
/// use idem_core::store::Fencing;
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
    /// How many tokens each shard holds at most.
    token_budget: usize,
    last_fence: AtomicU64,
    /// What the shards' instants count from.
    started: Instant,
}

impl Shared {
    fn shard(&self, key: &Packed) -> MutexGuard<'_, Shard> {
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
            while lock(shard).reclaim(self.now(), &self.entries, RECLAIM_CHUNK) {}
            let mut shard = lock(shard);
            shard.drop_lapsed_places(self.now());
            shard.shrink();
        }
    }

    fn now(&self) -> Moment {
        Moment::at(self.started, Instant::now())
    }

    fn draw_fence(&self) -> FencingToken {
        FencingToken::new(self.last_fence.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// Where the fencing counter of a new store starts: the wall clock in nanoseconds since
/// 1970, which a restarted process has moved past every token it drew before.
fn fence_start() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX / 2)
        })
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

    /// The most bytes windows, locks and records may take, stored responses included.
    pub fn max_bytes(&self) -> usize {
        self.shared.entries.max_bytes()
    }

    /// The most one-time tokens held at once.
    pub fn token_capacity(&self) -> usize {
        self.shared.token_budget * SHARDS
    }

    /// Windows, locks and records held now, counting expired ones not reclaimed yet.
    ///
    /// ```
    /// assert_eq!(idem_core::MemoryStore::new().entry_count(), 0);
    /// ```
    pub fn entry_count(&self) -> usize {
        self.shared.entries.held()
    }

    /// Bytes the windows, locks and records held now count, stored responses included.
    pub fn bytes_held(&self) -> usize {
        self.shared.entries.bytes()
    }

    /// One-time tokens held now, counting expired ones not reclaimed yet.
    ///
    /// ```
    /// assert_eq!(idem_core::MemoryStore::new().token_count(), 0);
    /// ```
    pub fn token_count(&self) -> usize {
        self.shared
            .shards
            .iter()
            .map(|shard| lock(shard).token_count())
            .sum()
    }

    /// Runs `op` on `key`'s shard.
    fn with_shard<T>(&self, key: &Packed, op: impl FnOnce(&mut Shard, Moment, &Entries) -> T) -> T {
        let mut shard = self.shared.shard(key);
        // Read the clock under the lock: a caller that waited for it must not judge expiry
        // (or compute a remaining TTL) by an instant older than the last change it sees.
        let now = self.shared.now();
        op(&mut shard, now, &self.shared.entries)
    }

    /// Runs `op`, which may add an entry, on `key`'s shard; if the store is full, reclaims
    /// every expired entry and tries once more.
    fn with_room<T>(
        &self,
        key: &Packed,
        op: impl Fn(&mut Shard, Moment, &Entries) -> Result<T, Full>,
    ) -> Result<T, StoreError> {
        self.with_shard(key, &op).or_else(|_full| {
            self.shared.reclaim_all();
            self.with_shard(key, &op).map_err(|full| match full {
                Full::Entries => StoreError::Capacity {
                    capacity: self.capacity(),
                },
                Full::Bytes => StoreError::Memory {
                    max_bytes: self.max_bytes(),
                },
            })
        })
    }
}

/// A registered waiter; unregisters when the wait ends, however it ends (woken, timed
/// out, or its future dropped).
struct Waiter<'a> {
    shared: &'a Shared,
    key: &'a Packed,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.shared.shard(self.key).unregister_waiter(self.key);
    }
}

/// A waiter registered on a record; unregisters when the wait ends, however it ends.
struct RecordWaiter<'a> {
    shared: &'a Shared,
    key: &'a Packed,
    signal: Arc<RecordSignal>,
}

impl Drop for RecordWaiter<'_> {
    fn drop(&mut self) {
        let mut shard = self.shared.shard(self.key);
        shard.unregister_record_waiter(self.key, &self.signal);
    }
}

impl FairStore for MemoryStore {
    async fn acquire_in_turn(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        place: Option<Duration>,
    ) -> Result<Turn, StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        let (ttl, place) = (kept(ttl), place.map(kept));
        let draw = || (fencing == Fencing::On).then(|| self.shared.draw_fence());
        self.with_room(key, |shard, now, entries| {
            shard.acquire_in_turn(key, owner, ttl, draw, place, now, entries)
        })
    }

    async fn wait_for_turn(
        &self,
        key: &Key,
        owner: &Owner,
        within: Duration,
    ) -> Result<bool, StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        // No place: it lapsed or was never taken; the caller's next attempt queues again.
        let Some(turn) = self.with_shard(key, |shard, _, _| shard.turn(key, owner)) else {
            return Ok(true);
        };
        Ok(tokio::time::timeout(kept(within), turn.notified())
            .await
            .is_ok())
    }

    async fn leave_queue(&self, key: &Key, owner: &Owner) -> Result<(), StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        self.with_shard(key, |shard, now, _| shard.leave_queue(key, owner, now));
        Ok(())
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

impl LockStore for MemoryStore {
    async fn acquire(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Acquire, StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        let ttl = kept(ttl);
        let draw = || (fencing == Fencing::On).then(|| self.shared.draw_fence());
        self.with_room(key, |shard, now, entries| {
            shard.acquire(key, owner, ttl, draw, now, entries)
        })
    }

    async fn release(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        Ok(self.with_shard(key, |shard, now, entries| {
            shard.release(key, owner, now, entries)
        }))
    }

    async fn release_and_signal(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        Ok(self.with_shard(key, |shard, now, entries| {
            let released = shard.release(key, owner, now, entries);
            if released {
                shard.signal(key);
                shard.hand_turn(key, now);
            }
            released
        }))
    }

    async fn wait_for_release(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        let key = &Packed::from(key);
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
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        let ttl = kept(ttl);
        Ok(self.with_shard(key, |shard, now, _| shard.renew(key, owner, ttl, now)))
    }

    async fn remaining(&self, key: &Key) -> Result<Option<Duration>, StoreError> {
        let key = &Packed::from(key);
        Ok(self.with_shard(key, |shard, now, _| shard.remaining(key, now)))
    }
}

impl TokenStore for MemoryStore {
    async fn put_token(
        &self,
        scope: &Key,
        token: &Key,
        ttl: Duration,
        keep: usize,
    ) -> Result<(), StoreError> {
        let (scope, token) = (&Packed::from(scope), &Packed::from(token));
        let (ttl, keep, budget) = (kept(ttl), keep.max(1), self.shared.token_budget);
        self.with_shard(scope, |shard, now, _| {
            shard.put_token(scope, token, ttl, keep, budget, now);
        });
        Ok(())
    }

    async fn consume_token(&self, scope: &Key, token: &Key) -> Result<bool, StoreError> {
        let (scope, token) = (&Packed::from(scope), &Packed::from(token));
        Ok(self.with_shard(scope, |shard, now, _| {
            shard.consume_token(scope, token, now)
        }))
    }

    async fn has_token(&self, scope: &Key, token: &Key) -> Result<bool, StoreError> {
        let (scope, token) = (&Packed::from(scope), &Packed::from(token));
        Ok(self.with_shard(scope, |shard, now, _| shard.has_token(scope, token, now)))
    }
}

impl RecordStore for MemoryStore {
    async fn begin_record(
        &self,
        key: &Key,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
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
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        let retention = kept(retention);
        self.with_room(key, |shard, now, entries| {
            shard.complete_record(key, owner, response.clone(), retention, now, entries)
        })
    }

    async fn renew_record(
        &self,
        key: &Key,
        owner: &Owner,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        let lease = kept(lease);
        Ok(self.with_shard(key, |shard, now, _| {
            shard.renew_record(key, owner, lease, now)
        }))
    }

    async fn abandon_record(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let (key, owner) = (&Packed::from(key), &Packed::from(owner));
        Ok(self.with_shard(key, |shard, now, entries| {
            shard.abandon_record(key, owner, now, entries)
        }))
    }

    async fn record_state(&self, key: &Key) -> Result<Option<RecordState>, StoreError> {
        let key = &Packed::from(key);
        Ok(self.with_shard(key, |shard, now, _| shard.record_state(key, now)))
    }

    async fn remove_record(&self, key: &Key) -> Result<bool, StoreError> {
        let key = &Packed::from(key);
        Ok(self.with_shard(key, |shard, now, entries| {
            shard.remove_record(key, now, entries)
        }))
    }

    /// Registers the waiter under the shard's mutex, atomically with seeing the record in
    /// progress, and wakes it when the record is completed, abandoned or removed; a lease
    /// that runs out signals nothing, so it waits at most the lease's remaining time.
    async fn wait_for_record(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        let key = &Packed::from(key);
        let registered =
            self.with_shard(key, |shard, now, _| shard.register_record_waiter(key, now));
        let Some((signal, remaining)) = registered else {
            return Ok(true);
        };
        let waiter = RecordWaiter {
            shared: &self.shared,
            key,
            signal,
        };
        let within = kept(within);
        let ended = waiter.signal.ended_within(within.min(remaining)).await;
        Ok(ended || remaining <= within)
    }
}

/// Settings for a [`MemoryStore`]; made by [`MemoryStore::builder`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder {
    capacity: usize,
    max_bytes: usize,
    token_capacity: usize,
    reclaim_interval: Duration,
}

impl Default for MemoryStoreBuilder {
    fn default() -> Self {
        Self {
            capacity: 1_000_000,
            max_bytes: 512 * 1024 * 1024,
            token_capacity: 250_000,
            reclaim_interval: Duration::from_secs(1),
        }
    }
}

impl MemoryStoreBuilder {
    /// The most windows, locks and records held at once (default 1,000,000; at least 1).
    ///
    /// ```
    /// let store = idem_core::MemoryStore::builder().with_capacity(500).build();
    /// assert_eq!(store.capacity(), 500);
    /// ```
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// The most bytes windows, locks and records may take, each counted as 256 bytes plus
    /// its stored response (default 512 MiB).
    ///
    /// ```
    /// let store = idem_core::MemoryStore::builder().with_max_bytes(64 << 20).build();
    /// assert_eq!(store.max_bytes(), 64 << 20);
    /// ```
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The most one-time tokens held at once (default 250,000), rounded up to a multiple
    /// of the store's 64 shards. Past it, the oldest are evicted.
    ///
    /// ```
    /// let store = idem_core::MemoryStore::builder().with_token_capacity(6_400).build();
    /// assert_eq!(store.token_capacity(), 6_400);
    /// ```
    pub fn with_token_capacity(mut self, tokens: usize) -> Self {
        self.token_capacity = tokens;
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
            entries: Entries::new(self.capacity, self.max_bytes),
            token_budget: self.token_capacity.div_ceil(SHARDS).max(1),
            last_fence: AtomicU64::new(fence_start()),
            started: Instant::now(),
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

    async fn take(store: &MemoryStore, key: &Key, ttl: Duration) -> Result<Acquire, StoreError> {
        store
            .acquire(key, &Owner::random(), ttl, Fencing::Off)
            .await
    }

    #[tokio::test]
    async fn a_flood_of_live_keys_is_refused_past_capacity_and_leaves_tokens_alone() {
        let store = small(100);
        let owner = Owner::random();
        for i in 0..100 {
            let taken = store
                .acquire(&key(i), &owner, Duration::from_secs(60), Fencing::Off)
                .await;
            taken.unwrap();
        }
        let err = take(&store, &key(1000), Duration::from_secs(60))
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
        // Tokens have a budget of their own.
        let client = key(5000);
        store
            .put_token(&client, &key(5001), Duration::from_secs(60), 16)
            .await
            .unwrap();
        assert!(store.consume_token(&client, &key(5001)).await.unwrap());
        // Existing entries still work, and freeing one makes room for one.
        assert!(store.release(&key(7), &owner).await.unwrap());
        take(&store, &key(1002), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(
            take(&store, &key(1003), Duration::from_secs(60))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_flood_of_tokens_never_takes_room_a_guard_needs() {
        let store = MemoryStore::builder()
            .with_capacity(10)
            .with_token_capacity(640)
            .with_reclaim_interval(Duration::from_secs(3600))
            .build();
        for i in 0..10_000 {
            store
                .put_token(&key(i), &key(i), Duration::from_secs(60), 16)
                .await
                .unwrap();
        }
        assert!(store.token_count() <= 640, "{}", store.token_count());
        for i in 0..10 {
            let taken = take(&store, &key(20_000 + i), Duration::from_secs(60)).await;
            assert_eq!(taken.unwrap(), Acquire::Acquired { fence: None });
        }
        assert!(
            !store.consume_token(&key(0), &key(0)).await.unwrap(),
            "the oldest token was evicted"
        );
        assert!(store.consume_token(&key(9_999), &key(9_999)).await.unwrap());
    }

    #[tokio::test]
    async fn stored_responses_count_against_the_bytes() {
        let store = MemoryStore::builder()
            .with_max_bytes(64 * 1024)
            .with_reclaim_interval(Duration::from_secs(3600))
            .build();
        let (fp, lease) = (Fingerprint::of(["x"]), Duration::from_secs(60));
        let response = Bytes::from(vec![7; 20 * 1024]);
        let mut stored = 0;
        for i in 0..10 {
            let owner = Owner::random();
            store
                .begin_record(&key(i), &owner, &fp, lease)
                .await
                .unwrap();
            match store
                .complete_record(&key(i), &owner, response.clone(), lease)
                .await
            {
                Ok(true) => stored += 1,
                Err(StoreError::Memory { max_bytes }) => {
                    assert_eq!(max_bytes, 64 * 1024);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            stored, 3,
            "three 20 KiB responses fit in 64 KiB, a fourth does not"
        );
        assert!(store.bytes_held() <= 64 * 1024, "{}", store.bytes_held());
        assert!(
            matches!(
                store
                    .begin_record(&key(3), &Owner::random(), &fp, lease)
                    .await
                    .unwrap(),
                Begin::InProgress { .. }
            ),
            "the refused completion left the record in progress"
        );
    }

    #[tokio::test]
    async fn expired_entries_are_reclaimed_before_refusing() {
        let store = small(100);
        for i in 0..100 {
            take(&store, &key(i), Duration::from_millis(10))
                .await
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(20)); // past every TTL above
        for i in 100..200 {
            take(&store, &key(i), Duration::from_secs(60))
                .await
                .unwrap();
        }
        assert_eq!(store.entry_count(), 100);
    }

    #[tokio::test]
    async fn fencing_tokens_keep_growing_across_a_restart() {
        async fn fence(store: MemoryStore) -> FencingToken {
            let lock = key(1);
            let owner = Owner::random();
            let Acquire::Acquired { fence: Some(fence) } = store
                .acquire(&lock, &owner, Duration::from_secs(60), Fencing::On)
                .await
                .unwrap()
            else {
                panic!("a free lock is acquired with a fence");
            };
            assert!(store.release(&lock, &owner).await.unwrap());
            fence
        }
        let before = MemoryStore::new();
        let mut last = fence(before.clone()).await;
        for _ in 0..10_000 {
            last = fence(before.clone()).await;
        }
        drop(before);
        // A new process: a new store, with nothing carried over.
        let after = fence(MemoryStore::new()).await;
        assert!(after > last, "{after:?} after {last:?}");
    }

    #[tokio::test]
    async fn the_reaper_reclaims_without_any_further_operation() {
        let store = MemoryStore::builder()
            .with_reclaim_interval(Duration::from_millis(10))
            .build();
        // Long enough that none lapses while a loaded machine inserts them (a CI run once
        // took over 500 ms for the 10,000), short enough for the test to wait it out.
        let ttl = Duration::from_secs(3);
        for i in 0..10_000 {
            store.put_token(&key(i), &key(i), ttl, 16).await.unwrap();
        }
        assert_eq!(store.token_count(), 10_000, "all live while inserting");
        let spare = || -> usize { store.shared.shards.iter().map(|s| lock(s).capacity()).sum() };
        // What is left is the few slots each small map keeps, not the flood's.
        let peak = spare();
        let deadline = Instant::now() + ttl + Duration::from_secs(5);
        while store.token_count() > 0 || spare() > peak / 3 {
            let (left, spare) = (store.token_count(), spare());
            assert!(
                Instant::now() < deadline,
                "left: {left}, map capacity given back down to {spare} slots"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Places of waiters that died, in queues nobody looks at again, are dropped by the
    /// reaper once they lapse, with their queues.
    #[tokio::test]
    async fn the_reaper_drops_lapsed_places() {
        let store = MemoryStore::builder()
            .with_reclaim_interval(Duration::from_millis(10))
            .build();
        let holder = Owner::random();
        let locks: Vec<Key> = (0..100).map(key).collect();
        for lock in &locks {
            store
                .acquire_in_turn(lock, &holder, Duration::from_secs(60), Fencing::Off, None)
                .await
                .unwrap();
            for _ in 0..3 {
                let place = Some(Duration::from_millis(50));
                let turn = store
                    .acquire_in_turn(
                        lock,
                        &Owner::random(),
                        Duration::from_secs(60),
                        Fencing::Off,
                        place,
                    )
                    .await
                    .unwrap();
                assert!(matches!(turn, Turn::Queued { .. }), "{turn:?}");
            }
        }
        let places = || -> usize {
            locks
                .iter()
                .map(|lock| {
                    store
                        .shared
                        .shard(&Packed::from(lock))
                        .places(&Packed::from(lock))
                })
                .sum()
        };
        assert_eq!(places(), 300);
        let deadline = Instant::now() + Duration::from_secs(5);
        while places() > 0 {
            assert!(Instant::now() < deadline, "{} places left", places());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn waiters(store: &MemoryStore, key: &Key) -> usize {
        let key = &Packed::from(key);
        store.shared.shard(key).waiters(key)
    }

    /// Waiters of a record leave nothing behind, whether they time out, are dropped or
    /// are woken; a completion wakes every one still waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn record_waiters_clean_up_and_a_completion_wakes_them_all() {
        let store = MemoryStore::new();
        let (record, owner) = (key(1), Owner::random());
        let fingerprint = Fingerprint::of(["f"]);
        let long = Duration::from_secs(60);
        let begun = store
            .begin_record(&record, &owner, &fingerprint, long)
            .await;
        assert_eq!(begun.unwrap(), Begin::Started);
        let count = |store: &MemoryStore| {
            let packed = &Packed::from(&record);
            store.shared.shard(packed).record_waiters(packed)
        };
        let timed_out = store
            .wait_for_record(&record, Duration::from_millis(5))
            .await;
        assert!(!timed_out.unwrap());
        assert_eq!(count(&store), 0, "a waiter that timed out left");
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let (store, record) = (store.clone(), record.clone());
                tokio::spawn(async move { store.wait_for_record(&record, long).await })
            })
            .collect();
        crate::conformance::eventually(long, "four waiters", || async { count(&store) == 4 }).await;
        let completed = store
            .complete_record(&record, &owner, Bytes::new(), long)
            .await;
        assert!(completed.unwrap());
        for waiter in waiters {
            assert!(waiter.await.unwrap().unwrap(), "woken");
        }
        assert_eq!(count(&store), 0);
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
