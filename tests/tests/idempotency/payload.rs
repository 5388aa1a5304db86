//! What of the body counts in the fingerprint (`with_payload_fingerprint`): canonical
//! JSON, selected fields, none, a function. Each choice is checked on every way a request
//! can go — the first run, a repeat while the first runs (409 for the same payload, 422
//! for another: the check is not skipped while in progress), a replay — counting the
//! handler's runs; and the same choice on an anti-repeat window by client and body.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use idem_axum::identity::ClientHeader;
use idem_axum::payload::PayloadFingerprint;
use idem_axum::store::Store;
use idem_axum::{AvoidRepeatLayer, Idem, IdempotencyLayer, RepeatBy, avoid_repeat};
use idem_tests::{Backend, Shop, send, shop_on};
use serde_json::Value;

use crate::{CLIENT, Seen, gated, pay, request};

idem_tests::on_every_store!(
    canonical_json_replays_a_reordered_body_and_refuses_another_even_in_flight,
    selected_fields_leave_the_rest_out,
    an_ignored_body_and_a_function_of_it,
    a_window_by_body_takes_the_same_choice,
    the_attribute_takes_the_same_choice,
);

/// `#[avoid_repeat]` by client and body, the body as canonical JSON.
#[avoid_repeat(timeout = "60s", by = "client+body", payload = "canonical_json")]
async fn canonical_window(State(shop): State<Shop>, Json(_order): Json<Value>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

/// `#[avoid_repeat]` by client and body, only the amount counting.
#[avoid_repeat(timeout = "60s", by = "client+body", payload = ["/amount"])]
async fn amount_window(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

fn app<S: Store>(store: S, shop: &Shop) -> Router {
    let layer = |payload| IdempotencyLayer::new().with_payload_fingerprint(payload);
    let routes = Router::new()
        .route(
            "/json",
            post(pay).route_layer(layer(PayloadFingerprint::CanonicalJson)),
        )
        .route(
            "/json/gated",
            post(gated).route_layer(layer(PayloadFingerprint::CanonicalJson)),
        )
        .route(
            "/fields",
            post(pay).route_layer(layer(PayloadFingerprint::json_fields([
                "/amount", "/to/iban",
            ]))),
        )
        .route(
            "/ignored",
            post(pay).route_layer(layer(PayloadFingerprint::Ignored)),
        )
        .route(
            "/function",
            // What counts: the body without its first line (a signature, say).
            post(pay).route_layer(layer(PayloadFingerprint::with(|body| {
                body.splitn(2, |&b| b == b'\n')
                    .nth(1)
                    .unwrap_or_default()
                    .to_vec()
            }))),
        )
        .route(
            "/window",
            post(pay).route_layer(
                AvoidRepeatLayer::new(Duration::from_secs(60))
                    .with_repeat_by(RepeatBy::ClientAndBody)
                    .with_payload_fingerprint(PayloadFingerprint::CanonicalJson),
            ),
        )
        .route("/attribute/canonical", post(canonical_window))
        .route("/attribute/amount", post(amount_window))
        .with_state(shop.clone());
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    routes.layer(idem.layer())
}

async fn send_as_alice(app: &Router, path: &str, key: Option<&str>, body: &str) -> Seen {
    Seen::of(send(app, request(path, "alice", key, body)).await).await
}

async fn canonical_json_replays_a_reordered_body_and_refuses_another_even_in_flight<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let first = send_as_alice(
        &app,
        "/json",
        Some("k"),
        r#"{"amount": 100, "currency": "EUR"}"#,
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED);
    let reordered = send_as_alice(
        &app,
        "/json",
        Some("k"),
        r#"{"currency":"EUR","amount":100}"#,
    )
    .await;
    assert!(reordered.replayed(), "{reordered:?}");
    assert_eq!(reordered.unmarked(), first, "the first answer, replayed");
    let other = send_as_alice(
        &app,
        "/json",
        Some("k"),
        r#"{"currency":"EUR","amount":999}"#,
    )
    .await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(other.problem(), "idempotency-key-reused");
    assert_eq!(shop.runs(), 1);

    // While the first runs: the same payload reordered waits its turn (409), another is
    // refused as another request (422), not as one in progress.
    let in_flight = tokio::spawn({
        let app = app.clone();
        async move { send_as_alice(&app, "/json/gated", Some("g"), r#"{"amount":1,"to":"x"}"#).await }
    });
    shop.until_runs(2).await;
    let same = send_as_alice(&app, "/json/gated", Some("g"), r#"{"to":"x","amount":1}"#).await;
    assert_eq!(same.status, StatusCode::CONFLICT, "{same:?}");
    let another = send_as_alice(&app, "/json/gated", Some("g"), r#"{"to":"y","amount":1}"#).await;
    assert_eq!(
        another.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{another:?}"
    );
    shop.open_gate();
    assert_eq!(
        in_flight.await.expect("no panic").status,
        StatusCode::CREATED
    );
    let replayed = send_as_alice(
        &app,
        "/json/gated",
        Some("g"),
        r#"{ "to": "x", "amount": 1 }"#,
    )
    .await;
    assert!(replayed.replayed(), "{replayed:?}");
    assert_eq!(shop.runs(), 2);
}

async fn selected_fields_leave_the_rest_out<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let sent = r#"{"amount":100,"to":{"iban":"DE89"},"sent_at":"12:00:01"}"#;
    assert_eq!(
        send_as_alice(&app, "/fields", Some("k"), sent).await.status,
        StatusCode::CREATED
    );
    let resent = r#"{"sent_at":"12:00:09","to":{"iban":"DE89"},"amount":100}"#;
    assert!(
        send_as_alice(&app, "/fields", Some("k"), resent)
            .await
            .replayed()
    );
    for other in [
        r#"{"amount":101,"to":{"iban":"DE89"}}"#,
        r#"{"amount":100,"to":{"iban":"FR76"}}"#,
        r#"{"amount":100}"#,
    ] {
        let seen = send_as_alice(&app, "/fields", Some("k"), other).await;
        assert_eq!(seen.status, StatusCode::UNPROCESSABLE_ENTITY, "{other}");
    }
    assert_eq!(shop.runs(), 1);
}

async fn an_ignored_body_and_a_function_of_it<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    assert_eq!(
        send_as_alice(&app, "/ignored", Some("k"), "one")
            .await
            .status,
        StatusCode::CREATED
    );
    assert!(
        send_as_alice(&app, "/ignored", Some("k"), "another")
            .await
            .replayed()
    );
    // The method, path and query count whatever the body's choice.
    let query = send_as_alice(&app, "/ignored?x=1", Some("k"), "one").await;
    assert_eq!(query.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(shop.runs(), 1);

    let signed = |signature: &str, amount: u32| format!("{signature}\n{{\"amount\":{amount}}}");
    assert_eq!(
        send_as_alice(&app, "/function", Some("k"), &signed("sig-a", 1))
            .await
            .status,
        StatusCode::CREATED
    );
    assert!(
        send_as_alice(&app, "/function", Some("k"), &signed("sig-b", 1))
            .await
            .replayed()
    );
    let other = send_as_alice(&app, "/function", Some("k"), &signed("sig-a", 2)).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(shop.runs(), 2);
}

async fn a_window_by_body_takes_the_same_choice<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    assert_eq!(
        send_as_alice(&app, "/window", None, r#"{"a":1,"b":2}"#)
            .await
            .status,
        StatusCode::CREATED
    );
    let reordered = send_as_alice(&app, "/window", None, r#"{"b":2, "a":1}"#).await;
    assert_eq!(
        reordered.status,
        StatusCode::CONFLICT,
        "the same body, reordered: a repeat"
    );
    let other = send_as_alice(&app, "/window", None, r#"{"a":1,"b":3}"#).await;
    assert_eq!(
        other.status,
        StatusCode::CREATED,
        "another body is another request"
    );
    assert_eq!(shop.runs(), 2);
}

async fn the_attribute_takes_the_same_choice<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let post = |path, body| send_as_alice(&app, path, None, body);
    let canonical = "/attribute/canonical";
    assert_eq!(
        post(canonical, r#"{"a":1,"b":2}"#).await.status,
        StatusCode::CREATED
    );
    let reordered = post(canonical, r#"{ "b": 2, "a": 1 }"#).await;
    assert_eq!(
        reordered.status,
        StatusCode::CONFLICT,
        "a repeat, reordered"
    );
    assert_eq!(
        post(canonical, r#"{"a":1,"b":3}"#).await.status,
        StatusCode::CREATED
    );
    assert_eq!(shop.runs(), 2);

    let amount = "/attribute/amount";
    let first = post(amount, r#"{"amount":5,"at":"10:00:00"}"#).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let later = post(amount, r#"{"at":"10:00:01","amount":5}"#).await;
    assert_eq!(later.status, StatusCode::CONFLICT, "only the amount counts");
    assert_eq!(
        post(amount, r#"{"amount":6}"#).await.status,
        StatusCode::CREATED
    );
    assert_eq!(shop.runs(), 4);
}
