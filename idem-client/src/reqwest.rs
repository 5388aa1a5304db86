//! [`IdempotentRetryMiddleware`]: the policy as a `reqwest-middleware` middleware.

use bytes::{Bytes, BytesMut};
use http::{Extensions, HeaderName};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::error::Error;
use crate::key::ensure_key;
use crate::policy::{
    Asked, Judged, MAX_PROBLEM, RetryPolicy, Verdict, in_progress_problem, keep_trying, verdict,
};

/// The [`RetryPolicy`] as a `reqwest-middleware` middleware: keys, retries and derives
/// keys as [`IdempotentRetry`](crate::IdempotentRetry) does (see the [crate docs](crate)).
/// Put an [`OutboundKey`](crate::OutboundKey) or [`OutboundKeys`](crate::OutboundKeys)
/// into a request with `RequestBuilder::with_extension`.
///
/// The body must be one reqwest can clone (bytes, text, JSON, a form): a keyed request
/// with a streamed body fails with [`Error::BodyNotReplayable`] before it is sent.
///
/// ```
/// use idem_client::{IdempotentRetryMiddleware, RetryPolicy};
///
/// # async fn charge(record: idem_axum::idempotency::IdempotencyRecord) -> reqwest_middleware::Result<()> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(IdempotentRetryMiddleware::new(RetryPolicy::new()))
///     .build();
/// let response = client
///     .post("http://payments.internal/payments")
///     .header("content-type", "application/json")
///     .body(r#"{"account":"alice","amount":1200}"#)
///     .with_extension(record.outbound_key("charge"))
///     .send()
///     .await?;
/// # let _ = response;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct IdempotentRetryMiddleware {
    policy: RetryPolicy,
}

impl IdempotentRetryMiddleware {
    /// A middleware that keys and retries as `policy` says.
    pub fn new(policy: RetryPolicy) -> Self {
        Self { policy }
    }
}

#[async_trait::async_trait]
impl Middleware for IdempotentRetryMiddleware {
    async fn handle(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        if !self.policy.keys(request.method()) {
            return next.run(request, extensions).await;
        }
        let uri = request.url().as_str().to_owned();
        let method = request.method().clone();
        ensure_key(&method, &uri, request.headers_mut(), extensions);
        if request.try_clone().is_none() {
            return Err(reqwest_middleware::Error::middleware(
                Error::BodyNotReplayable,
            ));
        }
        let extensions = &*extensions;
        let retention = self.policy.retention_header();
        keep_trying(&self.policy, || {
            let attempt = request.try_clone();
            let (next, mut extensions) = (next.clone(), extensions.clone());
            async move {
                let Some(attempt) = attempt else {
                    return Judged::Final(Err(reqwest_middleware::Error::middleware(
                        Error::BodyNotReplayable,
                    )));
                };
                match next.run(attempt, &mut extensions).await {
                    Ok(response) => judge(response, retention).await,
                    Err(error) => Judged::Failed(error),
                }
            }
        })
        .await
        .map_err(|(error, _)| error)
        .and_then(|answer| answer)
    }
}

/// Judges `response` by the policy, reading a `409` problem's body to learn its `type`;
/// the key's retention is read from the header `retention`.
async fn judge(
    response: Response,
    retention: Option<&HeaderName>,
) -> Judged<reqwest_middleware::Result<Response>, reqwest_middleware::Error> {
    match verdict(response.status(), response.headers(), retention) {
        Verdict::Final => Judged::Final(Ok(response)),
        Verdict::Retry(after) => Judged::Retry(Ok(response), after),
        Verdict::ReadProblem => {
            let mut head = http::Response::new(());
            *head.status_mut() = response.status();
            *head.version_mut() = response.version();
            *head.headers_mut() = response.headers().clone();
            let body = match read_problem(response).await {
                Ok(body) => body,
                Err(error) => return Judged::Failed(error),
            };
            let in_progress = in_progress_problem(&body);
            let asked = Asked::by(head.headers(), std::time::SystemTime::now(), retention);
            let response = Response::from(head.map(|()| body));
            if in_progress {
                Judged::Retry(Ok(response), asked)
            } else {
                Judged::Final(Ok(response))
            }
        }
    }
}

/// A `409` problem's body, if it is at most [`MAX_PROBLEM`] bytes.
async fn read_problem(mut response: Response) -> reqwest_middleware::Result<Bytes> {
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_PROBLEM {
            return Err(reqwest_middleware::Error::middleware(Error::Transport {
                attempts: 1,
                source: format!("a 409 problem body over {MAX_PROBLEM} bytes").into(),
            }));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}
