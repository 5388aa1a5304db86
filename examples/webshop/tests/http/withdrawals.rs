//! Withdrawals: deducted once per ticket, and insufficient funds is the ticket's recorded
//! outcome.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use idem_tests::{Backend, all_at_once, answer};
use serde_json::json;

use crate::{TestShop, get, json_request, status};

idem_tests::on_every_store!(
    withdrawals_deduct_once_per_ticket,
    insufficient_funds_is_the_tickets_recorded_outcome,
);

async fn new_ticket(router: &Router) -> String {
    let ticket = answer(
        router,
        Request::post("/api/tickets").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(ticket.status, StatusCode::CREATED);
    ticket.json()["ticket_id"]
        .as_str()
        .expect("a ticket id")
        .to_owned()
}

fn withdraw(account: i64, ticket: &str, amount: i64) -> Request<Body> {
    json_request(
        Method::PUT,
        &format!("/api/accounts/{account}/withdrawals/{ticket}"),
        &[],
        &json!({ "amount": amount }),
    )
}

async fn balance(router: &Router) -> i64 {
    let account = answer(router, get("/api/accounts/1", None)).await;
    assert_eq!(account.status, StatusCode::OK);
    assert_eq!(account.json()["id"], 1);
    account.json()["balance"].as_i64().unwrap()
}

async fn withdrawals_deduct_once_per_ticket<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    assert_eq!(balance(&shop.router).await, 1000);
    let ticket = new_ticket(&shop.router).await;
    let first = answer(&shop.router, withdraw(1, &ticket, 300)).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.json(),
        json!({ "ticket_id": ticket, "amount": 300, "balance": 700 })
    );
    for _ in 0..3 {
        let retry = answer(&shop.router, withdraw(1, &ticket, 300)).await;
        assert_eq!(retry.status, StatusCode::OK);
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(balance(&shop.router).await, 700);
    // The ticket cannot be spent on another amount or another account.
    assert_eq!(
        status(&shop.router, withdraw(1, &ticket, 1)).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // Concurrent retries of one new ticket: one deduction.
    let ticket = new_ticket(&shop.router).await;
    let router = shop.router.clone();
    let statuses = all_at_once(20, |_| {
        let (router, ticket) = (router.clone(), ticket.clone());
        async move { status(&router, withdraw(1, &ticket, 100)).await }
    })
    .await;
    assert!(statuses.contains(&StatusCode::OK), "{statuses:?}");
    assert_eq!(balance(&shop.router).await, 600);
    assert_eq!(shop.count("SELECT COUNT(*) FROM withdrawals").await, 2);

    assert_eq!(
        status(&shop.router, withdraw(1, "no-such-ticket", 1)).await,
        StatusCode::NOT_FOUND
    );
    let ticket = new_ticket(&shop.router).await;
    assert_eq!(
        status(&shop.router, withdraw(1, &ticket, 0)).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        status(
            &shop.router,
            withdraw(9, &new_ticket(&shop.router).await, 1)
        )
        .await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status(&shop.router, get("/api/accounts/9", None)).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(balance(&shop.router).await, 600);
}

async fn insufficient_funds_is_the_tickets_recorded_outcome<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let ticket = new_ticket(&shop.router).await;
    let refused = answer(&shop.router, withdraw(1, &ticket, 5000)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.json()["balance"], 1000);
    assert_eq!(refused.json()["ticket_id"], ticket.as_str());
    // Money arrives; the ticket's outcome stays what it was.
    sqlx::query("UPDATE accounts SET balance = 10000 WHERE id = 1")
        .execute(&shop.db)
        .await
        .unwrap();
    let retry = answer(&shop.router, withdraw(1, &ticket, 5000)).await;
    assert_eq!(retry.status, StatusCode::CONFLICT);
    assert_eq!(retry.body, refused.body);
    assert_eq!(balance(&shop.router).await, 10000);
}
