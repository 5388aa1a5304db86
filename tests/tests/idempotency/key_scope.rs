//! What a key is scoped by: the client, the request (another request on the same key is
//! 422), the route and its nest prefix, a key function, a shared scope.

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_axum::idempotency::{Idempotency, RecordScope};
use idem_axum::identity::ClientHeader;
use idem_axum::store::Store;
use idem_axum::{Idem, IdempotencyLayer};
use idem_tests::{Backend, Shop, send, shop_on};

use crate::{CLIENT, KEY, Seen, app, pay, post_key, request};

idem_tests::on_every_store!(
    the_same_key_with_another_request_is_422,
    keys_are_scoped_by_client,
    a_key_function_dedupes_callbacks_from_any_address,
    the_same_key_on_another_nested_route_runs_that_route,
    a_key_reused_under_another_nest_prefix_is_422,
    outside_the_router_a_key_is_scoped_by_the_request_path,
    a_shared_key_never_replays_a_cookie_and_a_client_key_does,
);

async fn the_same_key_with_another_request_is_422<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    assert_eq!(
        post_key(&app, "/pay", "k").await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        post_key(&app, "/carts/1", "k").await.status(),
        StatusCode::CREATED
    );
    let other_body = request("/pay", "alice", Some("k"), r#"{"amount":999}"#);
    let other_query = request("/pay?currency=eur", "alice", Some("k"), r#"{"amount":100}"#);
    // One route, another path.
    let other_path = request("/carts/2", "alice", Some("k"), r#"{"amount":100}"#);
    for other in [other_body, other_query, other_path] {
        let seen = Seen::of(send(&app, other).await).await;
        assert_eq!(seen.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(seen.problem(), "idempotency-key-reused");
    }
    assert_eq!(shop.runs(), 2);
    // The original requests still replay.
    assert!(Seen::of(post_key(&app, "/pay", "k").await).await.replayed());
    assert!(
        Seen::of(post_key(&app, "/carts/1", "k").await)
            .await
            .replayed()
    );
    // Another route with the key is another operation: it runs.
    let other_route = Seen::of(post_key(&app, "/other", "k").await).await;
    assert!(!other_route.replayed(), "{other_route:?}");
    assert_eq!(shop.runs(), 3);
}

async fn keys_are_scoped_by_client<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    for client in ["alice", "bob"] {
        let seen = Seen::of(send(&app, request("/pay", client, Some("same"), "{}")).await).await;
        assert_eq!(seen.status, StatusCode::CREATED);
        assert!(!seen.replayed(), "{client} has keys of its own");
    }
    assert_eq!(shop.runs(), 2);
    let anonymous = Request::post("/pay")
        .header(&KEY, "same")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&app, anonymous).await.status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(shop.runs(), 2);
}

async fn a_key_function_dedupes_callbacks_from_any_address<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let notification = r#"{"source":"alipay","seq":42,"amount":100}"#;
    let deliver = async |channel: &str| {
        Seen::of(send(&app, request("/callback", channel, None, notification)).await).await
    };
    let front = deliver("front-channel").await;
    assert_eq!(front.body, "acknowledged 1");
    let back = deliver("back-channel").await;
    assert!(back.replayed(), "the second delivery is a replay: {back:?}");
    assert_eq!(back.body, "acknowledged 1");
    let next = r#"{"source":"alipay","seq":43,"amount":100}"#;
    let seen = Seen::of(send(&app, request("/callback", "front-channel", None, next)).await).await;
    assert_eq!(seen.body, "acknowledged 2");
    let unnamed =
        Seen::of(send(&app, request("/callback", "front-channel", None, "{}")).await).await;
    assert_eq!(unnamed.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        unnamed.detail(),
        "a notification names its `source` and `seq`"
    );
    assert_eq!(shop.runs(), 2);
}

/// A router with one guarded `POST /` whose handler answers `"{name} {run}"`, for nesting.
fn endpoint(name: &'static str, shop: &Shop, scope: RecordScope) -> Router {
    Router::new()
        .route(
            "/",
            post(move |State(shop): State<Shop>| async move {
                (StatusCode::CREATED, format!("{name} {}", shop.ran()))
            }),
        )
        .route_layer(IdempotencyLayer::new().with_record_scope(scope))
        .with_state(shop.clone())
}

fn idem_on<S: Store>(store: S) -> Idem {
    Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build()
}

async fn the_same_key_on_another_nested_route_runs_that_route<B: Backend>() {
    let backend = B::start().await;
    let idem = idem_on(backend.store());
    for scope in [RecordScope::Client, RecordScope::Shared] {
        let (orders, refunds) = (Shop::new(), Shop::new());
        // Under `nest` both handlers see the path `/`.
        let app = Router::new()
            .nest("/orders", endpoint("order", &orders, scope))
            .nest("/refunds", endpoint("refund", &refunds, scope))
            .layer(idem.layer());
        let key = format!("{scope:?}-1");
        let order = Seen::of(post_key(&app, "/orders", &key).await).await;
        assert_eq!(order.status, StatusCode::CREATED, "{scope:?}: {order:?}");
        assert_eq!(order.body, "order 1");
        let refund = Seen::of(post_key(&app, "/refunds", &key).await).await;
        assert!(!refund.replayed(), "{scope:?}: {refund:?}");
        assert_eq!(refund.status, StatusCode::CREATED, "{scope:?}: {refund:?}");
        assert_eq!(refund.body, "refund 1", "{scope:?}: the refund ran");
        assert_eq!((orders.runs(), refunds.runs()), (1, 1), "{scope:?}");
        // Each route still replays its own response.
        for (path, body) in [("/orders", "order 1"), ("/refunds", "refund 1")] {
            let retry = Seen::of(post_key(&app, path, &key).await).await;
            assert!(retry.replayed(), "{scope:?} {path}: {retry:?}");
            assert_eq!(retry.body, body, "{scope:?} {path}");
        }
        assert_eq!((orders.runs(), refunds.runs()), (1, 1), "{scope:?}");
    }
}

async fn a_key_reused_under_another_nest_prefix_is_422<B: Backend>() {
    let backend = B::start().await;
    let orders = Shop::new();
    // One route, `/{shop}/orders`; its handler sees `/` whichever shop is asked.
    let app = Router::new()
        .nest(
            "/{shop}/orders",
            endpoint("order", &orders, RecordScope::Client),
        )
        .layer(idem_on(backend.store()).layer());
    let first = Seen::of(post_key(&app, "/acme/orders", "k").await).await;
    assert_eq!(first.body, "order 1");
    let other_shop = Seen::of(post_key(&app, "/globex/orders", "k").await).await;
    assert_eq!(
        other_shop.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "another shop's order is another request: {other_shop:?}"
    );
    assert_eq!(other_shop.problem(), "idempotency-key-reused");
    assert_eq!(orders.runs(), 1);
    assert!(
        Seen::of(post_key(&app, "/acme/orders", "k").await)
            .await
            .replayed()
    );
}

async fn outside_the_router_a_key_is_scoped_by_the_request_path<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    // Around a whole router no route has matched yet: the request's path is the scope.
    let unguarded = Router::new()
        .route("/pay", post(pay))
        .route("/other", post(pay))
        .with_state(shop.clone());
    let guarded = Idempotency::new(unguarded, IdempotencyLayer::new());
    let app = Router::new()
        .fallback_service(guarded)
        .layer(idem_on(backend.store()).layer());
    let pay = Seen::of(post_key(&app, "/pay", "k").await).await;
    let other = Seen::of(post_key(&app, "/other", "k").await).await;
    assert!(!other.replayed(), "{other:?}");
    assert_eq!(
        (pay.status, other.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert_eq!(shop.runs(), 2);
    assert!(Seen::of(post_key(&app, "/pay", "k").await).await.replayed());
    assert_eq!(shop.runs(), 2);
}

async fn a_shared_key_never_replays_a_cookie_and_a_client_key_does<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let cookies = |seen: &Seen| {
        seen.headers
            .iter()
            .filter(|(name, _)| name == "set-cookie")
            .count()
    };

    let first = Seen::of(post_key(&app, "/shared-pay", "shared-1").await).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(cookies(&first), 2, "the first client gets its cookies");
    let replay = Seen::of(
        send(
            &app,
            request("/shared-pay", "bob", Some("shared-1"), r#"{"amount":100}"#),
        )
        .await,
    )
    .await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(
        cookies(&replay),
        0,
        "another client never gets them: {replay:?}"
    );
    let mut without_cookies = first.clone();
    without_cookies
        .headers
        .retain(|(name, _)| name != "set-cookie");
    assert_eq!(
        replay.unmarked(),
        without_cookies,
        "status, other headers, body"
    );
    assert_eq!(shop.runs(), 1);

    // A client's own key replays to that client only: its cookies with it.
    let first = Seen::of(post_key(&app, "/pay", "own-1").await).await;
    let replay = Seen::of(post_key(&app, "/pay", "own-1").await).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(cookies(&replay), 2, "{replay:?}");
    assert_eq!(replay.unmarked(), first);
    assert_eq!(shop.runs(), 2);
}
