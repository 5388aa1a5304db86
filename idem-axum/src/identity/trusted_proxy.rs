use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use http::header::GetAll;
use http::{HeaderMap, HeaderName, HeaderValue};
use ipnet::IpNet;

use super::peer_ip::peer_addr;
use super::{ClientId, ClientRequest, IdentifyClient, IdentifyError};

/// The client is the address your proxy says it saw, read from the one forwarding header
/// your proxy writes ([`ForwardingHeader`], default `X-Forwarded-For`).
///
/// Forwarding headers are honoured only when the TCP peer is in one of the `proxies`
/// networks; anyone else could write any address there, so for any other peer the peer
/// itself is the client. Only the [chosen header](Self::with_header) is read: every other
/// forwarding header is ignored, whatever it says, because a proxy passes headers it does
/// not write through from the client unchanged. nginx, AWS ALB and HAProxy append to
/// `X-Forwarded-For` and forward a client's own `Forwarded` as it came; reading that one
/// would let every client name itself.
///
/// # The rightmost untrusted address
///
/// A list header (`X-Forwarded-For`, `Forwarded`) is read from the right. Each proxy
/// appends the address it received the request from, so the rightmost entry was written
/// by the TCP peer, one of your proxies. While an entry is itself the address of a
/// trusted proxy, that proxy wrote the entry to its left, so the walk goes on; the first
/// entry that is not a trusted proxy's is the client, as your own proxy saw it. Everything
/// to its left came with the request from the client, which can write anything there
/// (`X-Forwarded-For: 6.6.6.6` in its own request), so it is never read. A request from a
/// trusted proxy whose entries run out, or reach one that is not an address (`unknown`,
/// an obfuscated `_node`), before naming a client is refused with 400, rather than
/// counted as the proxy (which would put every user in one bucket).
///
/// The proxies are named by network rather than counted in hops: a count is right only
/// while the chain in front of the application keeps its length, and a count one too high
/// lets every client pick its address, silently. A network list that misses a proxy errs
/// the safe way: that proxy's address becomes the client of everyone behind it, so they
/// are refused together where they should not be, and nobody can pose as anyone else.
///
/// Needs `ConnectInfo<SocketAddr>`, like [`PeerIp`](super::PeerIp).
///
/// ```
/// use idem_axum::identity::{ForwardingHeader, TrustedProxyIp};
///
/// // nginx on the same host, appending with `$proxy_add_x_forwarded_for`.
/// let key = TrustedProxyIp::new(["127.0.0.1/32".parse().unwrap()]);
/// // A load balancer in the private network that writes RFC 7239 `Forwarded`.
/// let key = TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap()])
///     .with_header(ForwardingHeader::Forwarded);
/// ```
#[derive(Debug, Clone)]
pub struct TrustedProxyIp {
    proxies: Vec<IpNet>,
    header: ForwardingHeader,
}

/// The forwarding header a [`TrustedProxyIp`] reads: the one your proxy writes.
///
/// Name the header your proxy *writes* for every request, not one it may pass through:
/// whatever a proxy passes through is the client's to choose.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ForwardingHeader {
    /// `X-Forwarded-For: client, proxy, …`, to which each proxy appends the address it
    /// received the request from: nginx (`$proxy_add_x_forwarded_for`), AWS ALB,
    /// HAProxy (`option forwardfor`), Traefik, Caddy, Envoy. Read by the rightmost
    /// untrusted rule. The default.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy`, for a proxy set up to append to it.
    /// Read by the rightmost untrusted rule, from each element's `for=`.
    Forwarded,
    /// A header holding exactly one address that the proxy sets on every request,
    /// replacing whatever the client sent: nginx's `X-Real-IP`
    /// (`proxy_set_header X-Real-IP $remote_addr`), Cloudflare's `CF-Connecting-IP`,
    /// Akamai's `True-Client-IP`.
    ///
    /// Nothing in it came from the client, so there is no list to walk: the address is
    /// the client. Only safe when the proxy overwrites the header (`proxy_set_header`
    /// does; a proxy that keeps a value the client sent does not). A request whose header
    /// is missing, repeated, holds anything but one address, or names a trusted proxy is
    /// refused with 400.
    SingleAddress(HeaderName),
}

impl ForwardingHeader {
    /// The header's name.
    ///
    /// ```
    /// use idem_axum::identity::ForwardingHeader;
    /// assert_eq!(ForwardingHeader::default().name(), "x-forwarded-for");
    /// ```
    pub fn name(&self) -> &HeaderName {
        match self {
            Self::XForwardedFor => &X_FORWARDED_FOR,
            Self::Forwarded => &http::header::FORWARDED,
            Self::SingleAddress(name) => name,
        }
    }
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

impl TrustedProxyIp {
    /// Trusts the forwarding header of peers in `proxies`; reads `X-Forwarded-For`
    /// unless [`with_header`](Self::with_header) names another.
    ///
    /// ```
    /// let key = idem_axum::identity::TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap()]);
    /// ```
    pub fn new(proxies: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            proxies: proxies.into_iter().collect(),
            header: ForwardingHeader::default(),
        }
    }

    /// Reads `header`, the one your proxy writes (default
    /// [`ForwardingHeader::XForwardedFor`]); every other forwarding header is ignored.
    ///
    /// ```
    /// # use idem_axum::identity::{ForwardingHeader, TrustedProxyIp};
    /// let key = TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap()]).with_header(ForwardingHeader::Forwarded);
    /// ```
    pub fn with_header(mut self, header: ForwardingHeader) -> Self {
        self.header = header;
        self
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        // An IPv4 proxy is one address whether it is seen, or its network written,
        // IPv4-mapped (as a dual-stack listener reports it) or not.
        let ip = ip.to_canonical();
        let mapped = match ip {
            IpAddr::V4(v4) => Some(IpAddr::V6(v4.to_ipv6_mapped())),
            IpAddr::V6(_) => None,
        };
        self.proxies
            .iter()
            .any(|net| net.contains(&ip) || mapped.is_some_and(|mapped| net.contains(&mapped)))
    }

    /// The client of a request that came from a trusted proxy.
    fn forwarded_client(&self, headers: &HeaderMap) -> Option<IpAddr> {
        let hops = match &self.header {
            ForwardingHeader::XForwardedFor => x_forwarded_for(headers.get_all(&X_FORWARDED_FOR)),
            ForwardingHeader::Forwarded => forwarded_for(headers.get_all(http::header::FORWARDED)),
            ForwardingHeader::SingleAddress(name) => {
                return single_address(headers.get_all(name)).filter(|ip| !self.trusted(*ip));
            }
        };
        for hop in hops.iter().rev() {
            match hop {
                Some(ip) if self.trusted(*ip) => continue,
                Some(ip) => return Some(*ip),
                None => return None,
            }
        }
        None
    }
}

impl IdentifyClient for TrustedProxyIp {
    fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError> {
        let peer = peer_addr(request)?.ip();
        if !self.trusted(peer) {
            return Ok(ClientId::new(peer.to_canonical().to_string()));
        }
        match self.forwarded_client(request.headers()) {
            Some(ip) => Ok(ClientId::new(ip.to_canonical().to_string())),
            None => Err(IdentifyError::Missing(Cow::Owned(format!(
                "the request came through a trusted proxy without the client's address in \
                 `{}`",
                self.header.name()
            )))),
        }
    }
}

/// The entries of a list header, oldest first, each line of it in order. Split as bytes,
/// so an entry the client filled with bytes that are not text spoils only that entry,
/// not the proxy's beside it on the same line.
fn entries<'a>(values: GetAll<'a, HeaderValue>) -> impl Iterator<Item = Option<&'a str>> {
    values
        .into_iter()
        .flat_map(|value| value.as_bytes().split(|byte| *byte == b','))
        .map(|entry| std::str::from_utf8(entry).ok().map(str::trim))
}

/// The addresses of `X-Forwarded-For`, oldest first; `None` for an entry that is not one.
fn x_forwarded_for(values: GetAll<'_, HeaderValue>) -> Vec<Option<IpAddr>> {
    entries(values)
        .map(|entry| entry.and_then(parse_node))
        .collect()
}

/// The `for=` addresses of `Forwarded` (RFC 7239), oldest first; `None` for an element
/// without one.
fn forwarded_for(values: GetAll<'_, HeaderValue>) -> Vec<Option<IpAddr>> {
    entries(values)
        .map(|element| {
            element?
                .split(';')
                .filter_map(|pair| pair.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                .and_then(|(_, node)| parse_node(node.trim().trim_matches('"')))
        })
        .collect()
}

/// The address of a header that holds one; `None` when it is missing, repeated, or holds
/// anything else (a list included).
fn single_address(values: GetAll<'_, HeaderValue>) -> Option<IpAddr> {
    let mut values = values.iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse_node(value.to_str().ok()?.trim())
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

    /// The client `key` tells for a request from `peer` with `headers`.
    fn client_of(
        key: &TrustedProxyIp,
        peer: &str,
        headers: &[(&str, &str)],
    ) -> Result<String, IdentifyError> {
        let headers = headers
            .iter()
            .map(|(name, value)| {
                (
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                )
            })
            .collect();
        identify(key, peer.parse().unwrap(), headers)
    }

    /// The client `key` tells for a request from `peer` with `headers`, as text.
    fn identify(
        key: &TrustedProxyIp,
        peer: IpAddr,
        headers: HeaderMap,
    ) -> Result<String, IdentifyError> {
        let mut request = Request::new(());
        *request.headers_mut() = headers;
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::new(peer, 5555)));
        key.identify(&ClientRequest::from_request(&request))
            .map(|id| String::from_utf8(id.as_bytes().to_vec()).unwrap())
    }

    fn proxies() -> TrustedProxyIp {
        TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap()])
    }

    /// The client as the default key, reading `X-Forwarded-For`, tells it.
    fn client(peer: &str, headers: &[(&str, &str)]) -> Result<String, IdentifyError> {
        client_of(&proxies(), peer, headers)
    }

    /// The client as a key reading `Forwarded` tells it.
    fn client_by_forwarded(peer: &str, headers: &[(&str, &str)]) -> Result<String, IdentifyError> {
        client_of(
            &proxies().with_header(ForwardingHeader::Forwarded),
            peer,
            headers,
        )
    }

    /// The client as a key reading `X-Real-IP` tells it.
    fn client_by_real_ip(peer: &str, headers: &[(&str, &str)]) -> Result<String, IdentifyError> {
        let real_ip = ForwardingHeader::SingleAddress(HeaderName::from_static("x-real-ip"));
        client_of(&proxies().with_header(real_ip), peer, headers)
    }

    fn refused(answer: Result<String, IdentifyError>) -> bool {
        matches!(answer, Err(IdentifyError::Missing(_)))
    }

    #[test]
    fn headers_from_untrusted_peers_are_ignored() {
        assert_eq!(
            client("203.0.113.9", &[("x-forwarded-for", "1.2.3.4")]).unwrap(),
            "203.0.113.9"
        );
        assert_eq!(
            client_by_forwarded("203.0.113.9", &[("forwarded", "for=1.2.3.4")]).unwrap(),
            "203.0.113.9"
        );
        assert_eq!(
            client_by_real_ip("203.0.113.9", &[("x-real-ip", "1.2.3.4")]).unwrap(),
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
        // Whatever the client wrote to the left of its own address is never read.
        let junk = [("x-forwarded-for", "unknown, _hidden, 198.51.100.4")];
        assert_eq!(client("10.0.0.1", &junk).unwrap(), "198.51.100.4");
    }

    #[test]
    fn bytes_that_are_not_text_spoil_only_their_own_entry() {
        let mut request = Request::new(());
        request.extensions_mut().insert(ConnectInfo(SocketAddr::new(
            "10.0.0.1".parse().unwrap(),
            5555,
        )));
        request.headers_mut().insert(
            X_FORWARDED_FOR.clone(),
            HeaderValue::from_bytes(b"\xff\xfe, 198.51.100.4").unwrap(),
        );
        let id = proxies()
            .identify(&ClientRequest::from_request(&request))
            .unwrap();
        assert_eq!(id.as_bytes(), b"198.51.100.4");
    }

    #[test]
    fn a_forged_forwarded_is_ignored_when_the_proxy_writes_x_forwarded_for() {
        // nginx appended the client's address to `X-Forwarded-For` and passed the
        // client's own `Forwarded` through.
        for forged in [
            "for=6.6.6.6",
            r#"for="[2001:db8:cafe::17]:4711""#,
            "for=203.0.113.7;proto=https, for=10.0.0.9",
        ] {
            let headers = [("forwarded", forged), ("x-forwarded-for", "198.51.100.4")];
            assert_eq!(client("10.0.0.1", &headers).unwrap(), "198.51.100.4");
        }
        // A `Forwarded` alone names no client: the proxy's header is what counts.
        assert!(refused(client("10.0.0.1", &[("forwarded", "for=6.6.6.6")])));
    }

    #[test]
    fn a_forged_x_forwarded_for_is_ignored_when_the_proxy_writes_forwarded() {
        let headers = [
            ("x-forwarded-for", "6.6.6.6"),
            (
                "forwarded",
                r#"for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711""#,
            ),
        ];
        assert_eq!(
            client_by_forwarded("10.0.0.1", &headers).unwrap(),
            "2001:db8:cafe::17"
        );
        let appended = [(
            "forwarded",
            "for=6.6.6.6, for=198.51.100.4;proto=https, for=10.0.0.2",
        )];
        assert_eq!(
            client_by_forwarded("10.0.0.1", &appended).unwrap(),
            "198.51.100.4"
        );
        assert!(refused(client_by_forwarded(
            "10.0.0.1",
            &[("x-forwarded-for", "6.6.6.6")]
        )));
    }

    #[test]
    fn a_single_address_header_is_the_client_and_nothing_else_is_read() {
        let headers = [
            ("x-real-ip", "198.51.100.4"),
            ("x-forwarded-for", "6.6.6.6"),
            ("forwarded", "for=7.7.7.7"),
        ];
        assert_eq!(
            client_by_real_ip("10.0.0.1", &headers).unwrap(),
            "198.51.100.4"
        );
        assert_eq!(
            client_by_real_ip("10.0.0.1", &[("x-real-ip", " 2001:db8::1 ")]).unwrap(),
            "2001:db8::1"
        );
    }

    #[test]
    fn a_single_address_header_that_is_not_one_address_is_refused() {
        assert!(refused(client_by_real_ip("10.0.0.1", &[])));
        assert!(refused(client_by_real_ip(
            "10.0.0.1",
            &[("x-forwarded-for", "198.51.100.4")]
        )));
        let list = [("x-real-ip", "6.6.6.6, 198.51.100.4")];
        assert!(refused(client_by_real_ip("10.0.0.1", &list)));
        let repeated = [("x-real-ip", "6.6.6.6"), ("x-real-ip", "198.51.100.4")];
        assert!(refused(client_by_real_ip("10.0.0.1", &repeated)));
        // A proxy named as the client would put every user behind it in one bucket.
        assert!(refused(client_by_real_ip(
            "10.0.0.1",
            &[("x-real-ip", "10.0.0.2")]
        )));
    }

    #[test]
    fn a_proxy_that_names_no_client_is_refused() {
        assert!(refused(client("10.0.0.1", &[])));
        let all_proxies = [("x-forwarded-for", "10.0.0.3, 10.0.0.2")];
        assert!(refused(client("10.0.0.1", &all_proxies)));
        let obfuscated = [("forwarded", "for=_hidden")];
        assert!(refused(client_by_forwarded("10.0.0.1", &obfuscated)));
        let no_for = [("forwarded", "proto=https")];
        assert!(refused(client_by_forwarded("10.0.0.1", &no_for)));
        let garbage = [("x-forwarded-for", "not-an-ip")];
        assert!(refused(client("10.0.0.1", &garbage)));
        // An entry written by a trusted proxy that is not an address ends the walk: what
        // lies to its left came from someone no proxy vouches for.
        let unknown = [("x-forwarded-for", "198.51.100.4, unknown, 10.0.0.2")];
        assert!(refused(client("10.0.0.1", &unknown)));
    }

    #[test]
    fn the_refusal_names_the_header_read() {
        let Err(IdentifyError::Missing(why)) = client_by_forwarded("10.0.0.1", &[]) else {
            panic!("refused");
        };
        assert!(why.contains("`forwarded`"), "{why}");
    }

    #[test]
    fn a_proxy_network_written_ipv4_mapped_is_trusted() {
        // A dual-stack listener reports IPv4 peers as `::ffff:a.b.c.d`, so that is how an
        // operator may write the proxies' network.
        let key = TrustedProxyIp::new(["::ffff:10.0.0.0/104".parse().unwrap()]);
        let forwarded = [("x-forwarded-for", "198.51.100.4, 10.0.0.2")];
        for peer in ["::ffff:10.0.0.1", "10.0.0.1"] {
            assert_eq!(client_of(&key, peer, &forwarded).unwrap(), "198.51.100.4");
        }
    }

    #[test]
    fn ipv4_mapped_ipv6_is_one_client() {
        assert_eq!(client("::ffff:203.0.113.9", &[]).unwrap(), "203.0.113.9");
        let mapped = [("x-forwarded-for", "::ffff:198.51.100.4, ::ffff:10.0.0.2")];
        assert_eq!(client("10.0.0.1", &mapped).unwrap(), "198.51.100.4");
    }

    mod properties {
        use std::net::{Ipv4Addr, Ipv6Addr};

        use proptest::prelude::*;
        use proptest::sample::Index;

        use super::*;

        const HEADERS: [&str; 3] = ["x-forwarded-for", "forwarded", "x-real-ip"];

        fn address() -> impl Strategy<Value = IpAddr> {
            prop_oneof![
                any::<Ipv4Addr>().prop_map(IpAddr::V4),
                any::<Ipv6Addr>().prop_map(IpAddr::V6),
                any::<Ipv4Addr>().prop_map(|ip| IpAddr::V6(ip.to_ipv6_mapped())),
            ]
        }

        /// Up to three networks, each at least `/min_len` long (`/min_len * 4` for IPv6).
        fn networks(min_len: u8) -> impl Strategy<Value = Vec<IpNet>> {
            prop::collection::vec((address(), any::<u8>()), 1..4).prop_map(move |nets| {
                nets.into_iter()
                    .map(|(ip, len)| {
                        let (min, max) = if ip.is_ipv4() {
                            (min_len, 32)
                        } else {
                            (min_len * 4, 128)
                        };
                        IpNet::new(ip, min + len % (max - min + 1)).unwrap().trunc()
                    })
                    .collect()
            })
        }

        /// The header a key reads: `X-Forwarded-For`, `Forwarded` or `X-Real-IP`.
        fn forwarding_header() -> impl Strategy<Value = ForwardingHeader> {
            prop_oneof![
                Just(ForwardingHeader::XForwardedFor),
                Just(ForwardingHeader::Forwarded),
                Just(ForwardingHeader::SingleAddress(HeaderName::from_static(
                    "x-real-ip"
                ))),
            ]
        }

        /// An address in `net`, with the host bits of `host`.
        fn inside(net: &IpNet, host: IpAddr) -> IpAddr {
            let bits = match host {
                IpAddr::V4(ip) => u128::from(u32::from(ip)),
                IpAddr::V6(ip) => u128::from(ip),
            };
            match net {
                IpNet::V4(net) => {
                    let host = u32::from(net.hostmask()) & bits as u32;
                    IpAddr::V4(Ipv4Addr::from(u32::from(net.network()) | host))
                }
                IpNet::V6(net) => {
                    let host = u128::from(net.hostmask()) & bits;
                    IpAddr::V6(Ipv6Addr::from(u128::from(net.network()) | host))
                }
            }
        }

        /// `ip`, or failing that the first IPv6 address with another first byte that
        /// `key` does not trust: networks of at least `/32` cover one first byte each.
        fn outside(key: &TrustedProxyIp, ip: IpAddr) -> IpAddr {
            let v6 = match ip {
                IpAddr::V4(ip) => ip.to_ipv6_mapped(),
                IpAddr::V6(ip) => ip,
            };
            let others = (1..=255_u8).map(|first| {
                let mut octets = v6.octets();
                octets[0] ^= first;
                IpAddr::from(octets)
            });
            std::iter::once(ip)
                .chain(others)
                .find(|ip| !key.trusted(*ip))
                .expect("an untrusted address")
        }

        /// `ip` as an `X-Forwarded-For` entry, with `port` when there is one.
        fn xff_node(ip: IpAddr, port: Option<u16>) -> String {
            match (ip, port) {
                (_, None) => ip.to_string(),
                (IpAddr::V4(_), Some(port)) => format!("{ip}:{port}"),
                (IpAddr::V6(_), Some(port)) => format!("[{ip}]:{port}"),
            }
        }

        /// `ip` as a `Forwarded` element, with `port` and parameters around `for=`.
        fn forwarded_element(ip: IpAddr, port: Option<u16>, by_first: bool) -> String {
            let node = match (ip, port) {
                (IpAddr::V4(_), None) => ip.to_string(),
                (IpAddr::V6(_), None) => format!("\"[{ip}]\""),
                _ => format!("\"{}\"", xff_node(ip, port)),
            };
            if by_first {
                format!("by=_proxy;for={node};proto=https")
            } else {
                format!("for={node}")
            }
        }

        /// What a client may put in a header of its own: any bytes a field may hold, or
        /// a list of addresses of its choosing among junk.
        fn forged_value() -> impl Strategy<Value = Vec<u8>> {
            let byte = prop_oneof![Just(b'\t'), 0x20_u8..=0x7e, 0x80_u8..=0xff];
            let entry = prop_oneof![
                (address(), any::<Option<u16>>()).prop_map(|(ip, port)| xff_node(ip, port)),
                (address(), any::<Option<u16>>(), any::<bool>())
                    .prop_map(|(ip, port, by)| forwarded_element(ip, port, by)),
                prop::sample::select(&["unknown", "_hidden", "\"", "for=", ";", "", " "][..])
                    .prop_map(str::to_owned),
            ];
            prop_oneof![
                prop::collection::vec(byte, 0..80),
                prop::collection::vec(entry, 0..6).prop_map(|entries| entries.join(",").into()),
            ]
        }

        /// Header lines a client sends: forwarding headers and others, in any order.
        fn forged_headers() -> impl Strategy<Value = Vec<(HeaderName, Vec<u8>)>> {
            let name = prop_oneof![
                prop::sample::select(&HEADERS[..]).prop_map(HeaderName::from_static),
                Just(HeaderName::from_static("x-other")),
            ];
            prop::collection::vec((name, forged_value()), 0..6)
        }

        fn header_map(lines: Vec<(HeaderName, Vec<u8>)>) -> HeaderMap {
            let mut headers = HeaderMap::new();
            for (name, value) in lines {
                headers.append(
                    name,
                    HeaderValue::from_bytes(&value).expect("a field value"),
                );
            }
            headers
        }

        /// One proxy's hop, taken over the request's header lines: it received the
        /// request from `from`, and appends that address to the header it writes, at
        /// the end of the last line or as a line of its own. A one-address header is set
        /// by the first proxy, replacing the client's, and kept by the others.
        fn append_hop(
            lines: &mut Vec<(HeaderName, Vec<u8>)>,
            header: &ForwardingHeader,
            hop: (usize, IpAddr, Option<u16>, bool),
        ) {
            let (index, from, port, new_line) = hop;
            let entry = match header {
                ForwardingHeader::XForwardedFor => xff_node(from, port),
                ForwardingHeader::Forwarded => forwarded_element(from, port, new_line),
                ForwardingHeader::SingleAddress(name) => {
                    if index == 0 {
                        lines.retain(|(line, _)| line != name);
                        lines.push((name.clone(), from.to_string().into_bytes()));
                    }
                    return;
                }
            };
            let last = lines
                .iter_mut()
                .rev()
                .find(|(name, _)| name == header.name());
            match last {
                Some((_, value)) if !new_line => {
                    value.extend_from_slice(b", ");
                    value.extend_from_slice(entry.as_bytes());
                }
                _ => lines.push((header.name().clone(), entry.into_bytes())),
            }
        }

        proptest! {
            /// Whatever the peer, the networks and the header lines, the answer is an
            /// address in canonical form that is not a trusted proxy's, or a refusal.
            #[test]
            fn no_headers_make_it_panic(
                peer in address(),
                proxies in networks(0),
                header in forwarding_header(),
                lines in forged_headers(),
            ) {
                let key = TrustedProxyIp::new(proxies).with_header(header);
                match identify(&key, peer, header_map(lines)) {
                    Ok(client) => {
                        let ip: IpAddr = client.parse().expect("an address");
                        prop_assert_eq!(ip, ip.to_canonical());
                        prop_assert!(!key.trusted(ip) || !key.trusted(peer), "{ip}");
                    }
                    Err(error) => prop_assert!(matches!(error, IdentifyError::Missing(_))),
                }
            }

            /// A peer that is not a trusted proxy is the client, whatever it wrote.
            #[test]
            fn an_untrusted_peer_is_the_client(
                peer in address(),
                proxies in networks(8),
                header in forwarding_header(),
                lines in forged_headers(),
            ) {
                let key = TrustedProxyIp::new(proxies).with_header(header);
                let peer = outside(&key, peer);
                let client = identify(&key, peer, header_map(lines));
                prop_assert_eq!(client, Ok(peer.to_canonical().to_string()));
            }

            /// The property that makes forwarding headers safe to read. A client at
            /// address `c`, not a trusted proxy's, sends any header lines it likes —
            /// forwarding headers naming any addresses, any bytes — to a chain of one or
            /// more trusted proxies. Each appends the address it received the request
            /// from to the header the key reads (the first `c`, the others the proxy
            /// before them), or for a one-address header the first sets it to `c`; the
            /// last is the TCP peer. Then the client is `c`: nothing the client wrote
            /// changes it.
            #[test]
            fn a_client_behind_trusted_proxies_cannot_choose_its_address(
                client in address(),
                proxies in networks(8),
                header in forwarding_header(),
                lines in forged_headers(),
                chain in prop::collection::vec(
                    (any::<Index>(), address(), any::<Option<u16>>(), any::<bool>()),
                    1..4,
                ),
                mapped_peer in any::<bool>(),
            ) {
                let key = TrustedProxyIp::new(proxies.clone()).with_header(header.clone());
                let client = outside(&key, client);
                let mut lines = lines;
                let mut from = client;
                for (index, (net, host, port, new_line)) in chain.into_iter().enumerate() {
                    append_hop(&mut lines, &header, (index, from, port, new_line));
                    from = inside(net.get(&proxies), host);
                }
                let peer = match from {
                    IpAddr::V4(ip) if mapped_peer => IpAddr::V6(ip.to_ipv6_mapped()),
                    _ => from,
                };
                prop_assert_eq!(
                    identify(&key, peer, header_map(lines)),
                    Ok(client.to_canonical().to_string())
                );
            }
        }
    }
}
