//! The README's commands, against the `example-lock` binary run as processes and spoken
//! to over TCP: two holders in one process, a stalled one refused, and two processes on
//! one Redis and one database, one of them paused for real with `kill -STOP`.

#![cfg(unix)]

use std::process::Command;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use idem_tests::{
    Answer, HttpClient, RedisServer, ServerProcess, http_client, send_over_tcp, u64_field,
};
use serde_json::Value;

/// Starts the example on a port of its choosing, with `args`.
fn start(args: &[&str]) -> ServerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-lock"));
    command.args(["--port", "0"]).args(args);
    ServerProcess::start(command)
}

/// `curl -X POST 'URL/writes?QUERY'`, sent on a task of its own.
fn write(
    http: &HttpClient,
    server: &ServerProcess,
    query: &str,
) -> tokio::task::JoinHandle<Answer> {
    let request = Request::post(server.url(&format!("/writes?{query}")))
        .body(Body::empty())
        .unwrap();
    let http = http.clone();
    tokio::spawn(async move { send_over_tcp(&http, request).await.expect("an answer") })
}

async fn row(http: &HttpClient, server: &ServerProcess) -> Value {
    let request = Request::get(server.url("/row"))
        .body(Body::empty())
        .unwrap();
    send_over_tcp(http, request)
        .await
        .expect("an answer")
        .json()
}

fn signal(server: &ServerProcess, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &server.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill {signal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_commands_show_what_it_says() {
    let server = start(&[]);
    let http = http_client();

    let first = write(&http, &server, "text=first&work_ms=2000");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = write(&http, &server, "text=second").await.unwrap();
    let first = first.await.unwrap();
    assert_eq!(
        (first.status, second.status),
        (StatusCode::OK, StatusCode::OK)
    );
    let (first, second) = (first.json(), second.json());
    assert!(u64_field(&second, "waited_ms") >= 1500, "{second}");
    assert!(u64_field(&second, "acquired_at_ms") >= u64_field(&first, "released_at_ms"));

    let stalled = write(&http, &server, "text=stalled&stall_ms=2500");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fresh = write(&http, &server, "text=fresh").await.unwrap();
    assert_eq!(fresh.status, StatusCode::OK, "{fresh:?}");
    let stalled = stalled.await.unwrap();
    assert_eq!(stalled.status, StatusCode::CONFLICT, "{stalled:?}");
    assert_eq!(stalled.json()["written"], false);

    let row = row(&http, &server).await;
    assert_eq!((&row["text"], &row["writes"]), (&"fresh".into(), &3.into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_the_lock_and_a_paused_ones_write_is_refused() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("row.db");
    let args = ["--redis", &redis.url(), "--db", db.to_str().unwrap()];
    let (one, other) = (start(&args), start(&args));
    let http = http_client();

    let a = write(&http, &one, "text=a&work_ms=1000");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = write(&http, &other, "text=b").await.unwrap().json();
    let a = a.await.unwrap().json();
    assert_eq!((&a["written"], &b["written"]), (&true.into(), &true.into()));
    assert!(u64_field(&b, "waited_ms") >= 500, "b waits for a: {b}");
    assert!(u64_field(&b, "fencing_token") > u64_field(&a, "fencing_token"));

    // The holder's process stops dead, its watchdog with it; once its lease has run
    // out, the other process takes the lock.
    let paused = write(&http, &one, "text=paused&work_ms=1000");
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&one, "-STOP");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fresh = write(&http, &other, "text=fresh").await.unwrap();
    signal(&one, "-CONT");
    assert_eq!(fresh.status, StatusCode::OK, "{fresh:?}");
    let paused = paused.await.unwrap();
    assert_eq!(paused.status, StatusCode::CONFLICT, "{paused:?}");

    let row = row(&http, &other).await;
    assert_eq!((&row["text"], &row["writes"]), (&"fresh".into(), &3.into()));
}
