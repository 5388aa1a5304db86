//! [`RedisStore`]: the store for several instances behind a load balancer.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::{ErrorKind, RedisError, Script, ServerErrorKind, Value};

use idem_core::store::{Fencing, FencingToken, ttl_millis};
use idem_core::{
    Acquire, Begin, Fingerprint, Key, LockStore, Owner, RecordState, RecordStore, StoreError,
    TokenStore,
};

#[cfg(doc)]
use crate::EvictionCheck;
use crate::builder::RedisStoreBuilder;
use crate::call::Call;
use crate::connection::{Connection, Connections, Source, WaitingConnections};
use crate::record::Taken;

tokio::task_local! {
    /// Inside [`RedisStore::replicated_if`], the connection its write went on, for its
    /// `WAIT`.
    pub(crate) static WROTE_ON: RefCell<Option<Connection>>;
}
use crate::replay_cache::ReplayCache;
use crate::server::{AcquireCommand, Checks};
use crate::token_buckets::TokenBuckets;
use crate::{RedisSetupError, ReplicasBehind};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
static ACQUIRE_FENCED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire_fenced.lua")));
static ACQUIRE_OR_REGISTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire_or_register.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
static RELEASE_AND_SIGNAL: LazyLock<Script> =
    LazyLock::new(|| fair_script(include_str!("scripts/release_and_signal.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));
static COMPLETE_RECORD: LazyLock<Script> =
    LazyLock::new(|| record_script(include_str!("scripts/complete_record.lua")));
static RENEW_RECORD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/renew_record.lua")));
static ABANDON_RECORD: LazyLock<Script> =
    LazyLock::new(|| record_script(include_str!("scripts/abandon_record.lua")));
static PUT_TOKEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/put_token.lua")));
static CONSUME_TOKEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/consume_token.lua")));
static HAS_TOKEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/has_token.lua")));

/// A script that uses the fair queue's functions: their definitions, then its body.
pub(crate) fn fair_script(body: &str) -> Script {
    Script::new(&[include_str!("scripts/fair_prelude.lua"), body].concat())
}

/// A script that ends a record and wakes its waiters: the prelude's definitions, then its
/// body.
pub(crate) fn record_script(body: &str) -> Script {
    Script::new(&[include_str!("scripts/record_prelude.lua"), body].concat())
}

/// How long a release's wake-up stays in Redis for a waiter to take. It must cover the
/// moment between a waiter registering and its `BLPOP` reaching Redis (a round trip,
/// maybe opening a connection); keeping it longer only means that a later waiter may wake
/// once for nothing, when the one it was left for gave up waiting. In milliseconds, as
/// the scripts take it.
pub(crate) const SIGNAL_KEPT_MS: &str = "5000";

/// A [`Store`](idem_core::Store) in Redis, shared by every instance of an application.
///
/// - **Atomic**: each operation is one command (`SET … NX PX … GET`, `DEL`, `PTTL`) or one
///   Lua script run through [`redis::Script`] (`EVALSHA`, loading the script again after
///   `NOSCRIPT`, as after a server restart).
/// - **Bounded in time**: every operation, taking a connection included, is cut off after
///   the [timeout](RedisStoreBuilder::with_timeout) (default 1 s) with
///   [`StoreError::Timeout`]; no caller waits on a stalled server.
/// - **Failover**: a connection that meets `READONLY` (a server demoted to replica, as
///   after a Sentinel or managed-service failover behind one address) is replaced, like
///   one that failed, so the next operation reaches the new primary.
/// - **Redis Cluster**: keys are `namespace:{key}:kind`; everything one operation touches
///   shares the hash tag `{key}` and so one slot. Build from a cluster pool with
///   [`RedisServer::cluster`](crate::RedisServer::cluster).
/// - **One round trip** per operation: all operations are multiplexed over one connection,
///   rather than checking one out of a pool per operation (deadpool pings on every
///   checkout). After a connection error or a timeout the store opens a fresh one. The
///   connection is opened, and the server checked, by
///   [`connect`](RedisStoreBuilder::connect), or on first use
///   ([`with_lazy_connect`](RedisStoreBuilder::with_lazy_connect)).
/// - **Connections of its own**: the store opens its connections with a deadpool manager
///   (the pool's, with its settings, when built from an application's pool) and never
///   takes one out of a pool or puts one back. An application's blocking command
///   (`BLPOP`, `XREAD BLOCK`) on a connection from the same pool cannot stall the store.
/// - **Replays from the process**: a completed idempotency record it has replayed is
///   copied into the process, and its next replays are answered from there, as Redis
///   would answer them, until the record's own end
///   ([`with_replay_cache`](RedisStoreBuilder::with_replay_cache)).
///
/// Key layout (with the default namespace `idem`): `idem:{key}:lock`, `idem:{key}:fence`
/// (a lock's fencing counter: it has no TTL, so tokens keep growing across expiry — one
/// small key per lock name that ever used fencing), `idem:{key}:waiters` (how many
/// waiters registered with
/// [`acquire_or_register_waiter`](idem_core::LockStore::acquire_or_register_waiter) and were not yet
/// answered by a release; kept as long as the longest registered wait, plus the timeout),
/// `idem:{key}:signal` (a list of wake-ups, one per registered waiter a release answered,
/// kept for 5 s; neither key exists for a lock nobody waits for),
/// `idem:{key}:record_waiters` and `idem:{key}:record_signal` (the same for a record's
/// waiters; see [Waiting for a record](#waiting-for-a-record)), `idem:{key}:record` (an
/// idempotency record: one string, a byte for its state, `r` in progress or `d` done, the
/// request's 32-byte fingerprint, then the owner of the attempt in progress or the stored
/// response; records that earlier versions kept as hashes are still read). One-time
/// tokens are spread over [64 buckets](RedisStoreBuilder::with_token_buckets) by their
/// scope: `idem:{tokens/N/J}:all` (the bucket's tokens, by expiry) and
/// `idem:{tokens/N/J}:scope:<scope>` (one scope's), so a put or a spend is one script in
/// one slot; bucket `N`'s tag, with the first `J` that does it, is on a slot of its own at
/// an even spacing, so the buckets spread evenly over a cluster's masters. Each bucket
/// holds its share of the
/// [token capacity](RedisStoreBuilder::with_token_capacity) and evicts the tokens that
/// expire soonest past it; a scope keeps only its newest few. Tokens are timed by the
/// server's clock (`TIME`), not the instances'.
///
/// [`wait_for_release`](idem_core::LockStore::wait_for_release) blocks in `BLPOP` on a connection of its
/// own — never on the shared one, which a blocking command would stall. Waiting
/// connections are opened the same way, at most 64 at once
/// ([`with_max_waiting_connections`](RedisStoreBuilder::with_max_waiting_connections):
/// a waiter that gets none within its wait returns as timed out); up to 16 are kept open
/// between waits.
///
/// # Waiting for a record
///
/// [`wait_for_record`](idem_core::RecordStore::wait_for_record) registers its caller in
/// one script that sees the record in progress (`idem:{key}:record_waiters` counts the
/// waiters, for as long as the longest wait plus the timeout), then blocks in `BLPOP` on
/// `idem:{key}:record_signal` on a waiting connection, as a lock's waiter does, for at
/// most its bound and the lease's time left. The scripts that complete, abandon and
/// remove a record push one wake-up per registered waiter there (kept 5 s), so that every
/// waiter wakes and looks at the record again. The registration marks the record as
/// waited for (its first byte `w` rather than `r`), and the scripts that complete and
/// abandon a record wake waiters only for a record so marked: one nobody waits for costs
/// them no command more, and `begin_record` is unchanged (measured by `INFO
/// commandstats`, a completion's script takes the time it took before waits were woken,
/// where reading the waiter count took 1.9 µs more). During a rolling upgrade, a record
/// ended by an instance of an earlier version signals nobody (its waiters wait out their
/// bound or the lease), and one marked as waited for is of no layout an earlier version
/// reads (its request for that key meets a store error) until the record ends; one in
/// the hash layout of earlier versions is looked at again every 10 ms.
///
/// # Servers
///
/// Redis 6.0 or newer (`BLPOP` with a fractional timeout). Each time the store opens its
/// shared connection it reads the server's version (`INFO server`; in a cluster, every
/// primary's): from Redis 7.0 on, `acquire` without fencing and `begin_record` are the one
/// command `SET … NX PX … GET`; before 7.0, which refuses `NX` with `GET`, each is one
/// script doing the same `GET` and `SET NX PX` atomically. A server older than 6.0 is refused with
/// [`RedisSetupError::UnsupportedVersion`] (from an operation, as the source of
/// [`StoreError::Backend`]); a server that does not tell its version gets the
/// script. Valkey speaks the same protocol and reports `redis_version` 7.2.4, so it takes
/// the `SET` path (the suites in the repository pass on Valkey 9.1.2 as on Redis 7.0).
///
/// # Eviction
///
/// Every key the store writes has a TTL, so under any `maxmemory-policy` but `noeviction`
/// (`volatile-*` included) Redis may evict a live window, record or lock when memory runs
/// short, and the duplicate it stood for gets through. Run idem on a Redis with
/// `maxmemory-policy noeviction` (a full server then refuses writes, which the store
/// reports as errors, rather than forgetting keys). The store reads the policy when it
/// opens its shared connection and warns, or refuses the server: see [`EvictionCheck`].
///
/// ```no_run
/// use std::time::Duration;
/// use idem_redis::{RedisServer, RedisStore};
///
/// # async fn run() -> Result<(), idem_redis::RedisSetupError> {
/// let store = RedisStore::builder()
///     .with_namespace("shop")
///     .with_timeout(Duration::from_millis(500))
///     .connect(RedisServer::url("redis://127.0.0.1:6379"))
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connections: Connections,
    waiting: WaitingConnections,
    namespace: String,
    timeout: Duration,
    /// Where tokens live, and how many a bucket holds.
    tokens: TokenBuckets,
    /// Replicas that must acknowledge a decisive write, and how long to wait for them.
    replica_acks: Option<ReplicaAcks>,
    /// Copies of the completed records replayed here, unless turned off.
    replays: Option<ReplayCache>,
}

/// How many replicas must acknowledge a decisive write, within how long
/// ([`RedisStoreBuilder::with_replica_acks`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplicaAcks {
    pub(crate) replicas: u32,
    pub(crate) within: Duration,
}

/// The kinds of entries, each a suffix of the Redis key.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Lock,
    Fence,
    Waiters,
    Signal,
    Record,
    /// A fair lock's queue of owners.
    Queue,
    /// When each place in a fair lock's queue lapses.
    Places,
    /// The prefix of a fair lock's waiters' wake-up lists, each followed by its owner.
    Turns,
    /// How many waiters wait for a record to end.
    RecordWaiters,
}

impl Kind {
    /// What follows `namespace:{key}:` in a key of this kind. The release script, which
    /// names the lock's other keys from that prefix, spells the same suffixes.
    fn suffix(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Fence => "fence",
            Self::Waiters => "waiters",
            Self::Signal => "signal",
            Self::Record => "record",
            Self::Queue => "queue",
            Self::Places => "places",
            Self::Turns => "turn:",
            Self::RecordWaiters => "record_waiters",
        }
    }
}

impl RedisStore {
    /// The store on `source` with the settings of `builder`, not connected yet.
    pub(crate) fn new(source: Source, builder: RedisStoreBuilder) -> Self {
        Self {
            inner: Arc::new(Inner {
                waiting: WaitingConnections::new(source.clone(), builder.max_waiting_connections),
                connections: Connections::new(
                    source,
                    Checks {
                        eviction: builder.eviction,
                        script_acquire: builder.script_acquire,
                    },
                ),
                tokens: TokenBuckets::new(
                    &builder.namespace,
                    builder.token_buckets,
                    builder.token_capacity,
                ),
                namespace: builder.namespace,
                timeout: builder.timeout,
                replica_acks: builder.replica_acks,
                replays: ReplayCache::new(builder.replay_cache_bytes),
            }),
        }
    }

    /// A builder for the store's settings, finished by
    /// [`connect`](RedisStoreBuilder::connect) with the server to use.
    ///
    /// ```
    /// let builder = idem_redis::RedisStore::builder().with_namespace("shop");
    /// ```
    pub fn builder() -> RedisStoreBuilder {
        RedisStoreBuilder::default()
    }

    /// The namespace every key starts with.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// How long an operation may take.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Opens the shared connection and checks the server now, rather than on first use.
    pub(crate) async fn connected(self) -> Result<Self, RedisSetupError> {
        let timeout = self.inner.timeout;
        match tokio::time::timeout(timeout, self.inner.connections.get()).await {
            Ok(Ok(_)) => Ok(self),
            // A refused server is reported as such, not as a failure to connect.
            Ok(Err(StoreError::Backend(source))) => match source.downcast::<RedisSetupError>() {
                Ok(refused) => Err(*refused),
                Err(source) => Err(RedisSetupError::Connect(StoreError::Backend(source))),
            },
            Ok(Err(error)) => Err(RedisSetupError::Connect(error)),
            Err(_elapsed) => Err(RedisSetupError::Connect(StoreError::Timeout(timeout))),
        }
    }

    pub(crate) fn key(&self, key: &Key, kind: Kind) -> String {
        format!(
            "{}:{{{}}}:{}",
            self.inner.namespace,
            key.as_str(),
            kind.suffix()
        )
    }

    /// The wake-up list of `owner` waiting in `key`'s fair queue:
    /// `namespace:{key}:turn:<owner>`.
    pub(crate) fn turn_list(&self, key: &Key, owner: &Owner) -> String {
        format!("{}{}", self.key(key, Kind::Turns), owner.as_str())
    }

    /// Spends `token` from the bucket's set and the scope's set `keys`, waiting for the
    /// replicas the store asks for when it was there.
    async fn consume_in(&self, keys: (String, String), token: &Key) -> Result<bool, StoreError> {
        let (bucket, scope) = keys;
        let (keys, args) = ([bucket.as_str(), &scope], [token.as_str().as_bytes()]);
        let consume = self.flag(&CONSUME_TOKEN, &keys, &args);
        self.replicated_if(&scope, consume, |&consumed| consumed)
            .await
    }

    /// The shared connection, and how the next one is opened.
    pub(crate) fn connections(&self) -> &Connections {
        &self.inner.connections
    }

    /// How long an operation may take: the timeout, and with replica acknowledgements the
    /// time they may take besides.
    pub(crate) fn bound(&self) -> Duration {
        let inner = &self.inner;
        match inner.replica_acks {
            Some(acks) => inner.timeout.saturating_add(acks.within),
            None => inner.timeout,
        }
    }

    /// Whether a decisive write waits for replicas to acknowledge it.
    pub(crate) fn waits_for_replicas(&self) -> bool {
        self.inner.replica_acks.is_some()
    }

    /// The error of a command that failed; a connection that failed, or reached a server
    /// refusing writes with `READONLY`, is dropped first.
    pub(crate) fn failed(&self, error: RedisError) -> StoreError {
        let inner = &self.inner;
        let demoted = is_read_only(&error);
        if demoted {
            // The idle waiting connections lead to the demoted server too, where no
            // release would ever signal them.
            inner.waiting.discard_idle();
        }
        if demoted
            || error.is_io_error()
            || error.is_connection_dropped()
            || error.is_unrecoverable_error()
        {
            inner.connections.discard();
        }
        StoreError::backend(error)
    }

    pub(crate) async fn pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        let millis: i64 = self
            .query(|_| {
                let mut pttl = redis::cmd("PTTL");
                pttl.arg(key);
                Call::command(pttl)
            })
            .await?;
        Ok(remaining_from_pttl(millis))
    }

    pub(crate) fn get<'a>(
        &'a self,
        key: &'a str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + 'a {
        self.query(move |_| {
            let mut get = redis::cmd("GET");
            get.arg(key);
            Call::command(get)
        })
    }

    /// The copies of replayed records, unless turned off.
    pub(crate) fn replays(&self) -> Option<&ReplayCache> {
        self.inner.replays.as_ref()
    }

    /// The answer of `write`, once the replicas the store was built to wait for have the
    /// write it made, when `wrote` says it made one that decides something — a key taken,
    /// a record begun or completed, a token spent ([`RedisStoreBuilder::with_replica_acks`]);
    /// at once without that setting. Fewer replicas in time is an error
    /// ([`ReplicasBehind`]).
    ///
    /// `WAIT` counts the writes of the connection it is sent on, so it goes on the one the
    /// write went on, even when that one has been dropped since (another operation's
    /// failure): on a fresh connection it would count none, and acknowledge a write no
    /// replica has. The write and its `WAIT` take at most the timeout + `within`.
    pub(crate) fn replicated_if<'a, T, F>(
        &'a self,
        key: &'a str,
        write: F,
        wrote: impl FnOnce(&T) -> bool + Send + 'a,
    ) -> Replicated<'a, F, T>
    where
        T: Send + 'a,
        F: Future<Output = Result<T, StoreError>> + Send + 'a,
    {
        match self.inner.replica_acks {
            None => Replicated::Written { write },
            // Boxed: a setting few stores have, whose future inline would size every
            // operation's (`tests::an_operations_future_stays_small`).
            Some(acks) => Replicated::Waiting {
                waiting: Box::pin(self.replicated(acks, key, write, wrote)),
            },
        }
    }

    /// [`replicated_if`](Self::replicated_if) on a store that waits for `acks`.
    async fn replicated<T>(
        &self,
        acks: ReplicaAcks,
        key: &str,
        write: impl Future<Output = Result<T, StoreError>>,
        wrote: impl FnOnce(&T) -> bool,
    ) -> Result<T, StoreError> {
        let limit = self.inner.timeout.saturating_add(acks.within);
        let within = u64::try_from(acks.within.as_millis()).unwrap_or(u64::MAX);
        let replicated = WROTE_ON.scope(RefCell::new(None), async {
            let answer = write.await?;
            if !wrote(&answer) {
                return Ok(answer);
            }
            let Some(mut conn) = WROTE_ON.with(|wrote_on| wrote_on.borrow_mut().take()) else {
                return Err(StoreError::unexpected(
                    "WAIT",
                    "no connection for the write",
                ));
            };
            let acknowledged = conn
                .wait_for_replicas(key, acks.replicas, within)
                .await
                .map_err(|error| self.failed(error))?;
            let acknowledged = u32::try_from(acknowledged.max(0)).unwrap_or(u32::MAX);
            if acknowledged >= acks.replicas {
                Ok(answer)
            } else {
                Err(StoreError::backend(ReplicasBehind {
                    acknowledged,
                    wanted: acks.replicas,
                }))
            }
        });
        match tokio::time::timeout(limit, replicated).await {
            Ok(result) => result,
            Err(_elapsed) => {
                self.inner.connections.discard();
                Err(StoreError::Timeout(limit))
            }
        }
    }

    /// Takes a wake-up from `list`, waiting for one with `BLPOP` on a waiting connection
    /// up to `within`; `true` if it took one.
    pub(crate) async fn pop_wake_up(
        &self,
        list: &str,
        within: Duration,
    ) -> Result<bool, StoreError> {
        let inner = &self.inner;
        let within = Duration::from_millis(ttl_millis(within));
        let deadline = Instant::now() + within;
        // At the bound, wait within the caller's time for a waiting connection to come
        // free; none coming is the wait running out, as if no release came.
        let Ok(Ok(_seat)) = tokio::time::timeout(within, inner.waiting.seat()).await else {
            return Ok(false);
        };
        let millis = ttl_millis(deadline.saturating_duration_since(Instant::now()));
        // `BLPOP` takes seconds; 0 would mean "for ever", which `ttl_millis` rules out.
        let seconds = format!("{}.{:03}", millis / 1000, millis % 1000);
        let mut conn = tokio::time::timeout(inner.timeout, inner.waiting.take())
            .await
            .map_err(|_elapsed| StoreError::Timeout(inner.timeout))??;
        let limit = Duration::from_millis(millis) + inner.timeout;
        conn.allow_responses_within(limit);
        let popped = tokio::time::timeout(
            limit,
            redis::cmd("BLPOP")
                .arg(list)
                .arg(&seconds)
                .query_async::<Option<(Vec<u8>, Vec<u8>)>>(&mut conn),
        )
        .await;
        match popped {
            Ok(Ok(popped)) => {
                inner.waiting.give_back(conn);
                Ok(popped.is_some())
            }
            Ok(Err(error)) => {
                inner.waiting.discard_idle();
                Err(StoreError::backend(error))
            }
            Err(_elapsed) => {
                inner.waiting.discard_idle();
                Err(StoreError::Timeout(limit))
            }
        }
    }

    /// [`LockStore::acquire`](idem_core::LockStore::acquire) with a fencing token: one script takes the key and draws the
    /// token from the key's counter.
    async fn acquire_fenced(
        &self,
        lock: &str,
        fence: &str,
        owner: &Owner,
        ttl: Duration,
    ) -> Result<Acquire, StoreError> {
        let millis = ttl_millis(ttl).to_string();
        let (keys, args) = (
            [lock, fence],
            [owner.as_str().as_bytes(), millis.as_bytes()],
        );
        let answer: Value = self.script(&ACQUIRE_FENCED, &keys, &args).await?;
        scripted_acquire(&answer, Fencing::On)
    }

    /// [`LockStore::acquire`](idem_core::LockStore::acquire) without fencing: one command on the accept path, whose `GET`
    /// tells who holds the key when `NX` refuses. Only a refusal costs a second command,
    /// to learn the time left.
    async fn acquire_plain(
        &self,
        lock: &str,
        owner: &Owner,
        ttl: Duration,
    ) -> Result<Acquire, StoreError> {
        loop {
            let Some(holder) = self
                .set_nx_get(lock, owner.as_str().as_bytes(), ttl)
                .await?
            else {
                return Ok(Acquire::Acquired { fence: None });
            };
            // The key may expire between the two commands; then try to take it again.
            let Some(remaining) = self.pttl(lock).await? else {
                continue;
            };
            return Ok(if holder == owner.as_str().as_bytes() {
                Acquire::Reentered {
                    remaining,
                    fence: None,
                }
            } else {
                Acquire::Held { remaining }
            });
        }
    }

    /// Sets `key` to `value` for `ttl` unless it exists; the value it found, if any: a
    /// lock's holder, or a record. Servers before 7.0 refuse `NX` with `GET`; a script does
    /// the same there.
    pub(crate) async fn set_nx_get(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let millis = ttl_millis(ttl);
        self.query(move |conn| match conn.acquire_command() {
            AcquireCommand::SetNxGet => {
                let mut set = redis::cmd("SET");
                set.arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis)
                    .arg("GET");
                Call::command(set)
            }
            AcquireCommand::Script => {
                Call::script(&ACQUIRE, &[key], &[value, millis.to_string().as_bytes()])
            }
        })
        .await
    }
}

pin_project_lite::pin_project! {
    /// The future of [`RedisStore::replicated_if`].
    #[project = ReplicatedProj]
    pub(crate) enum Replicated<'a, F, T> {
        /// No replica to wait for: the write alone.
        Written { #[pin] write: F },
        /// The write, then the replicas' acknowledgements.
        Waiting { waiting: Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>> },
    }
}

impl<T, F: Future<Output = Result<T, StoreError>>> Future for Replicated<'_, F, T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ReplicatedProj::Written { write } => write.poll(cx),
            ReplicatedProj::Waiting { waiting } => waiting.as_mut().poll(cx),
        }
    }
}

/// Whether the server refused a write because it is a replica. Redis before 7.0 reports a
/// write refused inside a script as a script error quoting the `READONLY` reply.
fn is_read_only(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::Server(ServerErrorKind::ReadOnly) => true,
        ErrorKind::Server(ServerErrorKind::ResponseError) => error
            .detail()
            .is_some_and(|detail| detail.contains("-READONLY ")),
        _ => false,
    }
}

/// `PTTL`'s answer: milliseconds left, `-1` for a key without expiry (never written by
/// idem; reported as held for ever), `-2` for no key.
pub(crate) fn remaining_from_pttl(millis: i64) -> Option<Duration> {
    match millis {
        -2 => None,
        -1 => Some(Duration::MAX),
        ms => Some(Duration::from_millis(ms.max(0).unsigned_abs())),
    }
}

/// The answer of the acquiring scripts: the token, a bare integer, acquired (the cheapest
/// reply for Redis to build, on the common path); `{2, token, pttl}` already ours;
/// `{0, 0, pttl}` held by another. The token counts only with fencing.
fn scripted_acquire(answer: &Value, fencing: Fencing) -> Result<Acquire, StoreError> {
    let fields = match answer {
        Value::Int(token) => {
            let fence = (fencing == Fencing::On).then(|| FencingToken::new(token.unsigned_abs()));
            return Ok(Acquire::Acquired { fence });
        }
        Value::Array(fields) => fields.as_slice(),
        other => return Err(StoreError::unexpected("acquire", other)),
    };
    let answer = ScriptAnswer::new("acquire", fields);
    let remaining = || {
        answer
            .field(2)
            .map(|ms| remaining_from_pttl(ms).unwrap_or_default())
    };
    match answer.field(0)? {
        2 => Ok(Acquire::Reentered {
            remaining: remaining()?,
            fence: answer.token(fencing)?,
        }),
        0 => Ok(Acquire::Held {
            remaining: remaining()?,
        }),
        _ => Err(answer.unexpected()),
    }
}

/// The integers a script answers with, `{state, token, ...}`, read for `operation`.
pub(crate) struct ScriptAnswer<'a> {
    operation: &'static str,
    fields: &'a [Value],
}

impl<'a> ScriptAnswer<'a> {
    pub(crate) fn new(operation: &'static str, fields: &'a [Value]) -> Self {
        Self { operation, fields }
    }

    /// The `i`th field, which must be an integer.
    pub(crate) fn field(&self, i: usize) -> Result<i64, StoreError> {
        self.fields
            .get(i)
            .ok_or_else(|| self.unexpected())
            .and_then(|value| int(self.operation, value))
    }

    /// The error for an answer of no known shape.
    pub(crate) fn unexpected(&self) -> StoreError {
        StoreError::unexpected(self.operation, self.fields)
    }

    /// The fencing token in the second field, which counts only with fencing.
    pub(crate) fn token(&self, fencing: Fencing) -> Result<Option<FencingToken>, StoreError> {
        self.field(1)
            .map(|n| (fencing == Fencing::On).then(|| FencingToken::new(n.unsigned_abs())))
    }
}

pub(crate) fn int(operation: &'static str, value: &Value) -> Result<i64, StoreError> {
    match value {
        Value::Int(n) => Ok(*n),
        other => Err(StoreError::unexpected(operation, other)),
    }
}

impl LockStore for RedisStore {
    async fn acquire(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Acquire, StoreError> {
        let lock = self.key(key, Kind::Lock);
        let acquire = async {
            match fencing {
                Fencing::On => {
                    self.acquire_fenced(&lock, &self.key(key, Kind::Fence), owner, ttl)
                        .await
                }
                Fencing::Off => self.acquire_plain(&lock, owner, ttl).await,
            }
        };
        let acquired = self.replicated_if(&lock, acquire, |acquired| {
            matches!(acquired, Acquire::Acquired { .. })
        });
        self.bounded(acquired).await
    }

    async fn release(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let lock = self.key(key, Kind::Lock);
        self.flag(&RELEASE, &[&lock], &[owner.as_str().as_bytes()])
            .await
    }

    async fn acquire_or_register_waiter(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        wait: Duration,
    ) -> Result<Acquire, StoreError> {
        let (lock, fence, waiters) = (
            self.key(key, Kind::Lock),
            self.key(key, Kind::Fence),
            self.key(key, Kind::Waiters),
        );
        let (lock_key, fence, waiters) = (lock.as_str(), fence.as_str(), waiters.as_str());
        let (owner, millis) = (owner.as_str(), ttl_millis(ttl));
        let fenced = if fencing == Fencing::On { "1" } else { "0" };
        // The registration must outlast the wait, and the moment its `BLPOP` takes to
        // reach Redis.
        let registered_ms = ttl_millis(wait.saturating_add(self.inner.timeout));
        let acquire = async {
            let (millis, registered_ms) = (millis.to_string(), registered_ms.to_string());
            let keys = [lock_key, fence, waiters];
            let args = [
                owner.as_bytes(),
                millis.as_bytes(),
                fenced.as_bytes(),
                registered_ms.as_bytes(),
            ];
            let answer: Value = self.script(&ACQUIRE_OR_REGISTER, &keys, &args).await?;
            scripted_acquire(&answer, fencing)
        };
        self.replicated_if(&lock, acquire, |acquired| {
            matches!(acquired, Acquire::Acquired { .. })
        })
        .await
    }

    async fn release_and_signal(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let lock = self.key(key, Kind::Lock);
        // The script names the lock's other keys from its prefix, `namespace:{key}:`.
        let prefix = &lock[..lock.len() - Kind::Lock.suffix().len()];
        self.flag(
            &RELEASE_AND_SIGNAL,
            &[&lock],
            &[
                owner.as_str().as_bytes(),
                SIGNAL_KEPT_MS.as_bytes(),
                prefix.as_bytes(),
            ],
        )
        .await
    }

    async fn wait_for_release(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        self.pop_wake_up(&self.key(key, Kind::Signal), within).await
    }

    async fn renew(&self, key: &Key, owner: &Owner, ttl: Duration) -> Result<bool, StoreError> {
        let lock = self.key(key, Kind::Lock);
        let millis = ttl_millis(ttl).to_string();
        self.flag(
            &RENEW,
            &[&lock],
            &[owner.as_str().as_bytes(), millis.as_bytes()],
        )
        .await
    }

    async fn remaining(&self, key: &Key) -> Result<Option<Duration>, StoreError> {
        self.pttl(&self.key(key, Kind::Lock)).await
    }
}

impl TokenStore for RedisStore {
    async fn put_token(
        &self,
        scope: &Key,
        token: &Key,
        ttl: Duration,
        keep: usize,
    ) -> Result<(), StoreError> {
        let (bucket, scope) = self.inner.tokens.keys(scope.as_str());
        let (bucket, scope, token) = (bucket.as_str(), scope.as_str(), token.as_str());
        let (millis, keep, budget) = (ttl_millis(ttl), keep.max(1), self.inner.tokens.budget());
        let (millis, keep, budget) = (millis.to_string(), keep.to_string(), budget.to_string());
        self.query::<()>(|conn| {
            // `PEXPIRE … GT` came with 7.0, as `SET … NX … GET` did.
            let gt: &[u8] = match conn.acquire_command() {
                AcquireCommand::SetNxGet => b"1",
                AcquireCommand::Script => b"0",
            };
            let args = [
                token.as_bytes(),
                millis.as_bytes(),
                keep.as_bytes(),
                budget.as_bytes(),
                gt,
            ];
            Call::script(&PUT_TOKEN, &[bucket, scope], &args)
        })
        .await
    }

    async fn consume_token(&self, scope: &Key, token: &Key) -> Result<bool, StoreError> {
        let tokens = &self.inner.tokens;
        if self.consume_in(tokens.keys(scope.as_str()), token).await? {
            return Ok(true);
        }
        // A token put before the buckets were placed is where that release put it; a token
        // is in one place or the other, so this spends it once as well.
        self.consume_in(tokens.earlier_keys(scope.as_str()), token)
            .await
    }

    async fn has_token(&self, scope: &Key, token: &Key) -> Result<bool, StoreError> {
        let tokens = &self.inner.tokens;
        let (_, placed) = tokens.keys(scope.as_str());
        let token = [token.as_str().as_bytes()];
        if self.flag(&HAS_TOKEN, &[&placed], &token).await? {
            return Ok(true);
        }
        let (_, earlier) = tokens.earlier_keys(scope.as_str());
        self.flag(&HAS_TOKEN, &[&earlier], &token).await
    }
}

impl RecordStore for RedisStore {
    async fn begin_record(
        &self,
        key: &Key,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, StoreError> {
        let replays = self.inner.replays.as_ref();
        if let Some(answer) = replays.and_then(|replays| replays.answer(key, fingerprint)) {
            return Ok(answer);
        }
        let record = self.key(key, Kind::Record);
        let begin = async {
            loop {
                let answer = match self.take_record(&record, owner, fingerprint, lease).await? {
                    Taken::Started => return Ok(Begin::Started),
                    Taken::Found(value) => {
                        self.answer_found(key, &record, value, fingerprint).await?
                    }
                    // Boxed: records of earlier versions are rare, and their future inline
                    // would size every begin's (`tests::an_operations_future_stays_small`).
                    Taken::Hash => Box::pin(self.answer_hash(key, &record, fingerprint)).await?,
                };
                // `None`: the record ended between two commands, and the key is free again.
                if let Some(answer) = answer {
                    return Ok(answer);
                }
            }
        };
        self.bounded(begin).await
    }

    async fn complete_record(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let record = self.key(key, Kind::Record);
        let millis = ttl_millis(retention).to_string();
        let (keys, args) = (
            [record.as_str()],
            [owner.as_str().as_bytes(), &response, millis.as_bytes()],
        );
        let complete = self.flag(&COMPLETE_RECORD, &keys, &args);
        self.replicated_if(&record, complete, |&completed| completed)
            .await
    }

    async fn renew_record(
        &self,
        key: &Key,
        owner: &Owner,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let record = self.key(key, Kind::Record);
        let millis = ttl_millis(lease).to_string();
        self.flag(
            &RENEW_RECORD,
            &[&record],
            &[owner.as_str().as_bytes(), millis.as_bytes()],
        )
        .await
    }

    async fn abandon_record(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let record = self.key(key, Kind::Record);
        self.flag(&ABANDON_RECORD, &[&record], &[owner.as_str().as_bytes()])
            .await
    }

    async fn record_state(&self, key: &Key) -> Result<Option<RecordState>, StoreError> {
        self.read_record_state(key).await
    }

    /// One `DEL`, which removes a record of either layout, waited for by the replicas the
    /// store was built to wait for. The process's copy of the record is dropped too; other
    /// processes' copies replay it until they end (see
    /// [`with_replay_cache`](crate::RedisStoreBuilder::with_replay_cache)).
    async fn remove_record(&self, key: &Key) -> Result<bool, StoreError> {
        self.delete_record(key).await
    }

    /// One script registers the waiter, atomically with seeing the record in progress
    /// (`wait_for_record.lua`); then it waits in `BLPOP` on a waiting connection, as a
    /// lock's waiter does, for at most the lease's time left (see
    /// [Waiting for a record](RedisStore#waiting-for-a-record)).
    async fn wait_for_record(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        self.wait_for_record_end(key, within).await
    }
}

#[cfg(test)]
mod tests {
    use idem_core::store::sharing_one_timer;

    use super::*;
    use crate::RedisServer;

    /// The futures of the operations a guarded request makes, which the guard holds inline
    /// (idem-axum calls a `RedisStore` without boxing), measured with `size_of_val` in a
    /// debug build: 576 bytes for a release, 1,048 for a begin. What is rare (opening a
    /// connection, loading a script, waiting for replicas, a record of an earlier
    /// version) is boxed apart, and no step is an `async fn` holding the future of the
    /// next twice; built on redis-rs's `ScriptInvocation` inside two such layers, with
    /// the connection opened inline, they took 1,760 and 7,528.
    #[tokio::test]
    async fn an_operations_future_stays_small() {
        let store = RedisStore::builder()
            .with_lazy_connect(true)
            .connect(RedisServer::url("redis://127.0.0.1:1"))
            .await
            .expect("a lazy store connects to nothing yet");
        let (key, owner) = (Key::hashed(["k"]), Owner::random());
        let fingerprint = Fingerprint::of(["f"]);
        let second = Duration::from_secs(1);
        let sizes = [
            size_of_val(&store.acquire(&key, &owner, second, Fencing::Off)),
            size_of_val(&store.release(&key, &owner)),
            size_of_val(&store.consume_token(&key, &key)),
            size_of_val(&store.put_token(&key, &key, second, 16)),
            size_of_val(&store.begin_record(&key, &owner, &fingerprint, second)),
            size_of_val(&store.complete_record(&key, &owner, Bytes::new(), second)),
            size_of_val(&store.abandon_record(&key, &owner)),
        ];
        let largest = sizes.into_iter().max().unwrap_or_default();
        assert!(
            largest <= 1100,
            "an operation's future grew to {largest} bytes: {sizes:?}"
        );
        let within = sharing_one_timer(store.release(&key, &owner));
        assert!(size_of_val(&within) <= largest + 64);
    }
}
