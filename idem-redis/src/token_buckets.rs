//! Where one-time tokens live: buckets, each one hash tag, placed evenly over the cluster
//! slots so that token traffic spreads over a Redis Cluster's masters as evenly as the
//! number of buckets allows.
//!
//! A scope (one client) belongs to one bucket, chosen by a hash of its name, and its
//! tokens sit under the bucket's tag: `namespace:{tag}:all` (the bucket's tokens, by
//! expiry) and `namespace:{tag}:scope:<scope>` (the scope's own), so that a put or a spend
//! is one script in one slot and the scope's budget is exact. Bucket `i` of `n` has the tag
//! `tokens/i/j`, `j` the first number that puts it within a sixteenth of the spacing of
//! slot `(i + ½) · 16,384 / n`. With the slots split into even ranges over `m` masters, as
//! `redis-cli --cluster create` splits them, a master holds at most `⌈n / m + ⅛⌉` buckets:
//! exactly `n / m` when `m` divides `n`. The placement depends on `i` and `n` alone, so
//! every instance with the same number of buckets finds the same tags.

use crc16::{State, XMODEM};

/// Redis Cluster's slots.
const SLOTS: u32 = 16_384;

/// The buckets of versions before the buckets were placed, and the default.
pub(crate) const DEFAULT_BUCKETS: usize = 64;

/// The most buckets a store takes: placing each near its slot takes more tries the more
/// there are (about 5,500 hashes a bucket at this number, 500 at the default).
pub(crate) const MAX_BUCKETS: usize = 1_024;

/// The token buckets of one store, with their share of its token capacity.
#[derive(Debug)]
pub(crate) struct TokenBuckets {
    /// Each bucket's key prefix, `namespace:{tokens/i/j}`.
    prefixes: Box<[Box<str>]>,
    /// The namespace, for the key prefixes of the buckets before placement.
    namespace: Box<str>,
    /// Tokens one bucket holds at most.
    budget: usize,
}

impl TokenBuckets {
    /// `buckets` buckets (clamped to `1..=MAX_BUCKETS`) sharing `capacity` tokens.
    pub(crate) fn new(namespace: &str, buckets: usize, capacity: usize) -> Self {
        let buckets = buckets.clamp(1, MAX_BUCKETS);
        let prefixes = (0..buckets)
            .map(|bucket| format!("{namespace}:{{{}}}", placed_tag(bucket, buckets)).into())
            .collect();
        Self {
            prefixes,
            namespace: namespace.into(),
            budget: capacity.div_ceil(buckets).max(1),
        }
    }

    /// Tokens one bucket holds at most.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// The keys of `scope`'s tokens: its bucket's set and its own.
    pub(crate) fn keys(&self, scope: &str) -> (String, String) {
        let bucket = &self.prefixes[scope_hash(scope) as usize % self.prefixes.len()];
        keys_under(bucket, scope)
    }

    /// The keys `scope`'s tokens had in versions before the buckets were placed (64
    /// buckets tagged `tokens/N`), where tokens issued before an upgrade still are.
    pub(crate) fn earlier_keys(&self, scope: &str) -> (String, String) {
        let bucket = scope_hash(scope) % DEFAULT_BUCKETS as u32;
        keys_under(&format!("{}:{{tokens/{bucket}}}", self.namespace), scope)
    }
}

fn keys_under(bucket: &str, scope: &str) -> (String, String) {
    (format!("{bucket}:all"), format!("{bucket}:scope:{scope}"))
}

/// The hash that picks a scope's bucket. FNV-1a: stable across processes and releases, as
/// every instance must agree.
fn scope_hash(scope: &str) -> u32 {
    scope.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// The tag of bucket `bucket` of `buckets`: `tokens/<bucket>/<j>` for the first `j` whose
/// slot is within a sixteenth of the buckets' spacing of the bucket's place.
fn placed_tag(bucket: usize, buckets: usize) -> String {
    let (bucket, buckets) = (bucket as u32, buckets as u32);
    let place = (2 * bucket + 1) * SLOTS / (2 * buckets);
    let tolerance = SLOTS / buckets / 16;
    let tag = format!("tokens/{bucket}/");
    // The prefix is hashed once; each try hashes only its number's digits on top.
    let mut prefix = State::<XMODEM>::new();
    prefix.update(tag.as_bytes());
    let mut digits = itoa::Buffer::new();
    let j = (0_u32..)
        .find(|&j| {
            let mut state = prefix;
            state.update(digits.format(j).as_bytes());
            (u32::from(state.get()) % SLOTS).abs_diff(place) <= tolerance
        })
        .expect("some number puts a tag on every slot");
    format!("{tag}{j}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cluster slot of a hash tag.
    fn slot(tag: &str) -> u32 {
        u32::from(State::<XMODEM>::calculate(tag.as_bytes())) % SLOTS
    }

    /// The slots of each of `masters`, split as `redis-cli --cluster create` splits them:
    /// even ranges, rounded.
    fn even_ranges(masters: u32) -> Vec<std::ops::RangeInclusive<u32>> {
        let per = f64::from(SLOTS) / f64::from(masters);
        let (mut first, mut cursor) = (0_u32, 0.0_f64);
        (0..masters)
            .map(|master| {
                let mut last = (cursor + per - 1.0).round() as u32;
                if last >= SLOTS || master == masters - 1 {
                    last = SLOTS - 1;
                }
                let range = first..=last.max(first);
                first = range.end() + 1;
                cursor += per;
                range
            })
            .collect()
    }

    /// The most buckets of `tokens` that one of `masters` holds.
    fn busiest(tokens: &TokenBuckets, masters: u32) -> usize {
        let ranges = even_ranges(masters);
        let mut held = vec![0; ranges.len()];
        for prefix in &tokens.prefixes {
            let tag = &prefix[prefix.find('{').unwrap() + 1..prefix.len() - 1];
            let master = ranges.iter().position(|r| r.contains(&slot(tag))).unwrap();
            held[master] += 1;
        }
        held.into_iter().max().unwrap_or(0)
    }

    #[test]
    fn the_slot_is_redis_clusters() {
        // The check value of CRC16/XMODEM, and a key whose slot Redis' docs give.
        assert_eq!(State::<XMODEM>::calculate(b"123456789"), 0x31c3);
        assert_eq!(slot("foo"), 12_182);
    }

    /// The buckets spread over a cluster's masters as evenly as their number allows: a
    /// master holds at most `⌈n / m + ⅛⌉` of `n` — `n / m` when `m` divides `n`, at most
    /// 1.25 of an even share when `n ≥ 4m` — so the default 64 put on the busiest of 32
    /// masters exactly its share, where the 64 tags `tokens/0` … `tokens/63` of earlier
    /// versions put twice it.
    #[test]
    fn buckets_spread_evenly_over_the_masters() {
        for buckets in [DEFAULT_BUCKETS, 100, 256, MAX_BUCKETS] {
            let tokens = TokenBuckets::new("idem", buckets, 1);
            for masters in 2..=64_u32 {
                let most = busiest(&tokens, masters);
                let even = buckets as f64 / f64::from(masters);
                let bound = (even + 0.125).ceil() as usize;
                assert!(
                    most <= bound,
                    "{buckets} buckets over {masters} masters: {most} on one"
                );
                if buckets % masters as usize == 0 {
                    assert_eq!(most as f64, even, "{buckets} over {masters}");
                }
                if buckets >= 4 * masters as usize {
                    assert!(
                        most as f64 <= 1.25 * even,
                        "{buckets} over {masters}: {most}"
                    );
                }
            }
        }
        let default = TokenBuckets::new("idem", DEFAULT_BUCKETS, 1);
        assert_eq!(busiest(&default, 32), 2);
        let ranges = even_ranges(32);
        let mut held = [0; 32];
        for bucket in 0..DEFAULT_BUCKETS as u32 {
            let slot = slot(&format!("tokens/{bucket}"));
            held[ranges.iter().position(|r| r.contains(&slot)).unwrap()] += 1;
        }
        assert_eq!(held.iter().max(), Some(&4));
    }

    #[test]
    fn a_scope_keeps_its_bucket_and_its_earlier_keys() {
        let tokens = TokenBuckets::new("shop", DEFAULT_BUCKETS, 640);
        assert_eq!(tokens.budget(), 10);
        let (all, scope) = tokens.keys("client-7");
        assert_eq!(
            scope,
            format!("{}:scope:client-7", all.strip_suffix(":all").unwrap())
        );
        assert!(all.starts_with("shop:{tokens/"), "{all}");
        let bucket = scope_hash("client-7") % 64;
        assert_eq!(
            tokens.earlier_keys("client-7"),
            (
                format!("shop:{{tokens/{bucket}}}:all"),
                format!("shop:{{tokens/{bucket}}}:scope:client-7")
            )
        );
    }
}
