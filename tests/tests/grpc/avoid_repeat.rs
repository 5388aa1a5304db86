//! `AvoidRepeatLayer` on gRPC calls: one run under a hundred concurrent calls, the rest
//! `ABORTED` with when to retry; a call that fails gives its window back.

use std::time::Duration;

use axum::Router;
use idem_axum::grpc::Code;
use idem_axum::{AvoidRepeatLayer, MemoryStore, StoreFailure};
use idem_tests::Shop;
use tokio::task::JoinSet;
use tonic::Status;

use super::{Amount, Caller, PAY, REFUND, assert_retry_later, counting, idem, serve, unary};

/// `Pay` in a 30 s window: it counts its run, waits at the gate, and refuses a negative
/// amount with `INVALID_ARGUMENT`.
fn windowed_bank(shop: &Shop) -> Router {
    let shop = shop.clone();
    let pay = unary(move |_, amount: Amount| {
        let shop = shop.clone();
        async move {
            shop.ran();
            if amount.cents < 0 {
                return Err(Status::invalid_argument("a negative amount"));
            }
            shop.pass_gate().await;
            Ok(tonic::Response::new(amount))
        }
    });
    let window = AvoidRepeatLayer::new(Duration::from_secs(30)).with_grpc_methods([PAY]);
    Router::new()
        .route(PAY, pay)
        .layer(window)
        .layer(idem(MemoryStore::new(), StoreFailure::FailClosed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_calls_run_once_and_the_rest_are_aborted() {
    let shop = Shop::new();
    let url = serve(windowed_bank(&shop)).await;
    let caller = Caller::connect(&url).await;
    let mut calls = JoinSet::new();
    for _ in 0..100 {
        let mut caller = caller.clone();
        calls.spawn(async move { caller.call(PAY, 10, None).await });
    }
    for _ in 0..99 {
        let refused = calls.join_next().await.unwrap().unwrap().unwrap_err();
        assert_retry_later(&refused, Code::Aborted);
    }
    shop.open_gate();
    let accepted = calls.join_next().await.unwrap().unwrap().unwrap();
    assert_eq!(accepted.get_ref().cents, 10);
    assert_eq!(shop.runs(), 1);

    let mut caller = caller.clone();
    let repeat = caller.call(PAY, 10, None).await.unwrap_err();
    assert_retry_later(&repeat, Code::Aborted);
    assert_eq!(shop.runs(), 1, "the window stays after a success");
}

#[tokio::test]
async fn a_failed_call_gives_its_window_back() {
    let shop = Shop::new();
    let mut caller = Caller::connect(&serve(windowed_bank(&shop)).await).await;
    let refused = caller.call(PAY, -1, None).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    shop.open_gate();
    let corrected = caller.call(PAY, 10, None).await.unwrap();
    assert_eq!(corrected.get_ref().cents, 10);
    assert_eq!(shop.runs(), 2);
}

#[tokio::test]
async fn each_method_has_a_window_of_its_own_even_under_route_layer() {
    let shop = Shop::new();
    // One route for the whole service, as tonic's router has.
    let bank = counting(&shop);
    let window = AvoidRepeatLayer::new(Duration::from_secs(30)).with_grpc_methods([PAY, REFUND]);
    let router = Router::new()
        .route("/bank.Bank/{*method}", bank)
        .route_layer(window)
        .layer(idem(MemoryStore::new(), StoreFailure::FailClosed));
    let mut caller = Caller::connect(&serve(router).await).await;

    caller.call(PAY, 10, None).await.unwrap();
    caller.call(REFUND, 10, None).await.unwrap();
    assert_eq!(shop.runs(), 2);
    let repeat = caller.call(PAY, 10, None).await.unwrap_err();
    assert_retry_later(&repeat, Code::Aborted);
}
