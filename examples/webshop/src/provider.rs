//! The payment provider an API order is charged through (`--payment-provider URL`: the
//! payments example, or any service with its `POST /payments`), called through
//! `idem-client`'s layer with a key derived from the order's own idempotency record.
//!
//! The order's record commits with the order, after the charge: a shop that dies in
//! between leaves the provider's payment made and the order not, and the client's retry
//! runs the handler again once the record's lease runs out. The rerun charges with the
//! same key — derived from the record, whose key is the client's — so the provider
//! answers with the first charge instead of making a second. With a random key per call
//! (the test-only [`RANDOM_PAYMENT_KEYS`]) every rerun charges again; `tests/outbound_crash.rs`
//! counts both.

use std::time::Duration;

use axum::http::{Method, StatusCode, header};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem_axum::idempotency::IdempotencyRecord;
use idem_client::{IdempotentRetry, IdempotentRetryLayer, RetryPolicy};
use tower::{Layer, ServiceExt};

use crate::app::Shop;
use crate::db::Product;
use crate::error::ApiError;

/// For tests only: `1` makes the shop kill itself (`SIGKILL`) right after the provider
/// answered a charge, before the order and its record commit.
pub const CRASH_AFTER_CHARGE: &str = "IDEM_EXAMPLE_CRASH_AFTER_CHARGE";

/// For the comparison only: `1` gives every charge a random key instead of the one
/// derived from the order's record, as a client with no idea of the inbound record would.
pub const RANDOM_PAYMENT_KEYS: &str = "IDEM_EXAMPLE_RANDOM_PAYMENT_KEYS";

/// The provider, and how the shop calls it.
#[derive(Debug, Clone)]
pub struct PaymentProvider {
    payments: String,
    client: IdempotentRetry<Client<HttpConnector, Full<Bytes>>>,
    derived_keys: bool,
    crash_after_charge: bool,
}

impl PaymentProvider {
    /// The provider at `url` (`http://127.0.0.1:3001`), its crash and key switches read
    /// from the environment.
    pub fn new(url: &str) -> Self {
        let hyper = Client::builder(TokioExecutor::new()).build_http();
        // A provider that stays unavailable fails the order within 10 s; the client's own
        // retry then finds the order's record gone (a 5xx is not kept) and runs it again.
        let policy = RetryPolicy::new().with_max_elapsed(Duration::from_secs(10));
        let switch = |name| std::env::var(name).is_ok_and(|on| on == "1");
        Self {
            payments: format!("{}/payments", url.trim_end_matches('/')),
            client: IdempotentRetryLayer::new(policy).layer(hyper),
            derived_keys: !switch(RANDOM_PAYMENT_KEYS),
            crash_after_charge: switch(CRASH_AFTER_CHARGE),
        }
    }

    /// Charges `amount` cents to `account`, with the key of the call `"charge"` of
    /// `record`.
    async fn charge(
        &self,
        record: &IdempotencyRecord,
        account: &str,
        amount: i64,
    ) -> Result<(), ApiError> {
        let payment = serde_json::json!({ "account": account, "amount": amount });
        let mut request = http::Request::builder()
            .method(Method::POST)
            .uri(&self.payments)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(payment.to_string())))
            .map_err(|_| unavailable("the payment provider's URL is not valid"))?;
        if self.derived_keys {
            request
                .extensions_mut()
                .insert(record.outbound_key("charge"));
        }
        let answer = self
            .client
            .clone()
            .oneshot(request)
            .await
            .map_err(|error| {
                eprintln!("payment provider: {error}");
                unavailable("the payment provider did not answer")
            })?;
        if self.crash_after_charge {
            example_cli::crash::now();
        }
        match answer.status() {
            StatusCode::CREATED => Ok(()),
            status => {
                eprintln!("payment provider: answered {status}");
                Err(unavailable("the payment provider refused the charge"))
            }
        }
    }
}

/// Charges `quantity` of `product_id` to `account` through the shop's payment provider,
/// if it has one, with the key of the call `"charge"` of the order's `record`. A product
/// that does not exist is charged nothing (the order is refused after).
pub(crate) async fn charge(
    shop: &Shop,
    record: &IdempotencyRecord,
    account: &str,
    product_id: i64,
    quantity: i64,
) -> Result<(), ApiError> {
    let Some(provider) = shop.payment_provider() else {
        return Ok(());
    };
    let Some(product) = Product::find(shop.db(), product_id).await? else {
        return Ok(());
    };
    provider
        .charge(record, account, product.price * quantity)
        .await
}

/// A `502`: not kept by the order's record, so a retry charges (with the same key) again.
fn unavailable(message: &'static str) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, message)
}
