//! Reading a request body whole, for guards that must see it before the handler does
//! (a fingerprint of the payload) and then hand it on unchanged.

use axum::RequestExt;
use axum::body::{Body, HttpBody};
use bytes::Bytes;
use http::Request;
use http::request::Parts;

use crate::rejection::{Rejection, RejectionKind};

/// Reads the body of `request` within the router's body limit (axum's
/// `DefaultBodyLimit`, 2 MB unless set), and gives it back with the request's head.
///
/// # Errors
///
/// 413 over the limit, 400 for a body that breaks off.
pub(crate) async fn read_whole(request: Request<Body>) -> Result<(Parts, Bytes), Rejection> {
    read(request, None).await
}

/// Reads the body of `request` up to `limit` bytes, in place of the router's limit;
/// otherwise as [`read_whole`].
///
/// # Errors
///
/// 413 over `limit`, 400 for a body that breaks off.
pub(crate) async fn read_up_to(
    request: Request<Body>,
    limit: usize,
) -> Result<(Parts, Bytes), Rejection> {
    read(request, Some(limit)).await
}

async fn read(request: Request<Body>, limit: Option<usize>) -> Result<(Parts, Bytes), Rejection> {
    // `Content-Length: 0`, or no body at all: nothing to wait for.
    if request.body().size_hint().exact() == Some(0) {
        return Ok((request.into_parts().0, Bytes::new()));
    }
    let (parts, body, limit) = match limit {
        None => {
            let (parts, body) = request.with_limited_body().into_parts();
            (parts, body, usize::MAX)
        }
        Some(limit) => {
            let (parts, body) = request.into_parts();
            (parts, body, limit)
        }
    };
    let body = read_body(body, limit).await?;
    Ok((parts, body))
}

async fn read_body(body: Body, limit: usize) -> Result<Bytes, Rejection> {
    axum::body::to_bytes(body, limit).await.map_err(|error| {
        if is_length_limit(&error) {
            Rejection::new(
                RejectionKind::PayloadTooLarge,
                "the request body is larger than this endpoint accepts",
            )
        } else {
            Rejection::new(
                RejectionKind::InvalidBody,
                format!("the request body could not be read: {error}"),
            )
        }
    })
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
