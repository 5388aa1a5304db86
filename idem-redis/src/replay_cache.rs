//! The [`RedisStore`](crate::RedisStore)'s in-process copy of completed idempotency
//! records it has replayed, so that a key replayed again is answered without a round trip.
//!
//! A completed record never changes: nothing but its retention ending, or an operator,
//! removes it or rewrites it (`complete_record` and `abandon_record` only touch a record in
//! progress). A record an operator removes (`remove_record`) is dropped from the copy of
//! the process that removes it; another process's copy answers for it until it ends.
//! What `begin_record` answers for a completed record, the response for the same
//! fingerprint and a mismatch for any other, is therefore the same on every instance for
//! as long as Redis keeps it, and a copy answers exactly as Redis would, provided it is
//! dropped no later than Redis drops the record. Each copy is kept until the record's
//! remaining time, as Redis gave it, counted from before the request was sent: never past
//! the record's own end. Redis gives that time in the same step as it shows the record's
//! value again, so it is the time of the very record copied, not of one begun since.
//!
//! Only a replay asks Redis for that time, in a round trip of its own: a request that
//! begins a record pays the copy one lookup in the process and nothing in Redis.
//!
//! Only records that were replayed are copied, not every record completed here: a key
//! replayed once is the one that is likely to be asked for again (a client's retry loop, a
//! callback sent twice), while most records are never asked for a second time. The copy
//! is bounded in bytes and evicts by recency and frequency (`quick_cache`'s S3-FIFO).
//!
//! With the feature `metrics`, each answer from the copy counts in
//! `idem_replay_cache_hits_total`, registered at zero when the copy is made: set against
//! the replays the guards count (`idem_outcomes_total{outcome="replayed"}`), it tells
//! how many of them Redis did not have to answer.

use std::time::{Duration, Instant};

use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

use idem_core::{Begin, Fingerprint, Key};

/// What a completed record answers, and until when the copy may answer for it.
#[derive(Clone)]
struct Completed {
    fingerprint: Fingerprint,
    response: Bytes,
    until: Instant,
}

/// Bytes a copy holds besides its response: the key, the entry and the table's share.
const ENTRY_BYTES: u64 = 160;

/// Weighs a copy by its bytes, so that the bound is one of memory.
#[derive(Clone)]
struct ByBytes;

impl Weighter<Key, Completed> for ByBytes {
    fn weight(&self, key: &Key, completed: &Completed) -> u64 {
        ENTRY_BYTES + (key.as_str().len() + completed.response.len()) as u64
    }
}

/// The completed records a store replayed, up to a number of bytes.
pub(crate) struct ReplayCache {
    records: Cache<Key, Completed, ByBytes>,
}

impl std::fmt::Debug for ReplayCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayCache")
            .field("entries", &self.records.len())
            .field("bytes", &self.records.weight())
            .field("max_bytes", &self.records.capacity())
            .finish()
    }
}

impl ReplayCache {
    /// A cache of at most `max_bytes`; `None` for 0, which turns the cache off.
    pub(crate) fn new(max_bytes: usize) -> Option<Self> {
        let max_bytes = u64::try_from(max_bytes).unwrap_or(u64::MAX);
        if max_bytes == 0 {
            return None;
        }
        #[cfg(feature = "metrics")]
        metrics::counter!("idem_replay_cache_hits_total").increment(0);
        Some(Self {
            // The estimate sizes the tables as they grow; 1 KiB is a typical entry.
            records: Cache::with_weighter(
                usize::try_from(max_bytes / 1024)
                    .unwrap_or(usize::MAX)
                    .max(1),
                max_bytes,
                ByBytes,
            ),
        })
    }

    /// What the record `key` answers `fingerprint`, if a live copy of it is here:
    /// [`Begin::Completed`] for its own fingerprint, [`Begin::Mismatch`] for another.
    pub(crate) fn answer(&self, key: &Key, fingerprint: &Fingerprint) -> Option<Begin> {
        let completed = self.records.get(key)?;
        if completed.until <= Instant::now() {
            self.records.remove(key);
            return None;
        }
        #[cfg(feature = "metrics")]
        metrics::counter!("idem_replay_cache_hits_total").increment(1);
        Some(if completed.fingerprint == *fingerprint {
            Begin::Completed {
                response: completed.response,
            }
        } else {
            Begin::Mismatch
        })
    }

    /// Drops the copy of the record `key`, which an operator removed.
    pub(crate) fn forget(&self, key: &Key) {
        self.records.remove(key);
    }

    /// Keeps a copy of the completed record `key`, which Redis said, in a reply to a
    /// request sent at `asked`, it keeps for `remaining` more.
    pub(crate) fn keep(
        &self,
        key: &Key,
        fingerprint: Fingerprint,
        response: Bytes,
        asked: Instant,
        remaining: Duration,
    ) {
        let Some(until) = asked.checked_add(remaining) else {
            return;
        };
        if until > Instant::now() {
            self.records.insert(
                key.clone(),
                Completed {
                    fingerprint,
                    response,
                    until,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key::new(name).unwrap()
    }

    /// Keeps `response` under `name` for `fingerprint`, as Redis answered a question sent
    /// at `asked` with `remaining`.
    fn keep(
        cache: &ReplayCache,
        name: &str,
        fingerprint: Fingerprint,
        response: &Bytes,
        asked: Instant,
        remaining: Duration,
    ) {
        cache.keep(&key(name), fingerprint, response.clone(), asked, remaining);
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_copy_answers_its_fingerprint_with_the_response_and_any_other_with_a_mismatch() {
        let cache = ReplayCache::new(1 << 20).unwrap();
        let (ours, other) = (Fingerprint::of([b"a"]), Fingerprint::of([b"b"]));
        assert_eq!(cache.answer(&key("k"), &ours), None);
        let response = Bytes::from_static(b"stored");
        keep(&cache, "k", ours, &response, Instant::now(), MINUTE);
        assert_eq!(
            cache.answer(&key("k"), &ours),
            Some(Begin::Completed { response })
        );
        assert_eq!(cache.answer(&key("k"), &other), Some(Begin::Mismatch));
        assert_eq!(cache.answer(&key("other"), &ours), None);
    }

    #[test]
    fn a_copy_ends_when_the_record_does_counted_from_the_question() {
        let cache = ReplayCache::new(1 << 20).unwrap();
        let (fingerprint, response) = (Fingerprint::of([b"a"]), Bytes::from_static(b"stored"));
        let (asked, remaining) = (Instant::now(), Duration::from_millis(30));
        keep(&cache, "k", fingerprint, &response, asked, remaining);
        assert!(cache.answer(&key("k"), &fingerprint).is_some());
        std::thread::sleep((asked + remaining).saturating_duration_since(Instant::now()));
        assert_eq!(cache.answer(&key("k"), &fingerprint), None);
        // An answer that arrives after the record's end is not kept at all.
        let long_ago = Instant::now() - Duration::from_millis(50);
        keep(&cache, "late", fingerprint, &response, long_ago, remaining);
        assert_eq!(cache.answer(&key("late"), &fingerprint), None);
    }

    #[test]
    fn the_cache_stays_within_its_bytes() {
        let max = 64 * 1024;
        let cache = ReplayCache::new(max).unwrap();
        let response = Bytes::from(vec![b'x'; 1000]);
        for i in 0..1000 {
            let name = format!("k{i}");
            keep(
                &cache,
                &name,
                Fingerprint::of([b"a"]),
                &response,
                Instant::now(),
                MINUTE,
            );
        }
        assert!(cache.records.weight() <= max as u64);
        assert!(cache.records.len() > 10, "{} kept", cache.records.len());
        assert!(ReplayCache::new(0).is_none());
    }
}
