//! [`IdemBuilder`]: the settings of an [`Idem`].

use std::fmt;
use std::sync::Arc;

use axum::response::Response;
use idem_core::{MemoryStore, Store};

use super::handlers::{DEFAULT_DETACHED_LIMIT, Handlers};
use super::{Idem, IdemStore, Inner, Responder};
use crate::StoreFailure;
use crate::identity::{IdentifyClient, PeerIp};
use crate::rejection::Rejection;

/// Settings for an [`Idem`]; made by [`Idem::builder`].
pub struct IdemBuilder {
    store: Option<IdemStore>,
    client_identity: Box<dyn IdentifyClient>,
    namespace: String,
    store_failure: StoreFailure,
    responder: Option<Box<Responder>>,
    detached_limit: usize,
}

impl Default for IdemBuilder {
    fn default() -> Self {
        Self {
            store: None,
            client_identity: Box::new(PeerIp),
            namespace: "default".to_owned(),
            store_failure: StoreFailure::default(),
            responder: None,
            detached_limit: DEFAULT_DETACHED_LIMIT,
        }
    }
}

impl fmt::Debug for IdemBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdemBuilder")
            .field("store", &self.store)
            .field("client_identity", &self.client_identity)
            .field("namespace", &self.namespace)
            .field("store_failure", &self.store_failure)
            .field("detached_limit", &self.detached_limit)
            .finish_non_exhaustive()
    }
}

impl IdemBuilder {
    /// The store (default: a new [`MemoryStore`]). Use a [`RedisStore`] (feature `redis`)
    /// when the application runs as several instances: a memory store only sees its own
    /// process's requests. Any other [`Store`] works too, a SQL store of `idem-sqlx` or one
    /// of your own, with or without the feature.
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().with_store(idem_axum::MemoryStore::new()).build();
    /// ```
    ///
    #[cfg_attr(feature = "redis", doc = "[`RedisStore`]: crate::RedisStore")]
    #[cfg_attr(
        not(feature = "redis"),
        doc = "[`RedisStore`]: https://docs.rs/idem-axum/latest/idem_axum/struct.RedisStore.html"
    )]
    pub fn with_store<S: Store>(mut self, store: S) -> Self {
        self.store = Some(IdemStore::new(store));
        self
    }

    /// Who the client is (default [`PeerIp`]). See [`identity`](crate::identity).
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder()
    ///     .with_client_identity(idem_axum::identity::ClientCookie::new("session"))
    ///     .build();
    /// ```
    pub fn with_client_identity<K: IdentifyClient>(mut self, client_identity: K) -> Self {
        self.client_identity = Box::new(client_identity);
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

    /// How many guarded handlers may run on after their client went away (default
    /// 1,024): while more do, new guarded requests are refused with 503
    /// [`Busy`](crate::RejectionKind::Busy) and `Retry-After`.
    ///
    /// A guard that has taken its key runs the handler to its end even when the client
    /// disconnects, since the handler may already have committed. Nothing around the
    /// router counts such a handler: a concurrency limit (tower's `ConcurrencyLimitLayer`)
    /// frees its slot as soon as the request is dropped. This bound is what keeps a flood
    /// of abandoned requests from running an unbounded number of handlers at once; with a
    /// concurrency limit of `n` around the router and a limit of 0 (no guarded request
    /// let in while a detached handler runs), at most `n` guarded handlers run at once. [`Idem::detached_handlers`] (and, with the `metrics`
    /// feature, the gauge `idem_detached_handlers`) says how many run now.
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().with_detached_limit(64).build();
    /// ```
    pub fn with_detached_limit(mut self, limit: usize) -> Self {
        self.detached_limit = limit;
        self
    }

    /// The runtime.
    ///
    /// ```
    /// let idem = idem_axum::Idem::builder().build();
    /// ```
    pub fn build(self) -> Idem {
        crate::outcome::register_series();
        Idem {
            inner: Arc::new(Inner {
                store: self
                    .store
                    .unwrap_or_else(|| IdemStore::new(MemoryStore::new())),
                client_identity: self.client_identity,
                namespace: self.namespace,
                store_failure: self.store_failure,
                responder: self.responder,
                handlers: Handlers::new(self.detached_limit),
            }),
        }
    }
}
