//! [`AvoidRepeatLayer`]: the anti-repeat window for a route, as a tower layer.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use idem_core::Store;

use super::window::{Handler, fingerprint_payload, in_window, key_for};
use super::{Release, RepeatBy, Settings};
use crate::future::{Inner, ResponseFuture};
use crate::guard::GuardContext;
use crate::idem::OnStore;
use crate::identity::{ClientId, ClientRequest};
use crate::outcome::{self, Guard, Reporter};
use idem_core::payload::PayloadFingerprint;

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
                by: RepeatBy::default(),
                message: None,
                payload: PayloadFingerprint::Raw,
                #[cfg(feature = "grpc")]
                grpc_methods: crate::grpc::GrpcMethods::NONE,
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

    /// What of the body counts with [`RepeatBy::ClientAndBody`] (default
    /// [`PayloadFingerprint::Raw`], the bytes as sent): canonical JSON, so that a client
    /// that orders its keys otherwise sends the same body; selected JSON fields, to leave
    /// a timestamp out. The choice `IdempotencyLayer` and the run-once API take too.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use idem_axum::payload::PayloadFingerprint;
    /// let layer = idem_axum::AvoidRepeatLayer::new(Duration::from_secs(30))
    ///     .with_repeat_by(idem_axum::RepeatBy::ClientAndBody)
    ///     .with_payload_fingerprint(PayloadFingerprint::CanonicalJson);
    /// ```
    pub fn with_payload_fingerprint(mut self, payload: PayloadFingerprint) -> Self {
        Arc::make_mut(&mut self.settings).payload = payload;
        self
    }

    /// What makes two requests the same (default [`RepeatBy::Client`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let layer = idem_axum::AvoidRepeatLayer::new(Duration::from_secs(30))
    ///     .with_repeat_by(idem_axum::RepeatBy::ClientAndBody);
    /// ```
    pub fn with_repeat_by(mut self, by: RepeatBy) -> Self {
        Arc::make_mut(&mut self.settings).by = by;
        self
    }

    define_with_grpc_methods!(
        /// The gRPC methods guarded, by their full path (`/payments.Payments/Pay`); default
        /// none. Every other gRPC call passes through untouched, streaming ones included (see
        /// [`grpc`](crate::grpc)). Each method has a window of its own.
        ///
        /// ```
        /// # use std::time::Duration;
        /// let layer = idem_axum::AvoidRepeatLayer::new(Duration::from_secs(30))
        ///     .with_grpc_methods(["/payments.Payments/Pay"]);
        /// ```
    );

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

/// Its 409 for a repeat, and the refusals before it.
#[cfg(feature = "openapi")]
#[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
impl crate::openapi::DocumentedGuard for AvoidRepeatLayer {
    fn guard_doc(&self) -> crate::openapi::GuardDoc {
        crate::openapi::GuardDoc::new(self.settings.clone())
    }
}

define_guard_service!(
    /// Guards `inner` with `layer`'s settings.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem_axum::{AvoidRepeatLayer, avoid_repeat::AvoidRepeat};
    /// let service = AvoidRepeat::new(axum::Router::<()>::new(), AvoidRepeatLayer::new(Duration::from_secs(30)));
    /// ```
    AvoidRepeatLayer => AvoidRepeat
);

impl_guard_service!(AvoidRepeat, avoid_repeat, |settings, request| settings
    .takes(request));

/// Answers one request to a guarded route.
///
/// The client is told from the request's head before any future: a request refused there
/// is answered at once. The guarded request's future, on the runtime's store typed and
/// boxed per request, owns the request and the service once, and hands the request to
/// the service in place (`tests::the_per_request_future_stays_small`).
fn avoid_repeat<S: Inner>(
    settings: Arc<Settings>,
    inner: S,
    request: Request,
) -> ResponseFuture<S::Future> {
    let view = ClientRequest::from_request(&request);
    let (guard, client) = match GuardContext::open(&view) {
        Ok(opened) => opened,
        Err(refusal) => return ResponseFuture::ready(Ok(refusal)),
    };
    let store = guard.store().clone();
    store.typed(Guarded {
        handler_id: handler_id(&view),
        reporter: Reporter::of(Guard::AvoidRepeat, &view),
        settings,
        guard,
        client,
        inner,
        request,
    })
}

/// A guarded request, to be answered on the runtime's store once it is typed.
struct Guarded<S> {
    settings: Arc<Settings>,
    guard: GuardContext,
    client: ClientId,
    handler_id: String,
    reporter: Reporter,
    inner: S,
    request: Request,
}

impl<S: Inner> OnStore for Guarded<S> {
    type Output = ResponseFuture<S::Future>;

    fn on<St: Store + Clone>(self, store: St, waits: bool) -> Self::Output {
        ResponseFuture::guarded(self.answer(store), waits)
    }
}

impl<S: Inner> Guarded<S> {
    /// The answer: the payload fingerprinted if the key includes it, then the handler in
    /// the window.
    fn answer<St: Store + Clone>(
        self,
        store: St,
    ) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
        let Self {
            settings,
            guard,
            client,
            handler_id,
            reporter,
            mut inner,
            mut request,
        } = self;
        async move {
            let payload = match settings.by {
                RepeatBy::Client => None,
                RepeatBy::ClientAndBody => {
                    match fingerprint_payload(&mut request, &settings.payload).await {
                        Ok(fingerprint) => Some(fingerprint),
                        Err(rejection) => return Ok(guard.refuse(rejection)),
                    }
                }
            };
            let key = key_for(&guard, &handler_id, &client, payload.as_ref());
            let start = || inner.call(std::mem::take(&mut request));
            let handler = Handler {
                id: &handler_id,
                reporter,
            };
            in_window(store, &guard, &settings, handler, &client, key, start).await
        }
    }
}

/// The handler identity of a route: its method and matched path (`POST /orders/{id}`),
/// or, outside a router's routes, the path requested.
fn handler_id(request: &ClientRequest<'_>) -> String {
    let path = outcome::matched_route(request).unwrap_or(request.uri().path());
    format!("{} {path}", request.method().as_str())
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    /// The future of a guarded request on `store`, as the layer boxes it.
    fn guarded_future_size<St: Store + Clone>(store: St) -> usize {
        let guarded = Guarded {
            settings: AvoidRepeatLayer::new(Duration::from_secs(1)).settings,
            guard: GuardContext::new(crate::Idem::new(idem_core::MemoryStore::new()), false),
            client: ClientId::new("client"),
            handler_id: "POST /orders".to_owned(),
            reporter: Reporter::named(Guard::AvoidRepeat, "/orders"),
            inner: axum::Router::new(),
            request: Request::new(Body::empty()),
        };
        std::mem::size_of_val(&guarded.answer(store))
    }

    /// The layer's per-request future, boxed for every guarded request, is measured with
    /// `size_of_val` in a debug build with a `Router` as the inner service, on the store
    /// it is typed for: 856 bytes on `MemoryStore` (912 with the feature `metrics`, whose
    /// reporter holds the route's label; 848 before the reporter), under glibc's 1,032-byte
    /// per-thread cache. A `RedisStore` call's future is larger, and sizes only the
    /// requests on Redis.
    #[test]
    fn the_per_request_future_stays_small() {
        let size = guarded_future_size(idem_core::MemoryStore::new());
        assert!(size <= 920, "the per-request future grew to {size} bytes");
    }
}
