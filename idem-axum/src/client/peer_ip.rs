use std::net::SocketAddr;

use axum::extract::ConnectInfo;

use super::{ClientId, ClientKeyError, ClientRequest, KeyExtractor};

/// The client is the IP address of the TCP peer.
///
/// Needs the peer address in the request: serve the app with
/// `into_make_service_with_connect_info::<SocketAddr>()`. Without it every request is
/// refused with 500 (never guessed).
///
/// Behind a reverse proxy or load balancer the peer is the proxy, so every client would
/// be one: use [`TrustedProxyIp`](super::TrustedProxyIp) there.
///
/// ```
/// let idem = idem_axum::Idem::builder().with_client_key(idem_axum::client::PeerIp).build();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;

impl KeyExtractor for PeerIp {
    fn extract(&self, request: &ClientRequest<'_>) -> Result<ClientId, ClientKeyError> {
        peer_addr(request).map(|addr| ClientId::new(addr.ip().to_string()))
    }
}

pub(super) fn peer_addr(request: &ClientRequest<'_>) -> Result<SocketAddr, ClientKeyError> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
        .ok_or(ClientKeyError::Unavailable(
            "the peer address is unknown: serve the app with \
             `into_make_service_with_connect_info::<SocketAddr>()`"
                .into(),
        ))
}
