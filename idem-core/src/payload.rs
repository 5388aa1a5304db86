//! [`PayloadFingerprint`]: what of a payload tells one request from another — the one
//! choice that every guard fingerprinting a payload takes: `IdempotencyLayer`, an
//! anti-repeat window by client and body, a form token with replay (in `idem-axum`), and
//! the run-once API.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// What of a payload (a request's body, a message) counts in its fingerprint: two
/// payloads whose counted parts are equal are the same payload, and a key sent again
/// with the same payload is a retry, with another a reused key.
///
/// ```
/// use idem_core::payload::PayloadFingerprint;
///
/// let json = PayloadFingerprint::CanonicalJson;
/// assert_eq!(
///     json.counted(br#"{"order": 7, "cents": 1299}"#),
///     json.counted(br#"{"cents":1299,"order":7}"#),
///     "key order and whitespace do not count",
/// );
///
/// let fields = PayloadFingerprint::json_fields(["/order", "/items"]);
/// assert_eq!(
///     fields.counted(br#"{"order": 7, "items": [1], "sent_at": "12:00:01"}"#),
///     fields.counted(br#"{"order": 7, "items": [1], "sent_at": "12:00:07"}"#),
///     "only the fields named count",
/// );
/// assert_ne!(
///     fields.counted(br#"{"order": 7, "items": [1]}"#),
///     fields.counted(br#"{"order": 8, "items": [1]}"#),
/// );
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum PayloadFingerprint {
    /// The bytes as they came: a byte that differs is another payload. The HTTP guards'
    /// default.
    #[default]
    Raw,
    /// The payload as JSON, its objects' keys sorted and without whitespace: two bodies
    /// equal as JSON are one payload, whatever the order of their keys or their spacing.
    /// A body that is not JSON counts as it came ([`Raw`](Self::Raw)). The run-once
    /// API's default.
    CanonicalJson,
    /// Only the fields of a JSON payload at these JSON pointers (RFC 6901: `"/order"`,
    /// `"/items/0/sku"`), each as canonical JSON, a field that is absent as absent: a
    /// timestamp or a trace id elsewhere in the body does not count. A body that is not
    /// JSON counts as it came.
    JsonFields(Arc<[String]>),
    /// The payload does not count: the key alone tells a request, and any payload sent
    /// with it again is a retry.
    Ignored,
    /// What a function of the payload's bytes answers: for anything else (a form body
    /// read field by field, a signature to leave out).
    With(Arc<Counted>),
}

/// The function of [`PayloadFingerprint::With`]: what of a payload's bytes counts.
pub type Counted = dyn Fn(&[u8]) -> Vec<u8> + Send + Sync;

impl PayloadFingerprint {
    /// [`JsonFields`](Self::JsonFields) of `pointers`.
    pub fn json_fields<I, P>(pointers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        Self::JsonFields(pointers.into_iter().map(Into::into).collect())
    }

    /// [`With`](Self::With) `counted`, which answers what of a payload's bytes counts.
    pub fn with(counted: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) -> Self {
        Self::With(Arc::new(counted))
    }

    /// What of `payload` counts in its fingerprint, as bytes to hash.
    pub fn counted<'a>(&self, payload: &'a [u8]) -> Cow<'a, [u8]> {
        match self {
            Self::Raw => Cow::Borrowed(payload),
            Self::Ignored => Cow::Borrowed(&[]),
            Self::With(counted) => Cow::Owned(counted(payload)),
            Self::CanonicalJson | Self::JsonFields(_) => {
                match serde_json::from_slice::<Value>(payload) {
                    Ok(value) => Cow::Owned(self.counted_json(&value)),
                    // Canonical JSON is JSON, which such a body is not: they cannot meet.
                    Err(_) if matches!(self, Self::CanonicalJson) => Cow::Borrowed(payload),
                    // The fields' encoding starts with a byte of 0 or 1 a field; this
                    // one, never.
                    Err(_) => Cow::Owned([&[0xff], payload].concat()),
                }
            }
        }
    }

    /// What of a payload already parsed as JSON counts.
    pub fn counted_json(&self, value: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Self::Raw => write_json(value, &mut out),
            Self::Ignored => {}
            Self::With(counted) => {
                let mut raw = Vec::new();
                write_json(value, &mut raw);
                out = counted(&raw);
            }
            Self::CanonicalJson => write_canonical(value, &mut out),
            Self::JsonFields(pointers) => {
                for pointer in pointers.iter() {
                    // Each field with a mark of whether it is there, so that an absent
                    // field and one holding the text of another cannot be confused.
                    match value.pointer(pointer) {
                        Some(field) => {
                            out.push(1);
                            let mut written = Vec::new();
                            write_canonical(field, &mut written);
                            out.extend_from_slice(&(written.len() as u64).to_be_bytes());
                            out.extend_from_slice(&written);
                        }
                        None => out.push(0),
                    }
                }
            }
        }
        out
    }
}

impl fmt::Debug for PayloadFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Raw => f.write_str("Raw"),
            Self::CanonicalJson => f.write_str("CanonicalJson"),
            Self::JsonFields(pointers) => f.debug_tuple("JsonFields").field(pointers).finish(),
            Self::Ignored => f.write_str("Ignored"),
            Self::With(_) => f.write_str("With(..)"),
        }
    }
}

/// `value` as serde_json writes it.
fn write_json(value: &Value, out: &mut Vec<u8>) {
    // Writing a `Value` to a `Vec` cannot fail: its map keys are strings.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// `value` as JSON, each object's keys in sorted order (whatever map `Value` was built
/// with: another crate may turn on serde_json's `preserve_order`).
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(fields) => {
            let mut sorted: Vec<_> = fields.iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (name, field)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, name);
                out.push(b':');
                write_canonical(field, out);
            }
            out.push(b'}');
        }
        scalar => write_json(scalar, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_choice_counts_what_it_says() {
        let a = br#"{"order": 7, "meta": {"b": 1, "a": [2, 3]}, "at": 1}"#;
        let b = br#"{"at":2,"meta":{"a":[2,3],"b":1},"order":7}"#;
        assert_ne!(
            PayloadFingerprint::Raw.counted(a),
            PayloadFingerprint::Raw.counted(b)
        );
        let canonical = PayloadFingerprint::CanonicalJson;
        assert_ne!(canonical.counted(a), canonical.counted(b), "`at` differs");
        assert_eq!(
            canonical.counted(a),
            canonical.counted(br#"{ "at": 1, "order": 7, "meta": {"a": [2,3], "b": 1} }"#)
        );
        let fields = PayloadFingerprint::json_fields(["/order", "/meta/a"]);
        assert_eq!(fields.counted(a), fields.counted(b));
        assert_ne!(
            fields.counted(a),
            fields.counted(br#"{"order": 7}"#),
            "absent counts"
        );
        assert_ne!(
            fields.counted(br#"{"order": 7}"#),
            fields.counted(br#"{"order": 7, "meta": {"a": null}}"#),
            "absent is not null"
        );
        assert_eq!(
            PayloadFingerprint::Ignored.counted(a),
            PayloadFingerprint::Ignored.counted(b)
        );
        let length = PayloadFingerprint::with(|body| body.len().to_be_bytes().to_vec());
        assert_eq!(length.counted(b"abc"), length.counted(b"xyz"));
    }

    #[test]
    fn a_body_that_is_not_json_counts_as_it_came() {
        for choice in [
            PayloadFingerprint::CanonicalJson,
            PayloadFingerprint::json_fields(["/order"]),
        ] {
            assert!(choice.counted(b"order=7").ends_with(b"order=7"));
            assert_ne!(choice.counted(b"order=7"), choice.counted(b"order=8"));
        }
    }
}
