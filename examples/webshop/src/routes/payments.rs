//! A payment provider's callbacks, which arrive on the front and the back channel and
//! are retried until answered.
//!
//! A callback passes through, outermost first:
//!
//! - [`canonical_callback`], which checks the body's shape and hands on the callback in
//!   one canonical form, or answers a 4xx naming the field that is wrong. It runs before
//!   the guard, so a malformed callback leaves no record behind and a corrected retry of
//!   the same delivery is a first attempt;
//! - the guard ([`idempotency`]), which keys the delivery by `source` and `seq` and
//!   replays the first answer to every repeat;
//! - [`callback`], which records the payment and completes the guard's record in one
//!   transaction.
//!
//! Providers send trade numbers as strings, often longer than any integer type holds,
//! and some send small ones as JSON numbers, so `seq` is either and is kept as text: a
//! string exactly as sent, an integer as its decimal digits. `7` and `"7"` therefore name
//! one delivery, while `"007"` is another: a provider's string is its own, and leading
//! zeros may belong to it.

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::JsonRejection;
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use idem_axum::IdempotencyLayer;
use idem_axum::idempotency::{IdempotencyRecord, RecordScope};
use serde::Serialize;
use serde_json::{Map, Value, json};
use sqlx::SqliteConnection;

use crate::app::Shop;
use crate::db::is_unique_violation;
use crate::error::ApiError;
use crate::records;

/// The provider's notification, checked field by field.
///
/// Its JSON form is the canonical body the guard and the handler see: these four fields
/// in this order, `seq` as a string. Two deliveries that say the same thing — whatever
/// their key order, spacing, extra fields, or `seq` as a number or a string — are
/// therefore one request to the guard, just as the database tells them apart by
/// `source` and `seq` and compares only `order_id` and `amount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Callback {
    source: String,
    seq: String,
    order_id: i64,
    amount: i64,
}

/// Why a body is not a callback: the status it gets and what to tell the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BadCallback {
    status: StatusCode,
    message: String,
}

impl BadCallback {
    fn shape(message: String) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message,
        }
    }
}

impl From<BadCallback> for ApiError {
    fn from(bad: BadCallback) -> Self {
        Self::new(bad.status, bad.message)
    }
}

impl Callback {
    /// The callback a JSON body holds.
    ///
    /// # Errors
    ///
    /// A body that is not JSON, or not an object, or whose field is missing, of the wrong
    /// type or empty: 400, naming the field. An amount that is not positive: 422.
    fn from_json(body: &[u8]) -> Result<Self, BadCallback> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|error| BadCallback::shape(format!("the body is not JSON: {error}")))?;
        Self::from_value(&value)
    }

    /// The callback a JSON value holds; see [`Callback::from_json`].
    fn from_value(value: &Value) -> Result<Self, BadCallback> {
        let fields = value.as_object().ok_or_else(|| {
            BadCallback::shape(
                "the body must be a JSON object with `source`, `seq`, `order_id` and `amount`"
                    .to_owned(),
            )
        })?;
        let callback = Self {
            source: text(fields, "source")?,
            seq: seq(fields)?,
            order_id: integer(fields, "order_id")?,
            amount: integer(fields, "amount")?,
        };
        if callback.amount <= 0 {
            return Err(BadCallback {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                message: "`amount` must be positive".to_owned(),
            });
        }
        Ok(callback)
    }

    /// The canonical body: this callback as JSON.
    fn to_json(&self) -> Bytes {
        Bytes::from(json!(self).to_string())
    }

    /// What names this delivery, however often and however it is sent.
    fn delivery_key(&self) -> String {
        // JSON of the pair, so no source can be made to look like another pair.
        json!([self.source, self.seq]).to_string()
    }
}

/// The field `name`, present.
fn field<'a>(fields: &'a Map<String, Value>, name: &str) -> Result<&'a Value, BadCallback> {
    fields
        .get(name)
        .filter(|value| !value.is_null())
        .ok_or_else(|| BadCallback::shape(format!("`{name}` is missing")))
}

/// The field `name`, a string that is not empty.
fn text(fields: &Map<String, Value>, name: &str) -> Result<String, BadCallback> {
    match field(fields, name)? {
        Value::String(text) if !text.is_empty() => Ok(text.clone()),
        Value::String(_) => Err(BadCallback::shape(format!("`{name}` must not be empty"))),
        _ => Err(BadCallback::shape(format!("`{name}` must be a string"))),
    }
}

/// The field `name`, an integer.
fn integer(fields: &Map<String, Value>, name: &str) -> Result<i64, BadCallback> {
    field(fields, name)?
        .as_i64()
        .ok_or_else(|| BadCallback::shape(format!("`{name}` must be an integer")))
}

/// `seq` as text: a string as sent, an integer as its decimal digits.
fn seq(fields: &Map<String, Value>) -> Result<String, BadCallback> {
    match field(fields, "seq")? {
        Value::String(seq) if !seq.is_empty() => Ok(seq.clone()),
        Value::String(_) => Err(BadCallback::shape("`seq` must not be empty".to_owned())),
        // A number too large for an integer type is read as a float, already rounded:
        // taking it could make two trade numbers one.
        Value::Number(seq) if seq.is_i64() || seq.is_u64() => Ok(seq.to_string()),
        _ => Err(BadCallback::shape(
            "`seq` must be a string or an integer that fits in 64 bits (send a longer trade \
             number as a string)"
                .to_owned(),
        )),
    }
}

/// Checks a callback's body before the guard sees it, and hands on its canonical form
/// ([`Callback`]). A body that is not a callback gets its 4xx here, naming what is
/// wrong, and so leaves no idempotency record: the provider's corrected retry is taken
/// as the delivery's first.
pub(crate) async fn canonical_callback(
    mut head: Parts,
    body: Result<Json<Value>, JsonRejection>,
    next: Next,
) -> Response {
    let checked = body
        .map_err(|rejection| ApiError::new(rejection.status(), rejection.body_text()))
        .and_then(|Json(value)| Callback::from_value(&value).map_err(ApiError::from));
    let callback = match checked {
        Ok(callback) => callback,
        Err(error) => return error.into_response(),
    };
    let canonical = callback.to_json();
    // The body is another now; its headers must describe it.
    head.headers
        .insert(CONTENT_LENGTH, HeaderValue::from(canonical.len()));
    head.headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    next.run(Request::from_parts(head, Body::from(canonical)))
        .await
}

/// The callback's guard: the key is the body's `source` and `seq` (the provider sends no
/// `Idempotency-Key`), in one key space for every caller, since the provider calls from
/// several addresses and the pair is unique by construction. [`canonical_callback`] runs
/// first, so every body that reaches it has both.
pub(crate) fn idempotency() -> IdempotencyLayer {
    IdempotencyLayer::new()
        .with_idempotency_key_fn(|_head, body| {
            Callback::from_json(body)
                .ok()
                .map(|callback| callback.delivery_key())
        })
        .with_record_scope(RecordScope::Shared)
        .with_required(true)
        .with_missing_key_message("the callback must be a JSON object with `source` and `seq`")
}

/// `POST /api/payments/callback`: records the payment once per (`source`, `seq`):
/// `200 {"payment_id", "status": "paid"}`, and the same body for every repeat.
///
/// The route's guard replays repeats and refuses the pair with another payload (422).
/// The payment and the guard's record commit in one transaction ([`records`]), so a
/// repeat after a crash at any point finds both or neither; the unique index on
/// `payments (source, seq)` holds the line behind them, for a repeat that comes after the
/// record expired.
#[utoipa::path(post, path = "/api/payments/callback", tag = "payments",
    request_body(content = serde_json::Value, description = "`{source, seq, order_id, amount}`, `seq` a string or an integer: the pair `source` + `seq` names one delivery"),
    responses(
        (status = 200, description = "`{payment_id, status: \"paid\"}`, the same for every repeat", body = serde_json::Value),
        (status = 400, description = "A body of another shape, naming the field", body = serde_json::Value),
        (status = 422, description = "An `amount` not positive", body = serde_json::Value),
    ),
)]
pub(crate) async fn callback(
    State(shop): State<Shop>,
    record: IdempotencyRecord,
    body: Bytes,
) -> Result<Response, ApiError> {
    let callback = Callback::from_json(&body)?;
    let mut tx = records::begin(shop.db()).await?;
    let payment_id = pay(&mut tx, &callback).await?;
    let paid = Json(json!({ "payment_id": payment_id, "status": "paid" }));
    records::commit_with_response(tx, &record, paid).await
}

/// Records the payment `callback` reports, or finds the one its delivery recorded
/// already: its id.
async fn pay(tx: &mut SqliteConnection, callback: &Callback) -> Result<i64, ApiError> {
    let order: Option<i64> = sqlx::query_scalar("SELECT id FROM orders WHERE id = ?")
        .bind(callback.order_id)
        .fetch_optional(&mut *tx)
        .await?;
    if order.is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such order"));
    }
    let inserted: Result<i64, _> = sqlx::query_scalar(
        "INSERT INTO payments (source, seq, order_id, amount) VALUES (?, ?, ?, ?) RETURNING id",
    )
    .bind(&callback.source)
    .bind(&callback.seq)
    .bind(callback.order_id)
    .bind(callback.amount)
    .fetch_one(&mut *tx)
    .await;
    match inserted {
        Ok(id) => Ok(id),
        // SQLite fails the statement, not the transaction: it goes on.
        Err(error) if is_unique_violation(&error) => {
            let (id, order_id, amount): (i64, i64, i64) = sqlx::query_as(
                "SELECT id, order_id, amount FROM payments WHERE source = ? AND seq = ?",
            )
            .bind(&callback.source)
            .bind(&callback.seq)
            .fetch_one(&mut *tx)
            .await?;
            if (order_id, amount) != (callback.order_id, callback.amount) {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "this delivery was already recorded with another payload",
                ));
            }
            Ok(id)
        }
        Err(error) => Err(error.into()),
    }
}
