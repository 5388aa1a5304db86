//! The example through its router (no sockets): statuses, `Retry-After`, and how often
//! each handler ran, read from `GET /`.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use example_avoid_repeat::{AvoidRepeatExample, CLIENT_HEADER};
use idem_tests::{Answer, all_at_once, answer, from_loopback};
use serde_json::{Value, json};

/// The example with exports of `export_time`, every request from one peer address.
fn app(export_time: Duration) -> Router {
    from_loopback(
        AvoidRepeatExample::new()
            .with_export_time(export_time)
            .router(),
    )
}

/// `POST path` from `client` (the header; none: the peer address), with a JSON body if
/// any.
fn post(path: &str, client: Option<&str>, body: Option<Value>) -> Request<Body> {
    let mut request = Request::post(path);
    if let Some(client) = client {
        request = request.header(CLIENT_HEADER, client);
    }
    let body = match body {
        Some(json) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            Body::from(json.to_string())
        }
        None => Body::empty(),
    };
    request.body(body).expect("a request")
}

/// How often each handler ran.
async fn ran(app: &Router) -> Value {
    answer(app, Request::get("/").body(Body::empty()).unwrap())
        .await
        .json()
}

fn retry_after(refused: &Answer) -> u64 {
    let value = refused.headers[header::RETRY_AFTER].to_str().unwrap();
    value.parse().expect("whole seconds")
}

#[tokio::test]
async fn a_repeat_inside_the_window_is_refused_with_retry_after_and_does_not_run() {
    let app = app(Duration::ZERO);
    let first = answer(&app, post("/orders", None, None)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.json(), json!({ "order": 1 }));
    for _ in 0..3 {
        let repeat = answer(&app, post("/orders", None, None)).await;
        assert_eq!(repeat.status, StatusCode::CONFLICT, "{repeat:?}");
        assert!((1..=10).contains(&retry_after(&repeat)), "{repeat:?}");
    }
    assert_eq!(ran(&app).await["orders"], 1);
}

#[tokio::test]
async fn another_client_is_not_blocked() {
    let app = app(Duration::ZERO);
    for client in [None, Some("alice"), Some("bob"), Some("127.0.0.1")] {
        let placed = answer(&app, post("/orders", client, None)).await;
        assert_eq!(placed.status, StatusCode::CREATED, "{client:?}: {placed:?}");
    }
    let repeat = answer(&app, post("/orders", Some("alice"), None)).await;
    assert_eq!(repeat.status, StatusCode::CONFLICT);
    assert_eq!(ran(&app).await["orders"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_double_click_of_twenty_at_once_places_one_order() {
    let app = app(Duration::ZERO);
    let statuses = all_at_once(20, |_| {
        let app = app.clone();
        async move {
            answer(&app, post("/orders", Some("alice"), None))
                .await
                .status
        }
    })
    .await;
    let placed = statuses.iter().filter(|s| **s == StatusCode::CREATED);
    assert_eq!(placed.count(), 1, "{statuses:?}");
    assert_eq!(ran(&app).await["orders"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_finish_refuses_only_while_the_export_runs() {
    let app = app(Duration::from_millis(300));
    let first = tokio::spawn({
        let app = app.clone();
        async move { answer(&app, post("/exports", None, None)).await }
    });
    idem_tests::eventually(Duration::from_secs(5), "the first export starts", || {
        let app = app.clone();
        async move { ran(&app).await["exports"] == 1 }
    })
    .await;
    let during = answer(&app, post("/exports", None, None)).await;
    assert_eq!(during.status, StatusCode::CONFLICT, "{during:?}");
    assert_eq!(first.await.unwrap().json()["export"], 1);

    let after = answer(&app, post("/exports", None, None)).await;
    assert_eq!(after.status, StatusCode::OK, "free once the first finished");
    assert_eq!(after.json()["export"], 2);
    assert_eq!(ran(&app).await["exports"], 2);
}

#[tokio::test]
async fn by_client_and_body_another_comment_is_not_a_repeat() {
    let app = app(Duration::ZERO);
    let hi = || post("/comments", None, Some(json!({ "text": "hi" })));
    assert_eq!(answer(&app, hi()).await.status, StatusCode::CREATED);
    assert_eq!(answer(&app, hi()).await.status, StatusCode::CONFLICT);
    let hello = answer(
        &app,
        post("/comments", None, Some(json!({ "text": "hello" }))),
    )
    .await;
    assert_eq!(hello.status, StatusCode::CREATED);
    assert_eq!(hello.json(), json!({ "comment": 2, "text": "hello" }));
    assert_eq!(ran(&app).await["comments"], 2);
}

#[tokio::test]
async fn the_layer_guards_its_route_with_its_message() {
    let app = app(Duration::ZERO);
    let first = answer(&app, post("/subscriptions", None, None)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let repeat = answer(&app, post("/subscriptions", None, None)).await;
    assert_eq!(repeat.status, StatusCode::CONFLICT);
    assert!(retry_after(&repeat) >= 1);
    assert!(
        repeat.text().contains("You have just subscribed"),
        "{repeat:?}"
    );
    // Each route has its window: an order is not a repeat of a subscription.
    let order = answer(&app, post("/orders", None, None)).await;
    assert_eq!(order.status, StatusCode::CREATED);
    assert_eq!(
        ran(&app).await,
        json!({ "orders": 1, "exports": 0, "comments": 0, "subscriptions": 1 })
    );
}
