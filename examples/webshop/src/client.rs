//! Who the client is: the `X-User-Id` header of the JSON API, else the browser's
//! session, a `tower_sessions::Session` kept in the shop's database ([`session_layer`]).

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use idem_axum::identity::{
    ClientId, ClientRequest, IdentifyClient, IdentifyError, IdentifyFn, SessionClient,
};
use sqlx::SqlitePool;
use tower_sessions::cookie::SameSite;
use tower_sessions::cookie::time::Duration;
use tower_sessions::{Expiry, Session, SessionManagerLayer};
use tower_sessions_sqlx_store::SqliteStore;

/// The cookie that carries a browser's session id.
pub(crate) const SESSION_COOKIE: &str = "shop_session";

/// How long a session lives after its browser's last request: a day, far longer than the
/// half hour a form token stays good, so a session never ends under an open form.
const SESSION_INACTIVITY: Duration = Duration::days(1);

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
    /// The client of a request with `headers` and `session`: its `X-User-Id` if it sends
    /// one, else its session, once the session has an id.
    pub(crate) fn of(headers: &HeaderMap, session: &Session) -> Option<Self> {
        if let Some(user) = user_id(headers) {
            return Some(Self::User(user.to_owned()));
        }
        session.id().map(|id| Self::Browser(id.to_string()))
    }

    /// What the orders table and the API show. A session id is a credential (whoever has
    /// it is that browser), so only its first characters are shown.
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

/// The shop's client identity for its [`idem_axum::Idem`]s: one runtime has one
/// extractor, and the shop has two kinds of client. A browser is idem's own
/// [`SessionClient`], so the guards and `tower_sessions` agree on which session a request
/// belongs to; the prefixes keep a user id and a session id with the same text apart.
pub(crate) fn client_identity() -> impl IdentifyClient {
    IdentifyFn::new(|request: &ClientRequest<'_>| {
        if let Some(user) = user_id(request.headers()) {
            return Ok(ClientId::new(format!("user:{user}")));
        }
        // API paths start no session (see `ensure_browser_session`): a request there with
        // neither header nor session cookie is the client's mistake, not the server's.
        if request
            .extensions()
            .get::<Session>()
            .is_some_and(|session| session.id().is_none())
        {
            return Err(IdentifyError::Missing(
                format!("send an X-User-Id header (API) or the {SESSION_COOKIE} cookie (browser)")
                    .into(),
            ));
        }
        let session = SessionClient.identify(request)?;
        let session = String::from_utf8_lossy(session.as_bytes());
        Ok(ClientId::new(format!("session:{session}")))
    })
}

/// The session layer: sessions are rows of the shop's database, so every instance on it
/// knows every browser. The cookie is `HttpOnly` (no script reads it), `SameSite=Lax`
/// (sent when a link from elsewhere opens the shop, never with another site's posts), and
/// lasts [`SESSION_INACTIVITY`] after the browser's last request: every answer renews it
/// (`always_save`), at the cost of one write per request. It is not `Secure`, because the
/// shop serves plain HTTP on localhost; a shop behind TLS would set it.
pub(crate) fn session_layer(db: &SqlitePool) -> SessionManagerLayer<SqliteStore> {
    SessionManagerLayer::new(session_store(db))
        .with_name(SESSION_COOKIE)
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_secure(false)
        .with_expiry(Expiry::OnInactivity(SESSION_INACTIVITY))
        .with_always_save(true)
}

/// The store of the shop's sessions: the `tower_sessions` table of its database.
pub(crate) fn session_store(db: &SqlitePool) -> SqliteStore {
    SqliteStore::new(db.clone())
}

/// Gives a browser's page request a session with an id (idem's
/// [`ensure_session`](idem_axum::identity::ensure_session)), so the first page a browser
/// opens — the order form, say — already belongs to its session and issues its form token
/// to it. API paths and `/metrics` start none: an API client without `X-User-Id` would
/// otherwise be a new session on every request, its retries would never meet, and each
/// would leave a row behind.
pub(crate) async fn ensure_browser_session(
    session: Session,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if path.starts_with("/api/") || path == "/metrics" || user_id(request.headers()).is_some() {
        return next.run(request).await;
    }
    idem_axum::identity::ensure_session(session, request, next).await
}
