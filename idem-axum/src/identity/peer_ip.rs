use std::net::SocketAddr;

use axum::extract::ConnectInfo;

use super::{ClientId, ClientRequest, IdentifyClient, IdentifyError};

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
/// let idem = idem_axum::Idem::builder().with_client_identity(idem_axum::identity::PeerIp).build();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;

impl IdentifyClient for PeerIp {
    fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError> {
        peer_addr(request).map(|addr| ClientId::new(addr.ip().to_string()))
    }
}

pub(super) fn peer_addr(request: &ClientRequest<'_>) -> Result<SocketAddr, IdentifyError> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
        .ok_or(IdentifyError::Unavailable(
            "the peer address is unknown: serve the app with \
             `into_make_service_with_connect_info::<SocketAddr>()`"
                .into(),
        ))
}
