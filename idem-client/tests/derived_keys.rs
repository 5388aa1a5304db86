//! Keys derived from the inbound record: a guarded handler that calls a downstream
//! service, then fails, is run again by its client's retry, and the downstream's handler
//! runs once per outbound call, not once per run — with the calls made concurrently, and
//! a hundred inbound requests at once. With a random key per call (the control) it runs
//! once per run.

mod support;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use idem_axum::idempotency::IdempotencyRecord;
use idem_axum::{Idem, IdempotencyLayer, MemoryStore};
use idem_client::{OutboundKeys, RetryPolicy};
use support::{Downstream, Fault, TestClient, client, generous, post_to, read};
use tokio::task::JoinSet;
use tower::ServiceExt;

/// The calling service's state.
#[derive(Debug, Clone)]
struct Upstream {
    client: TestClient,
    downstream: String,
    /// Whether the calls carry keys derived from the record (else each its own random key).
    derive: bool,
    /// Runs of the handler, per inbound idempotency key.
    runs: Arc<Mutex<HashMap<String, usize>>>,
}

/// The guarded handler: three concurrent labelled calls and two unlabelled calls to one
/// URI, then a `500` on its first run (which removes its record, so the retry runs it
/// again), a `201` after.
async fn handler(
    State(upstream): State<Upstream>,
    record: IdempotencyRecord,
    headers: axum::http::HeaderMap,
) -> StatusCode {
    let inbound = headers["idempotency-key"].to_str().unwrap().to_owned();
    let keys = record.outbound_keys();
    let call = |body: &str, key: Option<idem_client::OutboundKey>, handle: Option<OutboundKeys>| {
        let mut request = post_to(&upstream.downstream, body);
        if upstream.derive {
            if let Some(key) = key {
                request.extensions_mut().insert(key);
            }
            if let Some(handle) = handle {
                request.extensions_mut().insert(handle);
            }
        }
        let client = upstream.client.clone();
        async move {
            let answer = client.oneshot(request).await.expect("an answer");
            assert_eq!(answer.status(), StatusCode::CREATED);
        }
    };
    // Concurrent: on a rerun they may start in another order; their labels keep their
    // keys apart.
    tokio::join!(
        call("reserve", Some(record.outbound_key("reserve")), None),
        call("charge", Some(keys.key("charge")), None),
        call("notify", Some(keys.key("notify")), None),
    );
    // One after the other, unlabelled: told apart by their ordinal.
    call("ship part 1", None, Some(keys.clone())).await;
    call("ship part 2", None, Some(keys)).await;

    let run = {
        let mut runs = upstream.runs.lock().unwrap();
        let run = runs.entry(inbound).or_insert(0);
        *run += 1;
        *run
    };
    if run == 1 {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::CREATED
    }
}

/// Runs `inbound` requests at once against a guarded upstream whose handler calls the
/// downstream five times and fails its first run, each request sent again after its
/// `500`; returns the downstream.
async fn run_each_twice(inbound: usize, derive: bool) -> Downstream {
    let downstream = Downstream::start(Fault::None, Duration::ZERO).await;
    let upstream = Upstream {
        client: client(generous()),
        downstream: downstream.url("/effects"),
        derive,
        runs: Arc::default(),
    };
    let router = Router::new()
        .route(
            "/orders",
            post(handler).route_layer(IdempotencyLayer::new().with_required(true)),
        )
        .layer(Idem::new(MemoryStore::new()).layer())
        .with_state(upstream);
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let url = format!("http://{}/orders", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let app = router.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });

    // The inbound client retries nothing itself: each retry here is the test's.
    let inbound_client = client(RetryPolicy::new().with_max_attempts(1));
    let mut all = JoinSet::new();
    for order in 0..inbound {
        let (client, url) = (inbound_client.clone(), url.clone());
        all.spawn(async move {
            let send = || {
                let mut request = post_to(&url, "an order");
                request
                    .headers_mut()
                    .insert("idempotency-key", format!("order-{order}").parse().unwrap());
                client.clone().oneshot(request)
            };
            let (first, ..) = read(send().await.unwrap()).await;
            assert_eq!(first, StatusCode::INTERNAL_SERVER_ERROR);
            let (rerun, ..) = read(send().await.unwrap()).await;
            assert_eq!(rerun, StatusCode::CREATED);
        });
    }
    all.join_all().await;
    server.abort();
    downstream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_of_a_record_sends_the_same_keys_and_the_downstream_runs_each_call_once() {
    let downstream = run_each_twice(100, true).await;
    assert_eq!(
        downstream.runs(),
        500,
        "five calls per inbound request, each run once"
    );
    let attempts = downstream.attempts_per_key();
    assert_eq!(
        attempts.len(),
        500,
        "five distinct keys per inbound request"
    );
    assert!(
        attempts.values().all(|n| *n == 2),
        "each key sent by both runs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_random_key_per_call_a_rerun_runs_every_call_again() {
    let downstream = run_each_twice(100, false).await;
    assert_eq!(downstream.runs(), 1000, "every call of both runs ran");
}
