//! What the suites share: a downstream service guarded by idem on a real TCP port, with
//! the faults a client meets in front of its guard, counting how often its handler ran;
//! and the client under test, hyper's behind the layer.

#![allow(dead_code)] // Each suite uses its part.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem_axum::{Idem, IdempotencyLayer, MemoryStore};
use idem_client::{IdempotentRetry, IdempotentRetryLayer, RetryPolicy};
use tokio::task::JoinHandle;
use tower::Layer;
use tower::retry::budget::TpsBudget;

/// What the downstream does in front of its guard, to each attempt of a key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fault {
    /// Nothing: every attempt reaches the guard.
    None,
    /// The first `n` attempts of each key are answered `503` with `Retry-After: 0`.
    Unavailable(usize),
    /// The first attempt of each key runs (the handler runs, its record completes), then
    /// its connection is dropped before the answer.
    DropAfterRun,
    /// Every attempt answered with this status and `Retry-After: 0`, the guard untouched.
    Always(StatusCode),
    /// Every attempt answered with idem's refusal of an avoid-repeat window (a `409`
    /// problem with `Retry-After`).
    AvoidRepeatWindow,
}

/// A downstream service: `POST /effects` guarded by `IdempotencyLayer` (key required,
/// records in memory, unless the test guards it otherwise), its handler taking `handler_time` and counting its runs.
#[derive(Debug)]
pub(crate) struct Downstream {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: JoinHandle<()>,
}

/// What the downstream saw.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Attempts that reached the server, per `Idempotency-Key` (`""` for none).
    attempts: Mutex<HashMap<String, usize>>,
    /// Runs of the handler, per key.
    runs: Mutex<HashMap<String, usize>>,
    all_runs: AtomicUsize,
}

#[derive(Debug, Clone)]
struct Setup {
    counts: Arc<Counts>,
    fault: Fault,
    handler_time: Duration,
}

impl Downstream {
    /// Starts the service on a free loopback port.
    pub(crate) async fn start(fault: Fault, handler_time: Duration) -> Self {
        Self::start_with(
            fault,
            handler_time,
            IdempotencyLayer::new().with_required(true),
        )
        .await
    }

    /// [`start`](Self::start), its route guarded by `guard`.
    pub(crate) async fn start_with(
        fault: Fault,
        handler_time: Duration,
        guard: IdempotencyLayer,
    ) -> Self {
        let counts = Arc::new(Counts::default());
        let setup = Setup {
            counts: Arc::clone(&counts),
            fault,
            handler_time,
        };
        let router = Router::new()
            .route("/effects", post(effect).route_layer(guard))
            .layer(Idem::new(MemoryStore::new()).layer())
            .layer(middleware::from_fn_with_state(setup.clone(), in_front))
            .with_state(setup);
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            let app = router.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app).await.expect("the server runs");
        });
        Self { addr, counts, task }
    }

    /// The URL of `path` on this server.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// How many times the handler ran, in all.
    pub(crate) fn runs(&self) -> usize {
        self.counts.all_runs.load(Ordering::SeqCst)
    }

    /// How many times the handler ran for each key.
    pub(crate) fn runs_per_key(&self) -> HashMap<String, usize> {
        self.counts.runs.lock().unwrap().clone()
    }

    /// How many attempts reached the server for each key.
    pub(crate) fn attempts_per_key(&self) -> HashMap<String, usize> {
        self.counts.attempts.lock().unwrap().clone()
    }

    /// How many attempts reached the server, in all.
    pub(crate) fn attempts(&self) -> usize {
        self.attempts_per_key().values().sum()
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The key of a request, `""` for none.
fn key_of(request: &Request) -> String {
    request
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The faults, in front of the guard.
async fn in_front(State(setup): State<Setup>, request: Request, next: Next) -> Response {
    let key = key_of(&request);
    let attempt = {
        let mut attempts = setup.counts.attempts.lock().unwrap();
        let count = attempts.entry(key).or_insert(0);
        *count += 1;
        *count
    };
    let refuse = |status: StatusCode| (status, [("retry-after", "0")]).into_response();
    match setup.fault {
        Fault::Unavailable(n) if attempt <= n => refuse(StatusCode::SERVICE_UNAVAILABLE),
        Fault::Always(status) => refuse(status),
        Fault::AvoidRepeatWindow => idem_axum::Rejection::new(
            idem_axum::RejectionKind::Duplicate,
            "wait for the window to end",
        )
        .with_retry_after(Duration::from_secs(1))
        .into_response(),
        Fault::DropAfterRun if attempt == 1 => {
            let _ran = next.run(request).await;
            // A panic ends the connection's task: the client sees the connection closed
            // before the answer, the way it would if the server died here.
            panic!("the connection drops after the handler ran (a test's fault)");
        }
        _ => next.run(request).await,
    }
}

/// The guarded handler: one side effect per run, the body echoed with the run's number.
async fn effect(State(setup): State<Setup>, request: Request) -> Response {
    let key = key_of(&request);
    let body = request.into_body().collect().await.unwrap().to_bytes();
    tokio::time::sleep(setup.handler_time).await;
    let run = setup.counts.all_runs.fetch_add(1, Ordering::SeqCst);
    *setup.counts.runs.lock().unwrap().entry(key).or_insert(0) += 1;
    let answer = format!("run {run}: {}", String::from_utf8_lossy(&body));
    (StatusCode::CREATED, answer).into_response()
}

/// The client under test: hyper's legacy client behind the layer.
pub(crate) type TestClient = IdempotentRetry<Client<HttpConnector, Full<Bytes>>>;

/// The client under test with `policy`.
pub(crate) fn client(policy: RetryPolicy) -> TestClient {
    let hyper = Client::builder(TokioExecutor::new()).build_http();
    IdempotentRetryLayer::new(policy).layer(hyper)
}

/// A policy that retries quickly and has budget for every retry the tests make, so what
/// they count is the layer's doing, not the budget's.
pub(crate) fn generous() -> RetryPolicy {
    RetryPolicy::new()
        .with_backoff(Duration::from_millis(5), Duration::from_millis(50))
        .with_budget(TpsBudget::new(Duration::from_secs(10), 100_000, 10.0))
}

/// A `POST` of `body` to `url`.
pub(crate) fn post_to(url: &str, body: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(url)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// The status, the replay header and the body of an answer.
pub(crate) async fn read<B>(response: http::Response<B>) -> (StatusCode, bool, String)
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        replayed,
        String::from_utf8_lossy(&body).into_owned(),
    )
}
