//! The `Idempotency-Key`s of the calls a guarded handler makes to other services:
//! [`OutboundKeys`] derives them from the key of the handler's own idempotency record, and
//! [`OutboundKey`] is one of them.
//!
//! A handler that charges a payment provider and dies before its record is complete runs
//! again on the client's retry. If that second run sends the provider a new key, the
//! provider charges twice, however well the handler's own record is kept. Derived from the
//! record's key, the second run's keys are the first run's, and the provider, which
//! deduplicates by key, answers the second charge with the first one's outcome.
//!
//! Each call of one run needs a key of its own, the same in every run. A call named by a
//! *label* ([`OutboundKeys::key`]: `"charge"`, `"reserve-stock"`) has it whatever order
//! the calls are made in. Without a label ([`OutboundKeys::next_key`]) a call is told by
//! its method, its URI and how many calls to that method and URI the run made before it:
//! that is stable as long as the calls to one method and URI are made one after another,
//! or all carry the same body. Give a label to each of several **concurrent** calls to one
//! method and URI with different bodies: on a rerun they may start in another order and
//! swap keys, and the downstream would see a key sent again with another request.
//!
//! ```
//! use idem_core::Key;
//! use idem_core::outbound::OutboundKeys;
//!
//! // The key of the handler's record: the same in every run of the handler for one
//! // client request (idem-axum's `IdempotencyRecord::outbound_keys` builds this).
//! let record = Key::hashed(["idempotency", "client-42", "POST /orders", "order-7"]);
//! let first_run = OutboundKeys::new(&record);
//! let rerun = OutboundKeys::new(&record);
//! assert_eq!(first_run.key("charge"), rerun.key("charge"));
//! assert_ne!(first_run.key("charge"), first_run.key("refund"));
//!
//! // Unlabelled calls: the first and the second POST to one URI differ, and a rerun
//! // gives them the same keys in the same order.
//! let a = first_run.next_key("POST", "https://pay.example/charges");
//! let b = first_run.next_key("POST", "https://pay.example/charges");
//! assert_ne!(a, b);
//! assert_eq!(rerun.next_key("POST", "https://pay.example/charges"), a);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::Key;
use crate::key::names::{digest_parts, write_hex};

/// Separates this derivation's hashes from every other hash of idem's, and names its
/// version: changing the derivation would give a rerun after an upgrade new keys.
const DERIVATION: &str = "idem-outbound/1";

/// The keys of one handler run's outbound calls, derived from the key of the run's
/// idempotency record: the same record gives the same keys, and each label its own.
///
/// Clones share the count of unlabelled calls ([`next_key`](Self::next_key)), so one
/// handle, cloned into each request of a run, numbers the run's calls once. A handle made
/// afresh counts from zero again, as a rerun does.
#[derive(Clone)]
pub struct OutboundKeys {
    record: Key,
    /// Calls made so far without a label, per method and URI.
    ordinals: Arc<Mutex<HashMap<(String, String), u64>>>,
}

impl OutboundKeys {
    /// The keys of the outbound calls of the run that holds the record `record`.
    ///
    /// ```
    /// let keys = idem_core::outbound::OutboundKeys::new(&idem_core::Key::hashed(["record"]));
    /// assert_eq!(keys.key("charge").as_str().len(), 32);
    /// ```
    pub fn new(record: &Key) -> Self {
        Self {
            record: record.clone(),
            ordinals: Arc::default(),
        }
    }

    /// The key of the call named `label`: the same for every run of the record, distinct
    /// for every label.
    ///
    /// ```
    /// # let keys = idem_core::outbound::OutboundKeys::new(&idem_core::Key::hashed(["record"]));
    /// assert_ne!(keys.key("charge"), keys.key("ship"));
    /// ```
    pub fn key(&self, label: &str) -> OutboundKey {
        OutboundKey::derived([DERIVATION, self.record.as_str(), "label", label])
    }

    /// The key of the next call to `method` and `uri` that has no label: the call's
    /// ordinal among this run's calls to them counts, so the first and the second call
    /// differ, and a rerun numbers its calls the same way if it makes them in the same
    /// order (see the [module docs](self) for when a label is needed instead).
    ///
    /// ```
    /// # let keys = idem_core::outbound::OutboundKeys::new(&idem_core::Key::hashed(["record"]));
    /// let first = keys.next_key("POST", "https://pay.example/charges");
    /// assert_ne!(keys.next_key("POST", "https://pay.example/charges"), first);
    /// ```
    pub fn next_key(&self, method: &str, uri: &str) -> OutboundKey {
        let ordinal = {
            // A panic elsewhere while the map was held leaves the counts whole.
            let mut ordinals = self.ordinals.lock().unwrap_or_else(PoisonError::into_inner);
            let count = ordinals
                .entry((method.to_owned(), uri.to_owned()))
                .or_insert(0);
            *count += 1;
            *count - 1
        };
        OutboundKey::derived([
            DERIVATION,
            self.record.as_str(),
            "call",
            method,
            uri,
            &ordinal.to_string(),
        ])
    }
}

/// Leaves out the record's key: what it is derived from is of no use in a log.
impl fmt::Debug for OutboundKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundKeys").finish_non_exhaustive()
    }
}

/// One outbound call's `Idempotency-Key`: 32 lowercase hex digits (128 bits of a SHA-256),
/// which every service that takes idempotency keys accepts (printable ASCII, short, no
/// character that needs quoting).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OutboundKey([u8; 32]);

impl OutboundKey {
    /// The key of the hash of `parts`.
    fn derived<const N: usize>(parts: [&str; N]) -> Self {
        let digest = digest_parts(parts);
        let mut hex = [0; 32];
        write_hex(&mut hex, &digest[..16]);
        Self(hex)
    }

    /// The key as it is sent.
    pub fn as_str(&self) -> &str {
        // Hex digits only, so never the fallback.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Debug for OutboundKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OutboundKey({})", self.as_str())
    }
}

impl fmt::Display for OutboundKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(record: &str) -> OutboundKeys {
        OutboundKeys::new(&Key::hashed([record]))
    }

    #[test]
    fn a_key_is_derived_from_the_record_and_the_label_only() {
        assert_eq!(keys("a").key("charge"), keys("a").key("charge"));
        assert_ne!(keys("a").key("charge"), keys("b").key("charge"));
        assert_ne!(keys("a").key("charge"), keys("a").key("charge2"));
        // The unlabelled calls' keys never equal a label's.
        let unlabelled = keys("a").next_key("POST", "/x");
        assert_ne!(unlabelled, keys("a").key("POST"));
        assert_ne!(unlabelled, keys("a").key("/x"));
    }

    #[test]
    fn unlabelled_calls_count_per_method_and_uri_across_clones() {
        let run = keys("a");
        let clone = run.clone();
        let first = run.next_key("POST", "/charges");
        let second = clone.next_key("POST", "/charges");
        let other_uri = run.next_key("POST", "/refunds");
        let other_method = run.next_key("PATCH", "/charges");
        let all = [&first, &second, &other_uri, &other_method];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        let rerun = keys("a");
        assert_eq!(rerun.next_key("POST", "/refunds"), other_uri);
        assert_eq!(rerun.next_key("POST", "/charges"), first);
        assert_eq!(rerun.next_key("POST", "/charges"), second);
    }

    #[test]
    fn a_key_is_32_hex_digits() {
        let key = keys("a").key("charge");
        assert_eq!(key.as_str().len(), 32);
        assert!(key.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(key.to_string(), key.as_str());
    }
}
