//! The names a store is addressed by: [`Key`], [`Owner`] and [`Fingerprint`].
//!
//! Whatever a client sends (an IP address, a header, a token, a body) reaches a store only
//! through [`Key::hashed`] or [`Fingerprint::of`], so no input can spell out, or collide
//! with, another key.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The name of one guarded thing in a store: a lock, a token, an idempotency record.
///
/// A key holds only the characters `A-Z a-z 0-9 _ - . : / @ #`, never a brace, so a store
/// may put it inside a Redis Cluster hash tag (`{key}`) and every key an operation touches
/// lands in one slot. A key is at most [`Key::MAX_LEN`] bytes.
///
/// Build keys for anything a client controls with [`Key::hashed`]; use [`Key::new`] for
/// names the application chooses, such as a lock on `"invoice-run"`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Arc<str>);

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
        let name = name.into();
        if name.is_empty() || name.len() > Self::MAX_LEN {
            return Err(KeyError::Length {
                len: name.len(),
                max: Self::MAX_LEN,
            });
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "_-.:/@".contains(*c)))
        {
            return Err(KeyError::Character(bad));
        }
        Ok(Self(name.into()))
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
        let mut name = String::with_capacity(33);
        name.push('#');
        push_hex(&mut name, &digest[..16]);
        Self(name.into())
    }

    /// The key as the store sees it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.0)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who holds a key: a lock's owner token, or the attempt that started an idempotency record.
///
/// Only the owner can release, renew or complete what it holds, so one worker can never
/// free or overwrite another's (the documents' "mis-delete" story). [`Owner::random`] is
/// the usual choice; [`Owner::new`] lets a process re-enter a lock it took before a
/// network timeout, by presenting the same owner again.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner(Arc<str>);

impl Owner {
    /// The longest owner, in bytes.
    pub const MAX_LEN: usize = 128;

    /// A fresh owner: a version 4 UUID (122 random bits from the OS generator).
    ///
    /// ```
    /// assert_ne!(idem_core::Owner::random(), idem_core::Owner::random());
    /// ```
    pub fn random() -> Self {
        let mut buf = uuid::Uuid::encode_buffer();
        Self(uuid::Uuid::new_v4().simple().encode_lower(&mut buf).into())
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
        let value = value.into();
        if value.is_empty() || value.len() > Self::MAX_LEN {
            return Err(KeyError::Length {
                len: value.len(),
                max: Self::MAX_LEN,
            });
        }
        if let Some(bad) = value.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(KeyError::Character(bad));
        }
        Ok(Self(value.into()))
    }

    /// The owner's value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({})", self.0)
    }
}

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
        let mut hex = String::with_capacity(64);
        push_hex(&mut hex, &self.0);
        write!(f, "Fingerprint({hex})")
    }
}

/// Why a [`Key`] or an [`Owner`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Empty, or longer than allowed.
    #[error("length {len} is outside 1..={max} bytes")]
    Length {
        /// The length given.
        len: usize,
        /// The longest allowed.
        max: usize,
    },
    /// A character that is not allowed.
    #[error("character {0:?} is not allowed")]
    Character(char),
}

fn digest_parts<I, P>(parts: I) -> [u8; 32]
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

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
