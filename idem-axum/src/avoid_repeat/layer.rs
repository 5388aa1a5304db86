//! [`AvoidRepeatLayer`]: the anti-repeat window for a route, as a tower layer.

use std::borrow::Cow;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use tower_layer::Layer;
use tower_service::Service;

use super::guard::{guard, key_for};
use super::handler::{AvoidRepeatContext, fingerprint_payload};
use super::{Release, RepeatKey, Settings};
use crate::client::ClientRequest;
pub use crate::response_future::ResponseFuture;

/// Guards the routes of a router with the anti-repeat window; see the
/// [module docs](mod@crate::avoid_repeat).
///
/// Install it with `route_layer`, so the handler identity is the method and the route's
/// matched path (`POST /orders/{id}`). Under plain `layer` there is no matched path and
/// the request path is used instead, giving each path its own window.
///
/// ```
/// use std::time::Duration;
/// use axum::{Router, routing::post};
/// use idem_axum::{AvoidRepeatLayer, Idem};
///
/// let idem = Idem::builder().build();
/// let app: Router = Router::new()
///     .route("/orders", post(|| async { "created" }))
///     .route_layer(AvoidRepeatLayer::new(Duration::from_secs(30)))
///     .layer(idem.layer());
/// ```
#[derive(Debug, Clone)]
pub struct AvoidRepeatLayer {
    settings: Arc<Settings>,
}

impl AvoidRepeatLayer {
    /// A window of `timeout` per client and route, released when it expires.
    ///
    /// ```
    /// let layer = idem_axum::AvoidRepeatLayer::new(std::time::Duration::from_secs(30));
    /// ```
    pub fn new(timeout: Duration) -> Self {
        Self {
            settings: Arc::new(Settings {
                timeout,
                release: Release::default(),
                key: RepeatKey::default(),
                message: None,
            }),
        }
    }

    /// When the key is given back (default [`Release::Expire`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let layer = idem_axum::AvoidRepeatLayer::new(Duration::from_secs(30))
    ///     .with_release(idem_axum::Release::Finish);
    /// ```
    pub fn with_release(mut self, release: Release) -> Self {
        Arc::make_mut(&mut self.settings).release = release;
        self
    }

    /// What makes two requests the same (default [`RepeatKey::Client`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let layer = idem_axum::AvoidRepeatLayer::new(Duration::from_secs(30))
    ///     .with_key(idem_axum::RepeatKey::ClientAndBody);
    /// ```
    pub fn with_key(mut self, key: RepeatKey) -> Self {
        Arc::make_mut(&mut self.settings).key = key;
        self
    }

    /// The message a refused duplicate gets.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let layer = idem_axum::AvoidRepeatLayer::new(Duration::from_secs(30)).with_message("请勿重复提交");
    /// ```
    pub fn with_message(mut self, message: impl Into<Cow<'static, str>>) -> Self {
        Arc::make_mut(&mut self.settings).message = Some(message.into());
        self
    }
}

impl<S> Layer<S> for AvoidRepeatLayer {
    type Service = AvoidRepeat<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AvoidRepeat {
            inner,
            settings: Arc::clone(&self.settings),
        }
    }
}

/// The service [`AvoidRepeatLayer`] makes.
#[derive(Debug, Clone)]
pub struct AvoidRepeat<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> AvoidRepeat<S> {
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

impl<S> Service<Request> for AvoidRepeat<S>
where
    S: Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The clone has not been polled ready; the one that was goes into the future.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let settings = Arc::clone(&self.settings);
        ResponseFuture::new(async move {
            let context = AvoidRepeatContext::new(ClientRequest::from_request(&request));
            let html = context.html();
            let (idem, client) = match context.resolve() {
                Ok(resolved) => resolved,
                Err(response) => return Ok(*response),
            };
            let path = request
                .extensions()
                .get::<MatchedPath>()
                .map_or(request.uri().path(), MatchedPath::as_str);
            let handler_id = format!("{} {path}", request.method());
            let (request, payload) = match settings.key {
                RepeatKey::Client => (request, None),
                RepeatKey::ClientAndBody => match fingerprint_payload(request).await {
                    Ok((request, fingerprint)) => (request, Some(fingerprint)),
                    Err(response) => return Ok(response),
                },
            };
            let key = key_for(&idem, &handler_id, &client, payload.as_ref());
            guard(&idem, &settings, &handler_id, key, html, move || {
                inner.call(request)
            })
            .await
        })
    }
}
