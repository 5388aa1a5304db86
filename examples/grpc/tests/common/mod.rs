//! What the example's tests share: a real tonic client, and calls that carry a merchant's
//! API key and an idempotency key.

#![allow(dead_code, reason = "each test file uses a part")]

use std::time::Duration;

use example_grpc::proto::payments_client::PaymentsClient;
use example_grpc::proto::{PayRequest, Payment};
use example_grpc::{API_KEY, LEDGER_ENTRY, PaymentsExample};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};
use tonic_types::StatusExt;

/// The merchant every call comes from.
pub(crate) const MERCHANT: &str = "merchant-7";

/// The metadata entry that names the merchant ([`API_KEY`]), as tonic's metadata takes it.
pub(crate) const API_KEY_ENTRY: &str = "x-api-key";

/// Serves `example` over HTTP/2 on a port of its own, in this process; its URL.
pub(crate) async fn serve(example: &PaymentsExample) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let example = example.clone();
    tokio::spawn(async move { example.serve(listener, std::future::pending()).await });
    url
}

/// A client on a connection of its own to `url`.
pub(crate) async fn client(url: &str) -> PaymentsClient<Channel> {
    let channel = Channel::from_shared(url.to_owned()).unwrap();
    PaymentsClient::new(channel.connect().await.unwrap())
}

/// `message` from [`MERCHANT`], with `key` as its `idempotency-key`.
pub(crate) fn keyed<T>(message: T, key: &str) -> Request<T> {
    let mut request = Request::new(message);
    let metadata = request.metadata_mut();
    assert_eq!(API_KEY, API_KEY_ENTRY);
    metadata.insert(API_KEY_ENTRY, MERCHANT.parse().unwrap());
    metadata.insert("idempotency-key", key.parse().unwrap());
    request
}

/// A payment of `amount_cents` euros.
pub(crate) fn payment(amount_cents: i64) -> PayRequest {
    PayRequest {
        amount_cents,
        currency: "EUR".to_owned(),
        card: "tok_visa".to_owned(),
    }
}

/// Pays as a client does that honours `ABORTED`'s retry info: while the first call with
/// its key runs, it waits as long as the refusal says and calls again.
pub(crate) async fn pay_retrying(
    client: &mut PaymentsClient<Channel>,
    message: PayRequest,
    key: &str,
) -> Result<Response<Payment>, Status> {
    loop {
        match client.pay(keyed(message.clone(), key)).await {
            Err(status) if status.code() == Code::Aborted => {
                tokio::time::sleep(retry_delay(&status)).await;
            }
            answered => return answered,
        }
    }
}

/// The delay a refusal's `google.rpc.RetryInfo` gives, checked against its `retry-after`.
pub(crate) fn retry_delay(status: &Status) -> Duration {
    let delay = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
        .unwrap_or_else(|| panic!("{status:?} carries a RetryInfo"));
    let retry_after = status.metadata().get("retry-after").expect("retry-after");
    let whole_seconds = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    assert_eq!(
        retry_after.to_str().unwrap(),
        whole_seconds.max(1).to_string()
    );
    delay
}

/// Whether an answer is a replay.
pub(crate) fn replayed<T>(answer: &Response<T>) -> bool {
    let replayed = answer.metadata().get("idempotent-replayed");
    replayed.is_some_and(|value| value == "true")
}

/// The ledger entry a payment's trailers gave.
pub(crate) fn ledger_entry(answer: &Response<Payment>) -> String {
    let entry = answer.metadata().get(LEDGER_ENTRY.as_str());
    entry
        .expect("a ledger-entry trailer")
        .to_str()
        .unwrap()
        .to_owned()
}
