//! The names a store is addressed by — [`Key`], [`Owner`] and [`Fingerprint`], public at
//! the crate root — and [`KeyError`], why one was refused.
//!
//! Whatever a client sends (an IP address, a header, a token, a body) reaches a store only
//! through [`Key::hashed`] or [`Fingerprint::of`], so no input can spell out, or collide
//! with, another key.

mod error;
// `Key`, `Owner` and `Fingerprint` are public at the crate root only: one path per public
// item.
pub(crate) mod names;

pub use self::error::KeyError;
pub(crate) use self::names::{Fingerprint, Key, Owner};
