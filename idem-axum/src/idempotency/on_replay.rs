//! [`Replayed`]: what an application's hook on replayed responses
//! ([`IdempotencyLayer::on_replay`](crate::IdempotencyLayer::on_replay),
//! [`VerifyFormTokenLayer::on_replay`](crate::VerifyFormTokenLayer::on_replay)) may see
//! and change.

use std::fmt;
use std::sync::Arc;

use axum::response::Response;
use http::{HeaderMap, StatusCode};

/// A replayed response on its way to the retry it answers, as a hook on replays sees it.
///
/// The hook runs after the handler was *not* run: the response is the stored one,
/// decoded afresh for this retry, and the hook returns nothing — it can add, change or
/// remove this response's headers (to add a header, or log the first request's id that
/// the stored response carries), but it cannot run the handler, change the status or the
/// body, or touch what is stored: the next replay starts from the same stored bytes.
///
/// ```
/// use idem_axum::IdempotencyLayer;
///
/// let layer = IdempotencyLayer::new().on_replay(|replayed| {
///     if let Some(first) = replayed.headers().get("x-request-id") {
///         tracing::info!(first = ?first, retry = ?replayed.request_headers().get("x-request-id"), "replayed");
///     }
///     replayed
///         .headers_mut()
///         .insert("cache-control", http::HeaderValue::from_static("no-store"));
/// });
/// ```
#[derive(Debug)]
pub struct Replayed<'a> {
    response: &'a mut Response,
    request: &'a HeaderMap,
}

impl<'a> Replayed<'a> {
    pub(crate) fn new(response: &'a mut Response, request: &'a HeaderMap) -> Self {
        Self { response, request }
    }

    /// The stored status.
    pub fn status(&self) -> StatusCode {
        self.response.status()
    }

    /// The headers the retry will get: the stored ones, the replay marker
    /// (`Idempotent-Replayed: true`, or the layer's own name for it) and the advertised
    /// retention, with what the hook changed so far.
    pub fn headers(&self) -> &HeaderMap {
        self.response.headers()
    }

    /// The headers the retry will get, to change.
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        self.response.headers_mut()
    }

    /// The headers of the retry this replay answers (its `X-Request-Id`, say). Empty for
    /// the answer an attempt gets after it lost its key to another one, whose response
    /// it is given instead of its own.
    pub fn request_headers(&self) -> &HeaderMap {
        self.request
    }
}

/// An application's hook on replayed responses.
type Hook = dyn Fn(&mut Replayed<'_>) + Send + Sync;

/// A layer's hook on replayed responses, shared by every clone of its settings.
#[derive(Clone)]
pub(crate) struct ReplayHook(Arc<Hook>);

impl ReplayHook {
    pub(crate) fn new<F>(hook: F) -> Self
    where
        F: Fn(&mut Replayed<'_>) + Send + Sync + 'static,
    {
        Self(Arc::new(hook))
    }

    /// Lets the hook adjust `response`, the replay to a retry with `request`'s headers.
    pub(crate) fn adjust(&self, response: &mut Response, request: &HeaderMap) {
        (self.0)(&mut Replayed::new(response, request));
    }
}

impl fmt::Debug for ReplayHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplayHook")
    }
}
