//! The shop's handlers, one module per thing the shop deals in.

pub(crate) mod accounts;
pub(crate) mod orders;
pub(crate) mod pages;
pub(crate) mod payments;
pub(crate) mod tickets;
pub(crate) mod vouchers;

use axum::http::StatusCode;
use sqlx::{Encode, Sqlite, SqlitePool, Type};

use crate::error::ApiError;

/// `Ok` when `query`, a `SELECT 1 … WHERE id = ?`, finds the row `id`; otherwise a 404
/// saying `missing`.
async fn require_row<'q, T>(
    db: &SqlitePool,
    query: &'q str,
    id: T,
    missing: &'static str,
) -> Result<(), ApiError>
where
    T: 'q + Send + Encode<'q, Sqlite> + Type<Sqlite>,
{
    let found: Option<i64> = sqlx::query_scalar(query)
        .bind(id)
        .fetch_optional(db)
        .await?;
    found
        .map(drop)
        .ok_or(ApiError::new(StatusCode::NOT_FOUND, missing))
}
