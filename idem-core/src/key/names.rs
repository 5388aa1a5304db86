//! [`Key`], [`Owner`] and [`Fingerprint`]: the names themselves.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::KeyError;

/// `as_str`, `as_bytes` and `Debug` for a name kept as [`Text`].
macro_rules! text_name {
    ($name:ident, $as_str:literal) => {
        impl $name {
            #[doc = $as_str]
            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }

            /// The bytes, without checking again that they are text.
            pub(crate) fn as_bytes(&self) -> &[u8] {
                self.0.as_bytes()
            }

            /// The 16 bytes whose hex digits the name ends with, when it was made from
            /// them ([`Key::hashed`], [`Owner::random`]): a store that keeps names as
            /// bytes takes them rather than reading the digits back.
            pub(crate) fn hex_bytes(&self) -> Option<&[u8; 16]> {
                match &self.0 {
                    Text::Hex { bytes, .. } => Some(bytes),
                    _ => None,
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.as_str())
            }
        }
    };
}

/// The name of one guarded thing in a store: a lock, a token, an idempotency record.
///
/// A key holds only the characters `A-Z a-z 0-9 _ - . : / @ #`, never a brace, so a store
/// may put it inside a Redis Cluster hash tag (`{key}`) and every key an operation touches
/// lands in one slot. A key is at most [`Key::MAX_LEN`] bytes.
///
/// Build keys for anything a client controls with [`Key::hashed`]; use [`Key::new`] for
/// names the application chooses, such as a lock on `"invoice-run"`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Text);

impl Key {
    /// The longest key, in bytes.
    pub const MAX_LEN: usize = 200;

    /// A key with a name the application chooses.
    ///
    /// ```
    /// let key = idem_core::Key::new("lock:invoice-run").unwrap();
    /// assert_eq!(key.as_str(), "lock:invoice-run");
    /// ```
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `name` is empty, longer than [`Key::MAX_LEN`], or holds a character
    /// other than `A-Z a-z 0-9 _ - . : / @`. (`#` is kept for [`Key::hashed`], so a chosen
    /// name can never equal a hashed one.)
    pub fn new(name: impl Into<String>) -> Result<Self, KeyError> {
        Text::checked(name.into(), Self::MAX_LEN, |c| {
            c.is_ascii_alphanumeric() || "_-.:/@".contains(c)
        })
        .map(Self)
    }

    /// A key derived from any bytes: the SHA-256 of the parts, each prefixed with its length
    /// (so `["ab", "c"]` and `["a", "bc"]` differ), cut to 128 bits and written as `#` and
    /// 32 hex digits.
    ///
    /// ```
    /// use idem_core::Key;
    /// let a = Key::hashed(["avoid_repeat", "shop::orders::create", "203.0.113.7"]);
    /// let b = Key::hashed(["avoid_repeat", "shop::orders::create", "203.0.113.8"]);
    /// assert_ne!(a, b);
    /// assert_eq!(a.as_str().len(), 33);
    /// ```
    pub fn hashed<I, P>(parts: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: AsRef<[u8]>,
    {
        let digest = digest_parts(parts);
        let mut bytes = [0; 16];
        bytes.copy_from_slice(&digest[..16]);
        Self(Text::hex(b"#", bytes))
    }
}

text_name!(Key, "The key as the store sees it.");

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who holds a key: a lock's owner token, or the attempt that started an idempotency record.
///
/// Only the owner can release, renew or complete what it holds, so one worker can never
/// free or overwrite another's (a holder that stalled past its lease deleting the lock the
/// next holder took). [`Owner::random`] is
/// the usual choice; [`Owner::new`] lets a process re-enter a lock it took before a
/// network timeout, by presenting the same owner again.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner(Text);

impl Owner {
    /// The longest owner, in bytes.
    pub const MAX_LEN: usize = 128;

    /// A fresh owner: a version 4 UUID (122 random bits from `rand`'s thread-local
    /// generator, a ChaCha cipher the operating system seeds, through uuid's `fast-rng`:
    /// no system call per owner).
    ///
    /// ```
    /// assert_ne!(idem_core::Owner::random(), idem_core::Owner::random());
    /// ```
    pub fn random() -> Self {
        Self(Text::hex(b"", uuid::Uuid::new_v4().into_bytes()))
    }

    /// An owner with a chosen value.
    ///
    /// ```
    /// let me = idem_core::Owner::new("worker-7:job-42").unwrap();
    /// assert_eq!(me.as_str(), "worker-7:job-42");
    /// ```
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `value` is empty, longer than [`Owner::MAX_LEN`], or holds a
    /// character that is not printable ASCII.
    pub fn new(value: impl Into<String>) -> Result<Self, KeyError> {
        Text::checked(value.into(), Self::MAX_LEN, |c| c.is_ascii_graphic()).map(Self)
    }
}

text_name!(Owner, "The owner's value.");

/// The SHA-256 of what makes two requests "the same request" for an idempotency record:
/// method, path, query, body, chosen headers.
///
/// A record remembers the fingerprint of the request that began it; a later request with
/// the same key but another fingerprint is a mismatch (HTTP 422), not a replay.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of `parts`, each prefixed with its length.
    ///
    /// ```
    /// use idem_core::Fingerprint;
    /// let a = Fingerprint::of(["POST", "/payments", "", r#"{"amount":10}"#]);
    /// let b = Fingerprint::of(["POST", "/payments", "", r#"{"amount":11}"#]);
    /// assert_ne!(a, b);
    /// ```
    pub fn of<I, P>(parts: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: AsRef<[u8]>,
    {
        Self(digest_parts(parts))
    }

    /// A fingerprint computed elsewhere.
    ///
    /// ```
    /// let fp = idem_core::Fingerprint::from_bytes([7; 32]);
    /// assert_eq!(fp.as_bytes(), &[7; 32]);
    /// ```
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut hex = [0; 64];
        write_hex(&mut hex, &self.0);
        write!(f, "Fingerprint({})", String::from_utf8_lossy(&hex))
    }
}

/// The SHA-256 of `parts`, each prefixed with its length.
pub(crate) fn digest_parts<I, P>(parts: I) -> [u8; 32]
where
    I: IntoIterator<Item = P>,
    P: AsRef<[u8]>,
{
    let mut hasher = Sha256::new();
    for part in parts {
        let part = part.as_ref();
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// Writes `bytes` as lowercase hex into `out`, which holds twice as many bytes.
pub(crate) fn write_hex(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
}

/// The longest text a [`Text`] keeps inline: a hashed key (33 bytes) and a random owner
/// (32) fit, with room for short chosen names, and `Text` stays 40 bytes.
const INLINE: usize = 38;

/// The text of a [`Key`] or an [`Owner`], ASCII by construction.
///
/// Short text (every hashed key, every random owner) lives inline, so that a guard's accept
/// path allocates nothing for its key and owner, and a store compares keys without following
/// a pointer (`bench/results/history.md`, section 7; `tests/allocations.rs` fails if either
/// allocates). Longer chosen names are shared behind an `Arc`.
///
/// Equality, hashing and order are those of the bytes, whichever the representation.
#[derive(Clone, Debug)]
enum Text {
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    /// A prefix and the lowercase hex digits of `bytes`, kept with the bytes.
    Hex {
        len: u8,
        text: [u8; HEX_TEXT],
        bytes: [u8; 16],
    },
    Shared(Arc<str>),
}

/// The longest [`Text::Hex`]: a one-byte prefix and 32 digits.
const HEX_TEXT: usize = 33;

impl Text {
    /// `value`, when it is not empty, at most `max` bytes long, and every character of it
    /// `allowed`.
    fn checked(
        value: String,
        max: usize,
        allowed: impl Fn(char) -> bool,
    ) -> Result<Self, KeyError> {
        if value.is_empty() || value.len() > max {
            return Err(KeyError::Length {
                len: value.len(),
                max,
            });
        }
        if let Some(bad) = value.chars().find(|&c| !allowed(c)) {
            return Err(KeyError::Character(bad));
        }
        Ok(Self::from(value))
    }

    /// `text` inline; callers pass ASCII of at most [`INLINE`] bytes.
    fn inline(text: &[u8]) -> Self {
        debug_assert!(text.len() <= INLINE && text.is_ascii());
        let mut bytes = [0; INLINE];
        let len = text.len().min(INLINE);
        bytes[..len].copy_from_slice(&text[..len]);
        Self::Inline {
            len: len as u8,
            bytes,
        }
    }

    /// `prefix` (at most one byte) and the hex digits of `bytes`.
    fn hex(prefix: &[u8], bytes: [u8; 16]) -> Self {
        debug_assert!(prefix.len() <= HEX_TEXT - 32 && prefix.is_ascii());
        let mut text = [0; HEX_TEXT];
        let start = prefix.len().min(HEX_TEXT - 32);
        text[..start].copy_from_slice(&prefix[..start]);
        write_hex(&mut text[start..start + 32], &bytes);
        Self::Hex {
            len: (start + 32) as u8,
            text,
            bytes,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Hex { len, text, .. } => &text[..usize::from(*len)],
            Self::Shared(text) => text.as_bytes(),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Only ASCII is ever put inline (checked by `Key::new`, `Owner::new`, or made
            // of hex digits), so this never falls back to "".
            Self::Inline { .. } | Self::Hex { .. } => {
                std::str::from_utf8(self.as_bytes()).unwrap_or_default()
            }
            Self::Shared(text) => text,
        }
    }
}

impl From<String> for Text {
    fn from(text: String) -> Self {
        if text.len() <= INLINE {
            Self::inline(text.as_bytes())
        } else {
            Self::Shared(text.into())
        }
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Text {}

impl std::hash::Hash for Text {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys and fingerprints are what stores hold across releases: a record begun before
    /// an upgrade is found by the same request after it only while the derivation stays
    /// as it is. (The figures are those of Python's `hashlib.sha256` over each part's
    /// length as 8 bytes big-endian, then the part.)
    #[test]
    fn the_derivation_stays_the_same_across_releases() {
        assert_eq!(
            Key::hashed(["idem", "idempotency", "POST", "/orders", "k-1"]).as_str(),
            "#e0d56203864b60aa187ab6bfb7972402"
        );
        assert_eq!(
            format!("{:?}", Fingerprint::of(["POST", "/orders", "", "{}"])),
            "Fingerprint(a1bfe21535f4d875c02cee56db16f3fafc85a7f9d9393a0ae23bb655e0e6707c)"
        );
    }

    #[test]
    fn hashed_keys_separate_their_parts() {
        assert_ne!(Key::hashed(["ab", "c"]), Key::hashed(["a", "bc"]));
        assert_eq!(Key::hashed(["a", "b"]), Key::hashed(["a", "b"]));
    }

    #[test]
    fn a_chosen_name_cannot_equal_a_hashed_one() {
        let hashed = Key::hashed(["x"]);
        assert_eq!(
            Key::new(hashed.as_str()),
            Err(KeyError::Character('#')),
            "`#` is reserved for hashed keys"
        );
    }

    #[test]
    fn keys_refuse_braces_and_bad_lengths() {
        assert_eq!(Key::new("a{b}"), Err(KeyError::Character('{')));
        assert_eq!(Key::new(""), Err(KeyError::Length { len: 0, max: 200 }));
        assert!(Key::new("x".repeat(201)).is_err());
        assert!(Key::new("x".repeat(200)).is_ok());
    }

    #[test]
    fn owners_are_printable_and_bounded() {
        assert_eq!(Owner::new("a b"), Err(KeyError::Character(' ')));
        assert!(Owner::new("x".repeat(129)).is_err());
        assert_eq!(Owner::random().as_str().len(), 32);
    }

    #[test]
    fn inline_and_shared_text_compare_by_their_bytes() {
        let long = "n".repeat(INLINE + 1);
        let (short, shared) = (Key::new("lock:a").unwrap(), Key::new(long.clone()).unwrap());
        assert!(matches!(short.0, Text::Inline { .. }));
        assert!(matches!(shared.0, Text::Shared(_)));
        assert_eq!(shared.as_str(), long);
        assert_eq!(
            Text::Shared("lock:a".into()),
            short.0,
            "one text, whichever the representation"
        );
        assert!(short < shared, "ordered by bytes: `l` before `n`");
        let random = Owner::random();
        assert!(matches!(random.0, Text::Hex { .. }));
        assert_eq!(Owner::new(random.as_str()).unwrap(), random);
        assert!(matches!(Key::hashed(["k"]).0, Text::Hex { .. }));
        // A hashed key keeps its 16 bytes beside its 33 characters.
        assert_eq!(std::mem::size_of::<Key>(), 56);
    }
}
