//! A handler that fails: a server error is not stored, a panic removes the record.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use idem_tests::{Shop, eventually};

use crate::{Seen, app, post_key};

idem_tests::on_every_store!(
    shop_on(app):
    a_server_error_is_not_stored_and_a_retry_runs_again,
    a_transient_refusal_is_not_stored_and_a_retry_runs_again,
    a_panic_removes_the_record,
);

async fn a_server_error_is_not_stored_and_a_retry_runs_again(shop: Shop, app: Router) {
    for run in 1..=2 {
        let seen = Seen::of(post_key(&app, "/failing", "flaky").await).await;
        assert_eq!(seen.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!seen.replayed());
        assert_eq!(shop.runs(), run);
    }
}

/// A timeout, a too-early and a rate limit say "come back later with the same request":
/// kept, they would refuse the retry for the whole retention. Another 4xx is kept.
async fn a_transient_refusal_is_not_stored_and_a_retry_runs_again(shop: Shop, app: Router) {
    let mut runs = 0;
    for status in [408, 425, 429] {
        for _ in 1..=2 {
            let path = format!("/answers/{status}");
            let seen = Seen::of(post_key(&app, &path, &format!("t-{status}")).await).await;
            runs += 1;
            assert_eq!(seen.status.as_u16(), status);
            assert!(!seen.replayed(), "{status} is not replayed");
            assert_eq!(shop.runs(), runs, "a retry after {status} runs again");
        }
    }
    let first = Seen::of(post_key(&app, "/answers/422", "t-422").await).await;
    let retry = Seen::of(post_key(&app, "/answers/422", "t-422").await).await;
    assert_eq!((first.status.as_u16(), retry.status.as_u16()), (422, 422));
    assert!(retry.replayed(), "a 422 is kept and replayed");
    assert_eq!(shop.runs(), runs + 1);
}

async fn a_panic_removes_the_record(shop: Shop, app: Router) {
    let seen = post_key(&app, "/panicking", "boom").await;
    assert_eq!(
        seen.status(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "CatchPanicLayer's"
    );
    assert_eq!(shop.runs(), 1);
    // The record is removed in the background as the panic unwinds; retry until it is.
    eventually(
        Duration::from_secs(5),
        "a retry runs the handler again",
        || {
            let (app, shop) = (app.clone(), shop.clone());
            async move {
                post_key(&app, "/panicking", "boom").await;
                shop.runs() == 2
            }
        },
    )
    .await;
}
