//! Reading a request body whole, for guards that must see it before the handler does
//! (a fingerprint of the payload) and then hand it on unchanged.
//!
//! The head is handed back at once and only the body is awaited, and only a body that
//! must be read puts its reading on the heap: the guards' futures that await it are boxed
//! per request, and kept small so that allocation stays cheap (BENCHMARKS.md, "HTTP end
//! to end", has the figures).

use std::future::Future;
use std::pin::Pin;

use axum::RequestExt;
use axum::body::{Body, HttpBody};
use bytes::Bytes;
use futures_util::future::{Either, Ready, ready};
use http::Request;
use http::request::Parts;

use crate::rejection::{Rejection, RejectionKind};

/// Reads the body of `request` within the router's body limit (axum's
/// `DefaultBodyLimit`, 2 MB unless set): over it is 413, a broken body is 400.
///
/// Gives the request's head at once and its body as a future. A body known to be empty
/// (`Content-Length: 0`, or none at all) is ready at once.
pub(crate) fn read_whole(request: Request<Body>) -> (Parts, Reading) {
    read(request, None)
}

/// Reads the body of `request` up to `limit` bytes, in place of the router's limit: over
/// it is 413, a broken body is 400. Otherwise as [`read_whole`].
pub(crate) fn read_up_to(request: Request<Body>, limit: usize) -> (Parts, Reading) {
    read(request, Some(limit))
}

/// A body being read (see [`read_whole`]).
pub(crate) type Reading = Either<
    Ready<Result<Bytes, Rejection>>,
    Pin<Box<dyn Future<Output = Result<Bytes, Rejection>> + Send>>,
>;

fn read(request: Request<Body>, limit: Option<usize>) -> (Parts, Reading) {
    if request.body().size_hint().exact() == Some(0) {
        return (
            request.into_parts().0,
            Either::Left(ready(Ok(Bytes::new()))),
        );
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
    (parts, Either::Right(Box::pin(read_body(body, limit))))
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
