//! What `#[avoid_repeat]` expands to calls: hidden, reached through `idem_axum::__private`.
//!
//! The attribute keeps the handler's arity (so `#[axum::debug_handler]` works above it as
//! well as below): it wraps one of the handler's own arguments in a type that also reads
//! the [`AvoidRepeatContext`] — the runtime and the client — and, when the key includes
//! the payload, the fingerprint of the query and body. Only a handler without arguments
//! gains one. The original body moves into an inner function whose future [`run`] drives
//! under the guard.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use idem_core::Fingerprint;

use super::guard::{guard, key_for};
use super::{Release, RepeatKey, Settings};
use crate::body::read_whole;
use crate::client::{ClientId, ClientRequest};
use crate::rejection::prefers_html;
use crate::runtime::Idem;

/// One annotated handler's settings, a `const` in the expansion.
#[derive(Debug)]
pub struct Spec {
    handler: &'static str,
    settings: Settings,
}

impl Spec {
    /// The settings `#[avoid_repeat(...)]` was given, checked by the macro.
    pub const fn new(
        handler: &'static str,
        timeout_ms: u64,
        release: Release,
        key: RepeatKey,
        message: Option<&'static str>,
    ) -> Self {
        Self {
            handler,
            settings: Settings {
                timeout: Duration::from_millis(timeout_ms),
                release,
                key,
                message: match message {
                    Some(message) => Some(std::borrow::Cow::Borrowed(message)),
                    None => None,
                },
            },
        }
    }
}

/// The runtime and the client of a request, or the answer when either is missing.
#[derive(Debug)]
pub struct AvoidRepeatContext {
    /// Boxed: the error is the rare path, and a `Response` is large.
    resolved: Result<(Idem, ClientId), Box<Response>>,
    html: bool,
}

impl AvoidRepeatContext {
    pub(crate) fn new(request: ClientRequest<'_>) -> Self {
        let html = prefers_html(request.headers());
        let resolved = match Idem::from_extensions(request.extensions()) {
            Err(rejection) => Err(Box::new(rejection.with_html(html).into_response())),
            Ok(idem) => match idem.client_id(&request) {
                Ok(client) => Ok((idem, client)),
                Err(rejection) => Err(Box::new(idem.respond(rejection.with_html(html)))),
            },
        };
        Self { resolved, html }
    }

    pub(crate) fn html(&self) -> bool {
        self.html
    }

    pub(crate) fn resolve(self) -> Result<(Idem, ClientId), Box<Response>> {
        self.resolved
    }
}

impl<S: Send + Sync> FromRequestParts<S> for AvoidRepeatContext {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::new(ClientRequest::from_parts(parts)))
    }
}

/// One of the handler's extractors that are not last, with the context read beside it.
#[derive(Debug)]
pub struct WithContext<T> {
    /// The runtime and the client.
    pub context: AvoidRepeatContext,
    /// What the handler's own extractor produced.
    pub inner: T,
}

impl<S, T> FromRequestParts<S> for WithContext<T>
where
    S: Send + Sync,
    T: FromRequestParts<S>,
{
    type Rejection = T::Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let context = AvoidRepeatContext::new(ClientRequest::from_parts(parts));
        let inner = T::from_request_parts(parts, state).await?;
        Ok(Self { context, inner })
    }
}

/// The handler's last extractor, when it reads the body (`Json`, `Form`, `Bytes`, …),
/// with the context, and with `FINGERPRINT` the fingerprint of the query and body (read
/// whole first and handed on unchanged).
///
/// Parts extractors have their own wrapper, [`LastParts`]: axum's blanket impl for them
/// rules out one impl for both.
#[derive(Debug)]
pub struct Last<T, const FINGERPRINT: bool> {
    /// The runtime and the client.
    pub context: AvoidRepeatContext,
    /// With `FINGERPRINT`, the fingerprint of the query and body.
    pub fingerprint: Option<Fingerprint>,
    /// What the handler's own extractor produced.
    pub inner: T,
}

impl<S, T, const FINGERPRINT: bool> FromRequest<S> for Last<T, FINGERPRINT>
where
    S: Send + Sync,
    T: FromRequest<S>,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let context = AvoidRepeatContext::new(ClientRequest::from_request(&request));
        let (request, fingerprint) = if FINGERPRINT {
            let (request, fingerprint) = fingerprint_payload(request).await?;
            (request, Some(fingerprint))
        } else {
            (request, None)
        };
        let inner = T::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self {
            context,
            fingerprint,
            inner,
        })
    }
}

/// The handler's last extractor, when it reads no body (`Path`, `Query`, …), with the
/// context and the fingerprint of the query and body.
#[derive(Debug)]
pub struct LastParts<T> {
    /// The runtime and the client.
    pub context: AvoidRepeatContext,
    /// The fingerprint of the query and body.
    pub fingerprint: Fingerprint,
    /// What the handler's own extractor produced.
    pub inner: T,
}

impl<S, T> FromRequest<S> for LastParts<T>
where
    S: Send + Sync,
    T: FromRequestParts<S>,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let context = AvoidRepeatContext::new(ClientRequest::from_request(&request));
        let (request, fingerprint) = fingerprint_payload(request).await?;
        let (mut parts, _body) = request.into_parts();
        let inner = T::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self {
            context,
            fingerprint,
            inner,
        })
    }
}

/// The context and the fingerprint of the query and body, for a handler without
/// arguments.
#[derive(Debug)]
pub struct Payload {
    /// The runtime and the client.
    pub context: AvoidRepeatContext,
    /// The fingerprint of the query and body.
    pub fingerprint: Fingerprint,
}

impl<S: Send + Sync> FromRequest<S> for Payload {
    type Rejection = Response;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let context = AvoidRepeatContext::new(ClientRequest::from_request(&request));
        let (_, fingerprint) = fingerprint_payload(request).await?;
        Ok(Self {
            context,
            fingerprint,
        })
    }
}

/// Reads the body whole and fingerprints it with the query; gives back the request with
/// the same body.
pub(crate) async fn fingerprint_payload(
    request: Request,
) -> Result<(Request, Fingerprint), Response> {
    let html = prefers_html(request.headers());
    let idem = Idem::from_extensions(request.extensions()).ok();
    let (parts, reading) = read_whole(request);
    match reading.await {
        Ok(body) => {
            let fingerprint = Fingerprint::of([parts.uri.query().unwrap_or("").as_bytes(), &body]);
            Ok((Request::from_parts(parts, Body::from(body)), fingerprint))
        }
        Err(rejection) => {
            let rejection = rejection.with_html(html);
            Err(match idem {
                Some(idem) => idem.respond(rejection),
                None => rejection.into_response(),
            })
        }
    }
}

/// Runs an annotated handler's body under its guard.
///
/// An `async move` block rather than an `async fn`, so that the future (boxed by axum for
/// every request) holds its arguments once, not twice.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn's future would hold its arguments twice"
)]
pub fn run<F, R>(
    context: AvoidRepeatContext,
    spec: &'static Spec,
    payload: Option<Fingerprint>,
    handler: F,
) -> impl Future<Output = Response>
where
    F: Future<Output = R> + Send + 'static,
    R: IntoResponse,
{
    async move {
        let html = context.html();
        let (idem, client) = match context.resolve() {
            Ok(resolved) => resolved,
            Err(response) => return *response,
        };
        let key = key_for(&idem, spec.handler, &client, payload.as_ref());
        let guarded = guard(
            &idem,
            &spec.settings,
            spec.handler,
            key,
            html,
            || async move { Ok::<_, Infallible>(handler.await.into_response()) },
        );
        match guarded.await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}
