//! What idem tells an operator: a `tracing` span per guarded request, naming the guard,
//! the route and the client (hashed), and one event per decision — a refused duplicate or
//! a replay at `info`, so it shows at the usual log level.

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use idem_axum::identity::ClientHeader;
use idem_axum::{AvoidRepeatLayer, Idem, IdempotencyLayer};
use idem_tests::{CLIENT, post_as, send};
use tracing_subscriber::fmt::MakeWriter;

/// Everything the subscriber writes, kept for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

#[tokio::test]
async fn duplicates_and_replays_are_logged_at_info_in_a_span_that_names_no_client() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let idem = Idem::builder()
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let app = Router::new()
        .route(
            "/orders",
            post(|| async { StatusCode::CREATED })
                .route_layer(AvoidRepeatLayer::new(std::time::Duration::from_secs(30))),
        )
        .route(
            "/payments",
            post(|| async { StatusCode::CREATED }).route_layer(IdempotencyLayer::new()),
        )
        .layer(idem.layer());
    for _ in 0..2 {
        send(&app, post_as("/orders", "alice-7f3", None)).await;
        send(&app, post_as("/payments", "alice-7f3", Some("k-1"))).await;
    }

    let log = captured.text();
    let line = |needle: &str| {
        log.lines()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{log}"))
            .to_owned()
    };
    let duplicate = line("idem: avoid_repeat: duplicate");
    assert!(duplicate.contains("INFO"), "{duplicate}");
    assert!(
        duplicate.contains(r#"idem.guard="avoid_repeat""#),
        "{duplicate}"
    );
    assert!(
        duplicate.contains(r#"idem.route="POST /orders""#),
        "{duplicate}"
    );
    assert!(
        duplicate.contains("idem.client="),
        "the client, hashed: {duplicate}"
    );
    let replayed = line("idem: idempotency: replayed");
    assert!(replayed.contains("INFO"), "{replayed}");
    assert!(replayed.contains(r#"idem.route="/payments""#), "{replayed}");
    assert!(
        !log.contains("alice-7f3"),
        "no client id in the log:\n{log}"
    );
    assert!(
        !log.contains("idem: avoid_repeat: accepted"),
        "an accepted request is a debug event:\n{log}"
    );
}
