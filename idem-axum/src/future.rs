//! [`ResponseFuture`]: the response future of every guard service of this crate
//! ([`AvoidRepeat`](crate::avoid_repeat::AvoidRepeat),
//! [`VerifyFormToken`](crate::form_token::VerifyFormToken),
//! [`Idempotency`](crate::idempotency::Idempotency)).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use idem_core::store::sharing_one_timer;
use pin_project_lite::pin_project;
use tower_service::Service;

type Boxed<O> = Pin<Box<dyn Future<Output = O> + Send>>;

pin_project! {
    /// The response future of a guard service: for a guarded request, the guard's steps
    /// and the inner service's call, boxed as one future; for a request the guard lets
    /// through untouched (a method it does not guard), the inner service's own future; for
    /// a request refused on its head alone, the refusal.
    pub struct ResponseFuture<F: Future> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F: Future> {
        Unguarded { #[pin] future: F },
        Guarded { future: Boxed<F::Output> },
        Ready { output: Option<F::Output> },
    }
}

impl<F: Future> ResponseFuture<F> {
    /// The answer of a guarded request. When its store calls may wait (`waits`), they
    /// share one timer ([`sharing_one_timer`]); a `MemoryStore`'s never wait, and need
    /// none.
    pub(crate) fn guarded(
        future: impl Future<Output = F::Output> + Send + 'static,
        waits: bool,
    ) -> Self {
        let future: Boxed<F::Output> = if waits {
            Box::pin(sharing_one_timer(future))
        } else {
            Box::pin(future)
        };
        Self {
            kind: Kind::Guarded { future },
        }
    }

    /// An answer known at once.
    pub(crate) fn ready(output: F::Output) -> Self {
        Self {
            kind: Kind::Ready {
                output: Some(output),
            },
        }
    }

    /// The inner service's own answer, unguarded.
    pub(crate) fn unguarded(future: F) -> Self {
        Self {
            kind: Kind::Unguarded { future },
        }
    }
}

impl<F: Future> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guarded = matches!(self.kind, Kind::Guarded { .. });
        f.debug_struct("ResponseFuture")
            .field("guarded", &guarded)
            .finish_non_exhaustive()
    }
}

impl<F: Future> Future for ResponseFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Unguarded { future } => future.poll(cx),
            KindProj::Guarded { future } => future.as_mut().poll(cx),
            KindProj::Ready { output } => {
                Poll::Ready(output.take().expect("polled after it ended"))
            }
        }
    }
}

/// The service a guard wraps, as its answering functions need it: one they can call
/// and whose future and error they can move into a task (axum's routes and handlers all
/// are).
pub(crate) trait Inner:
    Service<Request, Response = Response, Future: Send + 'static, Error: Send + 'static>
    + Send
    + 'static
{
}

impl<S> Inner for S
where
    S: Service<Request, Response = Response> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
}

/// The service `poll_ready` readied, to move into a guarded request's future, leaving a
/// clone in its place for the next call: the future outlives `&mut self`, and it must
/// call the service that was polled ready, not a fresh clone of it.
pub(crate) fn take_ready<S: Clone>(service: &mut S) -> S {
    let fresh = service.clone();
    std::mem::replace(service, fresh)
}
