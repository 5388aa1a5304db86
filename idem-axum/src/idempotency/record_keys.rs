//! [`RecordKeys`]: the store key of a record, from what a user sees of it, for the people
//! who run the application.

use std::sync::Arc;

use http::Method;
use idem_core::Key;

use crate::identity::ClientId;

/// Where each kind of record's keys are hashed apart from the others'.
pub(crate) mod tag {
    /// [`IdempotencyLayer`](crate::IdempotencyLayer)'s records, by client.
    pub(crate) const IDEMPOTENCY: &[u8] = b"idempotency";
    /// [`IdempotencyLayer`](crate::IdempotencyLayer)'s records under
    /// [`RecordScope::Shared`](super::super::RecordScope::Shared).
    pub(crate) const SHARED_IDEMPOTENCY: &[u8] = b"idempotency:shared";
    /// The records of form submissions with replay.
    pub(crate) const FORM_SUBMISSION: &[u8] = b"form_token:submission";
}

/// The key a record of `tag` has in the store of a runtime whose namespace is
/// `namespace`: the hash of the namespace, the tag, the client (if the record is one
/// client's), the method, the route and the key the client sent. The one derivation, used
/// by the guards and by [`RecordKeys`] alike.
pub(crate) fn derive(
    namespace: &str,
    tag: &[u8],
    client: Option<&ClientId>,
    method: &Method,
    route: &str,
    key: &str,
) -> Key {
    let (namespace, method) = (namespace.as_bytes(), method.as_str().as_bytes());
    let (route, key) = (route.as_bytes(), key.as_bytes());
    match client {
        Some(client) => Key::hashed([namespace, tag, client.as_bytes(), method, route, key]),
        None => Key::hashed([namespace, tag, method, route, key]),
    }
}

/// The store keys of the records idem-axum's guards keep, from what a user, a log line or
/// a support ticket shows of them: for an operator who looks a record up and removes it
/// ([`RecordStore::record_state`](idem_core::RecordStore::record_state),
/// [`RecordStore::remove_record`](idem_core::RecordStore::remove_record)), a customer's
/// payment stuck in progress, say. A record's key is a hash, so it cannot be read back;
/// it can only be derived again, as here.
///
/// A record belongs to:
/// - the runtime's namespace ([`IdemBuilder::with_namespace`](crate::IdemBuilder::with_namespace),
///   `"default"` unless set): [`Idem::record_keys`](crate::Idem::record_keys) gives the
///   keys of a runtime, [`RecordKeys::new`] those of a namespace, for a tool that runs
///   apart from the application;
/// - the route, with the method: the route's path as the router declares it
///   (`/orders/{id}`, the full path under `nest`); for a layer outside a router, the
///   request's path; for a gRPC method, its path (`/shop.Orders/Create`, method `POST`);
/// - the client, as the runtime's [client identity](crate::identity) spells it (the IP
///   address as text for `PeerIp` and `TrustedProxyIp`, the header's or cookie's value,
///   the extension's `Display`); no client under
///   [`RecordScope::Shared`](super::RecordScope::Shared);
/// - the key the client sent (`Idempotency-Key`, or what the layer's key function found),
///   or the form token it posted.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_axum::store::StoreError> {
/// use http::Method;
/// use idem_axum::idempotency::RecordKeys;
/// use idem_axum::identity::ClientId;
/// use idem_axum::store::RecordStore;
///
/// let idem = idem_axum::Idem::builder().with_namespace("shop").build();
/// let keys = RecordKeys::new("shop");
/// let client = ClientId::new("user-42");
/// let record = keys.idempotency(&Method::POST, "/payments", Some(&client), "pay-7");
/// assert_eq!(record, idem.record_keys().idempotency(&Method::POST, "/payments", Some(&client), "pay-7"));
///
/// if idem.store().record_state(&record).await?.is_some() {
///     idem.store().remove_record(&record).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordKeys {
    namespace: Arc<str>,
}

impl RecordKeys {
    /// The keys of the records of a runtime whose namespace is `namespace`.
    ///
    /// ```
    /// let keys = idem_axum::idempotency::RecordKeys::new("default");
    /// assert_eq!(keys.namespace(), "default");
    /// ```
    pub fn new(namespace: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The record [`IdempotencyLayer`](crate::IdempotencyLayer) begins for a request to
    /// `route` with `method` carrying `key`: `client`'s record, or, with `None`, the
    /// record of a layer under [`RecordScope::Shared`](super::RecordScope::Shared).
    ///
    /// ```
    /// use http::Method;
    /// use idem_axum::identity::ClientId;
    /// let keys = idem_axum::idempotency::RecordKeys::new("default");
    /// let client = ClientId::new("203.0.113.7");
    /// let ours = keys.idempotency(&Method::POST, "/orders", Some(&client), "k-1");
    /// assert_ne!(ours, keys.idempotency(&Method::POST, "/orders", None, "k-1"));
    /// assert_ne!(ours, keys.idempotency(&Method::PUT, "/orders", Some(&client), "k-1"));
    /// ```
    pub fn idempotency(
        &self,
        method: &Method,
        route: &str,
        client: Option<&ClientId>,
        key: &str,
    ) -> Key {
        let tag = match client {
            Some(_) => tag::IDEMPOTENCY,
            None => tag::SHARED_IDEMPOTENCY,
        };
        derive(&self.namespace, tag, client, method, route, key)
    }

    /// The record of a form submission with replay
    /// ([`VerifyFormTokenLayer::with_replay`](crate::VerifyFormTokenLayer::with_replay)):
    /// `token` posted by `client` to `route` with `method`.
    ///
    /// ```
    /// use http::Method;
    /// use idem_axum::identity::ClientId;
    /// let keys = idem_axum::idempotency::RecordKeys::new("default");
    /// let client = ClientId::new("session-9");
    /// let submission = keys.form_submission(&Method::POST, "/orders", &client, "k3JhbmRvbQ");
    /// assert_ne!(submission, keys.idempotency(&Method::POST, "/orders", Some(&client), "k3JhbmRvbQ"));
    /// ```
    pub fn form_submission(
        &self,
        method: &Method,
        route: &str,
        client: &ClientId,
        token: &str,
    ) -> Key {
        let tag = tag::FORM_SUBMISSION;
        derive(&self.namespace, tag, Some(client), method, route, token)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::body::Body;
    use axum::routing::{get, post};
    use http::{HeaderName, Method, Request, StatusCode};
    use idem_core::{RecordState, RecordStore};
    use tower::ServiceExt;

    use crate::identity::{ClientHeader, ClientId};
    use crate::{FormToken, FormTokenConfig, Idem, IdempotencyLayer, VerifyFormTokenLayer};

    const CLIENT: HeaderName = HeaderName::from_static("x-client");

    /// A router nested under `/api` whose two guarded routes count their runs: an
    /// idempotent `POST /api/orders/{id}` and a form post `POST /api/checkout` with replay.
    fn app(idem: &Idem, runs: &Arc<AtomicUsize>) -> Router {
        let run = |runs: Arc<AtomicUsize>| {
            move || async move { format!("run {}", runs.fetch_add(1, Ordering::SeqCst) + 1) }
        };
        let api = Router::new()
            .route(
                "/orders/{id}",
                post(run(Arc::clone(runs))).route_layer(IdempotencyLayer::new()),
            )
            .route(
                "/checkout",
                post(run(Arc::clone(runs)))
                    .route_layer(VerifyFormTokenLayer::new().with_replay(true)),
            )
            .route(
                "/form",
                get(|token: FormToken| async move { token.value().to_owned() }),
            );
        Router::new().nest("/api", api).layer(idem.layer())
    }

    async fn send(app: &Router, request: http::request::Builder) -> (StatusCode, String) {
        let request = request
            .header(&CLIENT, "alice")
            .body(Body::empty())
            .unwrap();
        let answer = app.clone().oneshot(request).await.unwrap();
        let status = answer.status();
        let body = axum::body::to_bytes(answer.into_body(), 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// Asserts that `record` is there, completed.
    async fn assert_completed(store: &crate::IdemStore, record: &idem_core::Key) {
        let state = store.record_state(record).await.unwrap();
        let completed = matches!(state, Some(RecordState::Completed { .. }));
        assert!(completed, "{state:?}");
    }

    /// The keys derived from the route as declared, the client and the key or token find
    /// the records the guards began; removed, each runs its handler again.
    #[tokio::test]
    async fn the_derived_keys_are_the_keys_of_the_guards_records() {
        let idem = Idem::builder()
            .with_namespace("shop")
            .with_client_identity(ClientHeader::new(CLIENT))
            .build();
        let runs = Arc::new(AtomicUsize::new(0));
        let app = app(&idem, &runs);
        let (store, keys) = (idem.store(), idem.record_keys());
        let alice = ClientId::new("alice");

        let pay = || Request::post("/api/orders/7").header("idempotency-key", "pay-7");
        assert_eq!(send(&app, pay()).await, (StatusCode::OK, "run 1".into()));
        let order = keys.idempotency(&Method::POST, "/api/orders/{id}", Some(&alice), "pay-7");
        assert_completed(store, &order).await;
        assert_eq!(send(&app, pay()).await.1, "run 1", "replayed");
        assert!(store.remove_record(&order).await.unwrap());
        assert_eq!(send(&app, pay()).await.1, "run 2", "run again once removed");

        let (_, token) = send(&app, Request::get("/api/form")).await;
        let post =
            || Request::post("/api/checkout").header(FormTokenConfig::new().header_name(), &token);
        assert_eq!(send(&app, post()).await.1, "run 3");
        let submission = keys.form_submission(&Method::POST, "/api/checkout", &alice, &token);
        assert_completed(store, &submission).await;
        assert_eq!(send(&app, post()).await.1, "run 3", "replayed");
        assert!(store.remove_record(&submission).await.unwrap());
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }
}
