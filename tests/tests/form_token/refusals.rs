//! What is refused, and how: a missing token, bodies that spend none, a missing layer, a
//! client that cannot be told, a browser that asks for HTML.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{Shop, assert_refused_page, body_text, problem_code, send};

use crate::{
    BOUNDARY, accepted, app, as_client, issue, multipart_content_type, multipart_order, order,
    post_form, post_typed, routes, send_empty_as,
};

idem_tests::on_every_store!(
    shop_on(app):
    a_missing_token_is_a_bad_request,
    bad_bodies_spend_no_token,
    an_oversize_body_spends_no_token,
);

async fn a_missing_token_is_a_bad_request(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    let no_content_type = send_empty_as(&app, Request::post("/orders"), "alice").await;
    let multipart_without = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"item\"\r\n\r\ntea\r\n--{BOUNDARY}--\r\n"
    );
    let responses = [
        post_form(&app, "/orders", "alice", "item=tea").await,
        post_form(&app, "/orders", "alice", "item=tea&form_token=").await,
        post_form(&app, "/orders", "alice", "").await,
        post_typed(
            &app,
            "/upload",
            "alice",
            &multipart_content_type(),
            multipart_without,
        )
        .await,
        no_content_type,
    ];
    for response in responses {
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let problem = body_text(response).await;
        assert!(problem.contains("missing-form-token"), "{problem}");
        assert!(
            problem.contains("form_token") && problem.contains("x-form-token"),
            "names where the token goes: {problem}"
        );
    }
    assert_eq!(shop.runs(), 0);
    accepted(&app, "/orders", "alice", &token, "no token was spent").await;
}

async fn bad_bodies_spend_no_token(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;

    let json = post_typed(
        &app,
        "/orders",
        "alice",
        "application/json",
        format!(r#"{{"item":"tea","form_token":"{token}"}}"#),
    )
    .await;
    assert_eq!(json.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(problem_code(json).await, "unsupported-media-type");

    for body in [
        [order(&token).as_bytes(), b"&note=\xff\xfe"].concat(),
        [b"note=%FF&".as_slice(), order(&token).as_bytes()].concat(),
    ] {
        let not_utf8 = post_form(&app, "/orders", "alice", body).await;
        assert_eq!(not_utf8.status(), StatusCode::BAD_REQUEST);
        assert_eq!(problem_code(not_utf8).await, "invalid-body");
    }

    let whole = multipart_order(&token);
    let cut = whole.find("a picture").unwrap();
    for (content_type, body) in [
        (multipart_content_type(), whole[..cut].to_owned()),
        (
            multipart_content_type(),
            whole[..whole.len() - 4].to_owned(),
        ),
        ("multipart/form-data".to_owned(), whole.clone()),
        (
            "multipart/form-data; boundary=other".to_owned(),
            whole.clone(),
        ),
    ] {
        let broken = post_typed(&app, "/upload", "alice", &content_type, body).await;
        assert_eq!(broken.status(), StatusCode::BAD_REQUEST, "{content_type}");
        assert_eq!(problem_code(broken).await, "invalid-body");
    }
    assert_eq!(shop.runs(), 0);

    accepted(&app, "/orders", "alice", &token, "no bad body spent it").await;
    assert_eq!(shop.runs(), 1);
}

async fn an_oversize_body_spends_no_token(shop: Shop, app: Router) {
    let token = issue(&app, "alice").await;
    // Over the layer's own limit (1 KiB on `/small`), and over the router's default
    // (axum's 2 MB) on `/orders`; the token comes first, the padding after it.
    for (path, padding) in [("/small", 2 * 1024), ("/orders", 3 * 1024 * 1024)] {
        let body = format!("{}&note={}", order(&token), "x".repeat(padding));
        let too_large = post_form(&app, path, "alice", body).await;
        assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert_eq!(problem_code(too_large).await, "payload-too-large");
    }
    assert_eq!(shop.runs(), 0);
    accepted(&app, "/small", "alice", &token, "no oversize body spent it").await;
    assert_eq!(shop.runs(), 1);
}

#[tokio::test]
async fn a_missing_layer_answers_500_and_names_it() {
    let shop = Shop::default();
    let app = routes(&shop); // no `idem.layer()`
    let page = send(&app, Request::get("/form").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_text(page).await.contains("idem.layer()"));
    let post = post_form(&app, "/orders", "alice", order("AAAAAAAAAAAAAAAAAAAAAA")).await;
    assert_eq!(post.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_text(post).await.contains("idem.layer()"));
    assert_eq!(shop.runs(), 0);
}

#[tokio::test]
async fn a_client_that_cannot_be_told_is_refused() {
    let shop = Shop::default();
    let app = app(idem_axum::MemoryStore::new(), &shop);
    let page = send(&app, Request::get("/form").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status(), StatusCode::BAD_REQUEST);
    assert!(
        body_text(page).await.contains("session"),
        "names the cookie"
    );
    let post = send(
        &app,
        Request::post("/orders")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(order("AAAAAAAAAAAAAAAAAAAAAA")))
            .unwrap(),
    )
    .await;
    assert_eq!(post.status(), StatusCode::BAD_REQUEST);
    assert_eq!(problem_code(post).await, "missing-client-identity");
    assert_eq!(shop.runs(), 0);
}

#[tokio::test]
async fn a_browser_gets_html_with_the_configured_message() {
    let shop = Shop::default();
    let app = app(idem_axum::MemoryStore::new(), &shop);
    let token = issue(&app, "alice").await;
    let browser = |token: &str| {
        as_client(Request::post("/localized"), "alice")
            .header(header::ACCEPT, "text/html,application/xhtml+xml,*/*;q=0.8")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(order(token)))
            .unwrap()
    };
    assert_eq!(
        send(&app, browser(&token)).await.status(),
        StatusCode::CREATED
    );
    let again = send(&app, browser(&token)).await;
    assert_refused_page(again, "请勿重复提交").await;
    assert_eq!(shop.runs(), 1);
}
