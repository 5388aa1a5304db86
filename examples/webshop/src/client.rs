//! Who the client is: the `X-User-Id` header of the JSON API, else the browser's
//! anonymous session cookie, which [`ensure_session`] hands out.

use axum::extract::Request;
use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use idem_axum::client::{
    ClientCookie, ClientId, ClientRequest, IdentifyClient, IdentifyError, IdentifyFn,
};

/// The cookie that carries a browser's anonymous session id.
pub(crate) const SESSION_COOKIE: &str = "shop_session";

/// The header that names an API client.
pub(crate) const USER_HEADER: &str = "x-user-id";

/// Who sent a request, as the shop tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Client {
    /// An API client, by its `X-User-Id`.
    User(String),
    /// A browser, by its session id.
    Browser(String),
}

impl Client {
    /// The client of a request with `headers`: its `X-User-Id` if it sends one, else its
    /// session cookie.
    pub(crate) fn of(headers: &HeaderMap) -> Option<Self> {
        if let Some(user) = user_id(headers) {
            return Some(Self::User(user.to_owned()));
        }
        session_id(headers).map(Self::Browser)
    }

    /// The client's identity for idem's guards. The prefixes keep a user id and a session
    /// id with the same text apart.
    fn id(&self) -> ClientId {
        match self {
            Self::User(user) => ClientId::new(format!("user:{user}")),
            Self::Browser(session) => ClientId::new(format!("session:{session}")),
        }
    }

    /// What the orders table and the API show. A session id is a credential (whoever has
    /// it is that browser to the guards), so only its first characters are shown.
    pub(crate) fn label(&self) -> String {
        match self {
            Self::User(user) => format!("user:{user}"),
            Self::Browser(session) => {
                let shown: String = session.chars().take(8).collect();
                format!("browser:{shown}")
            }
        }
    }
}

/// The `X-User-Id` of a request, when it is present, printable and not empty.
pub(crate) fn user_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(USER_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|user| !user.is_empty())
}

/// The session cookie's value, read by idem's own `ClientCookie`, so the shop and its guards
/// can never disagree on which cookie is the session (`ClientRequest` is built from a
/// request only, hence the one borrowed here).
fn session_id(headers: &HeaderMap) -> Option<String> {
    let mut request = axum::http::Request::new(());
    *request.headers_mut() = headers.clone();
    ClientCookie::new(SESSION_COOKIE)
        .identify(&ClientRequest::from_request(&request))
        .ok()
        .map(|id| String::from_utf8_lossy(id.as_bytes()).into_owned())
}

/// The shop's client identity for its [`idem_axum::Idem`]: one runtime has one
/// extractor, and the shop has two kinds of client.
pub(crate) fn client_identity() -> impl IdentifyClient {
    IdentifyFn::new(|request: &ClientRequest<'_>| {
        Client::of(request.headers())
            .map(|client| client.id())
            .ok_or(IdentifyError::Missing(
                "send an X-User-Id header (API) or the shop_session cookie (browser)".into(),
            ))
    })
}

/// Gives a browser page request without a session cookie a fresh anonymous session.
///
/// The cookie is added to the request itself as well as set on the response, so the
/// first page a browser opens — the order form, say — already belongs to its session and
/// issues its form token to it. API paths get none: an API client without `X-User-Id`
/// would otherwise be a new client on every request, and its retries would never meet.
pub(crate) async fn ensure_session(mut request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/api/")
        || user_id(request.headers()).is_some()
        || session_id(request.headers()).is_some()
    {
        return next.run(request).await;
    }
    let session = uuid::Uuid::new_v4().simple().to_string();
    // A simple uuid is 32 hex digits: always a valid header value.
    let Ok(cookie) = HeaderValue::from_str(&format!("{SESSION_COOKIE}={session}")) else {
        return next.run(request).await;
    };
    request.headers_mut().append(COOKIE, cookie);
    let mut response = next.run(request).await;
    if let Ok(set_cookie) = HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Lax"
    )) {
        response.headers_mut().append(SET_COOKIE, set_cookie);
    }
    response
}
