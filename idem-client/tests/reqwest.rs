//! The reqwest middleware against the same idem-guarded server: the policy is the tower
//! layer's, so these check what is its own — the key chosen, the body sent again, the
//! `409` problem read and given back, and a streamed body refused.

#![cfg(feature = "reqwest")]

mod support;

use std::time::Duration;

use axum::http::StatusCode;
use idem_client::{IdempotentRetryMiddleware, OutboundKeys, RetryPolicy};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use support::{Downstream, Fault, generous};
use tokio::task::JoinSet;

fn client(policy: RetryPolicy) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(IdempotentRetryMiddleware::new(policy))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_refused_or_cut_off_are_sent_again_under_their_key_and_run_once() {
    for fault in [Fault::Unavailable(2), Fault::DropAfterRun] {
        let downstream = Downstream::start(fault, Duration::ZERO).await;
        let client = client(generous());
        let mut all = JoinSet::new();
        for call in 0..200 {
            let request = client
                .post(downstream.url("/effects"))
                .body(format!("call {call}"));
            all.spawn(async move {
                let answer = request.send().await.expect("an answer");
                (answer.status(), answer.text().await.unwrap())
            });
        }
        for (status, body) in all.join_all().await {
            assert_eq!(status, StatusCode::CREATED, "{fault:?}: {body}");
        }
        assert_eq!(
            downstream.runs(),
            200,
            "{fault:?}: one side effect per call"
        );
        assert_eq!(downstream.attempts_per_key().len(), 200, "{fault:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn derived_keys_from_the_extensions_and_the_409_problem_given_back_whole() {
    let downstream = Downstream::start(Fault::AvoidRepeatWindow, Duration::ZERO).await;
    let keys = OutboundKeys::new(&idem_core::Key::hashed(["a record"]));
    let answer = client(generous())
        .post(downstream.url("/effects"))
        .body("x")
        .with_extension(keys.key("charge"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::CONFLICT);
    assert!(answer.headers().contains_key("retry-after"));
    let body = answer.text().await.unwrap();
    assert!(body.contains("duplicate-request"), "{body}");
    assert_eq!(
        downstream.attempts_per_key(),
        [(keys.key("charge").to_string(), 1)].into(),
        "the derived key, once: a window's refusal is final"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_is_refused_before_it_is_sent() {
    let downstream = Downstream::start(Fault::None, Duration::ZERO).await;
    let stream = futures_util::stream::iter([Ok::<_, std::io::Error>("x")]);
    let error = client(generous())
        .post(downstream.url("/effects"))
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("stream"), "{error}");
    assert_eq!(downstream.attempts(), 0);
}
