//! What the HTTP suites share: a request sent through a router and its answer read, and
//! the [`Shop`] whose handlers count what they did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::ConnectInfo;
use axum::http::{self, HeaderMap, HeaderName, Request, StatusCode};
use axum::response::Response;
use axum::{Extension, Router};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::{Backend, eventually};

/// The header the suites that name their clients tell them apart by
/// (`ClientHeader::new(CLIENT)`).
pub const CLIENT: HeaderName = HeaderName::from_static("x-client");

/// An empty `POST path` from `client` (in [`CLIENT`]), with `key` as its `Idempotency-Key`
/// when there is one.
///
/// # Panics
///
/// When `path`, `client` or `key` cannot be in a request.
pub fn post_as(path: &str, client: &str, key: Option<&str>) -> Request<Body> {
    let request = Request::post(path).header(CLIENT, client);
    let request = match key {
        Some(key) => request.header("idempotency-key", key),
        None => request,
    };
    request.body(Body::empty()).expect("a valid request")
}

/// Sends `request` through `app`.
///
/// # Panics
///
/// Never: a router's error type is `Infallible`.
pub async fn send(app: &Router, request: Request<Body>) -> Response {
    app.clone()
        .oneshot(request)
        .await
        .expect("routers are infallible")
}

/// `app` as serving it with `into_make_service_with_connect_info::<SocketAddr>()` would
/// run it, with every request from the peer `127.0.0.1:40000`: what the default client
/// identity (`PeerIp`) reads, for a suite that sends requests through the router.
pub fn from_loopback(app: Router) -> Router {
    let peer = SocketAddr::from(([127, 0, 0, 1], 40_000));
    app.layer(Extension(ConnectInfo(peer)))
}

/// The value of the hidden `form_token` input in `page`, as `FormToken::hidden_input`
/// writes it.
///
/// # Panics
///
/// When the page has none.
pub fn form_token_in(page: &str) -> String {
    let opening = r#"name="form_token" value=""#;
    let start = page.find(opening).expect("a form token in the page") + opening.len();
    let length = page[start..].find('"').expect("the end of the value");
    page[start..start + length].to_owned()
}

/// A response read whole, for a test that looks at its status, headers and body.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// Every header.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Answer {
    /// A response, its body read whole.
    ///
    /// # Errors
    ///
    /// The body broke off.
    pub async fn read<B>(response: http::Response<B>) -> Result<Self, axum::Error>
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(Body::new(body), usize::MAX).await?;
        Ok(Self {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// The body, as JSON.
    ///
    /// # Panics
    ///
    /// When it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|error| panic!("not a JSON body ({error}): {}", self.text()))
    }

    /// The body, as text (what is not UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Whether it is a stored response replayed (`Idempotent-Replayed: true`).
    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|value| value == "true")
    }
}

/// Checks the statuses of concurrent retries of one request: it was made (a 201), and every
/// other answer is that 201 again or a 409 for a retry that came while it ran.
///
/// # Panics
///
/// When that is not so.
pub fn assert_created_or_in_progress(statuses: &[StatusCode]) {
    assert!(statuses.contains(&StatusCode::CREATED), "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| [StatusCode::CREATED, StatusCode::CONFLICT].contains(s)),
        "{statuses:?}"
    );
}

/// The whole number `field` of a JSON answer.
///
/// # Panics
///
/// When `value` has no such field, or it is not a whole number.
pub fn u64_field(value: &serde_json::Value, field: &str) -> u64 {
    value[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {value}"))
}

/// Sends `request` through `app` and reads the response whole.
///
/// # Panics
///
/// When the body breaks off.
pub async fn answer(app: &Router, request: Request<Body>) -> Answer {
    Answer::read(send(app, request).await)
        .await
        .expect("a whole body")
}

/// The body of `response`, as text.
///
/// # Panics
///
/// When the body breaks off or is not UTF-8.
pub async fn body_text(response: Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a whole body");
    String::from_utf8(bytes.to_vec()).expect("a UTF-8 body")
}

/// How many of `statuses` are `status`.
pub fn count(statuses: &[StatusCode], status: StatusCode) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

/// Asserts that of `statuses`, the answers to one submission sent many times at once, one
/// was accepted (201) and every other refused as a repeat (409), and that `shop`'s handler
/// ran once.
///
/// # Panics
///
/// When it is not so.
pub fn assert_ran_once(shop: &Shop, statuses: &[StatusCode]) {
    assert_eq!(shop.runs(), 1);
    assert_eq!(count(statuses, StatusCode::CREATED), 1);
    assert_eq!(count(statuses, StatusCode::CONFLICT), statuses.len() - 1);
}

/// Asserts that `response` is the page a browser gets for a refused duplicate: a 409 in
/// HTML that shows `message`.
///
/// # Panics
///
/// When it is not.
pub async fn assert_refused_page(response: Response, message: &str) {
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(
        response.headers()[http::header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    let page = body_text(response).await;
    assert!(page.contains(&format!("<p>{message}</p>")), "{page}");
}

/// The code of a rejection's problem `type`: `duplicate-request` for
/// `https://docs.rs/idem-axum/0.1.0/idem_axum/guide/refusals/index.html#duplicate-request`,
/// the section of this release's refusals guide; anything else whole, so that an assertion
/// on it shows the `type` that is not one.
pub fn refusal_code(type_uri: &str) -> &str {
    const REFUSALS: &str = concat!(
        "https://docs.rs/idem-axum/",
        env!("CARGO_PKG_VERSION"),
        "/idem_axum/guide/refusals/index.html#"
    );
    type_uri.strip_prefix(REFUSALS).unwrap_or(type_uri)
}

/// The [code](refusal_code) of a rejection's problem `type`.
///
/// # Panics
///
/// When the body is not JSON.
pub async fn problem_code(response: Response) -> String {
    let text = body_text(response).await;
    let problem: serde_json::Value = serde_json::from_str(&text).expect("a problem document");
    refusal_code(problem["type"].as_str().unwrap_or_default()).to_owned()
}

/// The state of a suite's handlers: how often their bodies ran (and how many of those
/// held at the gate got to their end), and a gate that keeps handlers in flight until the
/// test opens it. A side effect counted, not a status code, is what tells "ran once".
#[derive(Debug, Clone)]
pub struct Shop {
    runs: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
}

impl Default for Shop {
    fn default() -> Self {
        Self::new()
    }
}

impl Shop {
    /// A shop where nothing ran yet and the gate is shut.
    pub fn new() -> Self {
        Self {
            runs: Arc::new(AtomicUsize::new(0)),
            finished: Arc::new(AtomicUsize::new(0)),
            gate: Arc::new(Semaphore::new(0)),
        }
    }

    /// Counts a run; the run's number, from 1.
    pub fn ran(&self) -> usize {
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// How many runs started.
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// How many runs held at the gate got to their end.
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }

    /// Lets one handler waiting at the gate (or the next to arrive) through.
    pub fn open_gate(&self) {
        self.open_gate_for(1);
    }

    /// Lets `handlers` through the gate.
    pub fn open_gate_for(&self, handlers: usize) {
        self.gate.add_permits(handlers);
    }

    /// Waits at the gate.
    ///
    /// # Panics
    ///
    /// Never: the gate is not closed.
    pub async fn pass_gate(&self) {
        self.gate
            .acquire()
            .await
            .expect("the gate stays open")
            .forget();
    }

    /// Waits until `runs` runs have started.
    ///
    /// # Panics
    ///
    /// When they have not within 5 s.
    pub async fn until_runs(&self, runs: usize) {
        eventually(Duration::from_secs(5), "the handler runs", || {
            let shop = self.clone();
            async move { shop.runs() >= runs }
        })
        .await;
    }

    /// Waits until exactly `runs` runs have started; `moment` says what that means, for the
    /// panic.
    ///
    /// # Panics
    ///
    /// When they have not within 5 s.
    pub async fn until_exactly(&self, runs: usize, moment: &str) {
        eventually(Duration::from_secs(5), moment, || {
            let shop = self.clone();
            async move { shop.runs() == runs }
        })
        .await;
    }

    /// A handler body that commits, then waits for the gate before it answers 201, as
    /// one that wrote its order and still renders a page.
    pub async fn commit_then_wait(&self) -> StatusCode {
        self.ran();
        self.pass_gate().await;
        self.finished.fetch_add(1, Ordering::SeqCst);
        StatusCode::CREATED
    }
}

/// A case's backend, a new [`Shop`], and the suite's router for that shop on the backend's
/// store (`app`): how an HTTP case on every store begins.
pub async fn shop_on<B: Backend>(app: fn(B::Store, &Shop) -> Router) -> (B, Shop, Router) {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    (backend, shop, app)
}

/// As [`shop_on`], with two routers for the one shop: each with store connections of its
/// own on the backend's data, as two processes behind a load balancer would have.
pub async fn shop_on_two_instances<B: Backend>(
    app: fn(B::Store, &Shop) -> Router,
) -> (B, Shop, [Router; 2]) {
    let backend = B::start().await;
    let shop = Shop::new();
    let instances = [
        app(backend.store(), &shop),
        app(backend.store_of_another_instance(), &shop),
    ];
    (backend, shop, instances)
}
