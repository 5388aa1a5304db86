//! The records in the shop's database: they commit with the order or the payment or not at
//! all, and a restarted shop on a fresh store replays from them.

use axum::http::StatusCode;
use idem_tests::{Backend, answer};
use serde_json::json;

use crate::{RECORDS, TestShop, api_order, callback};

idem_tests::on_every_store!(
    an_order_or_a_payment_and_its_record_commit_together_or_not_at_all,
    a_restarted_shop_on_a_fresh_store_replays_from_its_database,
);

/// Those of them that are completed: a stored response, no attempt owning them.
const COMPLETED_RECORDS: &str =
    "SELECT COUNT(*) FROM idem_records WHERE response IS NOT NULL AND owner IS NULL";

/// Makes every completion of a record fail inside its transaction, after the handler's
/// writes and before the commit, until [`HEAL`].
const BREAK_COMPLETION: &str = "CREATE TRIGGER fail_completion BEFORE UPDATE ON idem_records \
     BEGIN SELECT RAISE(ABORT, 'injected failure'); END";

const HEAL: &str = "DROP TRIGGER fail_completion";

async fn an_order_or_a_payment_and_its_record_commit_together_or_not_at_all<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let order = json!({ "product_id": 1, "quantity": 1 });
    let paid = json!({ "source": "alipay", "seq": "t1", "order_id": 1, "amount": 2400 });

    shop.execute(BREAK_COMPLETION).await;
    let failed = answer(&shop.router, api_order("k", "7", &order)).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 0);
    assert_eq!(shop.count(RECORDS).await, 0, "a 5xx keeps no record");
    shop.execute(HEAL).await;

    // The retry runs the handler once, and commits the order and its record.
    let placed = answer(&shop.router, api_order("k", "7", &order)).await;
    assert_eq!(placed.status, StatusCode::CREATED, "{}", placed.text());
    assert!(!placed.headers.contains_key("idempotent-replayed"));
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);
    assert_eq!(shop.count(COMPLETED_RECORDS).await, 1);
    let replayed = answer(&shop.router, api_order("k", "7", &order)).await;
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(replayed.body, placed.body);

    // The same for a payment callback.
    shop.execute(BREAK_COMPLETION).await;
    let failed = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 0);
    assert_eq!(shop.count(RECORDS).await, 1, "the order's only");
    shop.execute(HEAL).await;
    let recorded = answer(&shop.router, callback(&paid, "10.0.0.2")).await;
    assert_eq!(recorded.status, StatusCode::OK, "{}", recorded.text());
    assert_eq!(
        recorded.json(),
        json!({ "payment_id": 1, "status": "paid" })
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 1);
    assert_eq!(shop.count(COMPLETED_RECORDS).await, 2);
    let replayed = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(replayed.body, recorded.body);
}

async fn a_restarted_shop_on_a_fresh_store_replays_from_its_database<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let order = json!({ "product_id": 2, "quantity": 1 });
    let placed = answer(&shop.router, api_order("k", "7", &order)).await;
    assert_eq!(placed.status, StatusCode::CREATED);
    let paid = json!({ "source": "wechat", "seq": 5, "order_id": 1, "amount": 4900 });
    let recorded = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(recorded.status, StatusCode::OK);

    let (restarted, _store) = shop.restarted().await;
    let replayed = answer(&restarted, api_order("k", "7", &order)).await;
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(replayed.body, placed.body);
    let replayed = answer(&restarted, callback(&paid, "10.0.0.2")).await;
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(replayed.body, recorded.body);
    assert_eq!(
        shop.count("SELECT COUNT(*) FROM orders").await,
        1,
        "the handlers did not run again"
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 1);
}
