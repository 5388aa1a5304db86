//! What the layer adds to the answers it gives about a key: the retention it keeps the key
//! for (`Idempotency-TTL`), and what the application's hook on replays changes — never
//! the stored response, never a second run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::routing::post;
use idem_axum::IdempotencyLayer;
use idem_tests::{Backend, Shop, send, shop_on};

use crate::{CLIENT, Seen, app, pay, post_key, request};

idem_tests::on_every_store!(
    the_retention_is_advertised_on_the_answers_about_a_kept_key_only,
    the_retention_header_can_be_renamed_or_left_out,
    a_hook_adjusts_each_replay_from_the_stored_response_and_never_runs_the_handler,
);

const TTL: &str = "idempotency-ttl";

/// A response's headers in order, as [`Seen`] holds them.
type Headers = Vec<(String, Vec<u8>)>;

/// The guarded routes of this module, on `layer`, under an `Idem` on `store`.
async fn routes_on<B: Backend>(backend: &B, shop: &Shop, layer: &IdempotencyLayer) -> Router {
    let idem = idem_axum::Idem::builder()
        .with_store(backend.store())
        .with_client_identity(idem_axum::identity::ClientHeader::new(CLIENT))
        .build();
    Router::new()
        .route("/pay", post(pay).route_layer(layer.clone()))
        .with_state(shop.clone())
        .layer(idem.layer())
}

async fn the_retention_is_advertised_on_the_answers_about_a_kept_key_only<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let day = Some(b"86400".as_slice());

    // Kept: the first response and its replay say for how long.
    let first = Seen::of(post_key(&app, "/pay", "ttl-1").await).await;
    assert_eq!(first.header(TTL), day, "{first:?}");
    let replay = Seen::of(post_key(&app, "/pay", "ttl-1").await).await;
    assert!(replay.replayed());
    assert_eq!(replay.header(TTL), day);
    assert_eq!(replay.unmarked(), first, "in the same place, once");
    // A response too large to keep is still a kept key: its retry gets a 409 that ends it.
    let too_large = Seen::of(post_key(&app, "/big", "ttl-2").await).await;
    assert_eq!(too_large.header(TTL), day);

    // The retry of a request still running: the one refusal retried under its key.
    let running = tokio::spawn({
        let app = app.clone();
        async move { Seen::of(post_key(&app, "/gated", "ttl-3").await).await }
    });
    shop.until_runs(3).await;
    let wait = Seen::of(post_key(&app, "/gated", "ttl-3").await).await;
    assert_eq!(wait.problem(), "request-in-progress");
    assert_eq!(wait.header(TTL), day);
    shop.open_gate();
    assert_eq!(running.await.unwrap().header(TTL), day);

    // Not kept, or final refusals: nothing to advertise.
    let not_kept = [
        Seen::of(post_key(&app, "/failing", "ttl-4").await).await,
        Seen::of(send(&app, request("/validated", "alice", Some("ttl-5"), "{}")).await).await,
        Seen::of(post_key(&app, "/pay", "").await).await,
        Seen::of(send(&app, request("/pay", "alice", Some("ttl-1"), "{}")).await).await,
        Seen::of(post_key(&app, "/big", "ttl-2").await).await,
    ];
    let statuses = not_kept.each_ref().map(|seen| seen.status.as_u16());
    assert_eq!(statuses, [500, 422, 400, 422, 409]);
    for seen in &not_kept {
        assert_eq!(seen.header(TTL), None, "{seen:?}");
    }
    assert_eq!(shop.runs(), 4, "pay, big, gated and failing, once each");
}

async fn the_retention_header_can_be_renamed_or_left_out<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let renamed = HeaderName::from_static("x-key-kept-for");
    let hour = IdempotencyLayer::new()
        .with_retention(Duration::from_secs(3600))
        .with_retention_header(Some(renamed.clone()));
    let app = routes_on(&backend, &shop, &hour).await;
    for _ in 0..2 {
        let seen = Seen::of(post_key(&app, "/pay", "renamed").await).await;
        assert_eq!(seen.header(renamed.as_str()), Some(b"3600".as_slice()));
        assert_eq!(seen.header(TTL), None);
    }
    let silent = IdempotencyLayer::new().with_retention_header(None);
    let app = routes_on(&backend, &shop, &silent).await;
    for _ in 0..2 {
        let seen = Seen::of(post_key(&app, "/pay", "silent").await).await;
        assert_eq!(seen.header(TTL), None, "{seen:?}");
    }
    assert_eq!(shop.runs(), 2);
}

async fn a_hook_adjusts_each_replay_from_the_stored_response_and_never_runs_the_handler<
    B: Backend,
>() {
    let backend = B::start().await;
    let shop = Shop::new();
    // What the hook was given, each time.
    let given: Arc<Mutex<Vec<Headers>>> = Arc::default();
    let layer = IdempotencyLayer::new().on_replay({
        let given = Arc::clone(&given);
        move |replayed| {
            let headers = replayed.headers().iter();
            let seen = headers.map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()));
            given.lock().unwrap().push(seen.collect());
            let retry = replayed.request_headers().get("x-request-id").cloned();
            let headers = replayed.headers_mut();
            headers.remove("set-cookie");
            headers.insert(
                "x-replay-for",
                retry.unwrap_or(HeaderValue::from_static("-")),
            );
        }
    });
    let app = routes_on(&backend, &shop, &layer).await;
    let post = |id: &'static str| {
        let mut request = request("/pay", "alice", Some("hooked"), r#"{"amount":100}"#);
        request
            .headers_mut()
            .insert("x-request-id", HeaderValue::from_static(id));
        send(&app, request)
    };

    let first = Seen::of(post("r-1").await).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        first.header("x-replay-for"),
        None,
        "a first run is no replay"
    );
    assert!(given.lock().unwrap().is_empty());

    let replays = [
        Seen::of(post("r-2").await).await,
        Seen::of(post("r-3").await).await,
    ];
    for (replay, id) in replays.iter().zip(["r-2", "r-3"]) {
        assert!(replay.replayed());
        assert_eq!(replay.status, first.status);
        assert_eq!(replay.body, first.body);
        assert_eq!(
            replay.header("x-replay-for"),
            Some(id.as_bytes()),
            "{replay:?}"
        );
        assert_eq!(
            replay.header("set-cookie"),
            None,
            "removed from this replay"
        );
    }
    // The hook met the stored response both times, cookies and all: what it changed in
    // one replay was that replay's alone.
    let given = given.lock().unwrap();
    assert_eq!(given.len(), 2);
    assert_eq!(given[0], given[1]);
    // (`Content-Length` is the server's, set outside the layer from the body.)
    let mut stored = first.headers.clone();
    stored.retain(|(name, _)| name != "content-length");
    stored.push(("idempotent-replayed".to_owned(), b"true".to_vec()));
    let mut seen = given[0].clone();
    stored.sort();
    seen.sort();
    assert_eq!(
        seen, stored,
        "the stored headers, the marker, the retention"
    );
    assert_eq!(shop.runs(), 1, "the handler ran once for three posts");
}
