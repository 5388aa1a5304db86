//! The anti-repeat window in a few lines: `#[avoid_repeat]` on handlers and
//! `AvoidRepeatLayer` on a route, on the default `MemoryStore`.
//!
//! | route | guard | a repeat from the same client |
//! |---|---|---|
//! | `POST /orders` | `#[avoid_repeat(timeout = "10s")]` | `409` + `Retry-After` for 10 s after the first was accepted |
//! | `POST /exports` | `#[avoid_repeat(timeout = "60s", release = "finish")]` | `409` while the first export runs (2 s); free once it finished |
//! | `POST /comments` | `#[avoid_repeat(timeout = "10s", by = "client+body")]` | `409` for the same JSON `{"text"}` within 10 s; another text is a new request |
//! | `POST /subscriptions` | `AvoidRepeatLayer` (10 s) on the route | `409` + `Retry-After`, with the layer's message |
//! | `GET /` | none | JSON: how often each handler ran |
//!
//! The client is the `X-Client-Id` header when a request has one (as a gateway that
//! authenticated the user would set it), else the peer's IP address: `curl` with
//! `-H 'X-Client-Id: bob'` is another client than `curl` without.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_axum::identity::{ClientId, IdentifyClient, IdentifyFn, PeerIp};
use idem_axum::{AvoidRepeatLayer, Idem, avoid_repeat};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The header that names the client, when a request has it.
pub const CLIENT_HEADER: &str = "x-client-id";

/// How long an export runs unless [`AvoidRepeatExample::with_export_time`] says otherwise.
const EXPORT_TIME: Duration = Duration::from_secs(2);

/// How often each handler ran: a side effect counted, which a status alone cannot show.
#[derive(Debug, Default, Serialize)]
struct Ran {
    orders: AtomicU64,
    exports: AtomicU64,
    comments: AtomicU64,
    subscriptions: AtomicU64,
}

/// Counts a run of a handler; the run's number, from 1.
fn count(runs: &AtomicU64) -> u64 {
    runs.fetch_add(1, Ordering::SeqCst) + 1
}

/// The example: its handlers' counts, and how long an export takes.
#[derive(Debug, Clone)]
pub struct AvoidRepeatExample {
    ran: Arc<Ran>,
    export_time: Duration,
    idem: Idem,
}

impl Default for AvoidRepeatExample {
    fn default() -> Self {
        Self::new()
    }
}

impl AvoidRepeatExample {
    /// Nothing ran yet; an export takes 2 s.
    pub fn new() -> Self {
        Self {
            ran: Arc::default(),
            export_time: EXPORT_TIME,
            idem: Idem::builder()
                .with_client_identity(header_else_peer_ip())
                .build(),
        }
    }

    /// The idem runtime of its routes, on a `MemoryStore`: what `main` drains when the
    /// server stops.
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// How long an export takes.
    pub fn with_export_time(mut self, export_time: Duration) -> Self {
        self.export_time = export_time;
        self
    }

    /// The routes, behind [`idem`](Self::idem).
    pub fn router(&self) -> Router {
        let subscriptions = AvoidRepeatLayer::new(Duration::from_secs(10))
            .with_message("You have just subscribed; there is no need to do it again.");
        Router::new()
            .route("/", get(ran))
            .route("/orders", post(place_order))
            .route("/exports", post(export))
            .route("/comments", post(comment))
            .route("/subscriptions", post(subscribe).route_layer(subscriptions))
            .with_state(self.clone())
            .layer(self.idem.layer())
    }
}

/// The client: the [`CLIENT_HEADER`], else the peer's IP address. The prefixes keep a
/// header that spells an address from being that address.
fn header_else_peer_ip() -> impl IdentifyClient {
    IdentifyFn::new(|request| match request.headers().get(CLIENT_HEADER) {
        Some(id) if !id.is_empty() => Ok(ClientId::new([b"header:", id.as_bytes()].concat())),
        _ => {
            let ip = PeerIp.identify(request)?;
            Ok(ClientId::new([b"ip:", ip.as_bytes()].concat()))
        }
    })
}

/// `GET /`: how often each handler ran.
async fn ran(State(app): State<AvoidRepeatExample>) -> Json<Value> {
    Json(serde_json::to_value(&*app.ran).unwrap_or_default())
}

/// `POST /orders`: once per client per 10 s.
#[avoid_repeat(timeout = "10s")]
async fn place_order(State(app): State<AvoidRepeatExample>) -> (StatusCode, Json<Value>) {
    let order = count(&app.ran.orders);
    (StatusCode::CREATED, Json(json!({ "order": order })))
}

/// `POST /exports`: one at a time per client. The key is released when the export has
/// its response, so 60 s is only how long it is held should the process die meanwhile.
#[avoid_repeat(timeout = "60s", release = "finish")]
async fn export(State(app): State<AvoidRepeatExample>) -> Json<Value> {
    let export = count(&app.ran.exports);
    tokio::time::sleep(app.export_time).await;
    Json(json!({ "export": export, "took_ms": app.export_time.as_millis() }))
}

/// What `POST /comments` takes.
#[derive(Debug, Deserialize)]
struct Comment {
    text: String,
}

/// `POST /comments`: the same text from the same client once per 10 s; another text at
/// once.
#[avoid_repeat(timeout = "10s", by = "client+body")]
async fn comment(
    State(app): State<AvoidRepeatExample>,
    Json(comment): Json<Comment>,
) -> (StatusCode, Json<Value>) {
    let number = count(&app.ran.comments);
    let posted = json!({ "comment": number, "text": comment.text });
    (StatusCode::CREATED, Json(posted))
}

/// `POST /subscriptions`: guarded by the [`AvoidRepeatLayer`] on its route.
async fn subscribe(State(app): State<AvoidRepeatExample>) -> (StatusCode, Json<Value>) {
    let subscription = count(&app.ran.subscriptions);
    (
        StatusCode::CREATED,
        Json(json!({ "subscription": subscription })),
    )
}
