//! What `#[avoid_repeat]` expands to calls: hidden, reached through `idem_axum::__private`.
//!
//! The attribute keeps the handler's arity (so `#[axum::debug_handler]` works above it as
//! well as below): it wraps one of the handler's own arguments in a type that also reads
//! the [`AvoidRepeatContext`] — the runtime and the client — and, when the key includes
//! the payload, the query and body read whole, which [`run`] fingerprints as the handler's
//! [`Spec`] chooses. Only a handler without arguments
//! gains one. The original body moves into an inner function whose future [`run`] drives
//! under the guard.

use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::Uri;
use http::request::Parts;
use idem_core::store::sharing_one_timer;
use idem_core::{Key, Store};

use super::window::{Handler, in_window, key_for, payload_fingerprint};
use super::{Release, RepeatBy, Settings};
use crate::guard::GuardContext;
use crate::idem::OnStore;
use crate::identity::{ClientId, ClientRequest};
use crate::outcome::{Guard, Reporter};
use crate::rejection::Rejection;
use crate::request_body::read_back;
use idem_core::payload::PayloadFingerprint;

/// One annotated handler's settings, a `static` in the expansion.
#[derive(Debug)]
pub struct Spec {
    handler: &'static str,
    settings: Settings,
    /// With `payload = [...]`, the JSON pointers of the fields that count.
    fields: &'static [&'static str],
    /// Those fields as a [`PayloadFingerprint`], made by the first request.
    counted_fields: OnceLock<PayloadFingerprint>,
}

/// What of the body counts with `by = "client+body"`: `payload = "..."` or `[...]`.
#[derive(Debug, Clone, Copy)]
pub enum Counted {
    /// `"raw"`, the default: the bytes as they came.
    Raw,
    /// `"canonical_json"`: the body as canonical JSON.
    CanonicalJson,
    /// `["/pointer", ...]`: only these fields of a JSON body.
    Fields(&'static [&'static str]),
}

impl Spec {
    /// The settings `#[avoid_repeat(...)]` was given, checked by the macro.
    pub const fn new(
        handler: &'static str,
        timeout_ms: u64,
        release: Release,
        by: RepeatBy,
        message: Option<&'static str>,
        counted: Counted,
    ) -> Self {
        Self {
            handler,
            fields: match counted {
                Counted::Fields(fields) => fields,
                Counted::Raw | Counted::CanonicalJson => &[],
            },
            counted_fields: OnceLock::new(),
            settings: Settings {
                timeout: Duration::from_millis(timeout_ms),
                release,
                by,
                message: match message {
                    Some(message) => Some(std::borrow::Cow::Borrowed(message)),
                    None => None,
                },
                payload: match counted {
                    Counted::CanonicalJson => PayloadFingerprint::CanonicalJson,
                    Counted::Raw | Counted::Fields(_) => PayloadFingerprint::Raw,
                },
                #[cfg(feature = "grpc")]
                grpc_methods: crate::grpc::GrpcMethods::NONE,
            },
        }
    }

    /// What of the body counts.
    fn counted(&self) -> &PayloadFingerprint {
        if self.fields.is_empty() {
            return &self.settings.payload;
        }
        self.counted_fields
            .get_or_init(|| PayloadFingerprint::json_fields(self.fields.iter().copied()))
    }
}

/// A request's query and body, read whole (and handed on unchanged), for [`run`] to
/// fingerprint as the handler's [`Spec`] chooses.
#[derive(Debug)]
pub struct ReadPayload {
    uri: Uri,
    body: Bytes,
}

/// The guard's opening for a request — the runtime and the client — or the answer when
/// either is missing.
#[derive(Debug)]
pub struct AvoidRepeatContext {
    /// The refusal boxed: it is the rare path (`tests::the_context_stays_small`).
    opened: Result<(GuardContext, ClientId), Box<Response>>,
}

impl AvoidRepeatContext {
    pub(crate) fn new(request: ClientRequest<'_>) -> Self {
        Self {
            opened: GuardContext::open(&request).map_err(Box::new),
        }
    }

    /// The response for `rejection`: through the runtime's responder, or, when the
    /// request could not be opened, the answer for that.
    pub(crate) fn refuse(self, rejection: Rejection) -> Response {
        match self.opened {
            Ok((guard, _)) => guard.refuse(rejection),
            Err(response) => *response,
        }
    }

    /// The context of `request`, and its query and body, which is read whole and handed
    /// back unchanged.
    async fn with_payload(mut request: Request) -> Result<(Self, Request, ReadPayload), Response> {
        let context = Self::new(ClientRequest::from_request(&request));
        match read_back(&mut request, None).await {
            Ok(body) => {
                let uri = request.uri().clone();
                Ok((context, request, ReadPayload { uri, body }))
            }
            Err(rejection) => Err(context.refuse(rejection)),
        }
    }

    pub(crate) fn open(self) -> Result<(GuardContext, ClientId), Box<Response>> {
        self.opened
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

/// The handler's last extractor, with the context, and with `PAYLOAD` the query and body
/// (read whole first and handed on unchanged).
#[derive(Debug)]
pub struct Last<T, const PAYLOAD: bool> {
    /// The runtime and the client.
    pub context: AvoidRepeatContext,
    /// With `PAYLOAD`, the query and body.
    pub payload: Option<ReadPayload>,
    /// What the handler's own extractor produced.
    pub inner: T,
}

/// The marker of [`Last`]'s extractor impl: `Via<M>` where the handler's own extractor is
/// one by marker `M`. A marker of its own, so the impl does not overlap axum's blanket one
/// for parts extractors.
#[derive(Debug)]
pub struct Via<M>(PhantomData<M>);

/// Generic over axum's extractor marker `M`, so any extractor can be last — one that
/// reads the body (`Json`, `Form`, …) or any `FromRequestParts` type (`Path`, a
/// `CurrentUser` of the application's own, …) — whatever its name.
impl<S, T, M, const PAYLOAD: bool> FromRequest<S, Via<M>> for Last<T, PAYLOAD>
where
    S: Send + Sync,
    T: FromRequest<S, M>,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (context, request, payload) = if PAYLOAD {
            let (context, request, payload) = AvoidRepeatContext::with_payload(request).await?;
            (context, request, Some(payload))
        } else {
            let context = AvoidRepeatContext::new(ClientRequest::from_request(&request));
            (context, request, None)
        };
        let inner = T::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self {
            context,
            payload,
            inner,
        })
    }
}

/// The context and the query and body, for a handler without arguments.
#[derive(Debug)]
pub struct Payload {
    /// The runtime and the client.
    pub context: AvoidRepeatContext,
    /// The query and body.
    pub payload: ReadPayload,
}

impl<S: Send + Sync> FromRequest<S> for Payload {
    type Rejection = Response;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let (context, _, payload) = AvoidRepeatContext::with_payload(request).await?;
        Ok(Self { context, payload })
    }
}

/// Runs an annotated handler's body under its guard.
pub async fn run<F, R>(
    context: AvoidRepeatContext,
    spec: &'static Spec,
    payload: Option<ReadPayload>,
    handler: F,
) -> Response
where
    F: Future<Output = R> + Send + 'static,
    R: IntoResponse,
{
    let (guard, client) = match context.open() {
        Ok(opened) => opened,
        Err(response) => return *response,
    };
    let payload = payload.map(|read| payload_fingerprint(&read.uri, &read.body, spec.counted()));
    let key = key_for(&guard, spec.handler, &client, payload.as_ref());
    let store = guard.store().clone();
    let window = Window {
        guard,
        client,
        key,
        spec,
        handler,
    };
    store.typed(window).await
}

/// An annotated handler, to be run in its window on the runtime's store once it is
/// typed.
struct Window<F> {
    guard: GuardContext,
    client: ClientId,
    key: Key,
    spec: &'static Spec,
    handler: F,
}

impl<F, R> OnStore for Window<F>
where
    F: Future<Output = R> + Send + 'static,
    R: IntoResponse,
{
    /// Boxed, each store's with a size of its own: the handler's future, which holds it,
    /// is boxed by axum per request.
    type Output = Pin<Box<dyn Future<Output = Response> + Send>>;

    fn on<St: Store + Clone>(self, store: St, waits: bool) -> Self::Output {
        let Self {
            guard,
            client,
            key,
            spec,
            handler,
        } = self;
        let window = async move {
            let start = || async move { Ok::<_, Infallible>(handler.await.into_response()) };
            let settings = &spec.settings;
            let handler = Handler {
                id: spec.handler,
                reporter: Reporter::named(Guard::AvoidRepeat, spec.handler),
            };
            match in_window(store, &guard, settings, handler, &client, key, start).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        };
        if waits {
            Box::pin(sharing_one_timer(window))
        } else {
            Box::pin(window)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The context is held in the annotated handler's future, which axum boxes per
    /// request: 48 bytes with the refusal boxed, 128 without.
    #[test]
    fn the_context_stays_small() {
        let size = std::mem::size_of::<AvoidRepeatContext>();
        assert!(size <= 48, "the context grew to {size} bytes");
    }
}
