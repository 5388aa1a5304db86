//! Reading a request body whole, for guards that must see it before the handler does
//! (a fingerprint of the payload) and then hand it on unchanged.

use axum::RequestExt;
use axum::body::Body;
use bytes::Bytes;
use http::Request;
use http::request::Parts;

use crate::rejection::{Rejection, RejectionKind};

/// Reads the body of `request` within the router's body limit (axum's
/// `DefaultBodyLimit`, 2 MB unless set): over it is 413, a broken body is 400.
pub(crate) async fn read_whole(request: Request<Body>) -> Result<(Parts, Bytes), Rejection> {
    let (parts, body) = request.with_limited_body().into_parts();
    read_parts(parts, body, usize::MAX).await
}

/// Reads the body of `request` up to `limit` bytes, in place of the router's limit: over
/// it is 413, a broken body is 400.
pub(crate) async fn read_up_to(
    request: Request<Body>,
    limit: usize,
) -> Result<(Parts, Bytes), Rejection> {
    let (parts, body) = request.into_parts();
    read_parts(parts, body, limit).await
}

async fn read_parts(parts: Parts, body: Body, limit: usize) -> Result<(Parts, Bytes), Rejection> {
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok((parts, bytes)),
        Err(error) if is_length_limit(&error) => Err(Rejection::new(
            RejectionKind::PayloadTooLarge,
            "the request body is larger than this endpoint accepts",
        )),
        Err(error) => Err(Rejection::new(
            RejectionKind::InvalidBody,
            format!("the request body could not be read: {error}"),
        )),
    }
}

fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}
