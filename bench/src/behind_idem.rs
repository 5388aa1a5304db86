//! The `Idem` the in-process benches guard their routes with.

use axum::Router;
use axum::http::HeaderName;
use idem_axum::Idem;
use idem_axum::identity::ClientHeader;
use idem_axum::store::Store;

/// The header that names the client in the benches' requests, so that a bench decides
/// whether a request comes from a new client or from one seen before.
pub const CLIENT: HeaderName = HeaderName::from_static("x-client");

/// An `Idem` on `store` that tells clients apart by [`CLIENT`].
pub fn bench_idem<S: Store>(store: S) -> Idem {
    Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build()
}

/// `routes` behind [`bench_idem`] on `store`.
pub fn behind_idem<S: Store>(store: S, routes: Router) -> Router {
    routes.layer(bench_idem(store).layer())
}
