//! The one multiplexed connection a [`RedisStore`](crate::RedisStore) sends everything over.
//!
//! The store's connections are its own: they are made by a deadpool manager (the one
//! `RedisServer::url` sets up, or the manager of the pool an application hands over, with
//! that pool's settings) and never checked out of a pool nor given back to one. A
//! connection an application checks out of its pool is therefore never one the store
//! uses, and a blocking command the application runs on it (`BLPOP`, `XREAD BLOCK`)
//! cannot stall the store. Checking out per operation would not do either: deadpool runs
//! `UNWATCH` + `PING` on every `pool.get()`, doubling the commands and round trips of
//! every operation. redis-rs connections multiplex any number of concurrent requests, so
//! the store opens one and sends everything over it until it fails, then opens another.
//!
//! Each new shared connection is checked first ([`check`]): the server's version picks how
//! `acquire` takes a key, and a server too old, or one that may evict keys while the store
//! is set to refuse that, is not used. A refused server is asked again after a second, not
//! on every operation.
//!
//! Waiting for a lock is the exception: `BLPOP` blocks the connection it runs on, and on
//! the shared one it would stall every other operation behind it. Waits get connections of
//! their own ([`WaitingConnections`]), made the same way, so the shared connection is
//! never handed to a waiter; a bounded number of them, so a crowd of waiters cannot open
//! connections without end.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use deadpool::managed::Manager;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::SentinelClient;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::{AcquireError, Semaphore, SemaphorePermit};

use crate::server::{AcquireCommand, Checks, Refusal, check};
use idem_core::StoreError;

/// How long a refused server stays refused before a new connection asks it again.
const RECHECK_REFUSED_AFTER: Duration = Duration::from_secs(1);

/// A connection's settings that leave every bound to the store's own timeout, so that the
/// client's limits do not cut in first with another error (or cut off a `WAIT`).
pub(crate) fn unbounded_responses() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(None)
}

/// What opens the store's connections: a manager, never a pool's own connections.
#[derive(Clone)]
pub(crate) enum Source {
    /// The manager of a store built from a URL.
    Standalone(Arc<deadpool_redis::Manager>),
    /// An application's pool, of which only the manager is used.
    Pool(deadpool_redis::Pool),
    /// An application's cluster pool, of which only the manager is used.
    Cluster(deadpool_redis::cluster::Pool),
    /// The master Redis Sentinel names, asked for each new connection, so that after a
    /// failover the next connection reaches the new master.
    Sentinel(Arc<tokio::sync::Mutex<SentinelClient>>),
}

impl Source {
    /// A new connection, used by nobody else.
    async fn open(&self) -> Result<Link, StoreError> {
        match self {
            Self::Standalone(manager) => manager.create().await.map(Link::Standalone),
            Self::Pool(pool) => pool.manager().create().await.map(Link::Standalone),
            Self::Cluster(pool) => pool.manager().create().await.map(Link::Cluster),
            Self::Sentinel(sentinels) => sentinels
                .lock()
                .await
                .get_async_connection_with_config(&unbounded_responses())
                .await
                .map(Link::Standalone),
        }
        .map_err(StoreError::backend)
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Standalone(_) | Self::Pool(_) => "standalone",
            Self::Cluster(_) => "cluster",
            Self::Sentinel(_) => "sentinel",
        }
    }
}

/// A connection to one server or to a cluster; clones share the socket(s).
#[derive(Clone)]
pub(crate) enum Link {
    Standalone(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Link {
    /// How long the client waits for an answer before failing the command, where the
    /// connection has such a limit (a standalone one made with the pool's settings). A
    /// blocking command must not be cut off by it while the server still blocks: the
    /// server would then hand a wake-up to a client that stopped listening.
    pub(crate) fn allow_responses_within(&mut self, limit: Duration) {
        if let Self::Standalone(conn) = self {
            conn.set_response_timeout(limit);
        }
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Standalone(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Standalone(conn) => conn.req_packed_commands(cmd, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Standalone(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}

/// The shared connection, with what its check found; clones share the socket(s).
#[derive(Clone)]
pub(crate) struct Connection {
    link: Link,
    acquire: AcquireCommand,
}

impl Connection {
    /// How `acquire` without fencing takes a key on this server.
    pub(crate) fn acquire_command(&self) -> AcquireCommand {
        self.acquire
    }

    /// `WAIT replicas within`: how many replicas have acknowledged every write this
    /// connection sent so far, waiting up to `within_ms` for `replicas` of them. In a
    /// cluster, asked of the primary that holds `key`.
    pub(crate) async fn wait_for_replicas(
        &mut self,
        key: &str,
        replicas: u32,
        within_ms: u64,
    ) -> RedisResult<i64> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(within_ms);
        match &mut self.link {
            Link::Standalone(conn) => wait.query_async(conn).await,
            Link::Cluster(conn) => {
                let primary = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(key, SlotAddr::Master),
                ));
                let answer = conn.route_command(wait, primary).await?;
                Ok(redis::from_redis_value(answer)?)
            }
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.link.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.link.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.link.get_db()
    }
}

/// The shared connection's state.
#[derive(Clone)]
enum State {
    /// None open: not yet, or the last one failed.
    Closed,
    /// Checked and in use.
    Open(Connection),
    /// The server was refused at `at`.
    Refused { refusal: Refusal, at: Instant },
}

/// Where connections come from, and the one currently in use.
pub(crate) struct Connections {
    source: Source,
    checks: Checks,
    current: Mutex<State>,
    /// Serialises opening a new connection, so a burst after a failure opens one, not one
    /// per waiting request.
    refill: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state() {
            State::Closed => "closed",
            State::Open(_) => "open",
            State::Refused { .. } => "refused",
        };
        f.debug_struct("Connections")
            .field("kind", &self.source.kind())
            .field("state", &state)
            .finish()
    }
}

impl Connections {
    pub(crate) fn new(source: Source, checks: Checks) -> Self {
        Self {
            source,
            checks,
            current: Mutex::new(State::Closed),
            refill: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> State {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, state: State) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// The connection in use; the refusal of a server refused a moment ago; or `None`:
    /// time to [`open`](Self::open) a new one.
    pub(crate) fn ready(&self) -> Option<Result<Connection, StoreError>> {
        match self.state() {
            State::Open(conn) => Some(Ok(conn)),
            State::Refused { refusal, at } if at.elapsed() < RECHECK_REFUSED_AFTER => {
                Some(Err(refusal.into()))
            }
            State::Refused { .. } | State::Closed => None,
        }
    }

    /// The connection in use, or a new one once its server passed the check.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] when no connection can be opened or checked, or the server
    /// is refused (then with a [`RedisSetupError`](crate::RedisSetupError) as its source).
    pub(crate) async fn get(&self) -> Result<Connection, StoreError> {
        match self.ready() {
            Some(ready) => ready,
            None => self.open().await,
        }
    }

    /// A new connection once its server passed the check, unless another caller opened
    /// one meanwhile.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub(crate) async fn open(&self) -> Result<Connection, StoreError> {
        let _refill = self.refill.lock().await;
        if let Some(ready) = self.ready() {
            return ready;
        }
        let mut link = self.source.open().await?;
        match check(&mut link, self.checks)
            .await
            .map_err(StoreError::backend)?
        {
            Ok(acquire) => {
                let conn = Connection { link, acquire };
                self.set(State::Open(conn.clone()));
                Ok(conn)
            }
            Err(refusal) => {
                self.set(State::Refused {
                    refusal: refusal.clone(),
                    at: Instant::now(),
                });
                Err(refusal.into())
            }
        }
    }

    /// Stops using the current connection: the next operation opens a new one.
    pub(crate) fn discard(&self) {
        self.set(State::Closed);
    }
}

/// Connections kept open between waits, at most. Waiting is off the request path; past
/// this many, a wait's connection is closed when the wait ends.
const IDLE_WAITING_CONNECTIONS: usize = 16;

/// Connections for blocking waits, one per concurrent waiter, each used by nobody else, at
/// most `max` open at once.
pub(crate) struct WaitingConnections {
    source: Source,
    idle: Mutex<Vec<Link>>,
    /// One permit per waiting connection in use. A waiter takes or opens a connection only
    /// while it holds one, and keeps it until its connection is idle again or closed, so
    /// connections in use and idle ones together never pass `max`.
    seats: Semaphore,
    max: usize,
}

impl std::fmt::Debug for WaitingConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("WaitingConnections")
            .field("idle", &idle)
            .field("in_use", &(self.max - self.seats.available_permits()))
            .field("max", &self.max)
            .finish()
    }
}

impl WaitingConnections {
    /// At most `max` connections (at least one, and no more than a semaphore counts).
    pub(crate) fn new(source: Source, max: usize) -> Self {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            source,
            idle: Mutex::new(Vec::new()),
            seats: Semaphore::new(max),
            max,
        }
    }

    /// Waits until this waiter may use a waiting connection: hold the permit until the
    /// connection is given back or dropped.
    ///
    /// # Errors
    ///
    /// Never in practice: the semaphore is never closed.
    pub(crate) async fn seat(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.seats.acquire().await
    }

    /// An idle waiting connection, or a new one. Only for a waiter holding a
    /// [`seat`](Self::seat).
    pub(crate) async fn take(&self) -> Result<Link, StoreError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(conn) => Ok(conn),
            None => self.source.open().await,
        }
    }

    /// Keeps a connection whose wait completed, for the next wait. A wait that was cut
    /// short must not come back here: its `BLPOP` may still be blocked on the server.
    pub(crate) fn give_back(&self, conn: Link) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_WAITING_CONNECTIONS {
            idle.push(conn);
        }
    }

    /// Closes the idle connections: after one failed, the others most likely lead to the
    /// same lost server.
    pub(crate) fn discard_idle(&self) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}
