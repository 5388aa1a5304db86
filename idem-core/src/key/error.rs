//! [`KeyError`]: why a name was refused.

#[cfg(doc)]
use crate::{Key, Owner};

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
