//! Beside `#[avoid_repeat]`, in either order.

use axum::http::StatusCode;
use idem_tests::{Backend, Shop, all_at_once};

use crate::{accepted, app, count, issue, order, post_form};

idem_tests::on_every_store!(beside_avoid_repeat_in_either_order);

/// The routes under both guards: `#[avoid_repeat]` beside the token layer, and the token
/// layer outside and inside `AvoidRepeatLayer`.
const BOTH_GUARDS: [&str; 3] = [
    "/both/attribute",
    "/both/token-outside",
    "/both/token-inside",
];

async fn beside_avoid_repeat_in_either_order<B: Backend>() {
    let backend = B::start().await;
    for path in BOTH_GUARDS {
        let shop = Shop::default();
        let app = app(backend.store(), &shop);
        // One token, a burst of posts: exactly one runs, whichever guard refuses the rest.
        let token = issue(&app, "alice").await;
        let statuses = all_at_once(50, |_| {
            let (app, token) = (app.clone(), token.clone());
            async move { post_form(&app, path, "alice", order(&token)).await.status() }
        })
        .await;
        assert_eq!(shop.runs(), 1, "{path}");
        assert_eq!(count(&statuses, StatusCode::CREATED), 1, "{path}");
        assert_eq!(count(&statuses, StatusCode::CONFLICT), 49, "{path}");

        // A second rendering of the form inside the anti-repeat window: its token is
        // good, the window still refuses the same client.
        let token = issue(&app, "alice").await;
        let repeat = post_form(&app, path, "alice", order(&token)).await;
        assert_eq!(repeat.status(), StatusCode::CONFLICT, "{path}");
        assert_eq!(shop.runs(), 1, "{path}");

        // Another client is subject to neither.
        let token = issue(&app, "bob").await;
        accepted(&app, path, "bob", &token, "another client").await;
        assert_eq!(shop.runs(), 2, "{path}");
    }

    // With the token layer outside, a post refused for its token takes no anti-repeat
    // key; inside, the window is taken first and given back by the 400. Either way the
    // same client's next, valid post goes through.
    for path in BOTH_GUARDS {
        let shop = Shop::default();
        let app = app(backend.store(), &shop);
        let missing = post_form(&app, path, "carol", "item=tea").await;
        assert_eq!(missing.status(), StatusCode::BAD_REQUEST, "{path}");
        let token = issue(&app, "carol").await;
        accepted(&app, path, "carol", &token, "the 400 held no key").await;
        assert_eq!(shop.runs(), 1, "{path}");
    }
}
