//! The layer against a real idem-guarded server on a TCP port: what it retries, what it
//! does not, and how many times the downstream's handler ran (its side effects), with
//! hundreds of calls at once.

mod support;

use std::time::Duration;

use axum::http::StatusCode;
use http_body_util::Full;
use idem_axum::IdempotencyLayer;
use idem_client::Error;
use support::{Downstream, Fault, client, generous, post_to, read};
use tokio::task::JoinSet;
use tower::ServiceExt;
use tower::retry::budget::TpsBudget;

/// Sends `calls` posts at once, each its own request, and returns their answers.
async fn post_at_once(
    client: &support::TestClient,
    url: &str,
    calls: usize,
    key: Option<&str>,
) -> Vec<(StatusCode, bool, String)> {
    let mut all = JoinSet::new();
    for call in 0..calls {
        let mut request = post_to(url, &format!("call {call}"));
        if let Some(key) = key {
            request
                .headers_mut()
                .insert("idempotency-key", key.parse().unwrap());
            *request.body_mut() = Full::new("the same call".into());
        }
        let client = client.clone();
        all.spawn(async move { read(client.oneshot(request).await.expect("an answer")).await });
    }
    all.join_all().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_refused_with_503_are_sent_again_under_their_key_and_run_once() {
    let downstream = Downstream::start(Fault::Unavailable(2), Duration::ZERO).await;
    let answers = post_at_once(&client(generous()), &downstream.url("/effects"), 300, None).await;

    assert!(
        answers
            .iter()
            .all(|(status, ..)| *status == StatusCode::CREATED)
    );
    // Each call got a key of its own, sent with each of its three attempts.
    let attempts = downstream.attempts_per_key();
    assert_eq!(attempts.len(), 300, "one key per call");
    assert!(
        attempts.iter().all(|(key, n)| key.len() == 32 && *n == 3),
        "{attempts:?}"
    );
    assert_eq!(downstream.runs(), 300, "one side effect per call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_after_the_handler_ran_is_retried_and_gets_the_stored_answer() {
    let downstream = Downstream::start(Fault::DropAfterRun, Duration::ZERO).await;
    let answers = post_at_once(&client(generous()), &downstream.url("/effects"), 200, None).await;

    for (status, replayed, body) in &answers {
        assert_eq!(*status, StatusCode::CREATED, "{body}");
        assert!(replayed, "the retry replays the run whose answer was lost");
    }
    assert_eq!(downstream.runs(), 200, "one side effect per call");
    assert!(downstream.runs_per_key().values().all(|runs| *runs == 1));
    assert!(downstream.attempts_per_key().values().all(|n| *n == 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_with_one_key_while_the_first_runs_wait_for_its_answer() {
    // The handler runs long enough for every other call to find it in progress (409).
    let downstream = Downstream::start(Fault::None, Duration::from_millis(300)).await;
    let answers = post_at_once(
        &client(generous()),
        &downstream.url("/effects"),
        200,
        Some("one-key"),
    )
    .await;

    assert_eq!(downstream.runs(), 1, "one side effect for one key");
    let first = &answers[0].2;
    for (status, _, body) in &answers {
        assert_eq!(*status, StatusCode::CREATED);
        assert_eq!(body, first, "every call gets the one run's answer");
    }
    assert_eq!(
        answers.iter().filter(|(_, replayed, _)| *replayed).count(),
        199
    );
    assert!(
        downstream.attempts() > 200,
        "the calls that found it running were retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_at_the_attempt_limit_and_the_last_answer_is_returned() {
    let downstream = Downstream::start(
        Fault::Always(StatusCode::SERVICE_UNAVAILABLE),
        Duration::ZERO,
    )
    .await;
    let answers = post_at_once(
        &client(generous().with_max_attempts(4)),
        &downstream.url("/effects"),
        50,
        None,
    )
    .await;

    assert!(
        answers
            .iter()
            .all(|(status, ..)| *status == StatusCode::SERVICE_UNAVAILABLE)
    );
    let attempts = downstream.attempts_per_key();
    assert_eq!(attempts.len(), 50);
    assert!(attempts.values().all(|n| *n == 4), "{attempts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_when_the_budget_is_spent() {
    let downstream = Downstream::start(
        Fault::Always(StatusCode::SERVICE_UNAVAILABLE),
        Duration::ZERO,
    )
    .await;
    // No retry a second, and one retry for every ten requests.
    let budget = TpsBudget::new(Duration::from_secs(10), 0, 0.1);
    let client = client(generous().with_budget(budget));
    for call in 0..100 {
        let answer = client
            .clone()
            .oneshot(post_to(&downstream.url("/effects"), &format!("{call}")))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let retries = downstream.attempts() - 100;
    assert!(retries <= 10, "{retries} retries for 100 requests");
    assert!(retries > 0, "the budget lets some through");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_past_the_time_allowed_ends_the_retries() {
    let downstream = Downstream::start(Fault::None, Duration::from_secs(3)).await;
    let client = client(generous().with_max_elapsed(Duration::from_millis(500)));
    let url = downstream.url("/effects");
    // The call that comes second finds the first running: idem says to come back in 1 s,
    // later than the 500 ms this client allows, so its 409 is its answer, after one
    // attempt.
    let (a, b) = tokio::join!(
        client.clone().oneshot(post_to(&url, "x").with_key("k")),
        client.clone().oneshot(post_to(&url, "x").with_key("k")),
    );
    let mut statuses = [a.unwrap().status(), b.unwrap().status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
    assert_eq!(downstream.attempts(), 2);
    assert_eq!(downstream.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_end_before_the_key_s_advertised_retention_passes() {
    // The call that comes second finds the first running: idem says to come back in 1 s,
    // and that the key is kept `retention`. The client allows itself 30 s.
    for (retention, second, attempts) in [
        // A retry 1 s after the first attempt could find the key forgotten, and run the
        // request again: the 409 is the answer.
        (1, StatusCode::CONFLICT, 2..=2),
        // Kept long enough: the second call waits for the first's answer.
        (60, StatusCode::CREATED, 3..=5),
    ]
    .map(|(secs, status, n)| (Duration::from_secs(secs), status, n))
    {
        let guard = IdempotencyLayer::new()
            .with_required(true)
            .with_retention(retention);
        let downstream =
            Downstream::start_with(Fault::None, Duration::from_millis(1500), guard).await;
        let client = client(generous());
        let url = downstream.url("/effects");
        let (a, b) = tokio::join!(
            client.clone().oneshot(post_to(&url, "x").with_key("k")),
            client.clone().oneshot(post_to(&url, "x").with_key("k")),
        );
        let mut answers = [a.unwrap(), b.unwrap()];
        answers.sort_by_key(|answer| answer.status());
        let advertised = retention.as_secs().to_string();
        assert_eq!(answers[0].status(), StatusCode::CREATED);
        assert_eq!(answers[0].headers()["idempotency-ttl"], advertised.as_str());
        assert_eq!(answers[1].status(), second);
        assert_eq!(answers[1].headers()["idempotency-ttl"], advertised.as_str());
        assert!(
            attempts.contains(&downstream.attempts()),
            "{retention:?}: {}",
            downstream.attempts()
        );
        assert_eq!(downstream.runs(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_of_an_avoid_repeat_window_is_final_but_a_plain_409_with_retry_after_is_not() {
    let window = Downstream::start(Fault::AvoidRepeatWindow, Duration::ZERO).await;
    let answer = client(generous())
        .oneshot(post_to(&window.url("/effects"), "x"))
        .await
        .unwrap();
    let (status, _, body) = read(answer).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body.contains("duplicate-request"),
        "the problem, read and kept: {body}"
    );
    assert_eq!(window.attempts(), 1, "a window's refusal is not retried");

    let plain = Downstream::start(Fault::Always(StatusCode::CONFLICT), Duration::ZERO).await;
    let answer = client(generous().with_max_attempts(3))
        .oneshot(post_to(&plain.url("/effects"), "x"))
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::CONFLICT);
    assert_eq!(
        plain.attempts(),
        3,
        "a plain 409 with Retry-After is retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_fails_before_anything_is_sent() {
    let downstream = Downstream::start(Fault::None, Duration::ZERO).await;
    let error = client(generous().with_max_body(16))
        .oneshot(post_to(&downstream.url("/effects"), "seventeen bytes!!"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::BodyTooLarge { limit: 16 }),
        "{error:?}"
    );
    assert_eq!(downstream.attempts(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_not_keyed_is_sent_once_as_it_is() {
    let downstream = Downstream::start(
        Fault::Always(StatusCode::SERVICE_UNAVAILABLE),
        Duration::ZERO,
    )
    .await;
    let answer = client(generous())
        .oneshot(
            http::Request::put(downstream.url("/effects"))
                .body(Full::<bytes::Bytes>::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        downstream.attempts_per_key(),
        [(String::new(), 1)].into(),
        "once, with no key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_ends_in_a_transport_error_after_every_attempt() {
    // A port that was just free: every connection is refused.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/effects", listener.local_addr().unwrap());
    drop(listener);
    let error = client(generous().with_max_attempts(3))
        .oneshot(post_to(&url, "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::Transport { attempts: 3, .. }),
        "{error:?}"
    );
}

/// Sets a request's `Idempotency-Key`.
trait WithKey {
    fn with_key(self, key: &str) -> Self;
}

impl<B> WithKey for http::Request<B> {
    fn with_key(mut self, key: &str) -> Self {
        self.headers_mut()
            .insert("idempotency-key", key.parse().unwrap());
        self
    }
}
