//! Reading a request body whole, for guards that must see it before the handler does
//! (a fingerprint of the payload) and then hand it on unchanged.

use std::future::Future;

use axum::RequestExt;
use axum::body::{Body, HttpBody};
use bytes::Bytes;
use futures_util::future::{Either, ready};
use http::Request;
use http::request::Parts;

use crate::rejection::{Rejection, RejectionKind};

/// A request's head and its whole body, or why the body could not be read.
pub(crate) type Read = Result<(Parts, Bytes), Rejection>;

/// Reads the body of `request` within the router's body limit (axum's
/// `DefaultBodyLimit`, 2 MB unless set): over it is 413, a broken body is 400.
///
/// A body known to be empty (`Content-Length: 0`, or none at all) is answered at once.
/// Only a body that must be read puts its reading on the heap, so that the future of the
/// guard awaiting this — itself boxed per request — stays small.
pub(crate) fn read_whole(request: Request<Body>) -> impl Future<Output = Read> + Send {
    read(request, None)
}

/// Reads the body of `request` up to `limit` bytes, in place of the router's limit: over
/// it is 413, a broken body is 400. Empty bodies as in [`read_whole`].
pub(crate) fn read_up_to(
    request: Request<Body>,
    limit: usize,
) -> impl Future<Output = Read> + Send {
    read(request, Some(limit))
}

fn read(request: Request<Body>, limit: Option<usize>) -> impl Future<Output = Read> + Send {
    if is_empty(&request) {
        return Either::Left(ready(Ok((request.into_parts().0, Bytes::new()))));
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
    Either::Right(Box::pin(read_parts(parts, body, limit)))
}

fn is_empty(request: &Request<Body>) -> bool {
    request.body().size_hint().exact() == Some(0)
}

async fn read_parts(parts: Parts, body: Body, limit: usize) -> Read {
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
