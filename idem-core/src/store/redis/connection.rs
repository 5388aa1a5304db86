//! The one multiplexed connection a [`RedisStore`](super::RedisStore) sends everything over.
//!
//! deadpool-redis runs `UNWATCH` + `PING` on every `pool.get()` to recycle a connection,
//! which would double the commands and round trips of every operation. redis-rs
//! connections multiplex any number of concurrent requests, so the store takes one from
//! the pool, keeps a clone, and goes back to the pool (whose recycle check then weeds out
//! a dead connection) only after that one failed.
//!
//! Waiting for a lock is the exception: `BLPOP` blocks the connection it runs on, and on
//! the shared one it would stall every other operation behind it. Waits get connections of
//! their own ([`WaitingConnections`]), made by the pool's manager but never checked out of
//! the pool, so the shared connection is never handed to a waiter.

use std::sync::{Mutex, PoisonError};

use std::time::Duration;

use deadpool::managed::Manager;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::store::StoreError;

/// Where connections come from.
#[derive(Clone)]
pub(super) enum Pool {
    Standalone(deadpool_redis::Pool),
    Cluster(deadpool_redis::cluster::Pool),
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

/// The pool and the connection currently in use.
pub(super) struct Connections {
    pool: Pool,
    current: Mutex<Option<Connection>>,
    /// Serialises taking a new connection, so a burst after a failure opens one, not one
    /// per waiting request.
    refill: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.pool {
            Pool::Standalone(_) => "standalone",
            Pool::Cluster(_) => "cluster",
        };
        f.debug_struct("Connections")
            .field("kind", &kind)
            .field("connected", &self.cached().is_some())
            .finish()
    }
}

impl Connections {
    pub(super) fn new(pool: Pool) -> Self {
        Self {
            pool,
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

    /// The connection in use, or a new one from the pool.
    pub(super) async fn get(&self) -> Result<Connection, StoreError> {
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let _refill = self.refill.lock().await;
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        // The pooled object goes back to the pool when dropped here; the clone shares its
        // socket.
        let conn = match &self.pool {
            Pool::Standalone(pool) => {
                let pooled = pool.get().await.map_err(StoreError::Pool)?;
                Connection::Standalone(MultiplexedConnection::clone(&pooled))
            }
            Pool::Cluster(pool) => {
                let pooled = pool.get().await.map_err(StoreError::ClusterPool)?;
                Connection::Cluster(ClusterConnection::clone(&pooled))
            }
        };
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.clone());
        Ok(conn)
    }

    /// Stops using the current connection: the next operation takes one from the pool.
    pub(super) fn discard(&self) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// Connections kept open between waits. Waiting is off the request path; past this many
/// concurrent waiters, a wait opens a connection and closes it afterwards.
const IDLE_WAITING_CONNECTIONS: usize = 16;

/// Connections for blocking waits, one per concurrent waiter, each used by nobody else.
pub(super) struct WaitingConnections {
    pool: Pool,
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
    pub(super) fn new(pool: Pool) -> Self {
        Self {
            pool,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle waiting connection, or a new one from the pool's manager.
    pub(super) async fn take(&self) -> Result<Connection, StoreError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some(conn) = idle {
            return Ok(conn);
        }
        match &self.pool {
            Pool::Standalone(pool) => pool.manager().create().await.map(Connection::Standalone),
            Pool::Cluster(pool) => pool.manager().create().await.map(Connection::Cluster),
        }
        .map_err(StoreError::Redis)
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
