//! The handler runs once: under three hundred concurrent requests, past its lease, and
//! when its client goes away mid-handler.

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use idem_tests::{Shop, all_at_once, eventually};

use crate::{SHORT_LEASE, Seen, app, post_key};

idem_tests::on_every_store!(
    shop_on(app):
    three_hundred_concurrent_requests_run_the_handler_once,
    a_handler_three_times_longer_than_its_lease_runs_once,
    a_client_that_disconnects_mid_handler_still_gets_its_response_stored,
);

async fn three_hundred_concurrent_requests_run_the_handler_once(shop: Shop, app: Router) {
    let answers = all_at_once(300, |_| {
        let app = app.clone();
        async move { Seen::of(post_key(&app, "/pay", "\"order-1\"").await).await }
    })
    .await;
    assert_eq!(shop.runs(), 1, "the handler ran once");
    let first: Vec<_> = answers
        .iter()
        .filter(|seen| seen.status == StatusCode::CREATED && !seen.replayed())
        .collect();
    assert_eq!(first.len(), 1, "one answer is the handler's own");
    let (mut conflicts, mut replays) = (0, 0);
    for seen in &answers {
        if seen.status == StatusCode::CONFLICT {
            assert_eq!(seen.problem(), "request-in-progress");
            assert_eq!(seen.header("retry-after"), Some(b"1".as_slice()));
            conflicts += 1;
        } else if seen.replayed() {
            assert_eq!(&seen.unmarked(), first[0], "a replay is the first response");
            replays += 1;
        }
    }
    assert_eq!(
        1 + conflicts + replays,
        300,
        "every other answer is a 409 or a replay"
    );
}

async fn a_handler_three_times_longer_than_its_lease_runs_once(shop: Shop, app: Router) {
    let started = Instant::now();
    let first = tokio::spawn({
        let app = app.clone();
        async move { Seen::of(post_key(&app, "/long", "long-1").await).await }
    });
    shop.until_runs(1).await;
    // Retries throughout the handler's run, well past its first lease.
    let mut conflicts_after_the_lease = 0;
    while !first.is_finished() {
        let seen = Seen::of(post_key(&app, "/long", "long-1").await).await;
        assert!(
            seen.status == StatusCode::CONFLICT || seen.replayed(),
            "a retry during the run is a 409, never a second run: {seen:?}"
        );
        if seen.status == StatusCode::CONFLICT && started.elapsed() > 2 * SHORT_LEASE {
            conflicts_after_the_lease += 1;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        conflicts_after_the_lease > 0,
        "retries came after the lease"
    );
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    let replay = Seen::of(post_key(&app, "/long", "long-1").await).await;
    assert_eq!(replay.unmarked(), first);
    assert_eq!(shop.runs(), 1);
}

async fn a_client_that_disconnects_mid_handler_still_gets_its_response_stored(
    shop: Shop,
    app: Router,
) {
    let abandoned = tokio::spawn({
        let app = app.clone();
        async move { post_key(&app, "/gated", "walk-away").await }
    });
    shop.until_runs(1).await;
    abandoned.abort(); // the client goes away: the request's future is dropped
    assert!(abandoned.await.unwrap_err().is_cancelled());
    let retry = Seen::of(post_key(&app, "/gated", "walk-away").await).await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "the handler still runs");
    shop.open_gate();
    eventually(Duration::from_secs(5), "the response is stored", || {
        let app = app.clone();
        async move {
            let seen = Seen::of(post_key(&app, "/gated", "walk-away").await).await;
            seen.replayed()
        }
    })
    .await;
    let replay = Seen::of(post_key(&app, "/gated", "walk-away").await).await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.body, "order 1");
    assert_eq!(shop.runs(), 1);
}
