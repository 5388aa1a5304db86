//! The README's commands, against the `example-avoid-repeat` binary run as a process and
//! spoken to over TCP: what each `curl` shows, and how often each handler ran.

use std::process::Command;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{Answer, HttpClient, ServerProcess, http_client, send_over_tcp};
use serde_json::json;

/// `curl -X POST URL` with the headers and body given.
async fn post(http: &HttpClient, url: String, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut request = Request::post(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Body::from(body.to_owned())).unwrap();
    send_over_tcp(http, request).await.expect("an answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_commands_show_what_it_says() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-avoid-repeat"));
    command.args(["--port", "0"]);
    let server = ServerProcess::start(command);
    let http = http_client();
    let json = [(header::CONTENT_TYPE.as_str(), "application/json")];

    let order = post(&http, server.url("/orders"), &[], "").await;
    assert_eq!(
        (order.status, order.json()),
        (StatusCode::CREATED, json!({ "order": 1 }))
    );
    let repeat = post(&http, server.url("/orders"), &[], "").await;
    assert_eq!(repeat.status, StatusCode::CONFLICT);
    assert_eq!(repeat.headers[header::RETRY_AFTER], "10");
    let bob = post(&http, server.url("/orders"), &[("x-client-id", "bob")], "").await;
    assert_eq!(
        (bob.status, bob.json()),
        (StatusCode::CREATED, json!({ "order": 2 }))
    );

    let first_export = tokio::spawn({
        let (http, url) = (http.clone(), server.url("/exports"));
        async move { post(&http, url, &[], "").await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let during = post(&http, server.url("/exports"), &[], "").await;
    assert_eq!(during.status, StatusCode::CONFLICT);
    assert_eq!(first_export.await.unwrap().json()["export"], 1);
    let after = post(&http, server.url("/exports"), &[], "").await;
    assert_eq!(after.json()["export"], 2);

    let hi = post(&http, server.url("/comments"), &json, r#"{"text":"hi"}"#).await;
    assert_eq!(hi.status, StatusCode::CREATED);
    let again = post(&http, server.url("/comments"), &json, r#"{"text":"hi"}"#).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    let hello = post(&http, server.url("/comments"), &json, r#"{"text":"hello"}"#).await;
    assert_eq!(hello.status, StatusCode::CREATED);

    let subscribed = post(&http, server.url("/subscriptions"), &[], "").await;
    assert_eq!(subscribed.status, StatusCode::CREATED);
    let repeat = post(&http, server.url("/subscriptions"), &[], "").await;
    assert_eq!(repeat.status, StatusCode::CONFLICT);

    let ran = Request::get(server.url("/")).body(Body::empty()).unwrap();
    let ran = send_over_tcp(&http, ran).await.expect("an answer");
    assert_eq!(
        ran.json(),
        json!({ "orders": 2, "exports": 2, "comments": 2, "subscriptions": 1 })
    );
}
