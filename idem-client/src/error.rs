//! [`Error`]: why a keyed request got no answer.

/// A boxed error, as tower's services return them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why [`IdempotentRetry`](crate::IdempotentRetry) got no answer for a request. An answer
/// it may not retry, or whose retries ran out, is returned as the answer, not as an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request's body is larger than the policy buffers to send again
    /// ([`RetryPolicy::with_max_body`](crate::RetryPolicy::with_max_body)); nothing was
    /// sent.
    #[error("the request body is larger than the {limit} bytes kept to send it again")]
    BodyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The request's body failed while it was read; nothing was sent.
    #[error("the request body failed while it was read")]
    Body(#[source] BoxError),
    /// The reqwest middleware was given a request whose body it cannot send again (a
    /// stream); nothing was sent.
    #[error("the request body is a stream, which cannot be sent again")]
    BodyNotReplayable,
    /// The inner service failed on the last attempt (a connection refused or dropped, a
    /// timeout), and no attempt is left.
    #[error("the request failed after {attempts} attempt(s)")]
    Transport {
        /// The attempts made.
        attempts: u32,
        /// The last attempt's error.
        #[source]
        source: BoxError,
    },
}
