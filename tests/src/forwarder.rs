//! A TCP forwarder on loopback whose target can be moved, as an address behind which a
//! failover swaps the server: connections accepted from then on reach the new target,
//! connections already open keep reaching the old one.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Forwards every connection it accepts to the loopback port it points at; stops (and
/// cuts every forwarded connection) when dropped.
#[derive(Debug)]
pub struct Forwarder {
    port: u16,
    target: Arc<AtomicU16>,
    task: JoinHandle<()>,
}

impl Forwarder {
    /// Listens on a free loopback port and forwards to `target` (a loopback port).
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("a loopback port for the forwarder");
        let port = listener
            .local_addr()
            .expect("the forwarder's address")
            .port();
        let target = Arc::new(AtomicU16::new(target));
        let task = tokio::spawn(forward(listener, Arc::clone(&target)));
        Self { port, target, task }
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`, for a Redis target.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Sends connections accepted from now on to `target`.
    pub fn redirect(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
    }
}

async fn forward(listener: TcpListener, target: Arc<AtomicU16>) {
    // Owned here, so that stopping the forwarder cuts the connections it forwards.
    let mut connections = JoinSet::new();
    while let Ok((mut inbound, _)) = listener.accept().await {
        let port = target.load(Ordering::SeqCst);
        connections.spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await {
                // Either side closing ends the forwarding; nothing more to do about it.
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
