//! A payments gRPC service (tonic) on idem: `Pay` is idempotent under the
//! `idempotency-key` metadata entry, `SendReceipt` refuses a repeat for 30 s, and
//! `ListPayments`, a server stream, passes through both guards untouched.
//!
//! | call of `payments.Payments` | answer |
//! |---|---|
//! | `Pay` with a new key | the card is charged; the `Payment`, with a `ledger-entry` trailer |
//! | `Pay` again with the key and the same message, once the first answered | the same `Payment` and trailers, with `idempotent-replayed: true`; the card is not charged again |
//! | `Pay` with the key while the first still runs | `ABORTED`, with a `RetryInfo` and `retry-after` |
//! | `Pay` with the key and another message | `FAILED_PRECONDITION` |
//! | `Pay` with a malformed key, or none | `INVALID_ARGUMENT` |
//! | `Pay` while the card processor is down | `UNAVAILABLE`, not kept: a retry with the same key charges the card |
//! | `SendReceipt` again within 30 s | `ABORTED` with retry info; no second mail |
//! | `SendReceipt` for a payment that does not exist | `NOT_FOUND`; the window is given back |
//! | `ListPayments` | every payment, streamed; no guard |
//!
//! Clients are merchants, told apart by their `x-api-key` metadata entry: one merchant's
//! keys never meet another's.

pub mod proto;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use idem_axum::identity::ClientHeader;
use idem_axum::store::Store;
use idem_axum::{AvoidRepeatLayer, Idem, IdempotencyLayer};
use tokio::net::TcpListener;
use tonic::codegen::http::{HeaderMap, HeaderName, HeaderValue};
use tonic::codegen::tokio_stream;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use crate::proto::payments_server::{Payments, PaymentsServer};
use crate::proto::{ListPaymentsRequest, PayRequest, Payment, Receipt, ReceiptRequest};

/// The path of `Pay`, which [`IdempotencyLayer`] guards.
pub const PAY: &str = "/payments.Payments/Pay";

/// The path of `SendReceipt`, which [`AvoidRepeatLayer`] guards.
pub const SEND_RECEIPT: &str = "/payments.Payments/SendReceipt";

/// The metadata entry that names the merchant calling.
pub const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The trailing metadata entry that gives a payment's place in the ledger.
pub const LEDGER_ENTRY: HeaderName = HeaderName::from_static("ledger-entry");

/// How long a merchant waits before a receipt can be sent again.
const RECEIPT_WINDOW: Duration = Duration::from_secs(30);

/// The example: its idem runtime, and the payments service's state.
#[derive(Debug, Clone)]
pub struct PaymentsExample {
    idem: Idem,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    payments: Mutex<Vec<Payment>>,
    /// Every time a card was charged, or tried while the processor was down.
    charges: AtomicU64,
    receipts: AtomicU64,
    processor_up: AtomicBool,
    processing_time: Duration,
}

/// A payment's place in the ledger, which the handler hands to [`ledger_trailer`].
#[derive(Debug, Clone, Copy)]
struct LedgerEntry(u64);

impl PaymentsExample {
    /// No payment made yet; the records in `store`; a charge takes `processing_time`.
    pub fn new(store: impl Store, processing_time: Duration) -> Self {
        let idem = Idem::builder()
            .with_store(store)
            .with_client_identity(ClientHeader::new(API_KEY))
            .build();
        let state = State {
            payments: Mutex::default(),
            charges: AtomicU64::new(0),
            receipts: AtomicU64::new(0),
            processor_up: AtomicBool::new(true),
            processing_time,
        };
        Self {
            idem,
            state: Arc::new(state),
        }
    }

    /// The idem runtime of its routes: what `main` drains when the server stops.
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// The service's routes, behind its guards.
    ///
    /// tonic's routes are an axum router inside: the guards go on it as on any router,
    /// each told which methods it guards. The trailer middleware is innermost, so what it
    /// adds is part of the stored response.
    pub fn routes(&self) -> Routes {
        let router = Routes::new(PaymentsServer::new(self.clone()))
            .into_axum_router()
            .layer(axum::middleware::map_response(ledger_trailer))
            .layer(
                IdempotencyLayer::new()
                    .with_grpc_methods([PAY])
                    .with_required(true),
            )
            .layer(AvoidRepeatLayer::new(RECEIPT_WINDOW).with_grpc_methods([SEND_RECEIPT]))
            .layer(self.idem.layer());
        Routes::from(router)
    }

    /// Serves the routes over HTTP/2 on `listener` until `stop`, then drains the guarded
    /// handlers still running.
    ///
    /// # Errors
    ///
    /// The server's, when it cannot serve.
    pub async fn serve(
        &self,
        listener: TcpListener,
        stop: impl Future<Output = ()>,
    ) -> Result<(), tonic::transport::Error> {
        tonic::transport::Server::builder()
            .add_routes(self.routes())
            .serve_with_incoming_shutdown(TcpIncoming::from(listener), stop)
            .await?;
        self.idem.shutdown(example_cli::DRAIN_GRACE).await;
        Ok(())
    }

    /// How many times a card was charged (or tried, the processor being down).
    pub fn charges(&self) -> u64 {
        self.state.charges.load(Ordering::SeqCst)
    }

    /// How many receipts were mailed.
    pub fn receipts_sent(&self) -> u64 {
        self.state.receipts.load(Ordering::SeqCst)
    }

    /// Takes the card processor down, or brings it back.
    pub fn set_processor_up(&self, up: bool) {
        self.state.processor_up.store(up, Ordering::SeqCst);
    }

    fn payments(&self) -> std::sync::MutexGuard<'_, Vec<Payment>> {
        self.state
            .payments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[tonic::async_trait]
impl Payments for PaymentsExample {
    async fn pay(&self, request: Request<PayRequest>) -> Result<Response<Payment>, Status> {
        let request = request.into_inner();
        if request.amount_cents <= 0 {
            return Err(Status::invalid_argument("amount_cents must be positive"));
        }
        self.state.charges.fetch_add(1, Ordering::SeqCst);
        if !self.state.processor_up.load(Ordering::SeqCst) {
            return Err(Status::unavailable("the card processor is unavailable"));
        }
        tokio::time::sleep(self.state.processing_time).await;
        let payment = Payment {
            payment_id: format!("pay_{}", uuid::Uuid::new_v4().simple()),
            amount_cents: request.amount_cents,
            currency: request.currency,
        };
        let entry = {
            let mut payments = self.payments();
            payments.push(payment.clone());
            payments.len() as u64
        };
        let mut response = Response::new(payment);
        response.extensions_mut().insert(LedgerEntry(entry));
        Ok(response)
    }

    async fn send_receipt(
        &self,
        request: Request<ReceiptRequest>,
    ) -> Result<Response<Receipt>, Status> {
        let request = request.into_inner();
        let known = self
            .payments()
            .iter()
            .any(|payment| payment.payment_id == request.payment_id);
        if !known {
            return Err(Status::not_found("no such payment"));
        }
        self.state.receipts.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(Receipt {
            sent_to: request.email,
        }))
    }

    type ListPaymentsStream = tokio_stream::Iter<std::vec::IntoIter<Result<Payment, Status>>>;

    async fn list_payments(
        &self,
        _request: Request<ListPaymentsRequest>,
    ) -> Result<Response<Self::ListPaymentsStream>, Status> {
        let payments: Vec<_> = self.payments().iter().cloned().map(Ok).collect();
        Ok(Response::new(tokio_stream::iter(payments)))
    }
}

/// Adds the payment's ledger entry to the call's trailers, beside `grpc-status`: trailing
/// metadata, as a grpc-go server sets with `SetTrailer`. tonic has no API for trailers on
/// a call that succeeds, so the handler leaves the entry in the response's extensions.
async fn ledger_trailer(mut response: axum::response::Response) -> axum::response::Response {
    let Some(LedgerEntry(entry)) = response.extensions_mut().remove() else {
        return response;
    };
    response.map(|body| {
        let trailers = HeaderMap::from_iter([(LEDGER_ENTRY, HeaderValue::from(entry))]);
        Body::new(body.with_trailers(async move { Some(Ok(trailers)) }))
    })
}
