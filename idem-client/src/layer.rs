//! [`IdempotentRetryLayer`] and its service [`IdempotentRetry`]: the tower client
//! middleware.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use tower::{Layer, Service, ServiceExt};

use crate::error::{BoxError, Error};
use crate::key::ensure_key;
use crate::policy::{
    Asked, Judged, MAX_PROBLEM, RetryPolicy, Verdict, in_progress_problem, keep_trying, verdict,
};

/// The body of an answer: the inner service's as it came, or, for a `409` problem whose
/// `type` was read, its bytes.
pub type ResponseBody<B> = Either<B, Full<Bytes>>;

/// Wraps a client service in [`IdempotentRetry`].
///
/// ```
/// use idem_client::{IdempotentRetryLayer, RetryPolicy};
///
/// let layer = IdempotentRetryLayer::new(RetryPolicy::new().with_max_attempts(3));
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Default)]
pub struct IdempotentRetryLayer {
    policy: RetryPolicy,
}

impl IdempotentRetryLayer {
    /// A layer that keys and retries as `policy` says.
    pub fn new(policy: RetryPolicy) -> Self {
        Self { policy }
    }
}

impl<S> Layer<S> for IdempotentRetryLayer {
    type Service = IdempotentRetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotentRetry {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// A client service that gives each request of a keyed method (`POST`, `PATCH`) an
/// `Idempotency-Key` and retries it safely; see the [crate docs](crate).
///
/// The request's body is buffered (up to
/// [`RetryPolicy::with_max_body`](crate::RetryPolicy::with_max_body)) so that every
/// attempt sends it whole; the inner service gets it as a [`Full`] body.
#[derive(Debug, Clone)]
pub struct IdempotentRetry<S> {
    inner: S,
    policy: RetryPolicy,
}

impl<S> IdempotentRetry<S> {
    /// `inner`, keyed and retried as `policy` says.
    pub fn new(inner: S, policy: RetryPolicy) -> Self {
        Self { inner, policy }
    }

    // tower's usual three accessors, written by hand on purpose: idem-axum's services get
    // the same from its crate-private `define_inner_service_accessors!` (as tower-http's
    // do), but this crate depends on idem-axum for nothing, and three one-line getters do
    // not earn a macro exported across crates (idem-core's would be public API).

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, ResBody> Service<Request<B>> for IdempotentRetry<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send,
    S::Future: Send,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = Error;
    // Boxed: the retry loop is an `async` block, whose type cannot be named here.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        // Each attempt waits for a clone of the inner service to be ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        Box::pin(send(self.inner.clone(), self.policy.clone(), request))
    }
}

/// Sends `request` through `inner`: once if its method is not keyed; else keyed, and
/// again while the policy says to.
async fn send<S, B, ResBody>(
    inner: S,
    policy: RetryPolicy,
    request: Request<B>,
) -> Result<Response<ResponseBody<ResBody>>, Error>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let (mut head, body) = request.into_parts();
    let body = buffer(body, policy.max_body()).await?;
    if !policy.keys(&head.method) {
        return inner
            .oneshot(Request::from_parts(head, Full::new(body)))
            .await
            .map(|response| response.map(Either::Left))
            .map_err(|error| Error::Transport {
                attempts: 1,
                source: error.into(),
            });
    }
    let uri = head.uri.to_string();
    ensure_key(&head.method, &uri, &mut head.headers, &head.extensions);
    let retention = policy.retention_header().cloned();
    keep_trying(&policy, move || {
        let attempt = Request::from_parts(copy_head(&head), Full::new(body.clone()));
        let sent = inner.clone().oneshot(attempt);
        let retention = retention.clone();
        async move {
            match sent.await {
                Ok(response) => judge(response, retention.as_ref()).await,
                Err(error) => Judged::Failed(error.into()),
            }
        }
    })
    .await
    .map_err(|(source, attempts)| Error::Transport { attempts, source })
}

/// Judges `response` by the policy, reading a `409` problem's body to learn its `type`
/// (a body that cannot be read is as good as no answer); the key's retention is read
/// from the header `retention`.
async fn judge<B>(
    response: Response<B>,
    retention: Option<&HeaderName>,
) -> Judged<Response<ResponseBody<B>>, BoxError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match verdict(response.status(), response.headers(), retention) {
        Verdict::Final => Judged::Final(response.map(Either::Left)),
        Verdict::Retry(after) => Judged::Retry(response.map(Either::Left), after),
        Verdict::ReadProblem => {
            let (parts, body) = response.into_parts();
            let body = match Limited::new(body, MAX_PROBLEM).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(error) => return Judged::Failed(error),
            };
            let in_progress = in_progress_problem(&body);
            let response = Response::from_parts(parts, Either::Right(Full::new(body)));
            if in_progress {
                let asked = Asked::by(response.headers(), SystemTime::now(), retention);
                Judged::Retry(response, asked)
            } else {
                Judged::Final(response)
            }
        }
    }
}

/// The request's body, whole, if it is at most `limit` bytes.
async fn buffer<B>(body: B, limit: usize) -> Result<Bytes, Error>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(Error::BodyTooLarge { limit }),
        Err(error) => Err(Error::Body(error)),
    }
}

/// A copy of the request's head, extensions included, for one attempt.
fn copy_head(head: &http::request::Parts) -> http::request::Parts {
    let mut request = Request::new(());
    *request.method_mut() = head.method.clone();
    *request.uri_mut() = head.uri.clone();
    *request.version_mut() = head.version;
    *request.headers_mut() = head.headers.clone();
    *request.extensions_mut() = head.extensions.clone();
    request.into_parts().0
}
