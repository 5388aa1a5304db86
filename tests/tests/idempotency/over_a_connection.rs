//! The first client of a response whose body fails half-way, over a real connection
//! (`axum::serve`, a hyper client): it gets the status, the headers and the bytes the
//! handler produced before the failure, then the error, which ends its connection — as it
//! would without the layer. A retry gets 409: nothing whole was kept to replay.

use std::net::SocketAddr;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_tests::Shop;
use tokio::task::JoinHandle;

use crate::{BODY, Seen, app, broken_body, request};

idem_tests::on_every_store!(
    shop_on(app):
    the_first_client_of_a_body_that_fails_half_way_gets_what_was_sent_before_the_failure,
);

/// `app` served on a loopback port, with and without the layer.
struct Served {
    address: SocketAddr,
    server: JoinHandle<()>,
}

impl Served {
    async fn start(app: Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { address, server }
    }

    /// Sends `request` over a fresh connection: its status, and the bytes of its body up
    /// to the end or the error, and whether it ended in an error.
    async fn send(&self, request: Request<Body>, what: &str) -> (StatusCode, Bytes, bool) {
        let (mut parts, body) = request.into_parts();
        parts.uri = format!("http://{}{}", self.address, parts.uri)
            .parse()
            .unwrap();
        let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
        let response = client
            .request(Request::from_parts(parts, body))
            .await
            .unwrap_or_else(|error| panic!("{what}: no status and headers, {error:?}"));
        let status = response.status();
        let mut body = response.into_body();
        let mut read = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => read.extend_from_slice(&frame.into_data().unwrap_or_default()),
                Err(_) => return (status, read.into(), true),
            }
        }
        (status, read.into(), false)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn the_first_client_of_a_body_that_fails_half_way_gets_what_was_sent_before_the_failure(
    shop: Shop,
    app: Router,
) {
    let unguarded = Served::start(Router::new().route(
        "/broken-body",
        axum::routing::post(broken_body).with_state(shop.clone()),
    ))
    .await;
    let without = unguarded
        .send(
            request("/broken-body", "alice", Some("broken-0"), BODY),
            "without the layer",
        )
        .await;
    assert_eq!(
        without,
        (StatusCode::CREATED, Bytes::from_static(b"order "), true),
        "without the layer"
    );

    let guarded = Served::start(app.clone()).await;
    let first = guarded
        .send(
            request("/broken-body", "alice", Some("broken-1"), BODY),
            "the first client",
        )
        .await;
    assert_eq!(first, without, "the first client, as without the layer");
    let retry = Seen::of(
        idem_tests::send(
            &app,
            request("/broken-body", "alice", Some("broken-1"), BODY),
        )
        .await,
    )
    .await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "{retry:?}");
    assert_eq!(retry.problem(), "response-not-replayable");
    assert_eq!(shop.runs(), 2, "once unguarded, once guarded");
}
