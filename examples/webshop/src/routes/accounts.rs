//! Accounts and an idempotent `withdraw(ticket_id, amount)`: a withdrawal named by a
//! ticket pays once, however often it is sent.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::Shop;
use crate::db::is_unique_violation;
use crate::error::ApiError;

/// What a withdrawal asks for.
#[derive(Debug, Deserialize)]
pub(crate) struct Withdrawal {
    amount: i64,
}

/// `GET /api/accounts/{id}`: `{id, balance}`.
#[utoipa::path(get, path = "/api/accounts/{id}", tag = "accounts",
    params(("id" = i64, Path, description = "The account")),
    responses(
        (status = 200, description = "`{id, balance}`", body = serde_json::Value),
        (status = 404, description = "No such account", body = serde_json::Value),
    ),
)]
pub(crate) async fn show(
    State(shop): State<Shop>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let balance: Option<i64> = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = ?")
        .bind(id)
        .fetch_optional(shop.db())
        .await?;
    let balance = balance.ok_or(ApiError::new(StatusCode::NOT_FOUND, "no such account"))?;
    Ok(Json(json!({ "id": id, "balance": balance })))
}

/// `PUT /api/accounts/{id}/withdrawals/{ticket_id}`: deducts `amount` once per ticket.
///
/// The route's `IdempotencyLayer` (keyed by the ticket) replays the first answer for a
/// day; behind it, the `withdrawals` table holds one outcome per ticket (its primary
/// key), so even a retry after the record expired, or one that reached the database
/// beside the first, deducts nothing more and gets the same answer: `200` with the
/// withdrawal, or `409` when the balance did not cover it — the ticket's outcome too.
#[utoipa::path(put, path = "/api/accounts/{id}/withdrawals/{ticket_id}", tag = "accounts",
    params(
        ("id" = i64, Path, description = "The account"),
        ("ticket_id" = String, Path, description = "The ticket: the withdrawal's idempotency key"),
    ),
    request_body(content = serde_json::Value, description = "`{amount}`"),
    responses(
        (status = 200, description = "`{ticket_id, amount, balance}`, once per ticket and on every retry", body = serde_json::Value),
        (status = 404, description = "No such account or ticket", body = serde_json::Value),
        (status = 409, description = "Insufficient funds: the ticket's outcome for good", body = serde_json::Value),
    ),
)]
pub(crate) async fn withdraw(
    State(shop): State<Shop>,
    Path((account, ticket)): Path<(i64, String)>,
    Json(withdrawal): Json<Withdrawal>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let amount = withdrawal.amount;
    if amount <= 0 {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "amount must be positive",
        ));
    }
    let tickets = "SELECT 1 FROM tickets WHERE id = ?";
    super::require_row(shop.db(), tickets, &ticket, "no such ticket").await?;
    let accounts = "SELECT 1 FROM accounts WHERE id = ?";
    super::require_row(shop.db(), accounts, account, "no such account").await?;

    // The transaction writes first, so it takes SQLite's write lock at once and waits
    // for another writer instead of failing when it would upgrade a read.
    let mut tx = shop.db().begin().await?;
    let withdrawn =
        sqlx::query("UPDATE accounts SET balance = balance - ?1 WHERE id = ?2 AND balance >= ?1")
            .bind(amount)
            .bind(account)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
    let outcome = if withdrawn {
        "withdrawn"
    } else {
        "insufficient_funds"
    };
    let recorded = sqlx::query(
        "INSERT INTO withdrawals (ticket_id, account_id, amount, balance, outcome) \
         SELECT ?, id, ?, balance, ? FROM accounts WHERE id = ?",
    )
    .bind(&ticket)
    .bind(amount)
    .bind(outcome)
    .bind(account)
    .execute(&mut *tx)
    .await;
    match recorded {
        Ok(_) => tx.commit().await?,
        // The ticket has its outcome already: undo this deduction, answer with that one.
        Err(error) if is_unique_violation(&error) => tx.rollback().await?,
        Err(error) => return Err(error.into()),
    }

    let (first_account, first_amount, balance, outcome): (i64, i64, i64, String) = sqlx::query_as(
        "SELECT account_id, amount, balance, outcome FROM withdrawals WHERE ticket_id = ?",
    )
    .bind(&ticket)
    .fetch_one(shop.db())
    .await?;
    if (first_account, first_amount) != (account, amount) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "this ticket was used for another withdrawal",
        ));
    }
    let body = json!({ "ticket_id": ticket, "amount": amount, "balance": balance });
    if outcome == "withdrawn" {
        Ok((StatusCode::OK, Json(body)))
    } else {
        let mut body = body;
        body["error"] = json!("insufficient funds");
        Ok((StatusCode::CONFLICT, Json(body)))
    }
}
