//! Reading the handler's response body so it can be stored, and still handing the client
//! every frame of it.
//!
//! The body is read whole up to the storage limit: the client then gets exactly the
//! bytes that were stored, so its response and a replay are the same. A body over the
//! limit, or one that fails half-way, is handed on as it comes — what was read first,
//! then the rest (or the error) — and is not stored.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, HttpBody};
use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use http_body_util::BodyExt;

use crate::request_body::ReadFrames;

/// A handler's response body, read as far as it could be stored.
#[derive(Debug)]
pub(crate) enum Captured {
    /// The whole body, within the limit. Trailers are handed on, not stored.
    Whole {
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    /// Over the limit: what was read, and the body to read the rest from.
    TooLarge { read: Vec<Bytes>, rest: Body },
    /// The body failed after `read`.
    Failed {
        read: Vec<Bytes>,
        error: axum::Error,
    },
}

/// Reads `body` until it ends or passes `limit` bytes.
pub(crate) async fn capture(mut body: Body, limit: usize) -> Captured {
    let limit = u64::try_from(limit).unwrap_or(u64::MAX);
    if body.size_hint().lower() > limit {
        return Captured::TooLarge {
            read: Vec::new(),
            rest: body,
        };
    }
    let (mut read, mut trailers) = (ReadFrames::default(), None::<HeaderMap>);
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(error) => {
                let read = read.into_frames();
                return Captured::Failed { read, error };
            }
        };
        match frame.into_data() {
            Ok(data) => {
                if read.push(data) > limit {
                    let read = read.into_frames();
                    return Captured::TooLarge { read, rest: body };
                }
            }
            Err(frame) => {
                if let Ok(more) = frame.into_trailers() {
                    trailers.get_or_insert_with(HeaderMap::new).extend(more);
                }
            }
        }
    }
    Captured::Whole {
        data: read.into_whole(),
        trailers,
    }
}

impl Captured {
    /// The body the client gets: every frame the handler produced, in order.
    pub(crate) fn into_body(self) -> Body {
        let (frames, rest): (VecDeque<_>, _) = match self {
            Self::Whole {
                data,
                trailers: None,
            } => return Body::from(data),
            Self::Whole {
                data,
                trailers: Some(trailers),
            } => (
                [Frame::data(data), Frame::trailers(trailers)].into(),
                Rest::End,
            ),
            Self::TooLarge { read, rest } => (
                read.into_iter().map(Frame::data).collect(),
                Rest::Body(rest),
            ),
            Self::Failed { read, error } => (
                read.into_iter().map(Frame::data).collect(),
                Rest::Failed {
                    error: Some(error),
                    paused: false,
                },
            ),
        };
        Body::new(Resumed { frames, rest })
    }
}

/// Frames already read, then whatever the body had left.
struct Resumed {
    frames: VecDeque<Frame<Bytes>>,
    rest: Rest,
}

enum Rest {
    Body(Body),
    /// The error, once the frames before it had a pause to be sent in.
    Failed {
        error: Option<axum::Error>,
        paused: bool,
    },
    End,
}

impl HttpBody for Resumed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.frames.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        match &mut this.rest {
            Rest::Body(body) => Pin::new(body).poll_frame(cx),
            // The server drops what it has not written yet when a body fails: the pause
            // lets it write the head and the frames it holds first, as a body that fails
            // a moment after its first bytes would.
            Rest::Failed { paused, .. } if !*paused => {
                *paused = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Rest::Failed { error, .. } => Poll::Ready(error.take().map(Err)),
            Rest::End => Poll::Ready(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of separate chunks, and optionally an error after them.
    struct Chunks(VecDeque<&'static str>, Option<&'static str>);

    impl HttpBody for Chunks {
        type Data = Bytes;
        type Error = axum::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
            let this = self.get_mut();
            Poll::Ready(match this.0.pop_front() {
                Some(chunk) => Some(Ok(Frame::data(Bytes::from_static(chunk.as_bytes())))),
                None => this.1.take().map(|error| Err(axum::Error::new(error))),
            })
        }
    }

    fn chunked(chunks: &[&'static str]) -> Body {
        Body::new(Chunks(chunks.iter().copied().collect(), None))
    }

    async fn read(body: Body) -> Result<Bytes, axum::Error> {
        axum::body::to_bytes(body, usize::MAX).await
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let captured = capture(chunked(&["ab", "cd"]), 4).await;
        let Captured::Whole { data, trailers } = &captured else {
            panic!("within the limit: {captured:?}");
        };
        assert_eq!((data.as_ref(), trailers), (b"abcd".as_ref(), &None));
        assert_eq!(read(captured.into_body()).await.unwrap(), "abcd");
    }

    #[tokio::test]
    async fn a_one_frame_body_is_kept_without_a_copy() {
        let frame = "a page";
        let captured = capture(chunked(&[frame]), 64).await;
        let Captured::Whole { data, .. } = &captured else {
            panic!("within the limit: {captured:?}");
        };
        assert_eq!(data.as_ptr(), frame.as_ptr(), "the frame itself");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_handed_on_whole() {
        let captured = capture(chunked(&["ab", "cd", "ef"]), 3).await;
        assert!(
            matches!(captured, Captured::TooLarge { .. }),
            "{captured:?}"
        );
        assert_eq!(read(captured.into_body()).await.unwrap(), "abcdef");

        let known = capture(Body::from("abcdef"), 3).await;
        let Captured::TooLarge { read: first, .. } = &known else {
            panic!("the size hint says too large: {known:?}");
        };
        assert!(first.is_empty(), "nothing read when the length is known");
        assert_eq!(read(known.into_body()).await.unwrap(), "abcdef");
    }

    #[tokio::test]
    async fn a_failing_body_fails_for_the_client_too() {
        let failing = Body::new(Chunks(
            ["ab"].into(),
            Some("connection to the backend lost"),
        ));
        let captured = capture(failing, 100).await;
        assert!(matches!(captured, Captured::Failed { .. }), "{captured:?}");
        assert!(read(captured.into_body()).await.is_err());
    }
}
