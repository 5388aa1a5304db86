//! `IdempotencyLayer` on gRPC calls: one run per key under hundreds of concurrent calls,
//! failed calls (in the head or in the trailers) not kept and run again, trailers
//! replayed, keys per method, the store's outage as `UNAVAILABLE`, and HTTP untouched.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, header};
use axum::response::IntoResponse;
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use idem_axum::grpc::{Code, stored_by_default};
use idem_axum::{IdempotencyLayer, MemoryStore, StoreFailure};
use idem_tests::{Shop, unreachable_redis_store};
use prost::Message;
use tokio::task::JoinSet;
use tonic::Status;
use tower::ServiceExt;

use super::{
    Amount, Caller, PAY, REFUND, assert_retry_later, counting, idem, replayed, serve, unary,
};

/// `Pay`, whose body counts its run in `shop`, waits at its gate, and answers the amount.
fn gated_bank(shop: &Shop, layer: IdempotencyLayer) -> Router {
    let shop = shop.clone();
    let pay = unary(move |_, amount: Amount| {
        let shop = shop.clone();
        async move {
            shop.ran();
            shop.pass_gate().await;
            Ok(tonic::Response::new(amount))
        }
    });
    Router::new()
        .route(PAY, pay)
        .layer(layer)
        .layer(idem(MemoryStore::new(), StoreFailure::FailClosed))
}

/// A layer guarding `Pay` and `Refund`, their keys required.
fn guarding_both() -> IdempotencyLayer {
    IdempotencyLayer::new()
        .with_grpc_methods([PAY, REFUND])
        .with_required(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_calls_with_one_key_run_the_handler_once() {
    let shop = Shop::new();
    let url = serve(gated_bank(&shop, guarding_both())).await;
    let callers = [
        Caller::connect(&url).await,
        Caller::connect(&url).await,
        Caller::connect(&url).await,
        Caller::connect(&url).await,
    ];
    let mut calls = JoinSet::new();
    for call in 0..200 {
        let mut caller = callers[call % callers.len()].clone();
        calls.spawn(async move { caller.call(PAY, 500, Some("k-200")).await });
    }
    // The first call is held at the gate; every other one meets it in progress.
    // The retention comes as metadata, on the calls told to come back and on the answers.
    let day = Some("86400");
    for _ in 0..199 {
        let refused = calls.join_next().await.unwrap().unwrap().unwrap_err();
        assert_retry_later(&refused, Code::Aborted);
        assert_eq!(retention(refused.metadata()), day);
    }
    assert_eq!(shop.runs(), 1);
    shop.open_gate();
    let first = calls.join_next().await.unwrap().unwrap().unwrap();
    assert!(!replayed(&first));
    assert_eq!(retention(first.metadata()), day);

    let mut retries = JoinSet::new();
    for call in 0..199 {
        let mut caller = callers[call % callers.len()].clone();
        retries.spawn(async move { caller.call(PAY, 500, Some("k-200")).await });
    }
    for retry in retries.join_all().await {
        let retry = retry.unwrap();
        assert!(replayed(&retry));
        assert_eq!(retry.get_ref(), first.get_ref());
        assert_eq!(retention(retry.metadata()), day);
    }
    assert_eq!(shop.runs(), 1, "the handler ran once for 400 calls");
}

/// The key's retention a call's metadata advertises.
fn retention(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    metadata.get("idempotency-ttl")?.to_str().ok()
}

/// `Pay` answering its message, then its status and an `x-attempt` trailer: `UNAVAILABLE`
/// on the first attempt, `OK` after. Its trailers come after a message, as a handler's
/// own body sends them, not as tonic's trailers-only error.
fn failing_then_paying(shop: &Shop) -> Router {
    let shop = shop.clone();
    let pay = post(move || {
        let shop = shop.clone();
        async move {
            let attempt = shop.ran();
            let message = Amount { cents: 7 }.encode_to_vec();
            let mut frame = vec![0];
            frame.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
            frame.extend(message);
            let mut trailers = HeaderMap::new();
            let code = if attempt == 1 { "14" } else { "0" };
            trailers.insert("grpc-status", HeaderValue::from_static(code));
            trailers.insert("x-attempt", HeaderValue::from(attempt));
            let body = Full::new(Bytes::from(frame)).with_trailers(async { Some(Ok(trailers)) });
            let grpc = [(header::CONTENT_TYPE, "application/grpc")];
            (grpc, Body::new(body)).into_response()
        }
    });
    Router::new()
        .route(PAY, pay)
        .layer(guarding_both())
        .layer(idem(MemoryStore::new(), StoreFailure::FailClosed))
}

#[tokio::test]
async fn a_failure_in_the_trailers_is_not_kept_and_the_retry_is_replayed_with_its_trailers() {
    let shop = Shop::new();
    let mut caller = Caller::connect(&serve(failing_then_paying(&shop)).await).await;

    let failed = caller.call(PAY, 7, Some("k-t")).await.unwrap_err();
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    let paid = caller.call(PAY, 7, Some("k-t")).await.unwrap();
    assert_eq!(shop.runs(), 2, "the failed call was not kept");
    assert_eq!(paid.metadata().get("x-attempt").unwrap(), "2");

    let again = caller.call(PAY, 7, Some("k-t")).await.unwrap();
    assert!(replayed(&again));
    assert_eq!(again.get_ref(), paid.get_ref());
    assert_eq!(
        again.metadata().get("x-attempt").unwrap(),
        "2",
        "its trailer"
    );
    assert_eq!(shop.runs(), 2);
}

/// `Pay`, counting its runs and answering `NOT_FOUND`.
fn not_found(shop: &Shop, layer: IdempotencyLayer) -> Router {
    let shop = shop.clone();
    let pay = unary(move |_, _| {
        let shop = shop.clone();
        async move {
            shop.ran();
            Err(Status::not_found("no such account"))
        }
    });
    Router::new()
        .route(PAY, pay)
        .layer(layer)
        .layer(idem(MemoryStore::new(), StoreFailure::FailClosed))
}

#[tokio::test]
async fn which_statuses_are_kept_is_the_layers_policy() {
    let kept = Shop::new();
    let mut caller = Caller::connect(&serve(not_found(&kept, guarding_both())).await).await;
    for _ in 0..2 {
        let answer = caller.call(PAY, 1, Some("k-n")).await.unwrap_err();
        assert_eq!(answer.code(), Code::NotFound);
    }
    assert_eq!(
        kept.runs(),
        1,
        "NOT_FOUND answers the message: kept by default"
    );

    let run_again = Shop::new();
    let policy = guarding_both()
        .with_stored_grpc_codes(|code| stored_by_default(code) && code != Code::NotFound);
    let mut caller = Caller::connect(&serve(not_found(&run_again, policy)).await).await;
    for _ in 0..2 {
        let answer = caller.call(PAY, 1, Some("k-n")).await.unwrap_err();
        assert!(answer.metadata().get("idempotent-replayed").is_none());
    }
    assert_eq!(run_again.runs(), 2);
}

#[tokio::test]
async fn one_key_on_two_methods_is_two_calls_even_under_route_layer() {
    let shop = Shop::new();
    let handler_shop = shop.clone();
    // One route for the whole service, as tonic's router has: its matched path names
    // every method.
    let bank = unary(move |path, amount| {
        let shop = handler_shop.clone();
        async move {
            shop.ran();
            let cents = if path == REFUND {
                -amount.cents
            } else {
                amount.cents
            };
            Ok(tonic::Response::new(Amount { cents }))
        }
    });
    let router = Router::new()
        .route("/bank.Bank/{*method}", bank)
        .route_layer(guarding_both())
        .layer(idem(MemoryStore::new(), StoreFailure::FailClosed));
    let mut caller = Caller::connect(&serve(router).await).await;

    let paid = caller.call(PAY, 300, Some("k-m")).await.unwrap();
    let refunded = caller.call(REFUND, 300, Some("k-m")).await.unwrap();
    assert_eq!(
        (paid.get_ref().cents, refunded.get_ref().cents),
        (300, -300)
    );
    assert!(!replayed(&refunded));
    assert_eq!(shop.runs(), 2);
}

#[tokio::test]
async fn a_method_not_named_passes_through_even_when_keys_are_required() {
    let shop = Shop::new();
    let counted = counting(&shop);
    let router = Router::new()
        .route(PAY, counted.clone())
        .route(REFUND, counted)
        .layer(
            IdempotencyLayer::new()
                .with_grpc_methods([PAY])
                .with_required(true),
        )
        .layer(idem(MemoryStore::new(), StoreFailure::FailClosed));
    let mut caller = Caller::connect(&serve(router).await).await;

    let unkeyed = caller.call(PAY, 1, None).await.unwrap_err();
    assert_eq!(unkeyed.code(), Code::InvalidArgument);
    assert!(
        unkeyed.message().contains("`idempotency-key` metadata"),
        "a call is told of metadata, not of a header: {}",
        unkeyed.message()
    );
    for _ in 0..2 {
        let refund = caller.call(REFUND, 1, Some("k-r")).await.unwrap();
        assert!(!replayed(&refund));
    }
    assert_eq!(shop.runs(), 2, "Refund is not guarded: it ran each time");
}

#[tokio::test]
async fn the_store_down_is_unavailable_failing_closed_and_unguarded_failing_open() {
    for failure in [StoreFailure::FailClosed, StoreFailure::FailOpen] {
        let shop = Shop::new();
        let pay = counting(&shop);
        let store = unreachable_redis_store(Duration::from_millis(200));
        let router = Router::new()
            .route(PAY, pay)
            .layer(guarding_both())
            .layer(idem(store, failure));
        let mut caller = Caller::connect(&serve(router).await).await;
        let answer = caller.call(PAY, 1, Some("k-s")).await;
        match failure {
            StoreFailure::FailClosed => {
                assert_retry_later(&answer.unwrap_err(), Code::Unavailable);
                assert_eq!(shop.runs(), 0);
            }
            _ => {
                assert_eq!(answer.unwrap().get_ref().cents, 1);
                assert_eq!(shop.runs(), 1);
            }
        }
    }
}

#[tokio::test]
async fn an_http_request_through_the_same_layer_is_refused_with_problem_json() {
    let router = Router::new()
        .route("/payments", post(|| async { "paid" }))
        .layer(guarding_both())
        .layer(idem(MemoryStore::new(), StoreFailure::FailClosed));
    let request = Request::post("/payments")
        .header("x-api-key", "client-1")
        .header("idempotency-key", "k".repeat(256))
        .body(Body::from("{}"))
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
}
