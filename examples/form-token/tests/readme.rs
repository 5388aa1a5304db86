//! The README's commands, against the `example-form-token` binary run as a process and
//! spoken to over TCP: fetch the page, take its token, post the form twice.

use std::process::Command;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{Answer, HttpClient, ServerProcess, form_token_in, http_client, send_over_tcp};
use serde_json::json;

/// `curl URL -d FORM`.
async fn post_form(http: &HttpClient, url: String, form: String) -> Answer {
    let request = Request::post(url)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form))
        .unwrap();
    send_over_tcp(http, request).await.expect("an answer")
}

async fn get(http: &HttpClient, url: String) -> Answer {
    let request = Request::get(url).body(Body::empty()).unwrap();
    send_over_tcp(http, request).await.expect("an answer")
}

#[tokio::test]
async fn the_readme_commands_show_what_it_says() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-form-token"));
    command.args(["--port", "0"]);
    let server = ServerProcess::start(command);
    let http = http_client();

    let token = form_token_in(&get(&http, server.url("/")).await.text());
    let form = format!("form_token={token}&text=hello");
    let first = post_form(&http, server.url("/messages"), form.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(first.text().contains("Message 1 received."), "{first:?}");
    let again = post_form(&http, server.url("/messages"), form).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{again:?}");
    let no_token = post_form(&http, server.url("/messages"), "text=hello".to_owned()).await;
    assert_eq!(no_token.status, StatusCode::BAD_REQUEST);

    assert_eq!(
        get(&http, server.url("/messages")).await.json(),
        json!(["hello"])
    );
}
