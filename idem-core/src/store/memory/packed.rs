//! How a shard keeps keys, owners and instants: as small as they can be told apart.
//!
//! A store holding a million live windows keeps a million keys and owners, and, for each,
//! when it expires. A hashed key (`#` and 32 hex digits) and a random owner (32 hex
//! digits) are 16 bytes of information written as text, and an [`Instant`] is 16 bytes
//! where a count of nanoseconds from the store's start is 8, so the shard keeps those
//! instead; only names an application chose are kept as text.

use std::time::{Duration, Instant};

use crate::key::{Key, Owner};

/// A key or an owner as a shard keeps it. Two are equal exactly when their text is: each
/// text has one packing (only lowercase hex digits are packed, and only at full length).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Packed {
    /// `#` and 32 lowercase hex digits, as every [`Key::hashed`]: the bytes they spell.
    Hashed([u8; 16]),
    /// 32 lowercase hex digits, as every [`Owner::random`]: the bytes they spell.
    Hex([u8; 16]),
    /// Any other text.
    Text(Box<str>),
}

impl Packed {
    /// `text`, which a [`Key`] or an [`Owner`] guarantees is ASCII.
    fn of(text: &[u8], or_else: impl FnOnce() -> Box<str>) -> Self {
        if let Some(digits) = text.strip_prefix(b"#")
            && let Some(packed) = from_hex(digits)
        {
            return Self::Hashed(packed);
        }
        match from_hex(text) {
            Some(packed) => Self::Hex(packed),
            None => Self::Text(or_else()),
        }
    }
}

impl From<&Key> for Packed {
    fn from(key: &Key) -> Self {
        match key.hex_bytes() {
            // Made by `Key::hashed`: `#` and the digits of these bytes.
            Some(bytes) => Self::Hashed(*bytes),
            None => Self::of(key.as_bytes(), || key.as_str().into()),
        }
    }
}

impl From<&Owner> for Packed {
    fn from(owner: &Owner) -> Self {
        match owner.hex_bytes() {
            // Made by `Owner::random`: the digits of these bytes.
            Some(bytes) => Self::Hex(*bytes),
            None => Self::of(owner.as_bytes(), || owner.as_str().into()),
        }
    }
}

/// The value of each lowercase hex digit; 16 for every other byte.
const NIBBLES: [u8; 256] = {
    let mut nibbles = [16; 256];
    let mut digit = 0;
    while digit < 16 {
        nibbles[b"0123456789abcdef"[digit] as usize] = digit as u8;
        digit += 1;
    }
    nibbles
};

/// The 16 bytes that 32 lowercase hex digits spell, or `None` for any other text.
fn from_hex(digits: &[u8]) -> Option<[u8; 16]> {
    if digits.len() != 32 {
        return None;
    }
    let mut bytes = [0; 16];
    let mut invalid = 0;
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        let (high, low) = (NIBBLES[usize::from(pair[0])], NIBBLES[usize::from(pair[1])]);
        invalid |= high | low;
        *byte = high << 4 | (low & 0xf);
    }
    (invalid & 16 == 0).then_some(bytes)
}

/// An instant as nanoseconds from the store's start. TTLs are cut to a century
/// (`ttl_millis`), well within the five centuries a `u64` of nanoseconds counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Moment(u64);

impl Moment {
    /// `instant`, counted from `start` (the store's start; an earlier instant is the
    /// start itself).
    pub(super) fn at(start: Instant, instant: Instant) -> Self {
        let nanos = instant.saturating_duration_since(start).as_nanos();
        Self(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// `ttl` after this moment.
    pub(super) fn after(self, ttl: Duration) -> Self {
        let nanos = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(nanos))
    }

    /// How long from `earlier` to this moment (zero if it is not later).
    pub(super) fn since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_keeps_every_text_apart() {
        let hashed = Key::hashed(["x"]);
        let random = Owner::random();
        assert!(matches!(Packed::from(&hashed), Packed::Hashed(_)));
        assert!(matches!(Packed::from(&random), Packed::Hex(_)));
        // The same digits as a key and as an owner, and near misses, stay distinct.
        let digits = &hashed.as_str()[1..];
        let as_owner = Owner::new(digits).unwrap();
        assert_ne!(Packed::from(&hashed), Packed::from(&as_owner));
        let upper = Owner::new(digits.to_uppercase()).unwrap();
        assert!(matches!(Packed::from(&upper), Packed::Text(_)));
        assert_ne!(Packed::from(&upper), Packed::from(&as_owner));
        let short = Owner::new(&digits[..31]).unwrap();
        assert!(matches!(Packed::from(&short), Packed::Text(_)));
        let named = Key::new("lock:invoice-run").unwrap();
        assert_eq!(
            Packed::from(&named),
            Packed::Text("lock:invoice-run".into())
        );
        assert_eq!(Packed::from(&random), Packed::from(&random.clone()));
        // The bytes kept beside the digits pack as the digits would.
        assert_eq!(
            Packed::from(&as_owner),
            Packed::of(digits.as_bytes(), || "".into())
        );
        let chosen = Owner::new(random.as_str()).unwrap();
        assert_eq!(Packed::from(&chosen), Packed::from(&random));
        assert_eq!(
            Packed::from(&hashed),
            Packed::of(hashed.as_bytes(), || "".into())
        );
        assert_eq!(std::mem::size_of::<Packed>(), 24);
    }

    #[test]
    fn moments_count_from_the_start() {
        let start = Instant::now();
        let now = Moment::at(start, start + Duration::from_millis(5));
        let later = now.after(Duration::from_secs(1));
        assert!(later > now);
        assert_eq!(later.since(now), Duration::from_secs(1));
        assert_eq!(now.since(later), Duration::ZERO);
        assert_eq!(Moment::at(start + Duration::from_secs(1), start), Moment(0));
    }
}
