//! [`DoNotKeep`]: a handler's mark on a response that its idempotency record is not to
//! keep.

use axum::response::{IntoResponseParts, ResponseParts};

/// Marks a response as not to be kept by [`IdempotencyLayer`](crate::IdempotencyLayer)
/// (or a form token's replay): its record is removed and its key freed, so that a retry
/// with the same key runs the handler again.
///
/// For an answer given before anything was done, e.g. a request that failed validation
/// — a corrected retry with the same key should run, not replay the refusal. It is a
/// marker of idem's own, a response extension, not `Cache-Control: no-store`: that header
/// speaks to HTTP caches, and a payment's answer sent with it must still be kept.
///
/// ```
/// use axum::http::StatusCode;
/// use axum::response::IntoResponse;
/// use idem_axum::idempotency::DoNotKeep;
///
/// async fn create_payment(body: String) -> axum::response::Response {
///     if body.is_empty() {
///         return (StatusCode::UNPROCESSABLE_ENTITY, DoNotKeep, "an amount is required")
///             .into_response();
///     }
///     (StatusCode::CREATED, "paid").into_response()
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DoNotKeep;

impl IntoResponseParts for DoNotKeep {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, mut parts: ResponseParts) -> Result<ResponseParts, Self::Error> {
        parts.extensions_mut().insert(self);
        Ok(parts)
    }
}
