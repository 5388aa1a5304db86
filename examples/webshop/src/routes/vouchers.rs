//! A flash sale (秒杀): 100 vouchers, many buyers at once, one voucher per
//! user, and stock that never goes below zero.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use idem_axum::{
    lock::{Lease, Lock, LockError},
    store::Key,
};
use serde_json::{Value, json};

use crate::app::Shop;
use crate::client;
use crate::db::is_unique_violation;
use crate::error::ApiError;

/// How long a buyer's lock lives if its instance dies mid-purchase. A purchase is two
/// short statements; if one ever took longer, the unique index on
/// `voucher_orders (voucher_id, user_id)` still holds one voucher per user.
const PURCHASE_LEASE: Duration = Duration::from_secs(10);

/// `GET /api/vouchers/{id}`: `{id, stock, sold}`.
#[utoipa::path(get, path = "/api/vouchers/{id}", tag = "vouchers",
    params(("id" = i64, Path, description = "The voucher")),
    responses(
        (status = 200, description = "`{id, stock, sold}`", body = serde_json::Value),
        (status = 404, description = "No such voucher", body = serde_json::Value),
    ),
)]
pub(crate) async fn show(
    State(shop): State<Shop>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let voucher: Option<(i64, i64)> =
        sqlx::query_as("SELECT stock, sold FROM vouchers WHERE id = ?")
            .bind(id)
            .fetch_optional(shop.db())
            .await?;
    let (stock, sold) = voucher.ok_or(ApiError::new(StatusCode::NOT_FOUND, "no such voucher"))?;
    Ok(Json(json!({ "id": id, "stock": stock, "sold": sold })))
}

/// `POST /api/vouchers/{id}/seckill` with `X-User-Id`: `201` bought, `409` bought already
/// or a purchase of this user in progress, `410` sold out.
///
/// A [`Lock`] per (voucher, user), shared by every instance through the store, lets one
/// purchase per user run at a time; the stock is taken with one conditional `UPDATE`
/// (`… AND stock > 0`), so concurrent buyers can never take it below zero.
#[utoipa::path(post, path = "/api/vouchers/{id}/seckill", tag = "vouchers",
    params(
        ("id" = i64, Path, description = "The voucher"),
        ("x-user-id" = String, Header, description = "The buyer"),
    ),
    responses(
        (status = 201, description = "Bought", body = serde_json::Value),
        (status = 409, description = "Bought already, or this buyer's purchase in progress", body = serde_json::Value),
        (status = 410, description = "Sold out", body = serde_json::Value),
    ),
)]
pub(crate) async fn seckill(
    State(shop): State<Shop>,
    Path(voucher): Path<i64>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let user = client::user_id(&headers)
        .ok_or(ApiError::new(
            StatusCode::BAD_REQUEST,
            "send an X-User-Id header",
        ))?
        .to_owned();
    let vouchers = "SELECT 1 FROM vouchers WHERE id = ?";
    super::require_row(shop.db(), vouchers, voucher, "no such voucher").await?;

    let key = Key::hashed([
        "seckill".as_bytes(),
        &voucher.to_be_bytes()[..],
        user.as_bytes(),
    ]);
    let lock = Lock::new(shop.store().clone(), key, Lease::Fixed(PURCHASE_LEASE));
    let guard = match lock.try_acquire().await {
        Ok(guard) => guard,
        Err(LockError::Held { .. }) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "a purchase of this voucher by this user is in progress",
            ));
        }
        Err(error) => {
            eprintln!("seckill lock failed: {error}");
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the sale is busy; try again",
            ));
        }
    };
    let bought = buy(&shop, voucher, &user).await;
    // Released whatever the outcome: the database now answers later attempts. A failed
    // release only leaves the lock to its lease.
    if let Err(error) = guard.release().await {
        eprintln!("seckill unlock failed: {error}");
    }
    bought
}

/// One purchase, under the buyer's lock.
async fn buy(shop: &Shop, voucher: i64, user: &str) -> Result<(StatusCode, Json<Value>), ApiError> {
    let bought_before: Option<i64> =
        sqlx::query_scalar("SELECT id FROM voucher_orders WHERE voucher_id = ? AND user_id = ?")
            .bind(voucher)
            .bind(user)
            .fetch_optional(shop.db())
            .await?;
    if bought_before.is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this user has bought this voucher already",
        ));
    }
    // Writes first, so the transaction takes SQLite's write lock at once (see withdraw).
    let mut tx = shop.db().begin().await?;
    let taken = sqlx::query(
        "UPDATE vouchers SET stock = stock - 1, sold = sold + 1 WHERE id = ? AND stock > 0",
    )
    .bind(voucher)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !taken {
        return Err(ApiError::new(StatusCode::GONE, "sold out"));
    }
    let order: Result<i64, _> = sqlx::query_scalar(
        "INSERT INTO voucher_orders (voucher_id, user_id) VALUES (?, ?) RETURNING id",
    )
    .bind(voucher)
    .bind(user)
    .fetch_one(&mut *tx)
    .await;
    let order = match order {
        Ok(order) => order,
        // Dropping the transaction rolls the stock back.
        Err(error) if is_unique_violation(&error) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "this user has bought this voucher already",
            ));
        }
        Err(error) => return Err(error.into()),
    };
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "voucher_id": voucher, "user_id": user, "order_id": order })),
    ))
}
