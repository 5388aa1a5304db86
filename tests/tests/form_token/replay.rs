//! With replay, every post of one token lands where the first did; other clients' and
//! unknown tokens are still refused.

use axum::Router;
use axum::http::{StatusCode, header};
use idem_tests::{Shop, all_at_once};

use crate::{app, issue, order, post_form};

idem_tests::on_every_store!(
    shop_on(app):
    with_replay_every_post_of_one_token_lands_where_the_first_did,
    with_replay_another_clients_or_an_unknown_token_is_still_refused,
);

/// A double click — and a hundred — with replay on: the handler runs once, and every post
/// of the token, concurrent or later, gets the first one's redirect.
async fn with_replay_every_post_of_one_token_lands_where_the_first_did(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    let answers = all_at_once(100, |_| {
        let (app, body) = (app.clone(), order(&token));
        async move { post_form(&app, "/replayed", "alice", body).await }
    })
    .await;
    assert_eq!(shop.runs(), 1, "the handler ran once");
    let mut replayed = 0;
    for answer in &answers {
        assert_eq!(answer.status(), StatusCode::SEE_OTHER, "{answer:?}");
        assert_eq!(answer.headers()[header::LOCATION], "/orders/1");
        replayed += usize::from(answer.headers().contains_key("idempotent-replayed"));
    }
    assert_eq!(replayed, 99, "all but the first are replays");
    // Later, too, for the token's life.
    let later = post_form(&app, "/replayed", "alice", order(&token)).await;
    assert_eq!(later.headers()[header::LOCATION], "/orders/1");
    assert_eq!(shop.runs(), 1);
}

/// Replay does not open the door to other clients' tokens or to made-up ones.
async fn with_replay_another_clients_or_an_unknown_token_is_still_refused(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    let stolen = post_form(&app, "/replayed", "mallory", order(&token)).await;
    assert_eq!(stolen.status(), StatusCode::CONFLICT);
    let made_up = post_form(&app, "/replayed", "alice", order("A".repeat(22).as_str())).await;
    assert_eq!(made_up.status(), StatusCode::CONFLICT);
    assert_eq!(shop.runs(), 0);
    // Neither refusal spent alice's token or left a submission behind.
    let first = post_form(&app, "/replayed", "alice", order(&token)).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert!(!first.headers().contains_key("idempotent-replayed"));
    let stolen_again = post_form(&app, "/replayed", "mallory", order(&token)).await;
    assert_eq!(
        stolen_again.status(),
        StatusCode::CONFLICT,
        "not mallory's replay either"
    );
    assert_eq!(shop.runs(), 1);
}
