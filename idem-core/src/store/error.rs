//! [`StoreError`]: why a store operation failed, whatever the store.

use std::time::Duration;

#[cfg(doc)]
use crate::MemoryStore;

/// Why a store operation failed.
///
/// Whatever the variant, the operation may or may not have taken effect in the store (a
/// timeout can strike after the server applied a command): callers treat it as "unknown"
/// and follow their store-failure policy.
///
/// The variants speak of stores in general; what a particular backend reports (a Redis
/// error, a SQL driver's error, a server the store will not use) is the source of
/// [`Backend`](StoreError::Backend), typed, for [`downcast_ref`](std::error::Error) by
/// whoever needs the detail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within its timeout.
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    /// A store bounded in entries (such as [`MemoryStore`]) holds as many live windows,
    /// locks and records as it may, even after reclaiming the expired ones.
    #[error("the store is full ({capacity} live entries)")]
    Capacity {
        /// The configured capacity.
        capacity: usize,
    },
    /// A store bounded in bytes (such as [`MemoryStore`]) holds as many bytes of windows,
    /// locks and records, stored responses included, as it may, even after reclaiming the
    /// expired ones.
    #[error("the store is full ({max_bytes} bytes)")]
    Memory {
        /// The configured limit.
        max_bytes: usize,
    },
    /// The backend failed: no connection could be opened, a command was refused or broke
    /// off, or the server is one the store will not use. The source says which.
    #[error("the store's backend failed")]
    Backend(#[source] BoxError),
    /// The store does not implement the operation: a store written outside this
    /// repository that keeps the default of an operation added since (such as
    /// [`RecordStore::remove_record`](crate::RecordStore::remove_record)).
    #[error("the store does not implement `{operation}`")]
    Unsupported {
        /// The operation.
        operation: &'static str,
    },
    /// The store answered something the operation cannot read.
    #[error("unexpected answer from the store to `{operation}`: {answer}")]
    UnexpectedAnswer {
        /// The operation.
        operation: &'static str,
        /// What came back.
        answer: String,
    },
}

/// The error a backend reports, as [`StoreError::Backend`] carries it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl StoreError {
    /// A [`Backend`](StoreError::Backend) failure caused by `source`.
    ///
    /// ```
    /// use std::io;
    /// use idem_core::StoreError;
    ///
    /// let error = StoreError::backend(io::Error::from(io::ErrorKind::ConnectionRefused));
    /// let source = std::error::Error::source(&error).unwrap();
    /// assert!(source.downcast_ref::<io::Error>().is_some());
    /// ```
    pub fn backend(source: impl Into<BoxError>) -> Self {
        Self::Backend(source.into())
    }

    /// The backend's own error, when this is a [`Backend`](StoreError::Backend) failure
    /// caused by an `E`.
    ///
    /// ```
    /// use std::io;
    /// use idem_core::StoreError;
    ///
    /// let error = StoreError::backend(io::Error::from(io::ErrorKind::ConnectionRefused));
    /// assert_eq!(error.backend_error::<io::Error>().unwrap().kind(), io::ErrorKind::ConnectionRefused);
    /// assert!(StoreError::Timeout(std::time::Duration::from_secs(1)).backend_error::<io::Error>().is_none());
    /// ```
    pub fn backend_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Self::Backend(source) => source.downcast_ref(),
            _ => None,
        }
    }

    /// An [`UnexpectedAnswer`](StoreError::UnexpectedAnswer) to `operation`: the store
    /// answered `answer`, kept in its `Debug` form, which shows a backend's raw value as it
    /// came.
    ///
    /// ```
    /// use idem_core::StoreError;
    ///
    /// let error = StoreError::unexpected("acquire", [7, 0]);
    /// assert_eq!(error.to_string(), "unexpected answer from the store to `acquire`: [7, 0]");
    /// ```
    pub fn unexpected(operation: &'static str, answer: impl std::fmt::Debug) -> Self {
        Self::UnexpectedAnswer {
            operation,
            answer: format!("{answer:?}"),
        }
    }
}
