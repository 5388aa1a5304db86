//! Tickets: `create_ticket()`, a one-time id a client gets before a
//! withdrawal and sends with every attempt of it.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::app::Shop;
use crate::error::ApiError;

/// `POST /api/tickets`: `201 {"ticket_id"}`, a random id nobody can guess or reuse.
#[utoipa::path(post, path = "/api/tickets", tag = "accounts", responses(
    (status = 201, description = "`{ticket_id}`: a new ticket, to name one withdrawal", body = serde_json::Value),
))]
pub(crate) async fn create(
    State(shop): State<Shop>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let ticket = uuid::Uuid::new_v4().to_string();
    sqlx::query("INSERT INTO tickets (id) VALUES (?)")
        .bind(&ticket)
        .execute(shop.db())
        .await?;
    Ok((StatusCode::CREATED, Json(json!({ "ticket_id": ticket }))))
}
