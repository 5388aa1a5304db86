use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use idem_core::throttled;
use tower_sessions::Session;

use super::{ClientId, ClientRequest, IdentifyClient, IdentifyError};

/// What [`ensure_session`] stores in a new session, so that it is not empty: an empty
/// session gets no id and no cookie.
const VISITOR: &str = "idem.visitor";

/// The client is the request's `tower_sessions::Session` (feature `tower-sessions`): its
/// session id, so each browser session is a client of its own.
///
/// The session comes from `tower_sessions::SessionManagerLayer`, outside idem's layer. A
/// session gets its id only when it is first saved, and an empty one never is: put
/// [`ensure_session`] between the two (`middleware::from_fn(ensure_session)`), so that a
/// browser's very first request — the form page that issues a token — already has the
/// client it will post as. A request without a session, or with one that has no id yet, is
/// refused with 500: the server is not set up for it.
///
/// One-time form tokens stay in idem's store, keyed by this client, not in the session's
/// data: the session's data is loaded and saved whole per request, so two concurrent
/// posts of one form would each find the token in their copy and both pass, while the
/// store's delete answers "deleted" to exactly one.
///
/// ```
/// use axum::{Router, middleware};
/// use idem_axum::Idem;
/// use idem_axum::identity::{SessionClient, ensure_session};
/// use tower_sessions::{MemoryStore, SessionManagerLayer};
///
/// let idem = Idem::builder().with_client_identity(SessionClient).build();
/// let app: Router = Router::new()
///     .layer(idem.layer())
///     .layer(middleware::from_fn(ensure_session))
///     .layer(SessionManagerLayer::new(MemoryStore::default()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionClient;

impl IdentifyClient for SessionClient {
    fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError> {
        let session = request.extensions().get::<Session>().ok_or_else(|| {
            IdentifyError::Unavailable(
                "no session on the request: put tower_sessions::SessionManagerLayer outside \
                 idem's layer"
                    .into(),
            )
        })?;
        let id = session.id().ok_or_else(|| {
            IdentifyError::Unavailable(
                "the session has no id yet: put `middleware::from_fn(ensure_session)` between \
                 the session layer and idem's layer"
                    .into(),
            )
        })?;
        Ok(ClientId::new(id.to_string()))
    }
}

/// Gives a new session its id before the request goes on (an axum middleware, for
/// `middleware::from_fn`), so that [`SessionClient`] can tell its client on its very
/// first request: the session is marked as a visitor's and saved, which draws its id; the
/// session layer sets its cookie on the response.
///
/// The session is loaded first, so a cookie naming a session the store does not have
/// (expired, deleted, made up) gets a new session here too, rather than being taken at
/// its word for this request and replaced in the answer, which would strand a form token
/// the page issues to the old id. Loading costs nothing extra: the session layer loads
/// the session anyway to save it.
pub async fn ensure_session(session: Session, request: Request, next: Next) -> Response {
    let started = async {
        // Reading a key loads the session; an unknown id is dropped by the load.
        session.get_value(VISITOR).await?;
        if session.id().is_none() {
            session.insert(VISITOR, true).await?;
            session.save().await?;
        }
        Ok::<_, tower_sessions::session::Error>(())
    };
    if let Err(error) = started.await {
        throttled::error!(%error, "idem: the session could not be loaded or started");
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the session could not be started",
        )
            .into_response();
    }
    next.run(request).await
}
