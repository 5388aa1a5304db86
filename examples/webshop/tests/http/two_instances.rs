//! Two shop instances on one store and one SQLite file, as behind a load balancer.

use axum::http::StatusCode;
use idem_tests::{Backend, all_at_once, answer};
use serde_json::json;

use crate::{
    TestShop, api_order, form_token, new_browser, seckill, status, support, twenty_clicks, voucher,
};

idem_tests::on_every_store!(
    two_instances_place_one_order_for_duplicates_split_across_them,
    two_instances_sell_exactly_the_stock_to_200_buyers,
);

async fn two_instances_place_one_order_for_duplicates_split_across_them<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let instances = [shop.router.clone(), shop.another_instance().await];
    // A browser whose session one instance started, its form issued by the other, and
    // its posts spread over both: the session is the same browser on either.
    let s1 = new_browser(&instances[1]).await;

    let token = form_token(&instances[0], &s1).await;
    let statuses = twenty_clicks(&instances, &s1, &token).await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::SEE_OTHER),
        "every click lands on the order: {statuses:?}"
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);

    // An API client's retries, spread the same way.
    let routers = instances.clone();
    all_at_once(20, |i| {
        let router = routers[i % 2].clone();
        async move {
            let body = json!({ "product_id": 1, "quantity": 1 });
            status(&router, api_order("k", "7", &body)).await
        }
    })
    .await;
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 2);
    let retry = answer(
        &instances[1],
        api_order("k", "7", &json!({ "product_id": 1, "quantity": 1 })),
    )
    .await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(retry.json()["id"], 2);
}

async fn two_instances_sell_exactly_the_stock_to_200_buyers<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let instances = [shop.router.clone(), shop.another_instance().await];
    // 200 buyers, each clicking twice — once on each instance.
    let routers = instances.clone();
    let statuses = all_at_once(400, |i| {
        let router = routers[i % 2].clone();
        let user = format!("buyer-{}", i / 2);
        async move { status(&router, seckill(1, Some(&user))).await }
    })
    .await;
    support::assert_sold_exactly(&statuses, 100);
    assert_eq!(
        voucher(&instances[1]).await,
        json!({ "id": 1, "stock": 0, "sold": 100 })
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM voucher_orders").await, 100);
    assert_eq!(
        shop.count("SELECT COUNT(DISTINCT user_id) FROM voucher_orders")
            .await,
        100
    );
}
