//! A payment provider's callbacks, which arrive on the front and the back channel and
//! are retried until answered.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use idem_axum::IdempotencyLayer;
use idem_axum::idempotency::KeyScope;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::Shop;
use crate::db::is_unique_violation;
use crate::error::ApiError;

/// The provider's notification.
#[derive(Debug, Deserialize)]
pub(crate) struct Callback {
    source: String,
    seq: i64,
    order_id: i64,
    amount: i64,
}

/// What names one delivery, however often it is sent.
#[derive(Debug, Deserialize)]
struct Delivery {
    source: String,
    seq: i64,
}

/// The callback's guard: the key is the body's `source` and `seq` (the provider sends no
/// `Idempotency-Key`), in one key space for every caller, since the provider calls from
/// several addresses and the pair is unique by construction. A body without them is a
/// 400 that leaves nothing behind.
pub(crate) fn idempotency() -> IdempotencyLayer {
    IdempotencyLayer::new()
        .with_key_fn(|_head, body| {
            let delivery: Delivery = serde_json::from_slice(body).ok()?;
            // JSON of the pair, so no source can be made to look like another pair.
            serde_json::to_string(&(delivery.source, delivery.seq)).ok()
        })
        .with_key_scope(KeyScope::Shared)
        .with_required(true)
        .with_missing_key_message("the callback must be a JSON object with `source` and `seq`")
}

/// `POST /api/payments/callback`: records the payment once per (`source`, `seq`):
/// `200 {"payment_id", "status": "paid"}`, and the same body for every repeat.
///
/// The route's guard replays repeats and refuses the pair with another payload (422);
/// the unique index on `payments (source, seq)` holds the line behind it, for a repeat
/// that comes after the guard's record expired.
pub(crate) async fn callback(
    State(shop): State<Shop>,
    Json(callback): Json<Callback>,
) -> Result<Json<Value>, ApiError> {
    if callback.amount <= 0 {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "amount must be positive",
        ));
    }
    let order: Option<i64> = sqlx::query_scalar("SELECT id FROM orders WHERE id = ?")
        .bind(callback.order_id)
        .fetch_optional(shop.db())
        .await?;
    if order.is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such order"));
    }
    let inserted: Result<i64, _> = sqlx::query_scalar(
        "INSERT INTO payments (source, seq, order_id, amount) VALUES (?, ?, ?, ?) RETURNING id",
    )
    .bind(&callback.source)
    .bind(callback.seq)
    .bind(callback.order_id)
    .bind(callback.amount)
    .fetch_one(shop.db())
    .await;
    let payment_id = match inserted {
        Ok(id) => id,
        Err(error) if is_unique_violation(&error) => {
            let (id, order_id, amount): (i64, i64, i64) = sqlx::query_as(
                "SELECT id, order_id, amount FROM payments WHERE source = ? AND seq = ?",
            )
            .bind(&callback.source)
            .bind(callback.seq)
            .fetch_one(shop.db())
            .await?;
            if (order_id, amount) != (callback.order_id, callback.amount) {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "this delivery was already recorded with another payload",
                ));
            }
            id
        }
        Err(error) => return Err(error.into()),
    };
    Ok(Json(json!({ "payment_id": payment_id, "status": "paid" })))
}
