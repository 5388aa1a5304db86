//! The handlers: `POST /payments` with its record completed in the payment's transaction
//! ([`pay`]) or by the layer after it ([`pay_then_record`]), and `GET /payments`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_axum::idempotency::IdempotencyRecord;
use idem_sqlx::sqlx::{self, SqliteConnection};
use idem_sqlx::{CommitError, SqliteStore};
use serde::{Deserialize, Serialize};

use crate::Payments;

/// The largest payment, in cents.
const MAX_AMOUNT: i64 = 100_000_000;

/// The longest account name, in characters.
const MAX_ACCOUNT: usize = 64;

/// What `POST /payments` takes.
#[derive(Debug, Deserialize)]
pub(crate) struct NewPayment {
    account: String,
    /// In cents.
    amount: i64,
}

impl NewPayment {
    /// Refuses what is not a payment, before anything is written.
    fn check(&self) -> Result<(), PaymentError> {
        let length = self.account.trim().chars().count();
        if length == 0 || length > MAX_ACCOUNT {
            return Err(PaymentError::invalid(
                "`account` must be 1 to 64 characters",
            ));
        }
        if !(1..=MAX_AMOUNT).contains(&self.amount) {
            return Err(PaymentError::invalid(
                "`amount` must be a whole number of cents from 1 to 100000000",
            ));
        }
        Ok(())
    }
}

/// A payment made.
#[derive(Debug, Serialize)]
pub(crate) struct Payment {
    payment_id: i64,
    account: String,
    amount: i64,
}

/// `POST /payments`, records in the database: the payment and the response a retry will
/// get commit in one transaction.
pub(crate) async fn pay(
    State(app): State<Payments>,
    record: IdempotencyRecord,
    Json(payment): Json<NewPayment>,
) -> Result<Response, PaymentError> {
    payment.check()?;
    app.call_the_provider().await;
    let mut tx = app.db.begin_with("BEGIN IMMEDIATE").await?;
    let paid = insert(&mut tx, payment).await?;
    let (stored, response) = record
        .stored_response((StatusCode::CREATED, Json(paid)))
        .await?;
    SqliteStore::commit_with_record(tx, record.key(), record.owner(), stored, record.retention())
        .await?;
    app.crash_point();
    Ok(response)
}

/// `POST /payments`, records in Redis: the payment commits, and the layer stores the
/// response once this has returned.
pub(crate) async fn pay_then_record(
    State(app): State<Payments>,
    Json(payment): Json<NewPayment>,
) -> Result<(StatusCode, Json<Payment>), PaymentError> {
    payment.check()?;
    app.call_the_provider().await;
    let mut tx = app.db.begin_with("BEGIN IMMEDIATE").await?;
    let paid = insert(&mut tx, payment).await?;
    tx.commit().await?;
    app.crash_point();
    Ok((StatusCode::CREATED, Json(paid)))
}

/// Writes `payment`.
async fn insert(tx: &mut SqliteConnection, payment: NewPayment) -> Result<Payment, sqlx::Error> {
    let (payment_id,): (i64,) =
        sqlx::query_as("INSERT INTO payments (account, amount) VALUES (?, ?) RETURNING id")
            .bind(&payment.account)
            .bind(payment.amount)
            .fetch_one(tx)
            .await?;
    Ok(Payment {
        payment_id,
        account: payment.account,
        amount: payment.amount,
    })
}

/// `GET /payments`: every payment, oldest first.
pub(crate) async fn list(State(app): State<Payments>) -> Result<Json<Vec<Payment>>, PaymentError> {
    let rows: Vec<(i64, String, i64)> =
        sqlx::query_as("SELECT id, account, amount FROM payments ORDER BY id")
            .fetch_all(&app.db)
            .await?;
    let payments = rows
        .into_iter()
        .map(|(payment_id, account, amount)| Payment {
            payment_id,
            account,
            amount,
        })
        .collect();
    Ok(Json(payments))
}

/// Why a payment was not made: a status, and a message as JSON `{"error"}`.
#[derive(Debug)]
pub(crate) struct PaymentError {
    status: StatusCode,
    message: &'static str,
}

impl PaymentError {
    fn invalid(message: &'static str) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message,
        }
    }

    /// A failure of the server's, logged; the client learns only that it failed.
    fn internal(error: &dyn std::error::Error) -> Self {
        eprintln!("payment failed: {error}");
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "the payment failed; nothing was paid",
        }
    }
}

impl From<sqlx::Error> for PaymentError {
    fn from(error: sqlx::Error) -> Self {
        Self::internal(&error)
    }
}

/// The response's body failed while it was read to be stored.
impl From<axum::Error> for PaymentError {
    fn from(error: axum::Error) -> Self {
        Self::internal(&error)
    }
}

impl From<CommitError> for PaymentError {
    fn from(error: CommitError) -> Self {
        match error {
            CommitError::RecordLost => Self {
                status: StatusCode::CONFLICT,
                message: "a retry of this request took it over; nothing was paid here, send \
                          it again for its outcome",
            },
            error => Self::internal(&error),
        }
    }
}

impl IntoResponse for PaymentError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        (self.status, Json(body)).into_response()
    }
}
