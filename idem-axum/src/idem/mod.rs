//! [`Idem`]: the runtime every guard works through — the store, who the client is, what
//! to do when the store fails, how rejections look — with its builder and [`IdemLayer`],
//! which makes it available to the guards of a router.

mod builder;
pub(crate) mod handlers;
mod layer;
mod store;

use std::fmt;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use idem_core::{Key, Store, StoreError, throttled};

pub use self::builder::IdemBuilder;
pub use self::handlers::Drained;
use self::handlers::Handlers;
pub use self::layer::{IdemLayer, IdemService};
pub use self::store::IdemStore;
pub(crate) use self::store::OnStore;
use crate::StoreFailure;
use crate::idempotency::RecordKeys;
use crate::identity::{ClientId, ClientRequest, IdentifyClient, IdentifyError};
use crate::rejection::{Rejection, RejectionKind};

/// The runtime of idem's guards.
///
/// Build one per application, install it with [`Idem::layer`], and every guard below it
/// (`#[avoid_repeat]`, [`AvoidRepeatLayer`](crate::AvoidRepeatLayer), …) finds it. A guard
/// that runs without it answers 500 with a message naming the missing layer; it never
/// panics.
///
/// ```
/// use axum::{Router, routing::post};
/// use idem_axum::{Idem, MemoryStore, identity::ClientHeader};
///
/// let idem = Idem::builder()
///     .with_store(MemoryStore::new())
///     .with_client_identity(ClientHeader::new(http::HeaderName::from_static("x-user-id")))
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
    store: IdemStore,
    client_identity: Box<dyn IdentifyClient>,
    namespace: String,
    store_failure: StoreFailure,
    responder: Option<Box<Responder>>,
    handlers: Handlers,
}

impl fmt::Debug for Idem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idem")
            .field("store", &self.inner.store)
            .field("client_identity", &self.inner.client_identity)
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
    /// [`MemoryStore`](crate::MemoryStore).
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
        IdemLayer::new(self.clone())
    }

    /// The store.
    pub fn store(&self) -> &IdemStore {
        &self.inner.store
    }

    /// What guards do when the store fails.
    pub fn store_failure(&self) -> StoreFailure {
        self.inner.store_failure
    }

    /// Lets the guarded handlers that run end, for at most `grace`, and refuses every new
    /// guarded request meanwhile and after (503
    /// [`ShuttingDown`](crate::RejectionKind::ShuttingDown), `Retry-After: 1`).
    ///
    /// Await it once `axum::serve(..).with_graceful_shutdown(..)` has returned, before the
    /// process exits. axum's graceful shutdown waits for the requests whose clients are
    /// still connected, but not for a guarded handler whose client went away: the guard
    /// let it run on because it may already have committed. Cut off by the process's exit,
    /// its record would be left in progress, and the client's retry would run it again
    /// once the record's lease ran out. The drain also waits for a response still being
    /// stored after a store outage.
    ///
    /// ```no_run
    /// # async fn run() -> std::io::Result<()> {
    /// # async fn stop_signal() {}
    /// use std::time::Duration;
    /// let idem = idem_axum::Idem::builder().build();
    /// let app = axum::Router::new().layer(idem.layer());
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    /// axum::serve(listener, app)
    ///     .with_graceful_shutdown(stop_signal()) // e.g. SIGTERM, with tokio::signal
    ///     .await?;
    /// let drained = idem.shutdown(Duration::from_secs(20)).await;
    /// assert_eq!(drained.unfinished, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self, grace: std::time::Duration) -> Drained {
        self.inner.handlers.drain(grace).await
    }

    /// How many guarded handlers run now whose client went away: the figure
    /// [`IdemBuilder::with_detached_limit`] bounds.
    pub fn detached_handlers(&self) -> usize {
        self.inner.handlers.detached()
    }

    pub(crate) fn handlers(&self) -> &Handlers {
        &self.inner.handlers
    }

    /// Turns a rejection into the response the client gets: the custom responder's, or
    /// the default rendering.
    pub(crate) fn respond(&self, rejection: Rejection) -> Response {
        match &self.inner.responder {
            Some(responder) => responder(rejection),
            None => rejection.into_response(),
        }
    }

    /// The client of `request`, or the rejection for a client that cannot be told: of
    /// kind [`MissingClientIdentity`](RejectionKind::MissingClientIdentity) (400) or
    /// [`ClientIdentityUnavailable`](RejectionKind::ClientIdentityUnavailable) (500).
    pub(crate) fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, Rejection> {
        self.inner
            .client_identity
            .identify(request)
            .map_err(|error| match error {
                IdentifyError::Missing(why) => {
                    Rejection::new(RejectionKind::MissingClientIdentity, why)
                }
                IdentifyError::Unavailable(why) => {
                    throttled::error!(%why, "idem: cannot identify clients");
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
                crate::outcome::store_error(false);
                throttled::warn!(idem.outcome = "store_error", %error, "idem: {what}: refused (fail closed)");
                Err(Rejection::new(
                    RejectionKind::StoreUnavailable,
                    "protection against duplicate requests is unavailable right now; please retry shortly",
                )
                .with_retry_after(std::time::Duration::from_secs(1)))
            }
            StoreFailure::FailOpen => {
                crate::outcome::store_error(true);
                throttled::warn!(idem.outcome = "store_error", %error, "idem: {what}: let through unguarded (fail open)");
                Ok(())
            }
        }
    }

    /// The store keys of this runtime's records, from what a user sees of them: for an
    /// operator who looks a record up or removes it.
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().with_namespace("shop").build();
    /// assert_eq!(idem.record_keys().namespace(), "shop");
    /// ```
    pub fn record_keys(&self) -> RecordKeys {
        RecordKeys::new(self.inner.namespace.as_str())
    }

    /// The namespace every store key of this runtime is hashed with.
    pub(crate) fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// A store key in this runtime's namespace, hashed from `parts`.
    pub(crate) fn key(&self, parts: &[&[u8]]) -> Key {
        Key::hashed(std::iter::once(self.inner.namespace.as_bytes()).chain(parts.iter().copied()))
    }
}
