use std::net::{IpAddr, SocketAddr};

use http::HeaderName;
use ipnet::IpNet;

use super::peer_ip::peer_addr;
use super::{ClientId, ClientKeyError, ClientRequest, KeyExtractor};

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client is the first address, counting back from the TCP peer, that is not one of
/// your proxies.
///
/// Forwarding headers are honoured only when the TCP peer is in one of the `proxies`
/// networks; anyone else could write any address there. Then the addresses of
/// `Forwarded` (RFC 7239 `for=`), or else of `X-Forwarded-For`, are read from the right,
/// skipping trusted proxies; the first other address is the client. A request from a
/// trusted proxy that names no such address is refused with 400, rather than counted as
/// the proxy (which would put every user in one bucket).
///
/// Needs `ConnectInfo<SocketAddr>`, like [`PeerIp`](super::PeerIp).
///
/// ```
/// use idem_axum::client::TrustedProxyIp;
///
/// let key = TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap(), "127.0.0.1/32".parse().unwrap()]);
/// ```
#[derive(Debug, Clone)]
pub struct TrustedProxyIp {
    proxies: Vec<IpNet>,
}

impl TrustedProxyIp {
    /// Trusts forwarding headers from peers in `proxies`.
    pub fn new(proxies: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            proxies: proxies.into_iter().collect(),
        }
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.proxies.iter().any(|net| net.contains(&ip))
    }
}

impl KeyExtractor for TrustedProxyIp {
    fn extract(&self, request: &ClientRequest<'_>) -> Result<ClientId, ClientKeyError> {
        let peer = peer_addr(request)?.ip();
        if !self.trusted(peer) {
            return Ok(ClientId::new(peer.to_canonical().to_string()));
        }
        let headers = request.headers();
        let hops = if headers.contains_key(http::header::FORWARDED) {
            forwarded_for(headers.get_all(http::header::FORWARDED))
        } else {
            x_forwarded_for(headers.get_all(&X_FORWARDED_FOR))
        };
        for hop in hops.iter().rev() {
            match hop {
                Some(ip) if self.trusted(*ip) => continue,
                Some(ip) => return Ok(ClientId::new(ip.to_canonical().to_string())),
                None => break,
            }
        }
        Err(ClientKeyError::Missing(
            "the request came through a trusted proxy without a `Forwarded` or \
             `X-Forwarded-For` address of the client"
                .into(),
        ))
    }
}

/// The addresses of `X-Forwarded-For`, oldest first; `None` for an entry that is not one.
fn x_forwarded_for(values: http::header::GetAll<'_, http::HeaderValue>) -> Vec<Option<IpAddr>> {
    values
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("\u{0}").split(','))
        .map(|entry| parse_node(entry.trim()))
        .collect()
}

/// The `for=` addresses of `Forwarded` (RFC 7239), oldest first.
fn forwarded_for(values: http::header::GetAll<'_, http::HeaderValue>) -> Vec<Option<IpAddr>> {
    values
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("for=\u{0}").split(','))
        .map(|element| {
            element
                .split(';')
                .filter_map(|pair| pair.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                .and_then(|(_, node)| parse_node(node.trim().trim_matches('"')))
        })
        .collect()
}

/// `203.0.113.7`, `203.0.113.7:4711`, `2001:db8::1`, `[2001:db8::1]:4711`; not `unknown`
/// nor an obfuscated `_node`.
fn parse_node(node: &str) -> Option<IpAddr> {
    node.parse::<IpAddr>()
        .ok()
        .or_else(|| node.parse::<SocketAddr>().ok().map(|addr| addr.ip()))
        .or_else(|| node.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

#[cfg(test)]
mod tests {
    use axum::extract::ConnectInfo;
    use http::Request;

    use super::*;

    fn client(peer: &str, headers: &[(&str, &str)]) -> Result<String, ClientKeyError> {
        let key = TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap()]);
        let mut request = Request::new(());
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::new(peer.parse().unwrap(), 5555)));
        for (name, value) in headers {
            request.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        key.extract(&ClientRequest::from_request(&request))
            .map(|id| String::from_utf8(id.as_bytes().to_vec()).unwrap())
    }

    #[test]
    fn headers_from_untrusted_peers_are_ignored() {
        assert_eq!(
            client("203.0.113.9", &[("x-forwarded-for", "1.2.3.4")]).unwrap(),
            "203.0.113.9"
        );
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let spoofed = [("x-forwarded-for", "6.6.6.6, 198.51.100.4, 10.0.0.2")];
        assert_eq!(client("10.0.0.1", &spoofed).unwrap(), "198.51.100.4");
        let two_lines = [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.4"),
        ];
        assert_eq!(client("10.0.0.1", &two_lines).unwrap(), "198.51.100.4");
    }

    #[test]
    fn forwarded_wins_over_x_forwarded_for() {
        let headers = [
            (
                "forwarded",
                r#"for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711""#,
            ),
            ("x-forwarded-for", "6.6.6.6"),
        ];
        assert_eq!(client("10.0.0.1", &headers).unwrap(), "2001:db8:cafe::17");
    }

    #[test]
    fn a_proxy_that_names_no_client_is_refused() {
        assert!(matches!(
            client("10.0.0.1", &[]),
            Err(ClientKeyError::Missing(_))
        ));
        let all_proxies = [("x-forwarded-for", "10.0.0.3, 10.0.0.2")];
        assert!(matches!(
            client("10.0.0.1", &all_proxies),
            Err(ClientKeyError::Missing(_))
        ));
        let obfuscated = [("forwarded", "for=_hidden")];
        assert!(matches!(
            client("10.0.0.1", &obfuscated),
            Err(ClientKeyError::Missing(_))
        ));
        let garbage = [("x-forwarded-for", "not-an-ip")];
        assert!(matches!(
            client("10.0.0.1", &garbage),
            Err(ClientKeyError::Missing(_))
        ));
    }

    #[test]
    fn ipv4_mapped_ipv6_is_one_client() {
        assert_eq!(client("::ffff:203.0.113.9", &[]).unwrap(), "203.0.113.9");
    }
}
