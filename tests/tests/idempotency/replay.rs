//! What a replay answers: the first response byte for byte, a record the handler completed
//! itself, the same answer from a new router on the store.

use axum::http::StatusCode;
use idem_tests::{Backend, Shop, send, shop_on};

use crate::{Seen, app, post_key, request};

idem_tests::on_every_store!(
    a_replay_is_the_first_response_byte_for_byte,
    a_record_its_handler_completed_is_replayed_as_the_handler_stored_it,
    a_new_router_on_the_same_store_still_replays,
);

async fn a_replay_is_the_first_response_byte_for_byte<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let first = Seen::of(post_key(&app, "/pay", "bare-key-1").await).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    let cookies = first
        .headers
        .iter()
        .filter(|(n, _)| n == "set-cookie")
        .count();
    assert_eq!(cookies, 2, "{first:?}");

    let replay = Seen::of(post_key(&app, "/pay", "bare-key-1").await).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(replay.unmarked(), first, "status, every header, body");
    assert_eq!(shop.runs(), 1);

    // The quoted form of the same key is the same key.
    let quoted = Seen::of(post_key(&app, "/pay", "\"bare-key-1\"").await).await;
    assert_eq!(quoted.unmarked(), first);
    assert_eq!(shop.runs(), 1);
}

async fn a_record_its_handler_completed_is_replayed_as_the_handler_stored_it<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let first = Seen::of(post_key(&app, "/completes-itself", "own-1").await).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.body, "order 1, stored by its handler");
    let replay = Seen::of(post_key(&app, "/completes-itself", "own-1").await).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(
        replay.unmarked(),
        first,
        "what the handler stored, byte for byte"
    );
    assert_eq!(shop.runs(), 1);

    // Where a key is optional, the handler sees whether a record was begun.
    let with_key = send(
        &app,
        request("/record-if-any", "alice", Some("own-2"), "{}"),
    )
    .await;
    assert_eq!(idem_tests::body_text(with_key).await, "record: true");
    let without = send(&app, request("/record-if-any", "alice", None, "{}")).await;
    assert_eq!(idem_tests::body_text(without).await, "record: false");

    // A handler that takes the record on a route without the layer names what is missing.
    let unguarded = send(
        &app,
        request("/completes-unguarded", "alice", Some("own-3"), "{}"),
    )
    .await;
    assert_eq!(unguarded.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        idem_tests::body_text(unguarded)
            .await
            .contains("IdempotencyLayer")
    );
    assert_eq!(shop.runs(), 3, "the handler without a record never ran");
}

async fn a_new_router_on_the_same_store_still_replays<B: Backend>() {
    let backend = B::start().await;
    let before_restart = Shop::new();
    let first = {
        let app = app(backend.store(), &before_restart);
        Seen::of(post_key(&app, "/pay", "survives-restarts").await).await
    };
    let after_restart = Shop::new();
    let app = app(backend.store_of_another_instance(), &after_restart);
    let replay = Seen::of(post_key(&app, "/pay", "survives-restarts").await).await;
    assert!(replay.replayed());
    assert_eq!(replay.unmarked(), first);
    assert_eq!(
        after_restart.runs(),
        0,
        "the new instance did not run the handler"
    );
}
