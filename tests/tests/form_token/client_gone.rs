//! A post whose client goes away while its token is checked, or (with replay) while its
//! submission's record is begun — as a browser abandons the first POST of a double click
//! for the second — still runs to its end: the order is placed once, and with replay the
//! second post lands on it rather than waiting for a record that nobody runs.

use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use idem_axum::MemoryStore;
use idem_tests::{Counting, Shop, eventually};

use crate::{app, issue, order, post_form};

/// The store step a first post is dropped at: its answer held back, the store having
/// applied it.
#[derive(Debug, Clone, Copy)]
enum DroppedAt {
    /// The check of the token (spent, or looked at).
    TokenCheck,
    /// The beginning of the submission's record (with replay).
    RecordBegin,
}

impl DroppedAt {
    fn stall(self, store: &Counting<MemoryStore>, stall: bool) {
        match self {
            Self::TokenCheck => store.stall_token_checks(stall),
            Self::RecordBegin => store.stall_record_begins(stall),
        }
    }

    fn reached(self, store: &Counting<MemoryStore>) -> bool {
        match self {
            Self::TokenCheck => store.token_checks() == 1,
            Self::RecordBegin => store.record_begins() == 1,
        }
    }
}

/// The shop on a store whose answers the test holds back, a token of alice's, and
/// alice's first post of it to `path`, dropped (its client gone) once the store has
/// applied the step `at` and before its answer came back.
async fn first_post_gone_at(at: DroppedAt, path: &'static str) -> (Shop, Router, String) {
    let store = Counting::new(MemoryStore::new());
    let shop = Shop::new();
    let app = app(store.clone(), &shop);
    let token = issue(&app, "alice").await;
    at.stall(&store, true);
    let first = tokio::spawn({
        let (app, body) = (app.clone(), order(&token));
        async move { post_form(&app, path, "alice", body).await }
    });
    eventually(
        Duration::from_secs(5),
        "the first post reaches the store step it is dropped at",
        || {
            let store = store.clone();
            async move { at.reached(&store) }
        },
    )
    .await;
    first.abort();
    assert!(
        first.await.is_err_and(|error| error.is_cancelled()),
        "the first post was dropped before its answer"
    );
    at.stall(&store, false);
    (shop, app, token)
}

#[tokio::test]
async fn a_post_dropped_after_its_token_was_spent_still_places_its_order() {
    let (shop, app, token) = first_post_gone_at(DroppedAt::TokenCheck, "/orders").await;
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
    the_repeat_lands_on_the_order_of_a_post_dropped_at(DroppedAt::TokenCheck).await;
}

#[tokio::test]
async fn with_replay_the_repeat_of_a_post_dropped_at_its_record_lands_on_its_order() {
    the_repeat_lands_on_the_order_of_a_post_dropped_at(DroppedAt::RecordBegin).await;
}

async fn the_repeat_lands_on_the_order_of_a_post_dropped_at(at: DroppedAt) {
    let (shop, app, token) = first_post_gone_at(at, "/replayed").await;
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
