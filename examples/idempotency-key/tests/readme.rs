//! The README's commands, against the `example-idempotency-key` binary run as a process
//! and spoken to over TCP; and two processes on one Redis, as two instances behind a load
//! balancer.

use std::process::Command;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{Answer, HttpClient, RedisServer, ServerProcess, http_client, send_over_tcp};
use serde_json::json;

/// Starts the example on a port of its choosing, with `args`.
fn start(args: &[&str]) -> ServerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-idempotency-key"));
    command.args(["--port", "0"]).args(args);
    ServerProcess::start(command)
}

/// `curl URL -H "$json" [-H 'Idempotency-Key: KEY'] -d BODY`.
async fn transfer(http: &HttpClient, url: String, key: Option<&str>, body: &str) -> Answer {
    let mut request = Request::post(url).header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request.body(Body::from(body.to_owned())).unwrap();
    send_over_tcp(http, request).await.expect("an answer")
}

async fn transfers_made(http: &HttpClient, server: &ServerProcess) -> usize {
    let list = Request::get(server.url("/transfers"))
        .body(Body::empty())
        .unwrap();
    let list = send_over_tcp(http, list).await.expect("an answer").json();
    list.as_array().expect("a list").len()
}

const T1: &str = r#"{"from":"alice","to":"bob","amount":500}"#;
const T2: &str = r#"{"from":"bob","to":"carol","amount":100}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_commands_show_what_it_says() {
    let server = start(&[]);
    let http = http_client();
    let url = || server.url("/transfers");

    let first = transfer(&http, url(), Some("t-1"), T1).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        first.json(),
        json!({ "transfer_id": 1, "from": "alice", "to": "bob", "amount": 500 })
    );
    let retry = transfer(&http, url(), Some("t-1"), T1).await;
    assert_eq!(
        (retry.status, retry.replayed()),
        (StatusCode::CREATED, true)
    );
    assert_eq!(retry.body, first.body);
    let other = r#"{"from":"alice","to":"bob","amount":900}"#;
    let reused = transfer(&http, url(), Some("t-1"), other).await;
    assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY);

    let running = tokio::spawn({
        let (http, url) = (http.clone(), url());
        async move { transfer(&http, url, Some("t-2"), T2).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = transfer(&http, url(), Some("t-2"), T2).await;
    assert_eq!(during.status, StatusCode::CONFLICT);
    assert!(during.headers.contains_key(header::RETRY_AFTER));
    assert_eq!(running.await.unwrap().status, StatusCode::CREATED);

    let one = r#"{"from":"alice","to":"bob","amount":1}"#;
    let malformed = transfer(&http, url(), Some("not a token"), one).await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    let missing = transfer(&http, url(), None, one).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);

    assert_eq!(transfers_made(&http, &server).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_redis_make_a_transfer_once() {
    let redis = RedisServer::start();
    let (first, second) = (
        start(&["--redis", &redis.url()]),
        start(&["--redis", &redis.url()]),
    );
    let http = http_client();
    let made = transfer(&http, first.url("/transfers"), Some("t-1"), T1).await;
    assert_eq!(made.status, StatusCode::CREATED);
    let retried = transfer(&http, second.url("/transfers"), Some("t-1"), T1).await;
    assert!(
        retried.replayed(),
        "the other process replays it: {retried:?}"
    );
    assert_eq!(retried.body, made.body);
    let made = transfers_made(&http, &first).await + transfers_made(&http, &second).await;
    assert_eq!(made, 1);
}
