//! The handlers: `POST /payments` with its record completed in the payment's transaction
//! ([`pay`]) or by the layer after it ([`pay_then_record`]), and `GET /payments`, each one
//! core generic over the database (SQLite or PostgreSQL) that both arms of a `match` call.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_axum::idempotency::IdempotencyRecord;
use idem_sqlx::sqlx::{
    self, Encode, Executor, FromRow, IntoArguments, Pool, Postgres, Sqlite, Transaction, Type,
};
use idem_sqlx::{CommitError, SqlBackend, SqlStore};
use serde::{Deserialize, Serialize};

use crate::{Database, Payments};

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

/// How a payment's transaction begins on a database.
pub(crate) trait Begin {
    /// The statement: SQLite takes its write lock at once (`BEGIN IMMEDIATE`), so that two
    /// payments never deadlock upgrading a read lock.
    const BEGIN: &'static str;
}

impl Begin for Sqlite {
    const BEGIN: &'static str = "BEGIN IMMEDIATE";
}

impl Begin for Postgres {
    const BEGIN: &'static str = "BEGIN";
}

/// A database the payments can be in (SQLite, PostgreSQL): where a payment is written.
pub(crate) trait PaymentsDatabase: SqlBackend {
    /// Begins a transaction on `pool` and writes `payment` in it.
    fn begin_payment(
        pool: &Pool<Self>,
        payment: NewPayment,
    ) -> impl Future<Output = Result<(Transaction<'static, Self>, Payment), sqlx::Error>>;
}

impl<DB> PaymentsDatabase for DB
where
    DB: SqlBackend + Begin,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    Columns: for<'r> FromRow<'r, DB::Row>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    async fn begin_payment(
        pool: &Pool<DB>,
        payment: NewPayment,
    ) -> Result<(Transaction<'static, DB>, Payment), sqlx::Error> {
        let mut tx = pool.begin_with(DB::BEGIN).await?;
        let (payment_id, account, amount): Columns = sqlx::query_as(
            "INSERT INTO payments (account, amount) VALUES ($1, $2) RETURNING id, account, amount",
        )
        .bind(payment.account)
        .bind(payment.amount)
        .fetch_one(&mut *tx)
        .await?;
        let paid = Payment {
            payment_id,
            account,
            amount,
        };
        Ok((tx, paid))
    }
}

/// A payment's columns, as a row gives them.
type Columns = (i64, String, i64);

/// `POST /payments`, records in the database: the payment and the response a retry will
/// get commit in one transaction.
pub(crate) async fn pay(
    State(app): State<Payments>,
    record: IdempotencyRecord,
    Json(payment): Json<NewPayment>,
) -> Result<Response, PaymentError> {
    payment.check()?;
    app.call_the_provider().await;
    match &app.db {
        Database::Sqlite(pool) => pay_with_record(&app, pool, &record, payment).await,
        Database::Postgres(pool) => pay_with_record(&app, pool, &record, payment).await,
    }
}

/// The payment and its record, committed in one transaction on `pool`.
async fn pay_with_record<DB: PaymentsDatabase>(
    app: &Payments,
    pool: &Pool<DB>,
    record: &IdempotencyRecord,
    payment: NewPayment,
) -> Result<Response, PaymentError> {
    // Before the transaction: if it fails on a stalled database, the answer does not
    // wait on that database once more for the record's removal.
    record.take_over();
    let (tx, paid) = DB::begin_payment(pool, payment).await?;
    let (stored, response) = record
        .stored_response((StatusCode::CREATED, Json(paid)))
        .await?;
    SqlStore::<DB>::commit_with_record(
        tx,
        record.key(),
        record.owner(),
        stored,
        record.retention(),
    )
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
    let paid = match &app.db {
        Database::Sqlite(pool) => pay_alone(pool, payment).await?,
        Database::Postgres(pool) => pay_alone(pool, payment).await?,
    };
    app.crash_point();
    Ok((StatusCode::CREATED, Json(paid)))
}

/// The payment alone, committed on `pool`.
async fn pay_alone<DB: PaymentsDatabase>(
    pool: &Pool<DB>,
    payment: NewPayment,
) -> Result<Payment, sqlx::Error> {
    let (tx, paid) = DB::begin_payment(pool, payment).await?;
    tx.commit().await?;
    Ok(paid)
}

/// `GET /payments`: every payment, oldest first.
pub(crate) async fn list(State(app): State<Payments>) -> Result<Json<Vec<Payment>>, PaymentError> {
    const ALL: &str = "SELECT id, account, amount FROM payments ORDER BY id";
    let rows: Vec<Columns> = match &app.db {
        Database::Sqlite(pool) => sqlx::query_as(ALL).fetch_all(pool).await?,
        Database::Postgres(pool) => sqlx::query_as(ALL).fetch_all(pool).await?,
    };
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
