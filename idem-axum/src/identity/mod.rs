//! Who is the client: the [`IdentifyClient`]s that turn a request into a [`ClientId`].
//!
//! Every guard is per client: one user's double click must not block another user. The
//! runtime asks its extractor (set with
//! [`IdemBuilder::with_client_identity`](crate::IdemBuilder::with_client_identity), default
//! [`PeerIp`]) for the client of each request:
//!
//! | extractor | client is | behind a reverse proxy |
//! |---|---|---|
//! | [`PeerIp`] | the TCP peer's IP (needs `ConnectInfo`) | every client is the proxy: use [`TrustedProxyIp`] |
//! | [`TrustedProxyIp`] | the rightmost address not of a trusted proxy in the one header your proxy writes (default `X-Forwarded-For`; or `Forwarded`, or a one-address header such as `X-Real-IP`) | honoured only from the configured proxy networks; every other forwarding header is ignored |
//! | [`ClientHeader`] | a header's value (`X-User-Id`, an API key) | fine |
//! | [`ClientCookie`] | a cookie's value (an anonymous session id) | fine |
//! | [`ClientExtension`] | a request extension set by your authentication layer | fine |
//! | `SessionClient` (feature `tower-sessions`) | the `tower_sessions::Session`'s id | fine |
//! | [`IdentifyFn`] | whatever your closure says | yours to decide |
//!
//! A request whose client cannot be told is refused — never put in a bucket shared by
//! everyone, where one user's request would block all others. A client that leaves out a
//! header or cookie gets 400 ([`IdentifyError::Missing`]); a server not set up for its
//! extractor (no `ConnectInfo`) answers 500 ([`IdentifyError::Unavailable`]).
//!
//! Behind a proxy, name the one forwarding header it writes
//! ([`TrustedProxyIp::with_header`]). Proxies pass the headers they do not write through
//! from the client unchanged: nginx, AWS ALB and HAProxy append to `X-Forwarded-For` and
//! forward a client's own `Forwarded` as it came. An extractor that read both would let
//! each client name itself — a new identity per request to slip past every guard, or
//! another user's address to lock that user out and replay their stored responses.
//!
//! Client ids are hashed into store keys, so no value can address another key.

mod cookie;
mod extension;
mod header;
mod peer_ip;
#[cfg(feature = "tower-sessions")]
mod session;
mod trusted_proxy;

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use http::{Extensions, HeaderMap, Method, Uri, request::Parts};

pub use self::cookie::ClientCookie;
pub use self::extension::ClientExtension;
pub use self::header::ClientHeader;
pub use self::peer_ip::PeerIp;
#[cfg(feature = "tower-sessions")]
pub use self::session::{SessionClient, ensure_session};
pub use self::trusted_proxy::{ForwardingHeader, TrustedProxyIp};

/// What identifies one client: an address, a user id, a session id.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClientId(Bytes);

impl ClientId {
    /// A client id from any bytes.
    ///
    /// ```
    /// let id = idem_axum::identity::ClientId::new("user-42");
    /// assert_eq!(id.as_bytes(), b"user-42");
    /// ```
    pub fn new(id: impl Into<Bytes>) -> Self {
        Self(id.into())
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientId({:?})", String::from_utf8_lossy(&self.0))
    }
}

/// Why a request's client could not be told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentifyError {
    /// The request lacks what identifies its client (a header, a cookie): answered 400.
    Missing(Cow<'static, str>),
    /// The server is not set up to identify clients this way (no `ConnectInfo`): answered
    /// 500.
    Unavailable(Cow<'static, str>),
}

impl fmt::Display for IdentifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(why) | Self::Unavailable(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for IdentifyError {}

/// The parts of a request an extractor may look at; built from a [`Request`](http::Request)
/// in a layer or from [`Parts`] in an extractor.
#[derive(Debug, Clone, Copy)]
pub struct ClientRequest<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    extensions: &'a Extensions,
}

impl<'a> ClientRequest<'a> {
    /// A view of `parts`.
    ///
    /// ```
    /// let (parts, ()) = http::Request::new(()).into_parts();
    /// let view = idem_axum::identity::ClientRequest::from_parts(&parts);
    /// assert_eq!(view.method(), http::Method::GET);
    /// ```
    pub fn from_parts(parts: &'a Parts) -> Self {
        Self {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
            extensions: &parts.extensions,
        }
    }

    /// A view of `request`.
    ///
    /// ```
    /// let request = http::Request::new(());
    /// let view = idem_axum::identity::ClientRequest::from_request(&request);
    /// assert_eq!(view.uri(), "/");
    /// ```
    pub fn from_request<B>(request: &'a http::Request<B>) -> Self {
        Self {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }

    /// The method.
    pub fn method(&self) -> &'a Method {
        self.method
    }

    /// The URI.
    pub fn uri(&self) -> &'a Uri {
        self.uri
    }

    /// The headers.
    pub fn headers(&self) -> &'a HeaderMap {
        self.headers
    }

    /// The extensions (`ConnectInfo`, what authentication layers insert).
    pub fn extensions(&self) -> &'a Extensions {
        self.extensions
    }
}

/// Tells which client sent a request.
///
/// ```
/// use idem_axum::identity::{ClientId, IdentifyError, ClientRequest, IdentifyClient};
///
/// /// The tenant and the user, from two headers.
/// #[derive(Debug)]
/// struct TenantUser;
///
/// impl IdentifyClient for TenantUser {
///     fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError> {
///         let header = |name| request.headers().get(name).map(|v| v.as_bytes().to_vec());
///         match (header("x-tenant"), header("x-user")) {
///             (Some(mut tenant), Some(user)) => {
///                 tenant.push(b'/');
///                 tenant.extend(user);
///                 Ok(ClientId::new(tenant))
///             }
///             _ => Err(IdentifyError::Missing("send X-Tenant and X-User".into())),
///         }
///     }
/// }
/// ```
pub trait IdentifyClient: fmt::Debug + Send + Sync + 'static {
    /// The client of `request`.
    ///
    /// # Errors
    ///
    /// [`IdentifyError`] when the client cannot be told; the request is then refused.
    fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError>;
}

/// A [`IdentifyClient`] from a closure.
///
/// ```
/// use idem_axum::identity::{ClientId, IdentifyError, IdentifyFn};
///
/// let by_api_key = IdentifyFn::new(|request| {
///     request
///         .headers()
///         .get("x-api-key")
///         .map(|key| ClientId::new(key.as_bytes().to_vec()))
///         .ok_or(IdentifyError::Missing("send X-Api-Key".into()))
/// });
/// ```
#[derive(Clone)]
pub struct IdentifyFn<F>(F);

impl<F> IdentifyFn<F>
where
    F: Fn(&ClientRequest<'_>) -> Result<ClientId, IdentifyError> + Send + Sync + 'static,
{
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self(f)
    }
}

impl<F> fmt::Debug for IdentifyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdentifyFn")
    }
}

impl<F> IdentifyClient for IdentifyFn<F>
where
    F: Fn(&ClientRequest<'_>) -> Result<ClientId, IdentifyError> + Send + Sync + 'static,
{
    fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError> {
        (self.0)(request)
    }
}
