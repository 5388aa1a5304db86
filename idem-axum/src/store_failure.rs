//! [`StoreFailure`]: what a guard does when its store cannot answer.

/// What a guard does when the store fails (an outage, a timeout, a full `MemoryStore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StoreFailure {
    /// Refuse the request with 503 and `Retry-After: 1`: no duplicate can get through
    /// while the store is down. The default.
    #[default]
    FailClosed,
    /// Let the request through unguarded, logging a warning: the service stays up and
    /// duplicates are possible while the store is down.
    FailOpen,
}
