//! Payment callbacks: paid once per source and seq, whatever the seq's length; malformed
//! ones are refused, naming the field, and leave nothing.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{Backend, all_at_once, answer};
use serde_json::json;

use crate::{RECORDS, StoredEntries, TestShop, api_order, callback, status};

idem_tests::on_every_store!(
    payment_callbacks_pay_once_per_source_and_seq,
    a_string_seq_of_any_length_is_paid_once,
    malformed_callbacks_are_refused_naming_the_field_and_leave_nothing,
);

async fn payment_callbacks_pay_once_per_source_and_seq<B: Backend>() {
    let shop = shop_with_an_order::<B>().await;

    let paid = json!({ "source": "alipay", "seq": 42, "order_id": 1, "amount": 2400 });
    let first = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.json(), json!({ "payment_id": 1, "status": "paid" }));
    // The back channel, from another address, and the provider's retries.
    for caller in ["10.0.0.2", "10.0.0.1"] {
        let repeat = answer(&shop.router, callback(&paid, caller)).await;
        assert_eq!(repeat.status, StatusCode::OK);
        assert_eq!(repeat.body, first.body);
    }
    let other = json!({ "source": "alipay", "seq": 42, "order_id": 1, "amount": 1 });
    assert_eq!(
        status(&shop.router, callback(&other, "10.0.0.1")).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // Many deliveries of a new pair at once: one payment.
    let router = shop.router.clone();
    let next = json!({ "source": "wechat", "seq": 1, "order_id": 1, "amount": 2400 });
    let statuses = all_at_once(20, |_| {
        let (router, next) = (router.clone(), next.clone());
        async move { status(&router, callback(&next, "10.0.0.3")).await }
    })
    .await;
    assert!(statuses.contains(&StatusCode::OK), "{statuses:?}");
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 2);

    let broken = Request::post("/api/payments/callback")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{not json"))
        .unwrap();
    assert_eq!(status(&shop.router, broken).await, StatusCode::BAD_REQUEST);
    let no_order = json!({ "source": "alipay", "seq": 43, "order_id": 9, "amount": 1 });
    assert_eq!(
        status(&shop.router, callback(&no_order, "10.0.0.1")).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 2);
}

/// A callback with a body as sent, which need not be JSON.
fn raw_callback(body: &str) -> Request<Body> {
    Request::post("/api/payments/callback")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("a request")
}

async fn a_string_seq_of_any_length_is_paid_once<B: Backend>() {
    let shop = shop_with_an_order::<B>().await;

    // A trade number longer than any integer type holds.
    let trade = "2013112011001004330000121536";
    let paid = json!({ "source": "alipay", "seq": trade, "order_id": 1, "amount": 2400 });
    let first = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    assert_eq!(first.json(), json!({ "payment_id": 1, "status": "paid" }));
    for caller in ["10.0.0.2", "10.0.0.1", "10.0.0.3"] {
        let repeat = answer(&shop.router, callback(&paid, caller)).await;
        assert_eq!(repeat.status, StatusCode::OK);
        assert_eq!(repeat.body, first.body);
    }
    // The same delivery in other words: keys reordered, spaced, with a field the shop
    // does not read.
    let reworded = format!(
        r#"{{ "amount": 2400, "order_id": 1, "seq": "{trade}", "source": "alipay", "sign": "x" }}"#
    );
    let repeat = answer(&shop.router, raw_callback(&reworded)).await;
    assert_eq!(repeat.status, StatusCode::OK);
    assert_eq!(repeat.body, first.body);
    let stored: String = sqlx::query_scalar("SELECT seq FROM payments WHERE id = 1")
        .fetch_one(&shop.db)
        .await
        .unwrap();
    assert_eq!(stored, trade);

    // A number and its digits as a string are one delivery; a string is kept exactly,
    // leading zeros and all.
    let number = json!({ "source": "wechat", "seq": 7, "order_id": 1, "amount": 100 });
    let as_number = answer(&shop.router, callback(&number, "10.0.0.1")).await;
    assert_eq!(as_number.status, StatusCode::OK);
    assert_eq!(as_number.json()["payment_id"], 2);
    let text = json!({ "source": "wechat", "seq": "7", "order_id": 1, "amount": 100 });
    let as_text = answer(&shop.router, callback(&text, "10.0.0.2")).await;
    assert_eq!(as_text.status, StatusCode::OK);
    assert_eq!(as_text.body, as_number.body);
    assert_eq!(as_text.headers["idempotent-replayed"], "true");
    let padded = json!({ "source": "wechat", "seq": "007", "order_id": 1, "amount": 100 });
    let other = answer(&shop.router, callback(&padded, "10.0.0.1")).await;
    assert_eq!(other.json()["payment_id"], 3);
    // And the same number with another amount is the same delivery, refused.
    let changed = json!({ "source": "wechat", "seq": "7", "order_id": 1, "amount": 1 });
    assert_eq!(
        status(&shop.router, callback(&changed, "10.0.0.1")).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 3);
}

async fn malformed_callbacks_are_refused_naming_the_field_and_leave_nothing<
    B: Backend + StoredEntries,
>() {
    let shop = shop_with_an_order::<B>().await;
    let before = shop.backend.stored_entries();

    let bad = [
        (
            r#"{"source": "alipay", "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": null, "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": {"n": 9}, "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": 9.5, "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": 2013112011001004330000121536, "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": "", "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (r#"{"seq": "9", "order_id": 1, "amount": 2400}"#, "`source`"),
        (
            r#"{"source": 7, "seq": "9", "order_id": 1, "amount": 2400}"#,
            "`source`",
        ),
        (
            r#"{"source": "alipay", "seq": "9", "order_id": "1", "amount": 2400}"#,
            "`order_id`",
        ),
        (
            r#"{"source": "alipay", "seq": "9", "order_id": 1}"#,
            "`amount`",
        ),
        (r#"["alipay", "9", 1, 2400]"#, "object"),
        ("{not json", "JSON"),
        ("", "JSON"),
    ];
    for (body, field) in bad {
        let refused = answer(&shop.router, raw_callback(body)).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{body}");
        let error = refused.json()["error"].as_str().map(str::to_owned);
        assert!(
            error.is_some_and(|error| error.contains(field)),
            "{body}: {}",
            refused.text()
        );
    }
    let unpaid = r#"{"source": "alipay", "seq": "9", "order_id": 1, "amount": 0}"#;
    let refused = answer(&shop.router, raw_callback(unpaid)).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(refused.text().contains("`amount`"), "{}", refused.text());
    let untyped = Request::post("/api/payments/callback")
        .body(Body::from(
            r#"{"source": "alipay", "seq": "9", "order_id": 1, "amount": 2400}"#,
        ))
        .unwrap();
    let refused = answer(&shop.router, untyped).await;
    assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(
        refused.text().contains("Content-Type"),
        "{}",
        refused.text()
    );

    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 0);
    assert_eq!(shop.backend.stored_entries(), before, "no record was left");
    assert_eq!(
        shop.count(RECORDS).await,
        1,
        "the order's record, and no callback's"
    );

    // The provider corrects the delivery and sends it again: it is the first.
    let corrected = json!({ "source": "alipay", "seq": "9", "order_id": 1, "amount": 2400 });
    let paid = answer(&shop.router, callback(&corrected, "10.0.0.1")).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    assert_eq!(paid.json(), json!({ "payment_id": 1, "status": "paid" }));
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 1);
}

/// A shop with one order placed through the API (order 1), for callbacks to pay.
async fn shop_with_an_order<B: Backend>() -> TestShop<B> {
    let shop = TestShop::<B>::start().await;
    let order = json!({ "product_id": 1, "quantity": 1 });
    assert_eq!(
        status(&shop.router, api_order("k", "7", &order)).await,
        StatusCode::CREATED
    );
    shop
}
