//! The drain at shutdown, measured: `handlers` guarded requests, over TCP, to a handler
//! that takes `handler_ms`, each abandoned by its client once every handler runs; then
//! the server stops taking requests (axum's graceful shutdown) and `Idem::shutdown` waits
//! for the handlers left running. Prints what the drain found and how long it took,
//! against how long the last handler to start still had to run then.
//!
//! `drain <handlers> <handler_ms>`

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use idem_axum::{Idem, IdempotencyLayer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: drain <handlers> <handler_ms>";
    let handlers: usize = args.next().and_then(|n| n.parse().ok()).expect(usage);
    let handler_ms: u64 = args.next().and_then(|n| n.parse().ok()).expect(usage);
    let idem = Idem::builder().with_detached_limit(usize::MAX).build();
    let started = Arc::new(AtomicUsize::new(0));
    let running = Arc::clone(&started);
    let handler = move || {
        let running = Arc::clone(&running);
        async move {
            running.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(handler_ms)).await;
            StatusCode::CREATED
        }
    };
    let app = Router::new()
        .route("/pay", post(handler).route_layer(IdempotencyLayer::new()))
        .layer(idem.layer())
        .into_make_service_with_connect_info::<SocketAddr>();
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("a port");
    let address = listener.local_addr().expect("its address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    let sent = Instant::now();
    let mut connections = Vec::with_capacity(handlers);
    for i in 0..handlers {
        let mut connection = TcpStream::connect(address).await.expect("a connection");
        let request = format!(
            "POST /pay HTTP/1.1\r\nhost: {address}\r\nidempotency-key: key-{i}\r\n\
             content-length: 0\r\n\r\n"
        );
        connection
            .write_all(request.as_bytes())
            .await
            .expect("sent");
        connections.push(connection);
    }
    while started.load(Ordering::SeqCst) < handlers {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The last handler started at most a millisecond ago: it has about this long to run.
    let all_running = Instant::now();
    drop(connections); // every client goes away
    let _ = stop.send(());
    server.await.expect("the server task").expect("the server");
    let left = Duration::from_millis(handler_ms).saturating_sub(all_running.elapsed());
    let drained = idem.shutdown(Duration::from_secs(60)).await;
    println!(
        "{handlers} handlers of {handler_ms} ms, sent in {} ms; the last had {} ms left when \
         the server stopped: {drained}",
        (all_running - sent).as_millis(),
        left.as_millis()
    );
}
