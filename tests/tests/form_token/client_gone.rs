//! A post whose client goes away while its token is checked — as a browser abandons the
//! first POST of a double click for the second — still runs to its end: the order is
//! placed once, and with replay the second post lands on it rather than waiting for a
//! record that nobody runs.

use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use idem_axum::MemoryStore;
use idem_tests::{Counting, Shop, eventually};

use crate::{app, issue, order, post_form};

/// The shop on a store whose token checks the test holds back, a token of alice's, and
/// alice's first post of it to `path`, dropped (its client gone) once the store has
/// checked the token and before the answer came back.
async fn first_post_gone_while_its_token_was_checked(path: &'static str) -> (Shop, Router, String) {
    let store = Counting::new(MemoryStore::new());
    let shop = Shop::new();
    let app = app(store.clone(), &shop);
    let token = issue(&app, "alice").await;
    store.stall_token_checks(true);
    let first = tokio::spawn({
        let (app, body) = (app.clone(), order(&token));
        async move { post_form(&app, path, "alice", body).await }
    });
    eventually(
        Duration::from_secs(5),
        "the first post checks its token",
        || {
            let store = store.clone();
            async move { store.token_checks() == 1 }
        },
    )
    .await;
    first.abort();
    assert!(
        first.await.is_err_and(|error| error.is_cancelled()),
        "the first post was dropped before its answer"
    );
    store.stall_token_checks(false);
    (shop, app, token)
}

#[tokio::test]
async fn a_post_dropped_after_its_token_was_spent_still_places_its_order() {
    let (shop, app, token) = first_post_gone_while_its_token_was_checked("/orders").await;
    shop.until_runs(1).await;
    let repeat = post_form(&app, "/orders", "alice", order(&token)).await;
    assert_eq!(repeat.status(), StatusCode::CONFLICT, "the token is spent");
    assert_eq!(
        shop.runs(),
        1,
        "the order was placed once, by the first post"
    );
}

#[tokio::test]
async fn with_replay_the_repeat_of_a_post_dropped_at_its_token_lands_on_its_order() {
    let (shop, app, token) = first_post_gone_while_its_token_was_checked("/replayed").await;
    // Within the 5 s a repeat waits for the first submission: a record that nobody runs
    // would hold it for all of them, then answer 409.
    let repeat = tokio::time::timeout(
        Duration::from_secs(4),
        post_form(&app, "/replayed", "alice", order(&token)),
    )
    .await
    .expect("the repeat's answer comes once the first post's handler ran");
    assert_eq!(repeat.status(), StatusCode::SEE_OTHER, "{repeat:?}");
    assert_eq!(repeat.headers()[header::LOCATION], "/orders/1");
    assert_eq!(
        shop.runs(),
        1,
        "the order was placed once, by the first post"
    );
}
