//! Reading a request body whole, for guards that must see it before the handler does
//! (a fingerprint of the payload) and then hand it on unchanged.
//!
//! The head is handed back at once and only the body is awaited, so a guard can refuse
//! through the head or rebuild the request from it. [`ReadFrames`], which gathers the
//! frames, also serves the idempotency layer's capture of a response body.

use std::future::Future;

use axum::RequestExt;
use axum::body::{Body, HttpBody};
use bytes::{Bytes, BytesMut};
use futures_util::future::Either;
use http::Request;
use http::request::Parts;
use http_body_util::BodyExt;

use crate::rejection::{Rejection, RejectionKind};

/// Reads the body of `request` within `limit` bytes, or, without one, within the router's
/// body limit (axum's `DefaultBodyLimit`, 2 MB unless set): over it is 413, a broken body
/// is 400.
///
/// Gives the request's head at once and its body still unread, so that a guard can keep
/// the two apart until the body is awaited (in its own future's state, the head is then
/// held once). A body known to be empty (`Content-Length: 0`, or none at all) is not
/// wrapped in a limit to be read.
pub(crate) fn read_whole(request: Request<Body>, limit: Option<usize>) -> (Parts, Unread) {
    if request.body().size_hint().exact() == Some(0) {
        return (request.into_parts().0, Unread(None));
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
    (parts, Unread(Some((body, limit))))
}

/// Reads the body of `request` whole within `limit`, as [`read_whole`] does, and puts the
/// same bytes back: for a guard that reads the body before the handler does.
pub(crate) async fn read_back(
    request: &mut Request<Body>,
    limit: Option<usize>,
) -> Result<Bytes, Rejection> {
    let (parts, unread) = read_whole(std::mem::take(request), limit);
    let body = unread.read().await?;
    *request = Request::from_parts(parts, Body::from(body.clone()));
    Ok(body)
}

/// A request body not read yet, with the limit it is read within.
pub(crate) struct Unread(Option<(Body, usize)>);

impl Unread {
    /// The whole body.
    pub(crate) fn read(self) -> impl Future<Output = Result<Bytes, Rejection>> + Send + 'static {
        match self.0 {
            None => Either::Left(std::future::ready(Ok(Bytes::new()))),
            Some((body, limit)) => Either::Right(read_body(body, limit)),
        }
    }
}

async fn read_body(body: Body, limit: usize) -> Result<Bytes, Rejection> {
    let (mut body, mut read) = (
        http_body_util::Limited::new(body, limit),
        ReadFrames::default(),
    );
    while let Some(frame) = body.frame().await {
        // Trailers are no part of the payload.
        if let Ok(data) = frame.map_err(|error| unreadable(&*error))?.into_data() {
            read.push(data);
        }
    }
    Ok(read.into_whole())
}

/// The refusal of a body that could not be read whole: too large, or failing.
fn unreadable(error: &(dyn std::error::Error + 'static)) -> Rejection {
    if is_length_limit(error) {
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
}

fn is_length_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// The data frames of a body read so far. The first is kept apart: a body of one frame, as
/// most are, is read without a list to hold it, and kept without a copy.
#[derive(Default)]
pub(crate) struct ReadFrames {
    first: Option<Bytes>,
    more: Vec<Bytes>,
    len: u64,
}

impl ReadFrames {
    /// Adds `data`; the length read so far.
    pub(crate) fn push(&mut self, data: Bytes) -> u64 {
        self.len += data.len() as u64;
        match &self.first {
            None => self.first = Some(data),
            Some(_) => self.more.push(data),
        }
        self.len
    }

    /// Every frame read, in order.
    pub(crate) fn into_frames(self) -> Vec<Bytes> {
        self.first.into_iter().chain(self.more).collect()
    }

    /// The whole body: the one frame itself, or the frames joined.
    pub(crate) fn into_whole(self) -> Bytes {
        let Some(first) = self.first else {
            return Bytes::new();
        };
        if self.more.is_empty() {
            return first;
        }
        let mut whole = BytesMut::with_capacity(usize::try_from(self.len).unwrap_or(0));
        whole.extend_from_slice(&first);
        for chunk in self.more {
            whole.extend_from_slice(&chunk);
        }
        whole.freeze()
    }
}
