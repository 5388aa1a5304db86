//! The extractors of what a layer hands its handler, and their refusal when the layer is
//! not on the route.

/// `FromRequestParts` and `OptionalFromRequestParts` for `$extracted`, a value its layer
/// puts in the request's extensions for the handler ([`IdempotencyRecord`],
/// [`FormSubmission`]).
///
/// Extracted where no layer put one (the layer is not on the route, or did not begin
/// what the value stands for), `$extracted` logs `$log` as an error (throttled, per
/// request as it is: `idem_core::throttled`) and refuses with a [`MissingLayer`] 500 that
/// `$detail` explains; `Option<$extracted>` is `None` there.
///
/// [`IdempotencyRecord`]: crate::idempotency::IdempotencyRecord
/// [`FormSubmission`]: crate::form_token::FormSubmission
/// [`MissingLayer`]: super::RejectionKind::MissingLayer
macro_rules! impl_layer_extractor {
    ($extracted:ty, log: $log:literal, detail: $detail:expr $(,)?) => {
        impl<S: Send + Sync> ::axum::extract::FromRequestParts<S> for $extracted {
            type Rejection = ::axum::response::Response;

            async fn from_request_parts(
                parts: &mut ::http::request::Parts,
                _state: &S,
            ) -> Result<Self, Self::Rejection> {
                parts.extensions.get::<Self>().cloned().ok_or_else(|| {
                    ::idem_core::throttled::error!($log);
                    ::axum::response::IntoResponse::into_response(
                        $crate::rejection::Rejection::new(
                            $crate::rejection::RejectionKind::MissingLayer,
                            $detail,
                        ),
                    )
                })
            }
        }

        impl<S: Send + Sync> ::axum::extract::OptionalFromRequestParts<S> for $extracted {
            type Rejection = ::std::convert::Infallible;

            async fn from_request_parts(
                parts: &mut ::http::request::Parts,
                _state: &S,
            ) -> Result<Option<Self>, Self::Rejection> {
                Ok(parts.extensions.get::<Self>().cloned())
            }
        }
    };
}

pub(crate) use impl_layer_extractor;
