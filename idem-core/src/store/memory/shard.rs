//! One shard of a [`MemoryStore`](super::MemoryStore): the entries whose keys hash to it,
//! and the queue of when they expire. Every method is one critical section, run under the
//! shard's mutex.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use super::packed::{Moment, Packed};
use super::queue::Queues;
use super::reminders::{Due, Reminders, Space};
use super::tokens::Tokens;
use crate::key::Fingerprint;
use crate::store::{Acquire, Begin, FencingToken, RecordState, Turn};

/// A shard's map. Keys are SHA-256 output or names the application chose, never raw
/// client input, so a fast hash serves: std's SipHash was the largest single cost of an
/// operation (`bench/results/history.md`, "Latency per operation";
/// `tests::the_maps_hash_with_foldhash`).
pub(super) type Map<V> = HashMap<Packed, V, foldhash::fast::RandomState>;

/// What a window, a lock or a record counts against the store's bytes, besides a stored
/// response: its key, its value, its map slot and its expiry reminder, rounded up.
pub(super) const ENTRY_BYTES: usize = 256;

/// The store holds as many windows, locks and records as it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    /// As many entries as its capacity allows.
    Entries,
    /// As many bytes as its memory limit allows.
    Bytes,
}

/// Counts the windows, locks and records of all shards, and their bytes, against the
/// store's limits. Tokens have a budget of their own and are not counted here.
#[derive(Debug)]
pub(super) struct Entries {
    held: AtomicUsize,
    capacity: usize,
    bytes: AtomicUsize,
    max_bytes: usize,
}

impl Entries {
    pub(super) fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            held: AtomicUsize::new(0),
            capacity,
            bytes: AtomicUsize::new(0),
            max_bytes,
        }
    }

    pub(super) fn held(&self) -> usize {
        self.held.load(AtomicOrdering::Relaxed)
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    pub(super) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Counts a new entry of `ENTRY_BYTES`, if both limits allow it.
    fn try_add(&self) -> Result<(), Full> {
        let before = self.held.fetch_add(1, AtomicOrdering::Relaxed);
        if before >= self.capacity {
            self.held.fetch_sub(1, AtomicOrdering::Relaxed);
            return Err(Full::Entries);
        }
        self.try_grow(ENTRY_BYTES).inspect_err(|_| {
            self.held.fetch_sub(1, AtomicOrdering::Relaxed);
        })
    }

    /// Counts `bytes` more for an entry already held, if the memory limit allows it.
    fn try_grow(&self, bytes: usize) -> Result<(), Full> {
        let before = self.bytes.fetch_add(bytes, AtomicOrdering::Relaxed);
        if before.saturating_add(bytes) <= self.max_bytes {
            Ok(())
        } else {
            self.bytes.fetch_sub(bytes, AtomicOrdering::Relaxed);
            Err(Full::Bytes)
        }
    }

    /// Stops counting `count` entries holding `bytes` in all.
    fn remove(&self, count: usize, bytes: usize) {
        if count > 0 {
            self.held.fetch_sub(count, AtomicOrdering::Relaxed);
        }
        self.shrink(bytes);
    }

    /// Stops counting `bytes` of an entry that stays.
    fn shrink(&self, bytes: usize) {
        if bytes > 0 {
            self.bytes.fetch_sub(bytes, AtomicOrdering::Relaxed);
        }
    }
}

/// `ttl` from `now`.
fn deadline(now: Moment, ttl: Duration) -> Moment {
    now.after(ttl)
}

#[derive(Debug)]
pub(super) struct Lock {
    owner: Packed,
    expires_at: Moment,
    /// The token drawn for it; the store's counter never draws zero.
    fence: Option<NonZeroU64>,
}

impl Lock {
    fn new(owner: &Packed, expires_at: Moment, fence: Option<FencingToken>) -> Self {
        Self {
            owner: owner.clone(),
            expires_at,
            fence: fence.and_then(|fence| NonZeroU64::new(fence.get())),
        }
    }

    fn fence(&self) -> Option<FencingToken> {
        self.fence.map(|fence| FencingToken::new(fence.get()))
    }
}

#[derive(Debug)]
pub(super) struct Record {
    fingerprint: Fingerprint,
    state: Progress,
    expires_at: Moment,
}

#[derive(Debug)]
enum Progress {
    InProgress { owner: Packed },
    Completed { response: Bytes },
}

pub(super) trait Expiring {
    fn expires_at(&self) -> Moment;
}

/// What an entry counts against the store's bytes.
trait Footprint {
    fn bytes(&self) -> usize;
}

impl Expiring for Lock {
    fn expires_at(&self) -> Moment {
        self.expires_at
    }
}

impl Footprint for Lock {
    fn bytes(&self) -> usize {
        ENTRY_BYTES
    }
}

impl Expiring for Record {
    fn expires_at(&self) -> Moment {
        self.expires_at
    }
}

impl Footprint for Record {
    fn bytes(&self) -> usize {
        ENTRY_BYTES + self.response_bytes()
    }
}

impl Record {
    fn response_bytes(&self) -> usize {
        match &self.state {
            Progress::InProgress { .. } => 0,
            Progress::Completed { response } => response.len(),
        }
    }
}

/// Looks up an entry that has not expired.
fn live<'m, V: Expiring>(map: &'m mut Map<V>, key: &Packed, now: Moment) -> Option<&'m mut V> {
    map.get_mut(key).filter(|v| v.expires_at() > now)
}

/// Removes the entry under `key` if it has expired by `now`, and stops counting it.
fn remove_expired<V: Expiring + Footprint>(
    map: &mut Map<V>,
    key: &Packed,
    now: Moment,
    entries: &Entries,
) {
    if map.get(key).is_some_and(|v| v.expires_at() <= now)
        && let Some(removed) = map.remove(key)
    {
        entries.remove(1, removed.bytes());
    }
}

pub(super) fn shrink_if_sparse<V>(map: &mut Map<V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Stale reminders a shard keeps beyond twice its entries before it drops the stale ones.
const STALE_REMINDERS_KEPT: usize = 64;

/// Where the waiters on one lock are woken. It exists only while someone waits, so it
/// needs neither expiry nor a place in the capacity count.
#[derive(Debug, Default)]
struct Signal {
    notify: Arc<Notify>,
    waiters: usize,
}

/// Where the waiters on one record in progress are all woken when it ends. It exists only
/// while someone waits, and is taken out of the map when it fires: waiters that come
/// later wait on a fresh one.
#[derive(Debug, Default)]
pub(super) struct RecordSignal {
    notify: Notify,
    /// Set, before the wake-up, when the record ended: a waiter that registered but was
    /// not listening yet sees it.
    ended: AtomicBool,
}

impl RecordSignal {
    /// Waits until the record ends, for at most `within`: whether it did.
    pub(super) async fn ended_within(&self, within: Duration) -> bool {
        let notified = self.notify.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        if self.ended.load(AtomicOrdering::SeqCst) {
            return true;
        }
        tokio::time::timeout(within, notified).await.is_ok()
    }
}

#[derive(Debug)]
struct RecordWaiting {
    signal: Arc<RecordSignal>,
    waiters: usize,
}

#[derive(Debug, Default)]
pub(super) struct Shard {
    locks: Map<Lock>,
    tokens: Tokens,
    records: Map<Record>,
    signals: Map<Signal>,
    record_waits: Map<RecordWaiting>,
    queues: Queues,
    due: Reminders,
}

impl Shard {
    /// Reminds the shard that the entry `key` in `space`, just written with `ttl`, may
    /// expire at `at`.
    fn remind(&mut self, ttl: Duration, at: Moment, space: Space, key: &Packed) {
        self.due.push(
            space,
            ttl,
            Due {
                at,
                key: key.clone(),
            },
        );
        // Reminders of entries released, consumed or renewed since stay queued until
        // they come due; without this, a flood of short-lived keys (taken and released at
        // once) would grow the queue with the request rate × TTL, outside the capacity.
        let live = self.locks.len() + self.tokens.len() + self.records.len();
        if self.due.len() > 2 * live + STALE_REMINDERS_KEPT {
            self.drop_stale_reminders();
        }
    }

    /// Keeps only the reminders of entries that still expire when they say: O(reminders),
    /// and needed only after they grew to twice the entries, so O(1) per operation
    /// amortised.
    fn drop_stale_reminders(&mut self) {
        fn current<V: Expiring>(map: &Map<V>, due: &Due) -> bool {
            map.get(&due.key).is_some_and(|v| v.expires_at() == due.at)
        }
        let Self {
            locks,
            tokens,
            records,
            due,
            ..
        } = self;
        due.retain(|space, due| match space {
            Space::Lock => current(locks, due),
            Space::Token => tokens.expires_at(&due.key, due.at),
            Space::Record => current(records, due),
        });
    }

    /// Removes entries that expired by `now`, looking at no more than `limit` reminders;
    /// `true` if more reminders are due.
    pub(super) fn reclaim(&mut self, now: Moment, entries: &Entries, limit: usize) -> bool {
        let mut looked = 0;
        loop {
            if looked == limit {
                break self.due.any_due(now);
            }
            let Some((space, due)) = self.due.pop_due(now) else {
                break false;
            };
            looked += 1;
            match space {
                Space::Lock => remove_expired(&mut self.locks, &due.key, now, entries),
                Space::Token => self.tokens.remove_expired(&due.key, now),
                Space::Record => remove_expired(&mut self.records, &due.key, now, entries),
            }
        }
    }

    /// Slots the maps and the reminder queue hold, used or not.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.locks.capacity()
            + self.tokens.capacity()
            + self.records.capacity()
            + self.due.capacity()
    }

    /// Gives memory back once most entries are gone (after a flood has expired).
    pub(super) fn shrink(&mut self) {
        shrink_if_sparse(&mut self.locks);
        self.tokens.shrink();
        shrink_if_sparse(&mut self.records);
        shrink_if_sparse(&mut self.signals);
        shrink_if_sparse(&mut self.record_waits);
        self.due.shrink();
    }

    pub(super) fn acquire(
        &mut self,
        key: &Packed,
        owner: &Packed,
        ttl: Duration,
        draw_fence: impl FnOnce() -> Option<FencingToken>,
        now: Moment,
        entries: &Entries,
    ) -> Result<Acquire, Full> {
        let expires_at = deadline(now, ttl);
        match self.locks.entry(key.clone()) {
            Entry::Occupied(mut occupied) => {
                let lock = occupied.get_mut();
                if lock.expires_at > now {
                    let remaining = lock.expires_at.since(now);
                    return Ok(if lock.owner == *owner {
                        Acquire::Reentered {
                            remaining,
                            fence: lock.fence(),
                        }
                    } else {
                        Acquire::Held { remaining }
                    });
                }
                let fence = draw_fence();
                *lock = Lock::new(owner, expires_at, fence);
                self.remind(ttl, expires_at, Space::Lock, key);
                Ok(Acquire::Acquired { fence })
            }
            Entry::Vacant(vacant) => {
                entries.try_add()?;
                let fence = draw_fence();
                vacant.insert(Lock::new(owner, expires_at, fence));
                self.remind(ttl, expires_at, Space::Lock, key);
                Ok(Acquire::Acquired { fence })
            }
        }
    }

    pub(super) fn release(
        &mut self,
        key: &Packed,
        owner: &Packed,
        now: Moment,
        entries: &Entries,
    ) -> bool {
        let ours = live(&mut self.locks, key, now).is_some_and(|lock| lock.owner == *owner);
        if ours {
            self.locks.remove(key);
            entries.remove(1, ENTRY_BYTES);
        }
        ours
    }

    /// [`FairStore::acquire_in_turn`](crate::FairStore::acquire_in_turn) in one critical
    /// section.
    #[allow(clippy::too_many_arguments)] // one critical section's inputs, each needed
    pub(super) fn acquire_in_turn(
        &mut self,
        key: &Packed,
        owner: &Packed,
        ttl: Duration,
        draw_fence: impl FnOnce() -> Option<FencingToken>,
        place: Option<Duration>,
        now: Moment,
        entries: &Entries,
    ) -> Result<Turn, Full> {
        let remaining = match live(&mut self.locks, key, now) {
            Some(lock) if lock.owner == *owner => {
                return Ok(Turn::Reentered {
                    remaining: lock.expires_at.since(now),
                    fence: lock.fence(),
                });
            }
            Some(lock) => Some(lock.expires_at.since(now)),
            None => None,
        };
        let my_turn = self.queues.head(key, now).is_none_or(|head| head == owner);
        if remaining.is_none() && my_turn {
            let acquired = self.acquire(key, owner, ttl, draw_fence, now, entries)?;
            self.queues.pop_head(key, owner);
            return Ok(match acquired {
                Acquire::Acquired { fence } => Turn::Acquired { fence },
                Acquire::Reentered { remaining, fence } => Turn::Reentered { remaining, fence },
                Acquire::Held { remaining } => Turn::Queued {
                    next: true,
                    remaining: Some(remaining),
                },
            });
        }
        if remaining.is_none() {
            // Free, and another waiter's turn: make sure it knows (its place may just have
            // come to the head when a lapsed one before it was dropped).
            self.queues.hand_turn(key, now);
        }
        let next = match place {
            Some(lapse) => self.queues.queue(key, owner, lapse, now),
            None => self.queues.is_head(key, owner, now),
        };
        Ok(Turn::Queued { next, remaining })
    }

    /// Hands the turn on `key` to the head of its queue, if any.
    pub(super) fn hand_turn(&mut self, key: &Packed, now: Moment) {
        self.queues.hand_turn(key, now);
    }

    /// [`FairStore::leave_queue`](crate::FairStore::leave_queue) in one critical section.
    pub(super) fn leave_queue(&mut self, key: &Packed, owner: &Packed, now: Moment) {
        if self.queues.leave(key, owner) && live(&mut self.locks, key, now).is_none() {
            self.queues.hand_turn(key, now);
        }
    }

    /// Where `owner`'s turn on `key` is signalled; `None` if it holds no place.
    pub(super) fn turn(&self, key: &Packed, owner: &Packed) -> Option<Arc<Notify>> {
        self.queues.turn(key, owner)
    }

    /// Drops every lapsed place in the shard's queues.
    pub(super) fn drop_lapsed_places(&mut self, now: Moment) {
        self.queues.drop_lapsed(now);
    }

    /// Places in `key`'s queue, lapsed or not.
    #[cfg(test)]
    pub(super) fn places(&self, key: &Packed) -> usize {
        self.queues.len(key)
    }

    /// Wakes one waiter on `key`. `notify_one` keeps a permit when no waiter is parked yet,
    /// so one that registered but has not started waiting is woken as soon as it does.
    pub(super) fn signal(&self, key: &Packed) {
        if let Some(signal) = self.signals.get(key) {
            signal.notify.notify_one();
        }
    }

    /// Registers a waiter on `key`, or `None` when the lock is free already: deciding
    /// that under the shard's mutex is what keeps a release just before the wait from
    /// being missed.
    pub(super) fn register_waiter(&mut self, key: &Packed, now: Moment) -> Option<Arc<Notify>> {
        live(&mut self.locks, key, now)?;
        let signal = self.signals.entry(key.clone()).or_default();
        signal.waiters += 1;
        Some(Arc::clone(&signal.notify))
    }

    /// Undoes [`register_waiter`](Self::register_waiter); the last waiter to leave removes
    /// the entry (and any permit no one took).
    pub(super) fn unregister_waiter(&mut self, key: &Packed) {
        if let Entry::Occupied(mut occupied) = self.signals.entry(key.clone()) {
            occupied.get_mut().waiters -= 1;
            if occupied.get().waiters == 0 {
                occupied.remove();
            }
        }
    }

    /// Waiters registered on `key`.
    #[cfg(test)]
    pub(super) fn waiters(&self, key: &Packed) -> usize {
        self.signals.get(key).map_or(0, |signal| signal.waiters)
    }

    pub(super) fn renew(
        &mut self,
        key: &Packed,
        owner: &Packed,
        ttl: Duration,
        now: Moment,
    ) -> bool {
        let expires_at = deadline(now, ttl);
        match live(&mut self.locks, key, now) {
            Some(lock) if lock.owner == *owner => {
                lock.expires_at = expires_at;
                self.remind(ttl, expires_at, Space::Lock, key);
                true
            }
            _ => false,
        }
    }

    pub(super) fn remaining(&mut self, key: &Packed, now: Moment) -> Option<Duration> {
        live(&mut self.locks, key, now).map(|lock| lock.expires_at.since(now))
    }

    /// Puts `token` in `scope` for `ttl`; keeps the scope's newest `keep` tokens and the
    /// shard's newest `budget`.
    #[allow(clippy::too_many_arguments)] // one critical section's inputs, each needed
    pub(super) fn put_token(
        &mut self,
        scope: &Packed,
        token: &Packed,
        ttl: Duration,
        keep: usize,
        budget: usize,
        now: Moment,
    ) {
        let expires_at = deadline(now, ttl);
        self.tokens.put(scope, token, expires_at, keep, budget);
        self.remind(ttl, expires_at, Space::Token, token);
    }

    pub(super) fn consume_token(&mut self, scope: &Packed, token: &Packed, now: Moment) -> bool {
        self.tokens.consume(scope, token, now)
    }

    pub(super) fn has_token(&self, scope: &Packed, token: &Packed, now: Moment) -> bool {
        self.tokens.holds(scope, token, now)
    }

    /// Tokens held now, counting expired ones not reclaimed yet.
    pub(super) fn token_count(&self) -> usize {
        self.tokens.len()
    }

    pub(super) fn begin_record(
        &mut self,
        key: &Packed,
        owner: &Packed,
        fingerprint: &Fingerprint,
        lease: Duration,
        now: Moment,
        entries: &Entries,
    ) -> Result<Begin, Full> {
        let expires_at = deadline(now, lease);
        let started = Record {
            fingerprint: *fingerprint,
            state: Progress::InProgress {
                owner: owner.clone(),
            },
            expires_at,
        };
        match self.records.entry(key.clone()) {
            Entry::Occupied(mut occupied) => {
                let record = occupied.get_mut();
                if record.expires_at > now {
                    return Ok(if record.fingerprint != *fingerprint {
                        Begin::Mismatch
                    } else {
                        match &record.state {
                            Progress::InProgress { .. } => Begin::InProgress {
                                remaining: record.expires_at.since(now),
                            },
                            Progress::Completed { response } => Begin::Completed {
                                response: response.clone(),
                            },
                        }
                    });
                }
                entries.shrink(record.response_bytes());
                *record = started;
            }
            Entry::Vacant(vacant) => {
                entries.try_add()?;
                vacant.insert(started);
            }
        }
        self.remind(lease, expires_at, Space::Record, key);
        Ok(Begin::Started)
    }

    /// The in-progress record under `key`, if `owner` began it and its lease holds.
    fn in_progress_of(&mut self, key: &Packed, owner: &Packed, now: Moment) -> Option<&mut Record> {
        live(&mut self.records, key, now).filter(
            |record| matches!(&record.state, Progress::InProgress { owner: o } if o == owner),
        )
    }

    pub(super) fn complete_record(
        &mut self,
        key: &Packed,
        owner: &Packed,
        response: Bytes,
        retention: Duration,
        now: Moment,
        entries: &Entries,
    ) -> Result<bool, Full> {
        let expires_at = deadline(now, retention);
        let Some(record) = self.in_progress_of(key, owner, now) else {
            return Ok(false);
        };
        entries.try_grow(response.len())?;
        record.state = Progress::Completed { response };
        record.expires_at = expires_at;
        self.remind(retention, expires_at, Space::Record, key);
        self.end_record_waits(key);
        Ok(true)
    }

    pub(super) fn renew_record(
        &mut self,
        key: &Packed,
        owner: &Packed,
        lease: Duration,
        now: Moment,
    ) -> bool {
        let expires_at = deadline(now, lease);
        let Some(record) = self.in_progress_of(key, owner, now) else {
            return false;
        };
        record.expires_at = expires_at;
        self.remind(lease, expires_at, Space::Record, key);
        true
    }

    pub(super) fn abandon_record(
        &mut self,
        key: &Packed,
        owner: &Packed,
        now: Moment,
        entries: &Entries,
    ) -> bool {
        if self.in_progress_of(key, owner, now).is_none() {
            return false;
        }
        self.records.remove(key);
        entries.remove(1, ENTRY_BYTES);
        self.end_record_waits(key);
        true
    }

    pub(super) fn record_state(&mut self, key: &Packed, now: Moment) -> Option<RecordState> {
        let record = live(&mut self.records, key, now)?;
        let (fingerprint, remaining) = (record.fingerprint, record.expires_at.since(now));
        Some(match &record.state {
            Progress::InProgress { .. } => RecordState::InProgress {
                fingerprint,
                remaining,
            },
            Progress::Completed { response } => RecordState::Completed {
                fingerprint,
                response: response.clone(),
                remaining,
            },
        })
    }

    /// Removes the record under `key`, whoever began it: whether it was live.
    pub(super) fn remove_record(&mut self, key: &Packed, now: Moment, entries: &Entries) -> bool {
        let Some(removed) = self.records.remove(key) else {
            return false;
        };
        entries.remove(1, removed.bytes());
        self.end_record_waits(key);
        removed.expires_at > now
    }

    /// Registers a waiter on the record `key` while it is in progress: where it is woken,
    /// and how long the lease has left; `None` when the record is not in progress.
    /// Deciding that under the shard's mutex is what keeps an ending just before the wait
    /// from being missed.
    pub(super) fn register_record_waiter(
        &mut self,
        key: &Packed,
        now: Moment,
    ) -> Option<(Arc<RecordSignal>, Duration)> {
        let record = live(&mut self.records, key, now)?;
        if !matches!(record.state, Progress::InProgress { .. }) {
            return None;
        }
        let remaining = record.expires_at.since(now);
        let waiting = self
            .record_waits
            .entry(key.clone())
            .or_insert_with(|| RecordWaiting {
                signal: Arc::default(),
                waiters: 0,
            });
        waiting.waiters += 1;
        Some((Arc::clone(&waiting.signal), remaining))
    }

    /// Undoes [`register_record_waiter`](Self::register_record_waiter), unless the record
    /// ended since (its signal is gone); the last waiter to leave removes the entry.
    pub(super) fn unregister_record_waiter(&mut self, key: &Packed, signal: &Arc<RecordSignal>) {
        if let Entry::Occupied(mut occupied) = self.record_waits.entry(key.clone())
            && Arc::ptr_eq(&occupied.get().signal, signal)
        {
            occupied.get_mut().waiters -= 1;
            if occupied.get().waiters == 0 {
                occupied.remove();
            }
        }
    }

    /// Wakes every waiter on the record `key`, which just ended. A record nobody waits
    /// for finds an empty map.
    fn end_record_waits(&mut self, key: &Packed) {
        if self.record_waits.is_empty() {
            return;
        }
        if let Some(waiting) = self.record_waits.remove(key) {
            waiting.signal.ended.store(true, AtomicOrdering::SeqCst);
            waiting.signal.notify.notify_waiters();
        }
    }

    /// Waiters registered on the record `key`.
    #[cfg(test)]
    pub(super) fn record_waiters(&self, key: &Packed) -> usize {
        self.record_waits
            .get(key)
            .map_or(0, |waiting| waiting.waiters)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn the_maps_hash_with_foldhash() {
        fn hasher<K, V, S>(_: &HashMap<K, V, S>) -> &'static str {
            std::any::type_name::<S>()
        }
        let map: Map<()> = Map::default();
        assert!(hasher(&map).starts_with("foldhash::"), "{}", hasher(&map));
    }
    use crate::key::{Key, Owner};

    fn hashed(parts: &[&[u8]]) -> Packed {
        Packed::from(&Key::hashed(parts))
    }

    fn moment(start: Instant) -> Moment {
        Moment::at(start, Instant::now())
    }

    #[test]
    fn reminders_stay_bounded_by_the_entries_through_a_flood_of_released_keys() {
        let (mut shard, entries) = (Shard::default(), Entries::new(1_000_000, usize::MAX));
        let (owner, ttl) = (Packed::from(&Owner::random()), Duration::from_secs(30));
        let (scope, start) = (hashed(&[b"client"]), Instant::now());
        let mut most = 0;
        for i in 0..100_000_u32 {
            let (key, now) = (hashed(&[&i.to_le_bytes()]), moment(start));
            shard
                .acquire(&key, &owner, ttl, || None, now, &entries)
                .unwrap();
            assert!(shard.release(&key, &owner, now, &entries));
            let token = hashed(&[b"token", &i.to_le_bytes()]);
            shard.put_token(&scope, &token, ttl, 16, 1_000_000, now);
            assert!(shard.consume_token(&scope, &token, now));
            most = most.max(shard.due.len());
        }
        assert_eq!((entries.held(), entries.bytes()), (0, 0));
        assert_eq!(shard.token_count(), 0);
        // At most one entry is live at a time: twice that, plus the stale reminders kept.
        assert!(
            most <= 2 + STALE_REMINDERS_KEPT,
            "the queue grew to {most} reminders"
        );
    }

    #[test]
    fn dropping_stale_reminders_still_expires_every_live_entry() {
        let (mut shard, entries) = (Shard::default(), Entries::new(1_000_000, usize::MAX));
        let now = moment(Instant::now());
        for i in 0..1_000_u32 {
            let key = hashed(&[&i.to_le_bytes()]);
            let ttl = Duration::from_millis(u64::from(i % 7) + 1);
            // Renewing pushes a second reminder for the same entry: stale ones pile up.
            for _ in 0..2 {
                shard.put_token(&key, &key, ttl, 16, 1_000_000, now);
                shard
                    .acquire(
                        &key,
                        &Packed::from(&Owner::random()),
                        ttl,
                        || None,
                        now,
                        &entries,
                    )
                    .unwrap();
            }
        }
        assert!(shard.due.len() < 4 * 1_000 + STALE_REMINDERS_KEPT + 1);
        shard.reclaim(now.after(Duration::from_millis(10)), &entries, usize::MAX);
        assert_eq!(
            shard.token_count(),
            0,
            "every token expired and was reclaimed"
        );
        assert_eq!((entries.held(), entries.bytes()), (0, 0), "and every lock");
    }
}
