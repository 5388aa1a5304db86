//! The example's calls through a real HTTP/2 server (tonic's) and real tonic clients: a
//! payment charged once however it is retried, the refusals as gRPC statuses, failed calls
//! run again, trailers replayed, a receipt's window, a stream untouched.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use example_grpc::PaymentsExample;
use example_grpc::proto::payments_client::PaymentsClient;
use example_grpc::proto::{ListPaymentsRequest, ReceiptRequest};
use idem_axum::MemoryStore;
use idem_tests::eventually;
use tokio::task::JoinSet;
use tonic::Code;
use tonic::transport::Channel;

use common::{
    API_KEY_ENTRY, MERCHANT, client, keyed, ledger_entry, pay_retrying, payment, replayed,
    retry_delay, serve,
};

/// Long enough for every concurrent call to arrive while the first one runs.
const PROCESSING_TIME: Duration = Duration::from_millis(300);

fn example(store: &MemoryStore) -> PaymentsExample {
    PaymentsExample::new(store.clone(), PROCESSING_TIME)
}

/// An example on a store of its own, served, and a client of it.
async fn served() -> (PaymentsExample, PaymentsClient<Channel>) {
    let example = example(&MemoryStore::new());
    let client = client(&serve(&example).await).await;
    (example, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_retries_on_two_instances_charge_once_and_get_one_answer() {
    let store = MemoryStore::new();
    let instances = [example(&store), example(&store)];
    let urls = [serve(&instances[0]).await, serve(&instances[1]).await];

    let mut calls = JoinSet::new();
    for call in 0..20 {
        let url = urls[call % 2].clone();
        calls.spawn(async move {
            let mut client = client(&url).await;
            pay_retrying(&mut client, payment(4_200), "order-1001").await
        });
    }
    let answers: Vec<_> = calls
        .join_all()
        .await
        .into_iter()
        .map(|answer| answer.expect("every call is answered OK"))
        .collect();

    let charges: u64 = instances.iter().map(PaymentsExample::charges).sum();
    assert_eq!(charges, 1, "the card is charged once");
    let payments: HashSet<_> = answers
        .iter()
        .map(|answer| (answer.get_ref().payment_id.clone(), ledger_entry(answer)))
        .collect();
    assert_eq!(payments.len(), 1, "one answer for all: {payments:?}");
    let amounts: HashSet<_> = answers
        .iter()
        .map(|answer| answer.get_ref().amount_cents)
        .collect();
    assert_eq!(amounts, HashSet::from([4_200]));
    let first = answers.iter().filter(|answer| !replayed(answer)).count();
    assert_eq!(first, 1, "one first answer, the other 19 replayed");
}

#[tokio::test]
async fn the_key_reused_with_another_message_is_failed_precondition() {
    let (example, mut client) = served().await;
    client.pay(keyed(payment(100), "k-1")).await.unwrap();

    let other = client.pay(keyed(payment(999), "k-1")).await.unwrap_err();
    assert_eq!(other.code(), Code::FailedPrecondition, "{other:?}");
    assert_eq!(example.charges(), 1);
}

#[tokio::test]
async fn a_malformed_or_missing_key_is_invalid_argument() {
    let (example, mut client) = served().await;

    let too_long = "k".repeat(256);
    let malformed = client
        .pay(keyed(payment(100), &too_long))
        .await
        .unwrap_err();
    assert_eq!(malformed.code(), Code::InvalidArgument, "{malformed:?}");

    let mut unkeyed = tonic::Request::new(payment(100));
    unkeyed
        .metadata_mut()
        .insert(API_KEY_ENTRY, MERCHANT.parse().unwrap());
    let missing = client.pay(unkeyed).await.unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
    assert!(
        missing.message().contains("`idempotency-key` metadata"),
        "{missing:?}"
    );
    assert_eq!(example.charges(), 0, "no call ran");
}

#[tokio::test]
async fn a_call_in_progress_is_aborted_with_when_to_retry() {
    let example = PaymentsExample::new(MemoryStore::new(), Duration::from_secs(5));
    let url = serve(&example).await;
    let mut first = client(&url).await;
    let running = tokio::spawn(async move { first.pay(keyed(payment(100), "slow")).await });
    eventually(Duration::from_secs(10), "the first call charges", || {
        let charged = example.charges() == 1;
        async move { charged }
    })
    .await;
    let mut retry = client(&url).await;
    let refused = retry.pay(keyed(payment(100), "slow")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Aborted, "{refused:?}");
    assert_eq!(retry_delay(&refused), Duration::from_secs(1));
    running.abort();
}

#[tokio::test]
async fn a_failed_call_is_not_kept_and_its_retry_charges_again() {
    let (example, mut client) = served().await;
    example.set_processor_up(false);
    let failed = client.pay(keyed(payment(100), "k-2")).await.unwrap_err();
    assert_eq!(failed.code(), Code::Unavailable);
    assert_eq!(example.charges(), 1);

    example.set_processor_up(true);
    let paid = client.pay(keyed(payment(100), "k-2")).await.unwrap();
    assert!(!replayed(&paid), "the retry ran");
    assert_eq!(example.charges(), 2);

    let again = client.pay(keyed(payment(100), "k-2")).await.unwrap();
    assert!(replayed(&again));
    assert_eq!(again.get_ref(), paid.get_ref());
    assert_eq!(example.charges(), 2, "the completed call is not run again");
}

#[tokio::test]
async fn trailers_and_a_kept_error_are_replayed() {
    let (_, mut client) = served().await;
    client.pay(keyed(payment(1), "earlier")).await.unwrap();

    let paid = client.pay(keyed(payment(100), "k-3")).await.unwrap();
    assert_eq!(ledger_entry(&paid), "2");
    let again = client.pay(keyed(payment(100), "k-3")).await.unwrap();
    assert!(replayed(&again));
    assert_eq!(again.get_ref(), paid.get_ref());
    assert_eq!(ledger_entry(&again), "2", "the trailer of the first answer");

    // INVALID_ARGUMENT answers the message itself: it is kept, and replayed.
    let invalid = client.pay(keyed(payment(-5), "k-4")).await.unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument);
    assert!(invalid.metadata().get("idempotent-replayed").is_none());
    let replay = client.pay(keyed(payment(-5), "k-4")).await.unwrap_err();
    assert_eq!(
        (replay.code(), replay.message()),
        (invalid.code(), invalid.message())
    );
    assert_eq!(
        replay.metadata().get("idempotent-replayed").unwrap(),
        "true"
    );
}

#[tokio::test]
async fn a_receipt_repeated_within_its_window_is_aborted() {
    let (example, mut client) = served().await;
    let paid = client.pay(keyed(payment(100), "k-5")).await.unwrap();
    let receipt = |payment_id: &str| {
        let mut request = tonic::Request::new(ReceiptRequest {
            payment_id: payment_id.to_owned(),
            email: "ada@example.com".to_owned(),
        });
        let metadata = request.metadata_mut();
        metadata.insert(API_KEY_ENTRY, MERCHANT.parse().unwrap());
        request
    };

    // A call that fails gives its window back: the corrected call runs at once.
    let unknown = client.send_receipt(receipt("pay_nope")).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    let id = &paid.get_ref().payment_id;
    client.send_receipt(receipt(id)).await.unwrap();
    assert_eq!(example.receipts_sent(), 1);

    let repeat = client.send_receipt(receipt(id)).await.unwrap_err();
    assert_eq!(repeat.code(), Code::Aborted, "{repeat:?}");
    let delay = retry_delay(&repeat);
    assert!(
        delay > Duration::from_secs(25),
        "most of the window: {delay:?}"
    );
    assert_eq!(example.receipts_sent(), 1, "no second mail");
}

#[tokio::test]
async fn a_streaming_call_passes_through_the_guards() {
    let (_, mut client) = served().await;
    for key in ["a", "b"] {
        client.pay(keyed(payment(100), key)).await.unwrap();
    }
    // A key on it, and twice: no guard holds the stream, refuses it, or replays it.
    for _ in 0..2 {
        let listed = client
            .list_payments(keyed(ListPaymentsRequest {}, "list"))
            .await
            .unwrap();
        assert!(!replayed(&listed));
        let mut stream = listed.into_inner();
        let mut count = 0;
        while let Some(payment) = stream.message().await.unwrap() {
            assert_eq!(payment.amount_cents, 100);
            count += 1;
        }
        assert_eq!(count, 2);
    }
}
