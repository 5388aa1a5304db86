//! Replay with a payload choice (`VerifyFormTokenLayer::with_payload_fingerprint`): the
//! token and what of the body counts make the submission. A repeat of the token with the
//! same body replays; with another, it is refused with 422 — also while the first still
//! runs, so the check is not skipped on the waiting path — and the handler runs once.
//! Without a choice, the token alone is the submission.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{Shop, body_text, problem_code, send};

use crate::{app, as_client, issue, order, post_form};

idem_tests::on_every_store!(
    shop_on(app):
    by_body_a_repeat_with_other_fields_is_refused_and_the_same_replays,
    by_body_the_check_holds_while_the_first_still_runs,
    canonical_json_with_the_token_in_a_header,
    without_a_choice_the_token_alone_is_the_submission,
);

fn other_order(token: &str) -> String {
    format!("item=tea+pot&form_token={token}")
}

async fn by_body_a_repeat_with_other_fields_is_refused_and_the_same_replays(
    shop: Shop,
    app: Router,
) {
    let token = issue(&app, "alice").await;
    let first = post_form(&app, "/replayed/by-body", "alice", order(&token)).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    let other = post_form(&app, "/replayed/by-body", "alice", other_order(&token)).await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem_code(other).await, "idempotency-key-reused");
    let same = post_form(&app, "/replayed/by-body", "alice", order(&token)).await;
    assert_eq!(same.status(), StatusCode::SEE_OTHER);
    assert!(same.headers().contains_key("idempotent-replayed"));
    assert_eq!(same.headers()[header::LOCATION], "/orders/1");
    assert_eq!(shop.runs(), 1, "the handler ran once");
}

async fn by_body_the_check_holds_while_the_first_still_runs(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    let first = tokio::spawn({
        let (app, body) = (app.clone(), order(&token));
        async move { post_form(&app, "/replayed/by-body/gated", "alice", body).await }
    });
    shop.until_runs(1).await;
    // Another body does not wait for the first to end: it is another submission.
    let other = post_form(
        &app,
        "/replayed/by-body/gated",
        "alice",
        other_order(&token),
    )
    .await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // The same body waits for the first and replays its answer.
    let same = tokio::spawn({
        let (app, body) = (app.clone(), order(&token));
        async move { post_form(&app, "/replayed/by-body/gated", "alice", body).await }
    });
    // Room for two, so that a second run would show in the count rather than hang.
    shop.open_gate_for(2);
    let first = first.await.unwrap();
    let same = same.await.unwrap();
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert_eq!(same.status(), StatusCode::SEE_OTHER, "{same:?}");
    assert_eq!(same.headers()[header::LOCATION], "/orders/1");
    assert_eq!(shop.runs(), 1, "the handler ran once");
}

async fn canonical_json_with_the_token_in_a_header(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    let post = |json: &'static str| {
        let request = as_client(Request::post("/replayed/api"), "alice")
            .header("x-form-token", &token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(json))
            .unwrap();
        send(&app, request)
    };
    let first = post(r#"{"item": "teapot", "note": "gift"}"#).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(
        body_text(first).await,
        "ordered teapot",
        "the body reached it"
    );
    let reordered = post(r#"{"note":"gift","item":"teapot"}"#).await;
    assert_eq!(reordered.status(), StatusCode::CREATED);
    assert!(reordered.headers().contains_key("idempotent-replayed"));
    assert_eq!(body_text(reordered).await, "ordered teapot");
    let other = post(r#"{"item":"cup","note":"gift"}"#).await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(shop.runs(), 1, "the handler ran once");
}

async fn without_a_choice_the_token_alone_is_the_submission(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    let first = post_form(&app, "/replayed", "alice", order(&token)).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    let other = post_form(&app, "/replayed", "alice", other_order(&token)).await;
    assert_eq!(other.status(), StatusCode::SEE_OTHER, "a replay: {other:?}");
    assert!(other.headers().contains_key("idempotent-replayed"));
    assert_eq!(shop.runs(), 1, "the handler ran once");
}
