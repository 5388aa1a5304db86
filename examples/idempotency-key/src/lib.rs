//! `IdempotencyLayer` on a JSON API in a few lines: a client sends an `Idempotency-Key`
//! with a request and the same key with every retry; the handler runs once, and every
//! retry gets the first response back.
//!
//! | request to `POST /transfers` (JSON `{from, to, amount}`; the handler takes a second) | answer |
//! |---|---|
//! | first with its key | `201 {transfer_id, from, to, amount}` |
//! | the same key and body again, once the first has answered | the same `201`, byte for byte, with `Idempotent-Replayed: true`; no transfer is made |
//! | the same key while the first still runs | `409` + `Retry-After` |
//! | the same key with another body | `422` |
//! | a malformed key (`Idempotency-Key: not a token`) | `400` |
//! | no key | `400`, saying what to send |
//!
//! `GET /transfers` lists every transfer made. Keys are kept apart per client, here the
//! peer's IP address (the runtime's default).
//!
//! The records are in the store given to [`IdempotencyKeyExample::new`]: a
//! `MemoryStore`, or a `RedisStore` that several instances share. Either way the layer
//! stores the response *after* the handler made its transfer; a process that dies in
//! between leaves a transfer whose retry runs again once the record's lease runs out.
//! `examples/payments` closes that window by completing the record in the handler's own
//! database transaction.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use idem_axum::store::Store;
use idem_axum::{Idem, IdempotencyLayer};
use serde::{Deserialize, Serialize};

/// How long a transfer takes unless [`IdempotencyKeyExample::with_processing_time`] says
/// otherwise: long enough to send a retry while it runs.
const PROCESSING_TIME: Duration = Duration::from_secs(1);

/// The example: its idem runtime and the transfers made.
#[derive(Debug, Clone)]
pub struct IdempotencyKeyExample {
    idem: Idem,
    transfers: Arc<Mutex<Vec<Transfer>>>,
    processing_time: Duration,
}

impl IdempotencyKeyExample {
    /// No transfer made yet; the records in `store`; a transfer takes a second.
    pub fn new(store: impl Store) -> Self {
        Self {
            idem: Idem::builder().with_store(store).build(),
            transfers: Arc::default(),
            processing_time: PROCESSING_TIME,
        }
    }

    /// How long a transfer takes.
    pub fn with_processing_time(mut self, processing_time: Duration) -> Self {
        self.processing_time = processing_time;
        self
    }

    /// The idem runtime of its routes: what `main` drains when the server stops.
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// The routes, behind the idem runtime.
    pub fn router(&self) -> Router {
        let idempotency = IdempotencyLayer::new().with_required(true);
        Router::new()
            // The layer guards POST (and PATCH) only: the GET passes through untouched.
            .route(
                "/transfers",
                post(transfer).get(transfers).route_layer(idempotency),
            )
            .with_state(self.clone())
            .layer(self.idem.layer())
    }
}

/// What `POST /transfers` takes.
#[derive(Debug, Deserialize)]
struct NewTransfer {
    from: String,
    to: String,
    /// In cents.
    amount: u64,
}

/// A transfer made.
#[derive(Debug, Clone, Serialize)]
struct Transfer {
    transfer_id: usize,
    from: String,
    to: String,
    amount: u64,
}

/// `POST /transfers`: makes a transfer, once per key.
async fn transfer(
    State(app): State<IdempotencyKeyExample>,
    Json(new): Json<NewTransfer>,
) -> (StatusCode, Json<Transfer>) {
    tokio::time::sleep(app.processing_time).await;
    let mut transfers = app.transfers.lock().unwrap_or_else(PoisonError::into_inner);
    let made = Transfer {
        transfer_id: transfers.len() + 1,
        from: new.from,
        to: new.to,
        amount: new.amount,
    };
    transfers.push(made.clone());
    (StatusCode::CREATED, Json(made))
}

/// `GET /transfers`: every transfer made, oldest first.
async fn transfers(State(app): State<IdempotencyKeyExample>) -> Json<Vec<Transfer>> {
    let transfers = app.transfers.lock().unwrap_or_else(PoisonError::into_inner);
    Json(transfers.clone())
}
