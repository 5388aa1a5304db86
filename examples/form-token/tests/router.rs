//! The example through its router (no sockets): the form's token is spent once, and the
//! messages received are counted.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use example_form_token::FormTokenExample;
use idem_tests::{Answer, all_at_once, answer, form_token_in, from_loopback};
use serde_json::json;

fn app() -> Router {
    from_loopback(FormTokenExample::new().router())
}

/// Loads the form page and returns its token.
async fn fresh_token(app: &Router) -> String {
    let page = answer(app, Request::get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status, StatusCode::OK);
    form_token_in(&page.text())
}

/// Posts the form as a browser does, with `form` as its url-encoded body.
async fn submit(app: &Router, form: String) -> Answer {
    let request = Request::post("/messages")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form))
        .unwrap();
    answer(app, request).await
}

async fn received(app: &Router) -> serde_json::Value {
    let list = answer(app, Request::get("/messages").body(Body::empty()).unwrap()).await;
    assert_eq!(list.status, StatusCode::OK, "the list needs no token");
    list.json()
}

#[tokio::test]
async fn a_form_is_accepted_once_and_a_resubmission_refused() {
    let app = app();
    let token = fresh_token(&app).await;
    let first = submit(&app, format!("form_token={token}&text=hello")).await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    assert!(first.text().contains("Message 1 received."));
    for _ in 0..3 {
        let again = submit(&app, format!("form_token={token}&text=hello")).await;
        assert_eq!(again.status, StatusCode::CONFLICT, "{again:?}");
        assert!(again.text().contains("already sent"), "{again:?}");
    }
    assert_eq!(received(&app).await, json!(["hello"]));

    let next = fresh_token(&app).await;
    assert_ne!(next, token, "every page load issues a new token");
    let second = submit(&app, format!("form_token={next}&text=again")).await;
    assert!(second.text().contains("Message 2 received."));
    assert_eq!(received(&app).await, json!(["hello", "again"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_submissions_of_one_page_at_once_are_received_once() {
    let app = app();
    let token = fresh_token(&app).await;
    let statuses = all_at_once(20, |_| {
        let (app, form) = (app.clone(), format!("form_token={token}&text=hi"));
        async move { submit(&app, form).await.status }
    })
    .await;
    let accepted = statuses.iter().filter(|s| **s == StatusCode::CREATED);
    assert_eq!(accepted.count(), 1, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| [StatusCode::CREATED, StatusCode::CONFLICT].contains(s))
    );
    assert_eq!(received(&app).await, json!(["hi"]));
}

#[tokio::test]
async fn without_a_token_or_with_a_made_up_one_nothing_is_received() {
    let app = app();
    assert_eq!(
        submit(&app, "text=hi".to_owned()).await.status,
        StatusCode::BAD_REQUEST
    );
    let made_up = submit(&app, "form_token=AAAAAAAAAAAAAAAAAAAAAA&text=hi".to_owned()).await;
    assert_eq!(made_up.status, StatusCode::CONFLICT);
    assert_eq!(received(&app).await, json!([]));
}

#[tokio::test]
async fn a_browser_gets_the_refusal_as_a_page() {
    let app = app();
    let token = fresh_token(&app).await;
    let form = || {
        Request::post("/messages")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "text/html")
            .body(Body::from(format!("form_token={token}&text=hi")))
            .unwrap()
    };
    assert_eq!(answer(&app, form()).await.status, StatusCode::CREATED);
    let refused = answer(&app, form()).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    let content_type = refused.headers[header::CONTENT_TYPE].to_str().unwrap();
    assert!(content_type.starts_with("text/html"), "{content_type}");
}
