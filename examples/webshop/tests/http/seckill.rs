//! The flash sale: one voucher per user, and none once the stock is sold.

use axum::Router;
use axum::http::StatusCode;
use idem_tests::{Backend, all_at_once};
use serde_json::json;

use crate::{TestShop, get, seckill, status, voucher};

idem_tests::on_every_store!(seckill_sells_one_voucher_per_user_and_stops_at_zero);

async fn seckill_sells_one_voucher_per_user_and_stops_at_zero<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    assert_eq!(
        voucher(&shop.router).await,
        json!({ "id": 1, "stock": 100, "sold": 0 })
    );
    assert_eq!(seckill_as(&shop.router, 1, "u1").await, StatusCode::CREATED);
    assert_eq!(
        seckill_as(&shop.router, 1, "u1").await,
        StatusCode::CONFLICT
    );

    // One user's many clicks at once: one voucher.
    let router = shop.router.clone();
    let statuses = all_at_once(20, |_| {
        let router = router.clone();
        async move { status(&router, seckill(1, Some("u2"))).await }
    })
    .await;
    let bought = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    assert_eq!(bought, 1, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT)
    );
    assert_eq!(
        voucher(&shop.router).await,
        json!({ "id": 1, "stock": 98, "sold": 2 })
    );

    sqlx::query("UPDATE vouchers SET stock = 1 WHERE id = 1")
        .execute(&shop.db)
        .await
        .unwrap();
    assert_eq!(seckill_as(&shop.router, 1, "u3").await, StatusCode::CREATED);
    assert_eq!(seckill_as(&shop.router, 1, "u4").await, StatusCode::GONE);
    assert_eq!(voucher(&shop.router).await["stock"], 0);

    assert_eq!(
        status(&shop.router, seckill(1, None)).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        seckill_as(&shop.router, 9, "u5").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status(&shop.router, get("/api/vouchers/9", None)).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM voucher_orders").await, 3);
}

/// The status of `user`'s purchase of voucher `voucher` in the flash sale.
async fn seckill_as(router: &Router, voucher: i64, user: &str) -> StatusCode {
    status(router, seckill(voucher, Some(user))).await
}
