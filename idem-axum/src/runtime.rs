//! [`Idem`]: the runtime every guard works through — the store, who the client is, what
//! to do when the store fails, how rejections look — and [`IdemLayer`], which makes it
//! available to the guards of a router.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::{IntoResponse, Response};
use idem_core::{AnyStore, Key, MemoryStore, Store, StoreError};
use tower_layer::Layer;
use tower_service::Service;

use crate::client::{ClientId, ClientKeyError, ClientRequest, KeyExtractor, PeerIp};
use crate::rejection::{Rejection, RejectionKind};

/// What a guard does when the store fails (an outage, a timeout, a full `MemoryStore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StoreFailure {
    /// Refuse the request with 503 and `Retry-After: 1`: no duplicate can get through
    /// while the store is down. The default.
    #[default]
    FailClosed,
    /// Let the request through unguarded, logging a warning: the service stays up and
    /// duplicates are possible while the store is down.
    FailOpen,
}

/// The runtime of idem's guards.
///
/// Build one per application, install it with [`Idem::layer`], and every guard below it
/// (`#[avoid_repeat]`, [`AvoidRepeatLayer`](crate::AvoidRepeatLayer), …) finds it. A guard
/// that runs without it answers 500 with a message naming the missing layer; it never
/// panics.
///
/// ```
/// use axum::{Router, routing::post};
/// use idem_axum::{Idem, MemoryStore, client::HeaderKey};
///
/// let idem = Idem::builder()
///     .with_store(MemoryStore::new())
///     .with_client_key(HeaderKey::new(http::HeaderName::from_static("x-user-id")))
///     .build();
/// let app: Router = Router::new()
///     .route("/orders", post(|| async { "created" }))
///     .layer(idem.layer());
/// ```
#[derive(Clone)]
pub struct Idem {
    inner: Arc<Inner>,
}

type Responder = dyn Fn(Rejection) -> Response + Send + Sync;

struct Inner {
    store: AnyStore,
    client_key: Box<dyn KeyExtractor>,
    namespace: String,
    store_failure: StoreFailure,
    responder: Option<Box<Responder>>,
}

impl fmt::Debug for Idem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idem")
            .field("store", &self.inner.store)
            .field("client_key", &self.inner.client_key)
            .field("namespace", &self.inner.namespace)
            .field("store_failure", &self.inner.store_failure)
            .field("custom_responder", &self.inner.responder.is_some())
            .finish()
    }
}

impl Idem {
    /// A runtime on `store` with the default settings.
    ///
    /// ```
    /// let idem = idem_axum::Idem::new(idem_axum::MemoryStore::new());
    /// ```
    pub fn new<S: Store>(store: S) -> Self {
        Self::builder().with_store(store).build()
    }

    /// A builder; without [`with_store`](IdemBuilder::with_store) the store is a fresh
    /// [`MemoryStore`].
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().build();
    /// ```
    pub fn builder() -> IdemBuilder {
        IdemBuilder::default()
    }

    /// The layer that makes this runtime available to the guards of a router.
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().build();
    /// let app: axum::Router = axum::Router::new().layer(idem.layer());
    /// ```
    pub fn layer(&self) -> IdemLayer {
        IdemLayer { idem: self.clone() }
    }

    /// The store.
    pub fn store(&self) -> &AnyStore {
        &self.inner.store
    }

    /// What guards do when the store fails.
    pub fn store_failure(&self) -> StoreFailure {
        self.inner.store_failure
    }

    /// Turns a rejection into the response the client gets: the custom responder's, or
    /// the default rendering.
    pub fn respond(&self, rejection: Rejection) -> Response {
        match &self.inner.responder {
            Some(responder) => responder(rejection),
            None => rejection.into_response(),
        }
    }

    /// The client of `request`, or the rejection for a client that cannot be told.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] of kind [`MissingClientIdentity`](RejectionKind::MissingClientIdentity)
    /// (400) or [`ClientIdentityUnavailable`](RejectionKind::ClientIdentityUnavailable) (500).
    pub fn client_id(&self, request: &ClientRequest<'_>) -> Result<ClientId, Rejection> {
        self.inner
            .client_key
            .extract(request)
            .map_err(|error| match error {
                ClientKeyError::Missing(why) => {
                    Rejection::new(RejectionKind::MissingClientIdentity, why)
                }
                ClientKeyError::Unavailable(why) => {
                    tracing::error!(%why, "idem: cannot identify clients");
                    Rejection::new(RejectionKind::ClientIdentityUnavailable, why)
                }
            })
    }

    /// Applies the store-failure policy to `error`, met while doing `what`: the 503
    /// rejection when the runtime fails closed, `Ok` to go on unguarded when it fails open.
    /// Logged either way.
    pub(crate) fn store_failed(&self, error: &StoreError, what: &str) -> Result<(), Rejection> {
        match self.inner.store_failure {
            StoreFailure::FailClosed => {
                tracing::warn!(idem.outcome = "store_error", %error, "idem: {what}: refused (fail closed)");
                Err(Rejection::new(
                    RejectionKind::StoreUnavailable,
                    "protection against duplicate requests is unavailable right now; please retry shortly",
                )
                .with_retry_after(std::time::Duration::from_secs(1)))
            }
            StoreFailure::FailOpen => {
                tracing::warn!(idem.outcome = "store_error", %error, "idem: {what}: let through unguarded (fail open)");
                Ok(())
            }
        }
    }

    /// A store key in this runtime's namespace, hashed from `parts`.
    pub(crate) fn key(&self, parts: &[&[u8]]) -> Key {
        Key::hashed(std::iter::once(self.inner.namespace.as_bytes()).chain(parts.iter().copied()))
    }

    /// The runtime a layer put in `extensions`, or the rejection that says it is missing.
    pub(crate) fn from_extensions(extensions: &http::Extensions) -> Result<Self, Rejection> {
        extensions.get::<Self>().cloned().ok_or_else(|| {
            tracing::error!("idem: a guard ran without `Idem::layer()` on the router");
            Rejection::new(
                RejectionKind::MissingLayer,
                "idem's runtime is missing: add `.layer(idem.layer())` to the Router, \
                 outside the guarded routes",
            )
        })
    }
}

/// Settings for an [`Idem`]; made by [`Idem::builder`].
pub struct IdemBuilder {
    store: Option<AnyStore>,
    client_key: Box<dyn KeyExtractor>,
    namespace: String,
    store_failure: StoreFailure,
    responder: Option<Box<Responder>>,
}

impl Default for IdemBuilder {
    fn default() -> Self {
        Self {
            store: None,
            client_key: Box::new(PeerIp),
            namespace: "default".to_owned(),
            store_failure: StoreFailure::default(),
            responder: None,
        }
    }
}

impl fmt::Debug for IdemBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdemBuilder")
            .field("store", &self.store)
            .field("client_key", &self.client_key)
            .field("namespace", &self.namespace)
            .field("store_failure", &self.store_failure)
            .finish_non_exhaustive()
    }
}

impl IdemBuilder {
    /// The store (default: a new [`MemoryStore`]). Use a
    /// [`RedisStore`](idem_core::RedisStore) when the application runs as several
    /// instances: a memory store only sees its own process's requests.
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().with_store(idem_axum::MemoryStore::new()).build();
    /// ```
    pub fn with_store<S: Store>(mut self, store: S) -> Self {
        self.store = Some(AnyStore::new(store));
        self
    }

    /// Who the client is (default [`PeerIp`]). See [`client`](crate::client).
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder()
    ///     .with_client_key(idem_axum::client::CookieKey::new("session"))
    ///     .build();
    /// ```
    pub fn with_client_key<K: KeyExtractor>(mut self, client_key: K) -> Self {
        self.client_key = Box::new(client_key);
        self
    }

    /// A prefix hashed into every key (default `default`), so several applications or
    /// versions can share one store without sharing keys.
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().with_namespace("shop-v2").build();
    /// ```
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// What guards do when the store fails (default [`StoreFailure::FailClosed`]).
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder()
    ///     .with_store_failure(idem_axum::StoreFailure::FailOpen)
    ///     .build();
    /// ```
    pub fn with_store_failure(mut self, policy: StoreFailure) -> Self {
        self.store_failure = policy;
        self
    }

    /// Replaces the default rendering of every [`Rejection`].
    ///
    /// ```
    /// use axum::response::IntoResponse;
    ///
    /// let idem = idem_axum::Idem::builder()
    ///     .with_responder(|rejection| (rejection.status(), rejection.detail().to_owned()).into_response())
    ///     .build();
    /// ```
    pub fn with_responder<F>(mut self, responder: F) -> Self
    where
        F: Fn(Rejection) -> Response + Send + Sync + 'static,
    {
        self.responder = Some(Box::new(responder));
        self
    }

    /// The runtime.
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().build();
    /// ```
    pub fn build(self) -> Idem {
        Idem {
            inner: Arc::new(Inner {
                store: self
                    .store
                    .unwrap_or_else(|| AnyStore::new(MemoryStore::new())),
                client_key: self.client_key,
                namespace: self.namespace,
                store_failure: self.store_failure,
                responder: self.responder,
            }),
        }
    }
}

/// Puts an [`Idem`] in every request's extensions, where guards find it. Made by
/// [`Idem::layer`].
#[derive(Debug, Clone)]
pub struct IdemLayer {
    idem: Idem,
}

impl<S> Layer<S> for IdemLayer {
    type Service = IdemService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdemService {
            inner,
            idem: self.idem.clone(),
        }
    }
}

/// The service [`IdemLayer`] makes.
#[derive(Debug, Clone)]
pub struct IdemService<S> {
    inner: S,
    idem: Idem,
}

impl<S> IdemService<S> {
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

impl<S, B> Service<http::Request<B>> for IdemService<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.idem.clone());
        self.inner.call(request)
    }
}
