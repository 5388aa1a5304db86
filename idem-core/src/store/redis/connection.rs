//! The one multiplexed connection a [`RedisStore`](super::RedisStore) sends everything over.
//!
//! The store's connections are its own: they are made by a deadpool manager (the one
//! `build_with_url` sets up, or the manager of the pool an application hands over, with
//! that pool's settings) and never checked out of a pool nor given back to one. A
//! connection an application checks out of its pool is therefore never one the store
//! uses, and a blocking command the application runs on it (`BLPOP`, `XREAD BLOCK`)
//! cannot stall the store. Checking out per operation would not do either: deadpool runs
//! `UNWATCH` + `PING` on every `pool.get()`, doubling the commands and round trips of
//! every operation. redis-rs connections multiplex any number of concurrent requests, so
//! the store opens one and sends everything over it until it fails, then opens another.
//!
//! Waiting for a lock is the exception: `BLPOP` blocks the connection it runs on, and on
//! the shared one it would stall every other operation behind it. Waits get connections of
//! their own ([`WaitingConnections`]), made the same way, so the shared connection is
//! never handed to a waiter.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool::managed::Manager;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::store::StoreError;

/// What opens the store's connections: a manager, never a pool's own connections.
#[derive(Clone)]
pub(super) enum Source {
    /// The manager of a store built from a URL.
    Standalone(Arc<deadpool_redis::Manager>),
    /// An application's pool, of which only the manager is used.
    Pool(deadpool_redis::Pool),
    /// An application's cluster pool, of which only the manager is used.
    Cluster(deadpool_redis::cluster::Pool),
}

impl Source {
    /// A new connection, used by nobody else.
    async fn open(&self) -> Result<Connection, StoreError> {
        match self {
            Self::Standalone(manager) => manager.create().await.map(Connection::Standalone),
            Self::Pool(pool) => pool.manager().create().await.map(Connection::Standalone),
            Self::Cluster(pool) => pool.manager().create().await.map(Connection::Cluster),
        }
        .map_err(StoreError::Connect)
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Standalone(_) | Self::Pool(_) => "standalone",
            Self::Cluster(_) => "cluster",
        }
    }
}

/// A connection to one server or to a cluster; clones share the socket(s).
#[derive(Clone)]
pub(super) enum Connection {
    Standalone(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Connection {
    /// How long the client waits for an answer before failing the command, where the
    /// connection has such a limit (a standalone one made with the pool's settings). A
    /// blocking command must not be cut off by it while the server still blocks: the
    /// server would then hand a wake-up to a client that stopped listening.
    pub(super) fn allow_responses_within(&mut self, limit: Duration) {
        if let Self::Standalone(conn) = self {
            conn.set_response_timeout(limit);
        }
    }
}

impl ConnectionLike for Connection {
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

/// Where connections come from, and the one currently in use.
pub(super) struct Connections {
    source: Source,
    current: Mutex<Option<Connection>>,
    /// Serialises taking a new connection, so a burst after a failure opens one, not one
    /// per waiting request.
    refill: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("kind", &self.source.kind())
            .field("connected", &self.cached().is_some())
            .finish()
    }
}

impl Connections {
    pub(super) fn new(source: Source) -> Self {
        Self {
            source,
            current: Mutex::new(None),
            refill: tokio::sync::Mutex::new(()),
        }
    }

    fn cached(&self) -> Option<Connection> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The connection in use, or a new one.
    pub(super) async fn get(&self) -> Result<Connection, StoreError> {
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let _refill = self.refill.lock().await;
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let conn = self.source.open().await?;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.clone());
        Ok(conn)
    }

    /// Stops using the current connection: the next operation opens a new one.
    pub(super) fn discard(&self) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// Connections kept open between waits. Waiting is off the request path; past this many
/// concurrent waiters, a wait opens a connection and closes it afterwards.
const IDLE_WAITING_CONNECTIONS: usize = 16;

/// Connections for blocking waits, one per concurrent waiter, each used by nobody else.
pub(super) struct WaitingConnections {
    source: Source,
    idle: Mutex<Vec<Connection>>,
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
            .finish()
    }
}

impl WaitingConnections {
    pub(super) fn new(source: Source) -> Self {
        Self {
            source,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle waiting connection, or a new one.
    pub(super) async fn take(&self) -> Result<Connection, StoreError> {
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
    pub(super) fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_WAITING_CONNECTIONS {
            idle.push(conn);
        }
    }

    /// Closes the idle connections: after one failed, the others most likely lead to the
    /// same lost server.
    pub(super) fn discard_idle(&self) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}
