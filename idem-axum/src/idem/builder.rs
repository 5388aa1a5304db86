//! [`IdemBuilder`]: the settings of an [`Idem`].

use std::fmt;
use std::sync::Arc;

use axum::response::Response;
use idem_core::{AnyStore, MemoryStore, Store};

use super::{Idem, Inner, Responder};
use crate::StoreFailure;
use crate::client::{IdentifyClient, PeerIp};
use crate::rejection::Rejection;

/// Settings for an [`Idem`]; made by [`Idem::builder`].
pub struct IdemBuilder {
    store: Option<AnyStore>,
    client_identity: Box<dyn IdentifyClient>,
    namespace: String,
    store_failure: StoreFailure,
    responder: Option<Box<Responder>>,
}

impl Default for IdemBuilder {
    fn default() -> Self {
        Self {
            store: None,
            client_identity: Box::new(PeerIp),
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
            .field("client_identity", &self.client_identity)
            .field("namespace", &self.namespace)
            .field("store_failure", &self.store_failure)
            .finish_non_exhaustive()
    }
}

impl IdemBuilder {
    /// The store (default: a new [`MemoryStore`]). Use a
    /// [`RedisStore`](idem_redis::RedisStore) when the application runs as several
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
    ///     .with_client_identity(idem_axum::client::ClientCookie::new("session"))
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
                client_identity: self.client_identity,
                namespace: self.namespace,
                store_failure: self.store_failure,
                responder: self.responder,
            }),
        }
    }
}
