//! [`ResponseFuture`]: the response future of the guard layers whose work awaits the store
//! before and after the inner service ([`AvoidRepeat`](crate::avoid_repeat::AvoidRepeat),
//! [`VerifyFormToken`](crate::form_token::VerifyFormToken)).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::Response;

/// The response future of a guard layer: the guard's steps and the inner service's call,
/// boxed as one future.
pub struct ResponseFuture<E> {
    inner: Pin<Box<dyn Future<Output = Result<Response, E>> + Send>>,
}

impl<E> ResponseFuture<E> {
    pub(crate) fn new(future: impl Future<Output = Result<Response, E>> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<E> fmt::Debug for ResponseFuture<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<E> Future for ResponseFuture<E> {
    type Output = Result<Response, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
