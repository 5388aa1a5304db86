//! Where the token travels and what reaches the handler: a header, multipart forms, field
//! and header names configured otherwise.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_axum::FormTokenConfig;
use idem_tests::{Shop, body_text, send};

use crate::{
    app, app_with, as_client, issue, issue_in_field, multipart_content_type, multipart_order,
    order, post_form, post_typed,
};

idem_tests::on_every_store!(
    shop_on(app):
    a_token_in_the_header_leaves_the_body_to_the_handler,
    multipart_forms_reach_the_handler_whole,
);

async fn a_token_in_the_header_leaves_the_body_to_the_handler(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    let with_header = || {
        as_client(Request::post("/api/orders"), "alice")
            .header("x-form-token", &token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"item":"teapot"}"#))
            .unwrap()
    };
    let first = send(&app, with_header()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(
        body_text(first).await,
        "ordered teapot",
        "the JSON reached it"
    );
    let again = send(&app, with_header()).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let garbage = send(
        &app,
        as_client(Request::post("/api/orders"), "alice")
            .header("x-form-token", "not a token we issued ✓")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"item":"teapot"}"#))
            .unwrap(),
    )
    .await;
    assert_eq!(
        garbage.status(),
        StatusCode::CONFLICT,
        "unknown, like any other"
    );
    assert_eq!(shop.runs(), 1);
}

async fn multipart_forms_reach_the_handler_whole(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    let content_type = multipart_content_type();
    let upload = || {
        post_typed(
            &app,
            "/upload",
            "alice",
            &content_type,
            multipart_order(&token),
        )
    };
    let first = upload().await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(
        body_text(first).await,
        format!("item=tea cup;form_token={token};photo=a picture of a cup")
    );
    let again = upload().await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(shop.runs(), 1);
}

#[tokio::test]
async fn the_field_and_header_names_are_configurable() {
    let shop = Shop::default();
    let config = FormTokenConfig::new()
        .with_field_name("subToken")
        .with_header_name(axum::http::HeaderName::from_static("x-sub-token"));
    let app = app_with(idem_axum::MemoryStore::new(), &shop, config);
    let token = issue_in_field(&app, "alice", "subToken").await;
    let body = format!("item=tea&subToken={token}");
    assert_eq!(
        post_form(&app, "/orders", "alice", body).await.status(),
        StatusCode::CREATED
    );
    let old_name = post_form(&app, "/orders", "alice", order(&token)).await;
    assert_eq!(old_name.status(), StatusCode::BAD_REQUEST);
    assert!(body_text(old_name).await.contains("subToken"));

    let token = issue_in_field(&app, "alice", "subToken").await;
    let in_header = send(
        &app,
        as_client(Request::post("/editing"), "alice")
            .header("x-sub-token", &token)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from("item=tea"))
            .unwrap(),
    )
    .await;
    assert_eq!(in_header.status(), StatusCode::OK);
    assert!(in_header.headers().contains_key("x-sub-token"), "rotated");
    assert_eq!(shop.runs(), 2);
}
