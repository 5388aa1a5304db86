//! A token is spent once: by one of two hundred posts, on one of two instances, only by
//! the client it was issued to, only before it expires, and by a post its client abandoned.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Form, Router};
use idem_axum::{FormTokenConfig, VerifyFormTokenLayer};
use idem_tests::{
    Backend, Shop, all_at_once, assert_ran_once, body_text, problem_code, shop_on,
    shop_on_two_instances,
};

use crate::{
    Order, accepted, app, app_with, count, idem, issue, multipart_content_type, multipart_order,
    order, order_form, post_form, post_typed,
};

idem_tests::on_every_store!(
    two_hundred_posts_with_one_token_run_the_handler_once,
    two_instances_on_one_store_accept_a_token_once,
    a_token_is_refused_from_another_client_and_stays_usable,
    an_expired_token_is_refused,
    rotation_hands_out_a_fresh_token,
);

async fn two_hundred_posts_with_one_token_run_the_handler_once<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    for path in ["/orders", "/upload"] {
        let token = issue(&app, "alice").await;
        let runs_before = shop.runs();
        let statuses = all_at_once(200, |_| {
            let (app, token) = (app.clone(), token.clone());
            async move {
                let response = if path == "/upload" {
                    let content_type = multipart_content_type();
                    post_typed(&app, path, "alice", &content_type, multipart_order(&token)).await
                } else {
                    post_form(&app, path, "alice", order(&token)).await
                };
                response.status()
            }
        })
        .await;
        assert_eq!(shop.runs() - runs_before, 1, "{path}: the handler ran once");
        assert_eq!(count(&statuses, StatusCode::CREATED), 1, "{path}");
        assert_eq!(count(&statuses, StatusCode::CONFLICT), 199, "{path}");
    }
}

async fn two_instances_on_one_store_accept_a_token_once<B: Backend>() {
    let (_backend, shop, instances) = shop_on_two_instances::<B>(app).await;
    // Issued by one instance, posted to both.
    let token = issue(&instances[0], "alice").await;
    let statuses = all_at_once(200, |i| {
        let (app, token) = (instances[i % 2].clone(), token.clone());
        async move {
            post_form(&app, "/orders", "alice", order(&token))
                .await
                .status()
        }
    })
    .await;
    assert_eq!(statuses.len(), 200);
    assert_ran_once(&shop, &statuses);
}

async fn a_token_is_refused_from_another_client_and_stays_usable<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let alices = issue(&app, "alice").await;
    let bobs = issue(&app, "bob").await;
    let stolen = post_form(&app, "/orders", "bob", order(&alices)).await;
    assert_eq!(stolen.status(), StatusCode::CONFLICT);
    assert_eq!(problem_code(stolen).await, "invalid-form-token");
    assert_eq!(shop.runs(), 0);

    let own = accepted(&app, "/orders", "alice", &alices, "still usable by alice").await;
    assert_eq!(body_text(own).await, "ordered tea cup");
    let why = "bob's own token was not touched by his attempt with alice's";
    accepted(&app, "/orders", "bob", &bobs, why).await;
    assert_eq!(shop.runs(), 2);
}

async fn an_expired_token_is_refused<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::default();
    let config = FormTokenConfig::new().with_ttl(Duration::from_millis(300));
    let app = app_with(backend.store(), &shop, config);
    let stale = issue(&app, "alice").await;
    let fresh = issue(&app, "alice").await;
    accepted(&app, "/orders", "alice", &fresh, "inside its TTL").await;
    tokio::time::sleep(Duration::from_millis(400)).await; // past the 300 ms TTL
    let expired = post_form(&app, "/orders", "alice", order(&stale)).await;
    assert_eq!(expired.status(), StatusCode::CONFLICT);
    assert_eq!(problem_code(expired).await, "invalid-form-token");
    assert_eq!(shop.runs(), 1);
}

async fn rotation_hands_out_a_fresh_token<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let first = issue(&app, "alice").await;

    let response = post_form(&app, "/editing", "alice", order(&first)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let second = response.headers()["x-form-token"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(second, first);
    assert_eq!(
        body_text(response).await,
        second,
        "the handler's FormToken is the rotated token"
    );

    let replay = post_form(&app, "/editing", "alice", order(&first)).await;
    assert_eq!(replay.status(), StatusCode::CONFLICT);
    assert!(replay.headers().get("x-form-token").is_none());
    assert_eq!(
        post_form(&app, "/editing", "bob", order(&second))
            .await
            .status(),
        StatusCode::CONFLICT,
        "the rotated token is alice's too"
    );
    let next = post_form(&app, "/editing", "alice", order(&second)).await;
    assert_eq!(next.status(), StatusCode::OK);
    assert!(next.headers().contains_key("x-form-token"));
    assert_eq!(shop.runs(), 2);

    // Routes without rotation send no token back.
    let token = issue(&app, "alice").await;
    let plain = post_form(&app, "/orders", "alice", order(&token)).await;
    assert_eq!(plain.status(), StatusCode::CREATED);
    assert!(plain.headers().get("x-form-token").is_none());
}

async fn slow_order(State(shop): State<Shop>, Form(_order): Form<Order>) -> StatusCode {
    tokio::time::sleep(Duration::from_millis(100)).await;
    shop.ran();
    StatusCode::CREATED
}

/// A browser abandons the first POST of a double click: the request's future is dropped
/// after its token was spent. The submission must still be made — else the second click
/// is refused as a duplicate of an order that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_post_still_makes_its_submission() {
    let shop = Shop::default();
    let app = Router::new()
        .route("/form", get(order_form))
        .route(
            "/slow",
            post(slow_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .with_state(shop.clone())
        .layer(idem(idem_axum::MemoryStore::new()).layer());
    let token = issue(&app, "alice").await;
    let abandoned = tokio::time::timeout(
        Duration::from_millis(30),
        post_form(&app, "/slow", "alice", order(&token)),
    )
    .await;
    assert!(abandoned.is_err(), "the first POST is dropped mid-handler");
    let second = post_form(&app, "/slow", "alice", order(&token)).await;
    assert_eq!(second.status(), StatusCode::CONFLICT, "the token is spent");
    shop.until_exactly(1, "the abandoned submission completes")
        .await;
}
