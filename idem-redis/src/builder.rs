//! [`RedisStoreBuilder`]: a [`RedisStore`]'s settings, and the [`RedisServer`] it is
//! connected to.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use idem_core::Key;

use crate::RedisSetupError;
#[cfg(doc)]
use crate::ReplicasBehind;
use crate::connection::{Source, unbounded_responses};
use crate::server::EvictionCheck;
use crate::store::{RedisStore, ReplicaAcks};
#[cfg(doc)]
use idem_core::{Begin, Store, StoreError};

/// Where a [`RedisStore`] finds Redis: a URL, an application's pool, a Redis Cluster pool
/// or the sentinels of a Sentinel deployment. Handed to
/// [`RedisStoreBuilder::connect`].
///
/// ```
/// use idem_redis::RedisServer;
///
/// let server = RedisServer::url("redis://127.0.0.1:6379");
/// let replicated = RedisServer::sentinel(["redis://10.0.0.2:26379", "redis://10.0.0.3:26379"], "mymaster");
/// ```
pub struct RedisServer(Server);

enum Server {
    Url(String),
    #[cfg(feature = "tls")]
    UrlWithCa {
        url: String,
        ca_pem: Vec<u8>,
    },
    Pool(deadpool_redis::Pool),
    Cluster(deadpool_redis::cluster::Pool),
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

impl RedisServer {
    /// The server at `url`: `redis://host:port/db`, `rediss://…` with the feature `tls`
    /// (trusting the system's roots), `redis+unix:///path`. The URL is read by
    /// [`connect`](RedisStoreBuilder::connect).
    ///
    /// ```
    /// let server = idem_redis::RedisServer::url("redis://127.0.0.1:6379/0");
    /// ```
    pub fn url(url: impl Into<String>) -> Self {
        Self(Server::Url(url.into()))
    }

    /// The server at `url` (`rediss://host:port`) over TLS, trusting the certificate
    /// authority `ca_pem` (PEM) instead of the system's roots: for a server whose
    /// certificate a private CA signed.
    ///
    /// ```no_run
    /// let ca = std::fs::read("/etc/redis/ca.pem").unwrap();
    /// let server = idem_redis::RedisServer::url_with_ca("rediss://10.0.0.5:6380", ca);
    /// ```
    #[cfg(feature = "tls")]
    pub fn url_with_ca(url: impl Into<String>, ca_pem: impl Into<Vec<u8>>) -> Self {
        Self(Server::UrlWithCa {
            url: url.into(),
            ca_pem: ca_pem.into(),
        })
    }

    /// The server of an existing pool, with that pool's settings (address, credentials,
    /// TLS, connection settings).
    ///
    /// The store opens its connections with the pool's manager and never checks a
    /// connection out of `pool` nor returns one to it: the connections the application
    /// gets from `pool` are never the store's, so a blocking command on one of them
    /// (`BLPOP`, `XREAD BLOCK`) does not stall the store, and the store's connections do
    /// not count against the pool's size.
    ///
    /// ```
    /// let pool = deadpool_redis::Config::from_url("redis://127.0.0.1:6379")
    ///     .create_pool(Some(deadpool_redis::Runtime::Tokio1))
    ///     .unwrap();
    /// let server = idem_redis::RedisServer::pool(pool);
    /// ```
    pub fn pool(pool: deadpool_redis::Pool) -> Self {
        Self(Server::Pool(pool))
    }

    /// Redis Cluster, reached with the manager of a cluster pool; as with
    /// [`pool`](Self::pool), the store never checks a connection out of `pool`. The
    /// connection check reads every primary.
    ///
    /// ```
    /// let pool = deadpool_redis::cluster::Config::from_urls(vec!["redis://127.0.0.1:7000".to_owned()])
    ///     .create_pool(Some(deadpool_redis::Runtime::Tokio1))
    ///     .unwrap();
    /// let server = idem_redis::RedisServer::cluster(pool);
    /// ```
    pub fn cluster(pool: deadpool_redis::cluster::Pool) -> Self {
        Self(Server::Cluster(pool))
    }

    /// The master that Redis Sentinel names `master`, the sentinels at `sentinels`
    /// (`redis://host:port` each). Every new connection asks the sentinels for the current
    /// master, so after a failover — the old master gone, or demoted and answering
    /// `READONLY` — the next operation reaches the new one.
    ///
    /// A failover can lose the writes the old master had not yet sent to the replica it
    /// promoted: a window taken, a record begun or completed, a token spent just before
    /// the failover may be forgotten, and the duplicate it stood for let through, unless
    /// the store waits for [replica acknowledgements](RedisStoreBuilder::with_replica_acks).
    ///
    /// ```
    /// let server = idem_redis::RedisServer::sentinel(
    ///     ["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"],
    ///     "mymaster",
    /// );
    /// ```
    pub fn sentinel<I>(sentinels: I, master: impl Into<String>) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Self(Server::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master.into(),
        })
    }

    /// What opens the store's connections to this server.
    fn source(self) -> Result<Source, RedisSetupError> {
        // The store's own timeout bounds every operation, opening a connection included,
        // so the client's limits must not cut in first with another error.
        match self.0 {
            Server::Url(url) => {
                let manager =
                    deadpool_redis::Manager::new_with_config(url.as_str(), unbounded_responses())
                        .map_err(RedisSetupError::Url)?;
                Ok(Source::Standalone(Arc::new(manager)))
            }
            #[cfg(feature = "tls")]
            Server::UrlWithCa { url, ca_pem } => {
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca_pem),
                };
                let client = redis::Client::build_with_tls(url, certificates)
                    .map_err(RedisSetupError::Url)?;
                let manager = deadpool_redis::Manager::new_with_config(
                    client.get_connection_info().clone(),
                    unbounded_responses(),
                )
                .map_err(RedisSetupError::Url)?;
                Ok(Source::Standalone(Arc::new(manager)))
            }
            Server::Pool(pool) => Ok(Source::Pool(pool)),
            Server::Cluster(pool) => Ok(Source::Cluster(pool)),
            Server::Sentinel { sentinels, master } => {
                let client = redis::sentinel::SentinelClient::build(
                    sentinels,
                    master,
                    None,
                    redis::sentinel::SentinelServerType::Master,
                )
                .map_err(RedisSetupError::Url)?;
                Ok(Source::Sentinel(Arc::new(tokio::sync::Mutex::new(client))))
            }
        }
    }
}

// By hand: a URL may hold a password, and the pools do not all print.
impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.0 {
            Server::Url(_) => "url",
            #[cfg(feature = "tls")]
            Server::UrlWithCa { .. } => "url_with_ca",
            Server::Pool(_) => "pool",
            Server::Cluster(_) => "cluster",
            Server::Sentinel { .. } => "sentinel",
        };
        f.debug_tuple("RedisServer")
            .field(&kind)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`RedisStore`]; made by [`RedisStore::builder`], finished by
/// [`connect`](Self::connect) with the [`RedisServer`] to use.
#[derive(Debug, Clone)]
pub struct RedisStoreBuilder {
    pub(crate) namespace: String,
    pub(crate) timeout: Duration,
    pub(crate) eviction: EvictionCheck,
    pub(crate) max_waiting_connections: usize,
    pub(crate) script_acquire: bool,
    pub(crate) token_capacity: usize,
    pub(crate) token_buckets: usize,
    pub(crate) replica_acks: Option<ReplicaAcks>,
    pub(crate) replay_cache_bytes: usize,
    lazy: bool,
}

impl Default for RedisStoreBuilder {
    fn default() -> Self {
        Self {
            namespace: "idem".to_owned(),
            timeout: Duration::from_secs(1),
            eviction: EvictionCheck::Warn,
            max_waiting_connections: 64,
            script_acquire: false,
            token_capacity: 250_000,
            token_buckets: crate::token_buckets::DEFAULT_BUCKETS,
            replica_acks: None,
            replay_cache_bytes: 16 << 20,
            lazy: false,
        }
    }
}

impl RedisStoreBuilder {
    /// The prefix of every key (default `idem`), so several applications can share one
    /// Redis. Same characters as [`Key::new`].
    ///
    /// ```
    /// let builder = idem_redis::RedisStore::builder().with_namespace("shop");
    /// ```
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long one operation may take, taking a connection included (default 1 s). Past
    /// it the operation fails with [`StoreError::Timeout`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = idem_redis::RedisStore::builder().with_timeout(Duration::from_millis(250));
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What to do when the server may evict keys (default [`EvictionCheck::Warn`]); see
    /// [`EvictionCheck`] for why that matters.
    ///
    /// ```
    /// let builder = idem_redis::RedisStore::builder().with_eviction_policy_check(idem_redis::EvictionCheck::Refuse);
    /// ```
    pub fn with_eviction_policy_check(mut self, check: EvictionCheck) -> Self {
        self.eviction = check;
        self
    }

    /// The most one-time tokens held at once (default 250,000), rounded up to a multiple
    /// of the [buckets](Self::with_token_buckets) they are spread over. Past a bucket's share, the tokens that
    /// expire soonest are evicted, so a flood of form pages never fills Redis: give
    /// `maxmemory` room for about 300 bytes per token besides what your guards need.
    ///
    /// ```
    /// let builder = idem_redis::RedisStore::builder().with_token_capacity(100_000);
    /// ```
    pub fn with_token_capacity(mut self, tokens: usize) -> Self {
        self.token_capacity = tokens;
        self
    }

    /// How many buckets the one-time tokens are spread over (default 64, from 1 to
    /// 1,024): in a Redis Cluster, the slots their traffic reaches. Each bucket is one hash
    /// tag, placed on a slot of its own at an even spacing, so with the slots split evenly
    /// over `m` masters (as `redis-cli --cluster create` splits them) a master holds at
    /// most `⌈buckets / m⌉` buckets, and its share of token traffic is at most
    /// `⌈buckets / m⌉ · m / buckets` of an even share: 1 for the default and 2, 4, 8, 16,
    /// 32 or 64 masters, at most 1.25 whenever `buckets` is a multiple of the masters or
    /// at least four times as many. A client's tokens stay in one bucket, so its budget
    /// of newest tokens is exact; each bucket holds its share of the
    /// [token capacity](Self::with_token_capacity).
    ///
    /// Every instance on the same Redis must have the same number: a token is looked for
    /// in its client's bucket, so tokens put with another number are not found (their
    /// users reload the form). Tokens put by versions before the buckets were placed (the
    /// 64 tags `tokens/0` … `tokens/63`) are still found and spent, at one more script
    /// for a token that is not in its bucket.
    ///
    /// ```
    /// // A cluster of 48 masters: 192 buckets, four on each.
    /// let builder = idem_redis::RedisStore::builder().with_token_buckets(192);
    /// ```
    pub fn with_token_buckets(mut self, buckets: usize) -> Self {
        self.token_buckets = buckets;
        self
    }

    /// How many connections lock waiters may hold open at once (default 64, at least 1).
    ///
    /// Each waiter in [`wait_for_release`](idem_core::LockStore::wait_for_release) blocks a connection of
    /// its own in `BLPOP`. Past this many concurrent waiters, a waiter waits, within its
    /// own `within`, for one of them to come free; when none does, its wait ends as timed
    /// out (`false`), and [`Lock`](idem_core::Lock) tries to acquire again, as after any wait.
    /// In Redis Cluster a waiting connection holds a socket to each node.
    ///
    /// ```
    /// let builder = idem_redis::RedisStore::builder().with_max_waiting_connections(16);
    /// ```
    pub fn with_max_waiting_connections(mut self, max: usize) -> Self {
        self.max_waiting_connections = max;
        self
    }

    /// Acquires without fencing, and begins idempotency records, with the script meant for
    /// servers before Redis 7.0, whatever the version: for testing that path on a new
    /// server.
    ///
    /// ```
    /// let builder = idem_redis::RedisStore::builder().with_script_acquire(true);
    /// ```
    #[doc(hidden)]
    pub fn with_script_acquire(mut self, always: bool) -> Self {
        self.script_acquire = always;
        self
    }

    /// Waits, after each write that decides something — a key taken by `acquire`, a record
    /// begun or completed, a token spent — until `replicas` replicas have it, for at most
    /// `within` (default: no waiting). Fewer in time is an error
    /// ([`StoreError::Backend`] with a [`ReplicasBehind`] source), which the guards answer
    /// by their store-failure policy: what was written stays, and ends with its TTL.
    ///
    /// Redis replicates asynchronously: a master that fails over right after a write can
    /// take the write with it, and the promoted replica then lets the duplicate it stood
    /// for through. Waiting for the replicas' acknowledgement (`WAIT`) closes that window
    /// for every write the guards rely on, at the price of a second round trip per such
    /// write, and of every operation on the store's connection waiting behind it while a
    /// replica lags (at most `within`, which should stay well below the store's
    /// [timeout](Self::with_timeout)). A write acknowledged this way survives a failover
    /// that promotes one of the acknowledging replicas, as Sentinel does.
    ///
    /// # How long a request waits
    ///
    /// Each store call that writes something decided sends its write (at most the timeout)
    /// and then `WAIT` on the same connection — `WAIT` counts the writes of the connection
    /// it is sent on — all within **timeout + `within` per such call**, where a call
    /// without acks takes at most the timeout. The
    /// guards make these calls per request, one after the other (the handler runs between
    /// the first and the last):
    ///
    /// | guard | calls that wait for the replicas | other calls |
    /// |---|---|---|
    /// | `#[avoid_repeat]`, `AvoidRepeatLayer` | `acquire` | `release` (in finish mode) |
    /// | form token | `consume_token` | `put_token` (when the form is rendered) |
    /// | form token with replay | `begin_record`, `consume_token`, `complete_record` | renewals |
    /// | `Idempotency-Key`, first request | `begin_record`, `complete_record` | renewals |
    /// | `Idempotency-Key`, replay | — (a completed record is a read) | `begin_record` |
    /// | `Lock` | `acquire` | `release`, renewals |
    ///
    /// A request therefore gets its answer within (timeout + `within`) × its waiting calls
    /// \+ timeout × its other calls, plus its handler's own time. The first call that
    /// fails ends the request by the store-failure policy, so in a fault it is usually
    /// one call's bound that a request meets, not the sum.
    ///
    /// # What it costs in a failover
    ///
    /// Acknowledgements need replicas. When Sentinel promotes the only replica of a
    /// master that died, the new master has no replica until one joins it — the old
    /// master started again, or a new server — and every write that decides something is
    /// refused meanwhile ([`ReplicasBehind`]): the guards answer by their store-failure
    /// policy (503, or through unguarded) for the whole failover *plus* the time until a
    /// replica is back in sync, where without acks they fail only during the failover.
    /// Measured here (`cargo bench -p idem-bench --bench failover_acks`, two rounds, a
    /// writer taking a key every 10 ms, the master killed and started again 5 s after its
    /// replica's promotion): the Sentinels promoted the replica 3.2 s after the kill, and
    /// until then nearly every write failed either way (186–193 of 186–194). After the
    /// promotion, without acks 1 write of about 1,000 was refused (the moment the old
    /// master came back); with acks 58–59 of about 185 were — the writes of a master
    /// without a replica, each waiting out `within` — the last 14.5 s after the kill, a
    /// second after the old master was back in sync. If the old master's machine is gone,
    /// the refusals last until a replacement replica is in sync: what acks add is the
    /// refusal of every decided write between the promotion and the rejoin (503s by the
    /// store-failure policy, or requests let through unguarded where it fails open). What
    /// to choose instead:
    ///
    /// - **two replicas, acks from one** (`with_replica_acks(1, …)` with two replicas): a
    ///   failover leaves the promoted master one replica, and writes go on once the
    ///   failover is over;
    /// - **no acks, and Redis' own durability**: AOF with `appendfsync always` on every
    ///   server keeps what a master acknowledged across its restart, not across a
    ///   failover that promotes a replica behind it — the window acks close;
    /// - **the records that must not be lost in a SQL store**, completed in the handler's
    ///   transaction (`idem-sqlx`), and the guards that decide in a fraction of a
    ///   millisecond on Redis without acks.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = idem_redis::RedisStore::builder().with_replica_acks(1, Duration::from_millis(100));
    /// ```
    pub fn with_replica_acks(mut self, replicas: u32, within: Duration) -> Self {
        self.replica_acks = (replicas > 0).then_some(ReplicaAcks { replicas, within });
        self
    }

    /// How many bytes of completed idempotency records the store keeps in the process
    /// (default 16 MiB; 0 turns the copy off).
    ///
    /// When [`begin_record`](idem_core::RecordStore::begin_record) finds a completed record, the store keeps
    /// a copy of it, and answers the next request for that key from the copy, without a
    /// round trip: a retry loop or a callback sent many times is replayed at the speed of
    /// an in-memory store and costs Redis nothing. The answer is the one Redis would give,
    /// because a completed record never changes before its retention ends: the stored
    /// response for the same fingerprint, [`Begin::Mismatch`] for another. A copy is
    /// dropped no later than Redis drops the record (its remaining time, counted from
    /// before the question was sent). Only records that were replayed once are copied,
    /// not every completed one; past the bound, the least used copies are evicted.
    ///
    /// A record removed by an operator ([`remove_record`](idem_core::RecordStore::remove_record),
    /// the `idem` command line, or by hand in Redis) to let a key run again is still
    /// replayed by another process that copied it, until the copy's end (at most the
    /// record's retention): turn the copy off where records are removed by hand and the
    /// removal must hold at once everywhere.
    ///
    /// ```
    /// let builder = idem_redis::RedisStore::builder().with_replay_cache(64 << 20);
    /// ```
    pub fn with_replay_cache(mut self, max_bytes: usize) -> Self {
        self.replay_cache_bytes = max_bytes;
        self
    }

    /// Opens the shared connection on the first operation rather than in
    /// [`connect`](Self::connect) (default `false`): for an application that must start
    /// while Redis is down. Until the server answers, operations fail with
    /// [`StoreError`](idem_core::StoreError)s, and a server the store refuses (too old, or
    /// one that may evict keys under [`EvictionCheck::Refuse`]) fails every operation with
    /// the [`RedisSetupError`] as the source of a
    /// [`StoreError::Backend`](idem_core::StoreError::Backend).
    ///
    /// ```
    /// let builder = idem_redis::RedisStore::builder().with_lazy_connect(true);
    /// ```
    pub fn with_lazy_connect(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// The store on `server`, connected and checked at once: the server answered within
    /// the [timeout](Self::with_timeout), runs a version the store supports, and passed
    /// the [eviction check](Self::with_eviction_policy_check) — unless
    /// [lazy](Self::with_lazy_connect), when only the settings and the URL are read now
    /// and the rest happens on the first operation.
    ///
    /// ```no_run
    /// use idem_redis::{RedisServer, RedisStore};
    ///
    /// # async fn run() -> Result<(), idem_redis::RedisSetupError> {
    /// let store = RedisStore::builder()
    ///     .with_namespace("shop")
    ///     .connect(RedisServer::url("redis://127.0.0.1:6379"))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`RedisSetupError::Url`] when a URL (or the CA certificate) cannot be read.
    /// - [`RedisSetupError::Namespace`] when the namespace is not a valid [`Key`].
    /// - [`RedisSetupError::Connect`] when the server cannot be reached and checked within
    ///   the [timeout](Self::with_timeout).
    /// - [`RedisSetupError::UnsupportedVersion`] for a server older than Redis 6.0.
    /// - [`RedisSetupError::EvictionPolicy`] for a server that may evict keys, when set to
    ///   [`EvictionCheck::Refuse`].
    ///
    /// A [lazy](Self::with_lazy_connect) store fails here with the first two only.
    pub async fn connect(self, server: RedisServer) -> Result<RedisStore, RedisSetupError> {
        Key::new(self.namespace.as_str()).map_err(RedisSetupError::Namespace)?;
        let lazy = self.lazy;
        let store = RedisStore::new(server.source()?, self);
        if lazy {
            Ok(store)
        } else {
            store.connected().await
        }
    }
}
