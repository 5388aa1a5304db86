//! A TCP forwarder on loopback that stands for the network between a client and a
//! server, and can fail the way a network does:
//!
//! - its target can be moved, as an address behind which a failover swaps the server:
//!   connections accepted from then on reach the new target, connections already open
//!   keep reaching the old one ([`redirect`](Forwarder::redirect));
//! - it can stall: nothing passes in either direction, on connections open or new, until
//!   it resumes, and then what was held arrives late ([`stall`](Forwarder::stall));
//! - it can cut every open connection with a TCP reset ([`reset`](Forwarder::reset));
//! - it can delay every byte by a fixed time, as a slow link ([`delay`](Forwarder::delay)).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Forwards every connection it accepts to the loopback port it points at; stops (and
/// cuts every forwarded connection) when dropped.
#[derive(Debug)]
pub struct Forwarder {
    port: u16,
    link: Arc<Link>,
    task: JoinHandle<()>,
}

/// What every forwarded connection reads before it passes bytes on.
#[derive(Debug)]
struct Link {
    target: AtomicU16,
    stalled: watch::Sender<bool>,
    /// Counts the resets: a connection ends with a reset when it changes.
    resets: watch::Sender<u64>,
    delay_micros: AtomicU64,
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
        let link = Arc::new(Link {
            target: AtomicU16::new(target),
            stalled: watch::Sender::new(false),
            resets: watch::Sender::new(0),
            delay_micros: AtomicU64::new(0),
        });
        let task = tokio::spawn(forward(listener, Arc::clone(&link)));
        Self { port, link, task }
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
        self.link.target.store(target, Ordering::SeqCst);
    }

    /// Holds every byte, in both directions, on every connection (those accepted from
    /// now on too), until [`resume`](Self::resume); connections stay open.
    pub fn stall(&self) {
        self.link.stalled.send_replace(true);
    }

    /// Passes bytes again after [`stall`](Self::stall), those held first.
    pub fn resume(&self) {
        self.link.stalled.send_replace(false);
    }

    /// Cuts every connection open now with a TCP reset, on both sides, dropping what
    /// it held; connections accepted afterwards are forwarded as usual.
    pub fn reset(&self) {
        self.link.resets.send_modify(|resets| *resets += 1);
    }

    /// Passes every byte read from now on `delay` after it was read (zero: at once),
    /// keeping their order.
    pub fn delay(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.link.delay_micros.store(micros, Ordering::SeqCst);
    }
}

async fn forward(listener: TcpListener, link: Arc<Link>) {
    // Owned here, so that stopping the forwarder cuts the connections it forwards.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((inbound, _)) => {
                    connections.spawn(connection(inbound, Arc::clone(&link)));
                }
                Err(_) => return,
            },
            // Reaps ended connections, so a long run does not pile them up.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Forwards one connection until either side closes it, or a reset cuts it.
async fn connection(mut inbound: TcpStream, link: Arc<Link>) {
    let mut resets = link.resets.subscribe();
    let port = link.target.load(Ordering::SeqCst);
    let Ok(mut outbound) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await else {
        return;
    };
    let cut = {
        let (inbound_read, inbound_write) = inbound.split();
        let (outbound_read, outbound_write) = outbound.split();
        let both = async {
            tokio::join!(
                pump(inbound_read, outbound_write, &link),
                pump(outbound_read, inbound_write, &link)
            )
        };
        tokio::select! {
            _ = both => false,
            changed = resets.changed() => changed.is_ok(),
        }
    };
    if cut {
        // Closing a socket whose linger is zero sends a reset instead of a FIN.
        for stream in [&inbound, &outbound] {
            let _ = stream.set_zero_linger();
        }
    }
}

/// Copies `from` to `to` through a queue, so that a delay holds bytes back without
/// slowing how fast they are read, and so that a stall holds them without closing.
async fn pump(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, link: &Link) {
    let (queue, mut queued) = mpsc::channel::<(Instant, Vec<u8>)>(64);
    let read = async move {
        loop {
            let mut chunk = vec![0; 16 * 1024];
            match from.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => chunk.truncate(read),
            }
            let due =
                Instant::now() + Duration::from_micros(link.delay_micros.load(Ordering::SeqCst));
            if queue.send((due, chunk)).await.is_err() {
                return;
            }
        }
    };
    // Each side owns its end of the queue, so either ending stops the other.
    let write = async move {
        let mut stalled = link.stalled.subscribe();
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if stalled.wait_for(|stalled| !stalled).await.is_err()
                || to.write_all(&chunk).await.is_err()
            {
                return;
            }
        }
        // The other side sent its last byte: pass the end on.
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::Forwarder;

    /// A loopback server that sends back what it reads; its port.
    async fn echo() -> u16 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        port
    }

    async fn through(forwarder: &Forwarder) -> TcpStream {
        TcpStream::connect((Ipv4Addr::LOCALHOST, forwarder.port()))
            .await
            .unwrap()
    }

    async fn round_trip(stream: &mut TcpStream, within: Duration) -> std::io::Result<u8> {
        stream.write_all(b"x").await?;
        let mut byte = [0];
        match tokio::time::timeout(within, stream.read_exact(&mut byte)).await {
            Ok(read) => read.map(|_| byte[0]),
            Err(_) => Err(ErrorKind::TimedOut.into()),
        }
    }

    /// Asserts that a byte sent on `stream` comes back within 5 s.
    async fn assert_echoed(stream: &mut TcpStream) {
        let echoed = round_trip(stream, Duration::from_secs(5)).await;
        assert_eq!(echoed.unwrap(), b'x');
    }

    #[tokio::test]
    async fn a_stall_holds_the_bytes_until_it_resumes() {
        let forwarder = Forwarder::start(echo().await).await;
        let mut stream = through(&forwarder).await;
        assert_echoed(&mut stream).await;

        forwarder.stall();
        let held = round_trip(&mut stream, Duration::from_millis(200)).await;
        assert_eq!(held.unwrap_err().kind(), ErrorKind::TimedOut);
        forwarder.resume();
        let mut byte = [0];
        tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut byte))
            .await
            .expect("the held byte arrives once resumed")
            .unwrap();
        assert_eq!(byte, *b"x");
    }

    #[tokio::test]
    async fn a_reset_cuts_open_connections_and_lets_new_ones_through() {
        let forwarder = Forwarder::start(echo().await).await;
        let mut open = through(&forwarder).await;
        assert!(round_trip(&mut open, Duration::from_secs(5)).await.is_ok());

        forwarder.reset();
        let mut byte = [0];
        let cut = tokio::time::timeout(Duration::from_secs(5), open.read(&mut byte))
            .await
            .expect("the connection ends at once");
        assert_eq!(cut.unwrap_err().kind(), ErrorKind::ConnectionReset);
        let mut fresh = through(&forwarder).await;
        assert_echoed(&mut fresh).await;
    }

    #[tokio::test]
    async fn a_delay_holds_each_byte_in_each_direction() {
        let forwarder = Forwarder::start(echo().await).await;
        forwarder.delay(Duration::from_millis(100));
        let mut stream = through(&forwarder).await;
        let sent = Instant::now();
        assert_echoed(&mut stream).await;
        assert!(
            sent.elapsed() >= Duration::from_millis(200),
            "{:?}",
            sent.elapsed()
        );
    }
}
