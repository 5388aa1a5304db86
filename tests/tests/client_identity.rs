//! Who the client is behind a reverse proxy, over HTTP, on `MemoryStore` and on a real
//! Redis: `TrustedProxyIp` reads only the forwarding header the proxy writes, so a client
//! cannot choose its identity with another one. Every request comes from a trusted proxy
//! peer (`ConnectInfo` of `10.0.0.1`), which appended the real client's address to
//! `X-Forwarded-For` and passed the client's own `Forwarded` through, as nginx, AWS ALB
//! and HAProxy do.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_axum::identity::{ForwardingHeader, TrustedProxyIp};
use idem_axum::{Idem, IdempotencyLayer, avoid_repeat, store::Store};
use idem_tests::{Backend, Shop, body_text, send};

idem_tests::on_every_store!(
    a_new_forged_forwarded_on_each_request_is_still_one_client,
    a_forged_forwarded_naming_another_user_does_not_lock_them_out,
    a_forged_forwarded_cannot_replay_another_users_response,
    a_forged_x_forwarded_for_is_ignored_when_the_proxy_writes_forwarded,
);

/// The proxy in front of the app: the only peer whose forwarding headers count.
const PROXY: &str = "10.0.0.1";
/// The client the proxy saw (the last hop it appended to `X-Forwarded-For`).
const CLIENT: &str = "198.51.100.4";
/// Another user, whose address the client names in a forged header.
const VICTIM: &str = "203.0.113.7";

#[avoid_repeat(timeout = "30s")]
async fn place_order(State(counter): State<Shop>) -> StatusCode {
    counter.ran();
    StatusCode::CREATED
}

/// Answers with the order's number, so a replay shows whose order it was.
async fn pay(State(counter): State<Shop>) -> (StatusCode, String) {
    (StatusCode::CREATED, format!("order {}", counter.ran()))
}

/// The proxies' network.
fn proxies() -> TrustedProxyIp {
    TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap()])
}

/// The app behind the proxy: clients told apart by `TrustedProxyIp` with the default
/// header, `X-Forwarded-For`.
fn app<S: Store>(store: S, counter: &Shop) -> Router {
    app_with(store, counter, proxies())
}

fn app_with<S: Store>(store: S, counter: &Shop, client_identity: TrustedProxyIp) -> Router {
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(client_identity)
        .build();
    Router::new()
        .route("/orders", post(place_order))
        .route(
            "/payments",
            post(pay).route_layer(IdempotencyLayer::new().with_required(true)),
        )
        .with_state(counter.clone())
        .layer(idem.layer())
}

/// A request as the proxy hands it on: from the proxy's address, with the client's
/// address appended to `X-Forwarded-For` and the client's own headers kept.
fn through_proxy(path: &str, client: &str, headers: &[(&str, &str)]) -> Request<Body> {
    from_proxy(path, headers, ("x-forwarded-for", client))
}

/// A request from the proxy's address with the client's `headers`, then the header the
/// proxy wrote.
fn from_proxy(path: &str, headers: &[(&str, &str)], written: (&str, &str)) -> Request<Body> {
    let mut request = Request::post(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request
        .header(written.0, written.1)
        .body(Body::empty())
        .expect("a request");
    let peer = SocketAddr::new(PROXY.parse().unwrap(), 40000);
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

async fn a_new_forged_forwarded_on_each_request_is_still_one_client<B: Backend>() {
    let backend = B::start().await;
    let counter = Shop::new();
    let app = app(backend.store(), &counter);
    let mut statuses = Vec::new();
    for i in 0..5 {
        let forged = format!("for=6.6.6.{i}");
        let request = through_proxy("/orders", CLIENT, &[("forwarded", &forged)]);
        statuses.push(send(&app, request).await.status());
    }
    assert_eq!(statuses[0], StatusCode::CREATED);
    assert!(
        statuses[1..].iter().all(|s| *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    assert_eq!(counter.runs(), 1);
}

async fn a_forged_forwarded_naming_another_user_does_not_lock_them_out<B: Backend>() {
    let backend = B::start().await;
    let counter = Shop::new();
    let app = app(backend.store(), &counter);
    let forged = format!("for={VICTIM}");
    let attack = through_proxy("/orders", CLIENT, &[("forwarded", &forged)]);
    assert_eq!(send(&app, attack).await.status(), StatusCode::CREATED);
    // The victim's own first order is theirs to place.
    let own = through_proxy("/orders", VICTIM, &[]);
    assert_eq!(send(&app, own).await.status(), StatusCode::CREATED);
    assert_eq!(counter.runs(), 2);
    // And the attacker's request counted as the attacker's.
    let again = through_proxy("/orders", CLIENT, &[]);
    assert_eq!(send(&app, again).await.status(), StatusCode::CONFLICT);
}

async fn a_forged_forwarded_cannot_replay_another_users_response<B: Backend>() {
    let backend = B::start().await;
    let counter = Shop::new();
    let app = app(backend.store(), &counter);
    let key = ("idempotency-key", "order-1");
    let first = send(&app, through_proxy("/payments", VICTIM, &[key])).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(body_text(first).await, "order 1");

    let forged = format!("for={VICTIM}");
    let attack = through_proxy("/payments", CLIENT, &[key, ("forwarded", &forged)]);
    let answer = send(&app, attack).await;
    assert_eq!(answer.status(), StatusCode::CREATED);
    assert!(
        answer.headers().get("idempotent-replayed").is_none(),
        "the victim's response was replayed to another client"
    );
    assert_eq!(body_text(answer).await, "order 2");
    assert_eq!(counter.runs(), 2);
}

async fn a_forged_x_forwarded_for_is_ignored_when_the_proxy_writes_forwarded<B: Backend>() {
    let backend = B::start().await;
    let counter = Shop::new();
    let by_forwarded = proxies().with_header(ForwardingHeader::Forwarded);
    let app = app_with(backend.store(), &counter, by_forwarded);
    let written = ("forwarded", "for=198.51.100.4;proto=https");
    let mut statuses = Vec::new();
    for i in 0..5 {
        let forged = format!("6.6.6.{i}, {VICTIM}");
        let request = from_proxy("/orders", &[("x-forwarded-for", &forged)], written);
        statuses.push(send(&app, request).await.status());
    }
    assert_eq!(statuses[0], StatusCode::CREATED);
    assert!(
        statuses[1..].iter().all(|s| *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    let victim = from_proxy("/orders", &[], ("forwarded", &format!("for={VICTIM}")));
    assert_eq!(send(&app, victim).await.status(), StatusCode::CREATED);
    assert_eq!(counter.runs(), 2);
}
