//! [`RunError`]: why a run gave no result.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::StoreError;

/// Why [`RunOnce::run`](super::RunOnce::run) gave no result.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError<E> {
    /// This call ran the work, and it failed: the key is free again, and the next call
    /// runs the work afresh.
    Failed(E),
    /// Another call runs the work with this key now (and did not end within the wait, if
    /// one was set). Try again later: after `remaining` at the latest, its lease ends
    /// unless it is renewed.
    InProgress {
        /// How long the other run's lease has left.
        remaining: Duration,
    },
    /// The key was used with another payload: a client's bug, not a retry. The work did
    /// not run.
    Mismatch,
    /// The store could not answer when the record was begun: the work did not run.
    Store(StoreError),
    /// The payload or the work's result could not be serialised. For a result: the work
    /// ran, and the key is free again. A type that cannot be serialised is a bug to fix
    /// in that type (a map whose keys are not strings).
    Encode(serde_json::Error),
    /// The result stored by the run that did the work could not be decoded as the
    /// result type: the type changed incompatibly while records written with the old one
    /// are kept.
    Replay(serde_json::Error),
    /// The run that did the work had a result too large for the store to keep
    /// (`MemoryStore` at its memory bound): its result is not known here.
    NotKept,
}

impl<E: fmt::Display> fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed(error) => write!(f, "the work failed: {error}"),
            Self::InProgress { remaining } => write!(
                f,
                "another call runs the work with this key (its lease ends within {remaining:?})"
            ),
            Self::Mismatch => f.write_str("the key was used with another payload"),
            Self::Store(_) => f.write_str("the store could not answer; the work did not run"),
            Self::Encode(_) => f.write_str("the payload or the result could not be serialised"),
            Self::Replay(_) => f.write_str("the stored result could not be decoded"),
            Self::NotKept => {
                f.write_str("the run that did the work had a result too large to keep")
            }
        }
    }
}

impl<E: Error + 'static> Error for RunError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Failed(error) => Some(error),
            Self::Store(error) => Some(error),
            Self::Encode(error) | Self::Replay(error) => Some(error),
            Self::InProgress { .. } | Self::Mismatch | Self::NotKept => None,
        }
    }
}
