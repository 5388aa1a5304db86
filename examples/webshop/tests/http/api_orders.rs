//! Orders through the JSON API: retries replay the first order, concurrent ones place one,
//! and a key, a client and good JSON are required.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use idem_tests::{Backend, all_at_once, answer};
use serde_json::json;

use crate::{TestShop, api_order, get, json_request, status};

idem_tests::on_every_store!(
    api_order_retries_replay_the_first_order,
    concurrent_api_retries_place_one_order,
    api_orders_need_a_key_and_a_client_and_good_json,
);

async fn api_order_retries_replay_the_first_order<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let body = json!({ "product_id": 2, "quantity": 3 });
    let first = answer(&shop.router, api_order("k1", "7", &body)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        first.json(),
        json!({ "id": 1, "product_id": 2, "quantity": 3, "client": "user:7" })
    );
    for _ in 0..3 {
        let retry = answer(&shop.router, api_order("k1", "7", &body)).await;
        assert_eq!(retry.status, StatusCode::CREATED);
        assert_eq!(retry.body, first.body);
        assert_eq!(retry.headers["idempotent-replayed"], "true");
    }
    // The same key with another order is refused; another user's key is their own.
    let other = json!({ "product_id": 2, "quantity": 4 });
    assert_eq!(
        status(&shop.router, api_order("k1", "7", &other)).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        status(&shop.router, api_order("k1", "8", &body)).await,
        StatusCode::CREATED
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 2);
    let orders = answer(&shop.router, get("/api/orders", None)).await;
    assert_eq!(orders.status, StatusCode::OK);
    assert_eq!(orders.json().as_array().unwrap().len(), 2);
}

async fn concurrent_api_retries_place_one_order<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let router = shop.router.clone();
    let statuses = all_at_once(20, |_| {
        let router = router.clone();
        async move {
            let body = json!({ "product_id": 1, "quantity": 1 });
            status(&router, api_order("k", "7", &body)).await
        }
    })
    .await;
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);
}

async fn api_orders_need_a_key_and_a_client_and_good_json<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let body = json!({ "product_id": 1, "quantity": 1 });
    let no_key = json_request(Method::POST, "/api/orders", &[("x-user-id", "7")], &body);
    assert_eq!(status(&shop.router, no_key).await, StatusCode::BAD_REQUEST);
    let no_client = json_request(
        Method::POST,
        "/api/orders",
        &[("idempotency-key", "k")],
        &body,
    );
    assert_eq!(
        status(&shop.router, no_client).await,
        StatusCode::BAD_REQUEST
    );
    let broken = Request::post("/api/orders")
        .header("idempotency-key", "k2")
        .header("x-user-id", "7")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{\"product_id\":"))
        .unwrap();
    assert!(status(&shop.router, broken).await.is_client_error());
    let no_product = json!({ "product_id": 99, "quantity": 1 });
    assert_eq!(
        status(&shop.router, api_order("k3", "7", &no_product)).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 0);
}
