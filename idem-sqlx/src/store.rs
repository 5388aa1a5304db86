//! [`SqlStore`]: the [`Store`] operations as SQL statements, one database's each.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use idem_core::store::{Fencing, FencingToken, Turn};
use idem_core::store::{RELEASE_POLL_INTERVAL, bounded, ttl_millis};
use idem_core::{
    Acquire, Begin, FairStore, Fingerprint, Key, LockStore, Owner, RecordState, RecordStore,
    StoreError, TokenStore,
};
use sqlx::Pool;

use crate::backend::{Arg, InTurn, LockRow, On, RecordRow, SqlBackend, StateRow, is_timeout};
use crate::builder::{Settings, SqlStoreBuilder};
use crate::purge::{self, Purged};
use crate::task::Background;
use crate::wake::{Asked, Subscription, Topic, Waiters};

/// A [`Store`](idem_core::Store) in a SQL database, on an sqlx pool: `PostgresStore` (feature `postgres`)
/// or `SqliteStore` (feature `sqlite`).
///
/// Every operation is one statement, or (SQLite's `put_token`, and a fair lock's
/// `acquire_in_turn`) one short transaction; the [crate docs](crate) list them. Every operation, taking a connection from the pool
/// included, is cut off after the store's [timeout](SqlStoreBuilder::with_timeout)
/// (default 1 s) with [`StoreError::Timeout`]. Clones share the pool and the purge.
///
/// # Waiting
///
/// A waiter for a lock ([`wait_for_release`](idem_core::LockStore::wait_for_release)), a fair lock's
/// turn ([`wait_for_turn`](FairStore::wait_for_turn)) or a record in progress
/// ([`wait_for_record`](Self::wait_for_record)) asks the database whether what it waits
/// for has come, and asks again when woken:
///
/// - **PostgreSQL** wakes it: [`release_and_signal`](idem_core::LockStore::release_and_signal),
///   [`leave_queue`](FairStore::leave_queue), [`complete_record`](idem_core::RecordStore::complete_record)
///   (and [`complete_record_in`](Self::complete_record_in), at the commit) and
///   [`abandon_record`](idem_core::RecordStore::abandon_record) notify the channel `idem_wake` with the
///   key when a waiter flagged the row, and each store listens on it with one
///   connection of its own, started by its first wait and stopped with its last clone. A
///   waiter flags the lock or the record it waits on (its `waited` column) before it asks,
///   and the flag goes with the row: a change nobody waits for sends no notification, which
///   PostgreSQL would otherwise commit one at a time with every other notifying
///   transaction. Every waiter of this store on that key is woken and asks once; a fair
///   lock's waiters then see that only the head's turn has come. A waiter also asks every
///   [fallback poll](SqlStoreBuilder::with_fallback_poll) (default 500 ms), so that a
///   notification lost (the listener's connection was down and is being made again) or
///   never sent (a plain [`release`](idem_core::LockStore::release), an instance of an older version)
///   delays it by that much at most, and never past its deadline.
/// - **SQLite** has no notifications: a waiter asks every 10 ms
///   ([`RELEASE_POLL_INTERVAL`](idem_core::store::RELEASE_POLL_INTERVAL)), a read each,
///   for the changes other processes make. A record's waiter is also woken at once by a
///   [`complete_record`](idem_core::RecordStore::complete_record),
///   [`abandon_record`](idem_core::RecordStore::abandon_record) or
///   [`remove_record`](idem_core::RecordStore::remove_record) of the same store (or a
///   clone) in its own process. (On PostgreSQL these wake the process's own waiters in the
///   same way, ahead of the notification.)
pub struct SqlStore<DB: sqlx::Database> {
    inner: Arc<Inner<DB>>,
}

struct Inner<DB: sqlx::Database> {
    pool: Pool<DB>,
    settings: Settings,
    /// Started by the first operation, which runs on the runtime the purge needs; stopped
    /// when the last clone is dropped.
    purge: OnceLock<Option<Background>>,
    /// The operations waiting, by what they wait for.
    waiters: Arc<Waiters>,
    /// The task that wakes them on the database's notifications (PostgreSQL): started by
    /// the first wait, stopped when the last clone is dropped.
    listener: OnceLock<Option<Background>>,
}

impl<DB: sqlx::Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<DB: sqlx::Database> fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStore")
            .field("database", &DB::NAME)
            .field("pool", &self.inner.pool)
            .field("settings", &self.inner.settings)
            .finish()
    }
}

impl<DB: SqlBackend> SqlStore<DB> {
    /// A store on `pool` with the default settings. Run [`migrate`](Self::migrate) once
    /// (or the crate's SQL in your own migrations) before the first operation.
    ///
    /// ```no_run
    /// # #[cfg(feature = "sqlite")]
    /// # async fn example() -> Result<(), sqlx::Error> {
    /// let pool = sqlx::SqlitePool::connect("sqlite://idem.db").await?;
    /// let store = idem_sqlx::SqliteStore::new(pool);
    /// # Ok(()) }
    /// ```
    pub fn new(pool: Pool<DB>) -> Self {
        Self::builder().build(pool)
    }

    /// A builder for the timeout, the purge and the token capacity.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// let builder = idem_sqlx::SqliteStore::builder().with_token_capacity(100_000);
    /// # }
    /// ```
    pub fn builder() -> SqlStoreBuilder<DB> {
        SqlStoreBuilder::default()
    }

    pub(crate) fn with_settings(pool: Pool<DB>, settings: Settings) -> Self {
        Self {
            inner: Arc::new(Inner {
                pool,
                settings,
                purge: OnceLock::new(),
                waiters: Arc::default(),
                listener: OnceLock::new(),
            }),
        }
    }

    /// The pool the store runs its statements on.
    pub fn pool(&self) -> &Pool<DB> {
        &self.inner.pool
    }

    /// How long an operation may take.
    pub fn timeout(&self) -> Duration {
        self.inner.settings.timeout
    }

    /// Creates idem's tables (`idem_*`) if they are missing, and brings them up to date:
    /// the migrations this crate ships that the database has not seen yet run in one
    /// transaction, recorded in `idem_migrations`. Safe to call from every instance at
    /// every start; instances starting at once migrate one after the other. Not bounded by
    /// the store's timeout: creating a table may wait for a lock the application holds.
    ///
    /// An application that manages its schema itself may instead copy the files of the
    /// crate's `migrations/postgres` or `migrations/sqlite` folder into its own
    /// migrations, and never call this. (The crate keeps its own record rather than sqlx's
    /// `_sqlx_migrations`, which an application's own `sqlx::migrate!` would refuse to
    /// share with migrations it does not know.)
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] with the [`sqlx::Error`] when a statement fails.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        DB::migrate(&self.inner.pool)
            .await
            .map_err(StoreError::backend)
    }

    /// Deletes expired windows, locks, tokens and records, the lapsed places of fair
    /// locks' queues and (PostgreSQL) the expired registrations of waiters that earlier versions left, and evicts the oldest tokens past the
    /// [token capacity](SqlStoreBuilder::with_token_capacity): at most
    /// [`purge_batch`](SqlStoreBuilder::with_purge_batch) rows of each, one statement
    /// each, so a run's cost is bounded however much has piled up.
    ///
    /// The store runs this every [`purge_interval`](SqlStoreBuilder::with_purge_interval)
    /// by itself; call it yourself when that is off. An expired row counts as absent to
    /// every operation whether or not it was purged: purging only gives the space back.
    /// (A lapsed place is the one difference: one further back in its queue keeps its
    /// rank if its waiter comes back before the purge deletes it, as a
    /// [`FairStore`] allows.)
    ///
    /// # Errors
    ///
    /// [`StoreError`] when a statement fails or times out; the statements before it have
    /// taken effect.
    pub async fn purge(&self) -> Result<Purged, StoreError> {
        let sql = &DB::STATEMENTS;
        let settings = &self.inner.settings;
        let batch = [Arg::Int(settings.purge_batch)];
        let evict = [
            Arg::Int(settings.token_capacity),
            Arg::Int(settings.purge_batch),
        ];
        let mut deleted = [0; 5];
        let runs = [
            (sql.purge_locks, &batch[..]),
            (sql.purge_tokens, &batch),
            (sql.purge_records, &batch),
            (sql.evict_tokens, &evict),
            (sql.purge_queue, &batch),
        ];
        for (rows, (sql, args)) in deleted.iter_mut().zip(runs) {
            *rows = self
                .run("purge", DB::execute(&self.inner.pool, sql, args))
                .await?;
        }
        let waiters = match DB::WAITERS {
            Some(registry) => {
                let expired = DB::execute(&self.inner.pool, registry.purge, &batch);
                self.run("purge", expired).await?
            }
            None => 0,
        };
        let [locks, tokens, records, evicted_tokens, places] = deleted;
        Ok(Purged {
            locks,
            tokens,
            records,
            evicted_tokens,
            places,
            waiters,
        })
    }

    /// Completes the record `owner` began, inside the caller's own transaction (or on a
    /// connection of the caller's): the business write and the stored response commit
    /// together, or neither does.
    ///
    /// The same statement as [`RecordStore::complete_record`](idem_core::RecordStore::complete_record), with the same fencing: `true`
    /// only if the record is still in progress and still `owner`'s. On `false` another
    /// attempt owns the key now (this one's lease ran out): roll the transaction back, so
    /// the business write does not happen twice.
    ///
    /// Until the transaction ends, the record's row stays locked: a retry that arrives
    /// meanwhile waits for the commit or the rollback (at most its store's timeout), then
    /// sees the record completed, or still in progress. Keep the transaction short.
    ///
    /// It runs under the connection's own limits (such as PostgreSQL's
    /// `statement_timeout`), not the store's timeout: cutting a statement off half-way
    /// through the caller's transaction would leave that transaction in an unknown state.
    ///
    /// **Isolation.** In PostgreSQL's `REPEATABLE READ` or `SERIALIZABLE`, a transaction
    /// cannot update a row that changed after its snapshot: the record's row changes when
    /// its lease is renewed, and when a waiter (a retry of the same key that waits for it)
    /// flags it. The statement then fails with a serialization failure (SQLSTATE `40001`,
    /// the [`sqlx::Error`] of a [`StoreError::Backend`]); roll back and run the transaction
    /// again, as those levels ask of any transaction: the record is still `owner`'s, and
    /// the retry's completion commits. `READ COMMITTED`, PostgreSQL's default, waits for a
    /// concurrent change instead, and never fails this way.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] with the [`sqlx::Error`] when the statement fails; the
    /// transaction is then aborted (PostgreSQL) and must be rolled back.
    pub async fn complete_record_in(
        conn: &mut DB::Connection,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        complete::<DB>(On::Connection(conn), key, owner, &response, retention)
            .await
            .map_err(|error| store_error::<DB>(error, "complete_record_in", None))
    }

    /// Spends the one-time form token `token` of `scope` inside the caller's own
    /// transaction (or on a connection of the caller's), for a form submission whose
    /// token is spent with what it submits
    /// (`VerifyFormTokenLayer::with_spend_in_transaction` of `idem-axum`, whose
    /// `FormSubmission` gives the two keys).
    ///
    /// The same statement as [`TokenStore::consume_token`](idem_core::TokenStore::consume_token): `true` for exactly one caller per
    /// stored token. On `false` the token is gone (expired, pushed out by newer tokens of
    /// its scope, or spent): write nothing, and roll back. The token's row stays locked
    /// until the transaction ends, and a rollback leaves it unspent.
    ///
    /// Like [`complete_record_in`](Self::complete_record_in), it runs under the
    /// connection's own limits, not the store's timeout.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] with the [`sqlx::Error`] when the statement fails; the
    /// transaction is then aborted (PostgreSQL) and must be rolled back.
    pub async fn consume_token_in(
        conn: &mut DB::Connection,
        scope: &Key,
        token: &Key,
    ) -> Result<bool, StoreError> {
        let args = [Arg::Text(scope.as_str()), Arg::Text(token.as_str())];
        let row = DB::fetch::<(bool,)>(On::Connection(conn), DB::STATEMENTS.consume_token, &args);
        let live = row
            .await
            .map_err(|error| store_error::<DB>(error, "consume_token_in", None))?;
        Ok(live.is_some_and(|(live,)| live))
    }

    /// Waits until the idempotency record `key` is no longer in progress (it was
    /// completed, abandoned, or its lease ran out), or `within` has passed: `true` when
    /// it is no longer in progress (or there is none), `false` when the time ran out.
    ///
    /// For a request that found its key's record
    /// [in progress](idem_core::Begin::InProgress) and would rather wait for the first
    /// attempt's response than answer `409 Conflict`: wait at most the `remaining` lease
    /// the record reported, then call [`begin_record`](idem_core::RecordStore::begin_record) again, which
    /// answers the stored response, or starts the key afresh.
    ///
    /// The same as [`RecordStore::wait_for_record`](idem_core::RecordStore::wait_for_record),
    /// callable without the trait. On PostgreSQL the completion, abandonment or removal
    /// wakes it (see [Waiting](Self#waiting)); on SQLite one made in the same process
    /// wakes it, and it asks every 10 ms for those of other processes. It takes no
    /// connection while it sleeps.
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")]
    /// # async fn example(store: idem_sqlx::PostgresStore) -> Result<(), idem_core::StoreError> {
    /// use idem_core::{Begin, Fingerprint, Key, Owner, RecordStore};
    /// let (key, fingerprint) = (Key::hashed(["POST /orders", "key-7f3a"]), Fingerprint::of(["book"]));
    /// let lease = std::time::Duration::from_secs(30);
    /// let mut begun = store.begin_record(&key, &Owner::random(), &fingerprint, lease).await?;
    /// if let Begin::InProgress { remaining } = begun {
    ///     store.wait_for_record(&key, remaining).await?;
    ///     begun = store.begin_record(&key, &Owner::random(), &fingerprint, lease).await?;
    /// }
    /// # let _ = begun;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError`] when a question to the database fails or times out.
    pub async fn wait_for_record(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        let args = [Arg::Text(key.as_str())];
        let sql = DB::STATEMENTS.record_in_progress;
        self.wait_for(
            "wait_for_record",
            (Topic::Record, false),
            key,
            within,
            || async { Ok(self.flag("wait_for_record", sql, &args).await? == Some(false)) },
        )
        .await
    }

    /// Runs `op` under the store's timeout, and starts the purge on first use.
    async fn run<T>(
        &self,
        operation: &'static str,
        op: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, StoreError> {
        self.start_purge();
        let timeout = self.inner.settings.timeout;
        let op = async {
            op.await
                .map_err(|error| store_error::<DB>(error, operation, Some(timeout)))
        };
        bounded(timeout, op).await
    }

    /// Runs a statement that answers at most one boolean: whether it found a row, and
    /// what the row says.
    async fn flag(
        &self,
        operation: &'static str,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Option<bool>, StoreError> {
        let row = DB::fetch::<(bool,)>(&self.inner.pool, sql, args);
        Ok(self.run(operation, row).await?.map(|(flag,)| flag))
    }

    /// Deletes the row of `key` and `owner` with `sql` (`release` or
    /// `release_and_signal`): whether it was live.
    async fn release_with(
        &self,
        operation: &'static str,
        sql: &'static str,
        key: &Key,
        owner: &Owner,
    ) -> Result<bool, StoreError> {
        let args = [Arg::Text(key.as_str()), Arg::Text(owner.as_str())];
        Ok(self.flag(operation, sql, &args).await? == Some(true))
    }

    fn start_purge(&self) {
        self.inner.purge.get_or_init(|| {
            let every = self.inner.settings.purge_interval?;
            purge::spawn(Arc::downgrade(&self.inner), every, |inner| async move {
                Self { inner }.purge().await
            })
        });
    }

    /// A subscription to the notifications of `key` under `topic`, the store's listener
    /// started if it was not; `None` where the store has no listener (SQLite, or outside
    /// a Tokio runtime).
    fn subscribe(&self, topic: Topic, key: &Key) -> Option<Subscription> {
        let inner = &self.inner;
        let listener = inner
            .listener
            .get_or_init(|| DB::listen(&inner.pool, &inner.waiters));
        listener
            .as_ref()
            .map(|_| inner.waiters.subscribe(topic, key))
    }

    /// Asks `ready` until it answers `true` or `within` has passed: again on each
    /// notification of `key` under `topic` and every fallback period where the store
    /// listens, every [`RELEASE_POLL_INTERVAL`](idem_core::store::RELEASE_POLL_INTERVAL)
    /// where it does not.
    ///
    /// Where the database notifies only the rows a waiter flagged (PostgreSQL), the wait
    /// flags the row it waits on before its first question ([`WaiterStatements::register`]),
    /// and asks again after `RELEASE_POLL_INTERVAL` when it could not; once woken, it asks
    /// first, and flags only when what it waits for has not come. A lock's or a record's
    /// flag answers for the question too (it flags only a live row, what the question
    /// looks for); a fair lock's turn is asked after the flag. Why no change can slip
    /// between a flag and what comes after it is told with PostgreSQL's statements.
    /// `queued`: the waiter holds a place in the key's fair queue, which announces it when
    /// there is no row to flag.
    async fn wait_for<F, Fut>(
        &self,
        operation: &'static str,
        (topic, queued): (Topic, bool),
        key: &Key,
        within: Duration,
        mut ready: F,
    ) -> Result<bool, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, StoreError>>,
    {
        let Some(subscription) = self.subscribe(topic, key) else {
            // No listener (SQLite): woken by the changes of this process, and asking every
            // `RELEASE_POLL_INTERVAL` for those of others.
            let subscription = self.inner.waiters.subscribe(topic, key);
            return subscription
                .wait(RELEASE_POLL_INTERVAL, within, || {
                    let question = ready();
                    async move {
                        Ok(match question.await? {
                            true => Asked::Ready,
                            false => Asked::NotYet,
                        })
                    }
                })
                .await;
        };
        let fallback = self.inner.settings.fallback_poll;
        let payload = subscription.payload();
        // Whether the last question came after a flag that announced the waiter: then the
        // next one (woken, or at the fallback poll) asks first, and flags only when what it
        // waits for has not come, which a hand-off then pays no round trip for.
        let announced = &AtomicBool::new(false);
        let asked = subscription.wait(fallback, within, || {
            let woken = announced.swap(false, Ordering::Relaxed);
            // Made first, run in order; the first only after a flag.
            let (first, after_flag) = (ready(), ready());
            async move {
                if woken && first.await? {
                    return Ok(Asked::Ready);
                }
                let flagged = match DB::WAITERS {
                    Some(waiters) => {
                        let args = [Arg::Text(payload), Arg::Bool(queued)];
                        self.flag(operation, waiters.register, &args).await? == Some(true)
                    }
                    None => true,
                };
                announced.store(flagged, Ordering::Relaxed);
                // The flag of a lock's or a record's live row is itself the answer: the row
                // the question would find is there, and its change will be notified. Only a
                // fair lock's turn (the head of its queue) needs its own question.
                if flagged && !queued {
                    return Ok(Asked::NotYet);
                }
                Ok(match after_flag.await? {
                    true => Asked::Ready,
                    false if flagged => Asked::NotYet,
                    false => Asked::Unannounced,
                })
            }
        });
        asked.await
    }

    /// Claims with `claim`; when it was refused without saying by whom (or by a row that
    /// has expired since), reads the current row with `read`; when that finds none (it was
    /// released in between), claims again. The caller's timeout bounds the loop.
    async fn claim_or_read<R, CF, RF>(
        claim: impl Fn() -> CF,
        read: impl Fn() -> RF,
        answers: impl Fn(&R) -> bool,
    ) -> Result<R, sqlx::Error>
    where
        CF: Future<Output = Result<Option<R>, sqlx::Error>>,
        RF: Future<Output = Result<Option<R>, sqlx::Error>>,
    {
        loop {
            if let Some(row) = claim().await?.filter(&answers) {
                return Ok(row);
            }
            if let Some(row) = read().await? {
                return Ok(row);
            }
        }
    }
}

/// Runs `complete_record`'s statement on the pool or in a caller's transaction: whether it
/// completed the record.
async fn complete<DB: SqlBackend>(
    on: On<'_, DB>,
    key: &Key,
    owner: &Owner,
    response: &Bytes,
    retention: Duration,
) -> Result<bool, sqlx::Error> {
    let args = [
        Arg::Text(key.as_str()),
        Arg::Text(owner.as_str()),
        Arg::Bytes(response),
        Arg::Int(millis(retention)),
    ];
    let row = DB::fetch::<(bool,)>(on, DB::STATEMENTS.complete_record, &args);
    Ok(row.await?.is_some())
}

/// Runs `work`, a transaction, in a task of its own: the store's timeout stops waiting
/// for it, but never cancels it in the middle. sqlx (0.8.6, PostgreSQL) hands a connection
/// whose `BEGIN` was cancelled before its answer back to the pool still inside the
/// transaction that `BEGIN` opened, where the statements of every later operation on it
/// would run, uncommitted, holding their rows' locks, and lost when the connection ends.
/// Run to its end, the transaction commits or rolls back as it would have, and frees its
/// connection.
async fn to_the_end<T: Send + 'static>(
    work: impl Future<Output = Result<T, sqlx::Error>> + Send + 'static,
) -> Result<T, sqlx::Error> {
    match tokio::spawn(work).await {
        Ok(done) => done,
        Err(ended) if ended.is_panic() => std::panic::resume_unwind(ended.into_panic()),
        // The runtime is shutting down.
        Err(_) => Err(sqlx::Error::PoolClosed),
    }
}

/// An sqlx error as the store reports it: a wait the database gave up on is a timeout, an
/// answer that does not decode is unexpected, anything else the backend's own error.
fn store_error<DB: SqlBackend>(
    error: sqlx::Error,
    operation: &'static str,
    timeout: Option<Duration>,
) -> StoreError {
    match (&error, timeout) {
        (error, Some(timeout)) if is_timeout::<DB>(error) => StoreError::Timeout(timeout),
        (
            sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::Decode(_)
            | sqlx::Error::TypeNotFound { .. },
            _,
        ) => StoreError::unexpected(operation, error),
        _ => StoreError::backend(error),
    }
}

/// A TTL in whole milliseconds as every store keeps it, as the `BIGINT` the statements take.
fn millis(ttl: Duration) -> i64 {
    // At most a century of milliseconds, far below `i64::MAX`.
    i64::try_from(ttl_millis(ttl)).unwrap_or(i64::MAX)
}

/// Milliseconds left of a row the statement found live; `None` for an answer without them.
fn left(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(ms.max(1).unsigned_abs()))
}

fn fence(value: Option<i64>) -> Result<Option<FencingToken>, String> {
    value
        .map(|value| {
            u64::try_from(value)
                .map(FencingToken::new)
                .map_err(|_| format!("fencing token {value}"))
        })
        .transpose()
}

/// What a [`LockRow`] says to the caller `owner`; an answer it cannot read, as text.
fn acquired(
    (claimed, holder, remaining, drawn): LockRow,
    owner: &Owner,
    fencing: Fencing,
) -> Result<Acquire, String> {
    let fence = fence(drawn)?;
    if claimed {
        if fencing == Fencing::On && fence.is_none() {
            return Err("a fenced acquisition without a fencing token".to_owned());
        }
        return Ok(Acquire::Acquired { fence });
    }
    match (holder, left(remaining)) {
        (Some(holder), Some(remaining)) if holder == owner.as_str() => {
            Ok(Acquire::Reentered { remaining, fence })
        }
        (Some(_), Some(remaining)) => Ok(Acquire::Held { remaining }),
        row => Err(format!("{row:?}")),
    }
}

/// What a [`RecordRow`] says; an answer it cannot read, as text.
fn begun((started, same, response, remaining): RecordRow) -> Result<Begin, String> {
    if started {
        return Ok(Begin::Started);
    }
    match (same, response, left(remaining)) {
        (Some(false), _, _) => Ok(Begin::Mismatch),
        (Some(true), Some(response), _) => Ok(Begin::Completed {
            response: Bytes::from(response),
        }),
        (Some(true), None, Some(remaining)) => Ok(Begin::InProgress { remaining }),
        row => Err(format!("{row:?}")),
    }
}

/// What a [`StateRow`] says; a row it cannot read, given back.
fn state((fingerprint, response, remaining): StateRow) -> Result<RecordState, StateRow> {
    let Ok(bytes) = <[u8; 32]>::try_from(fingerprint.as_slice()) else {
        return Err((fingerprint, response, remaining));
    };
    let (fingerprint, remaining) = (Fingerprint::from_bytes(bytes), left(Some(remaining)));
    let remaining = remaining.unwrap_or_default();
    Ok(match response {
        None => RecordState::InProgress {
            fingerprint,
            remaining,
        },
        Some(response) => RecordState::Completed {
            fingerprint,
            response: Bytes::from(response),
            remaining,
        },
    })
}

/// Whether a row answers the operation: the caller claimed, or the row it met was live.
fn lock_answers((claimed, _, remaining, _): &LockRow) -> bool {
    *claimed || remaining.is_some_and(|ms| ms > 0)
}

/// What an [`InTurn`] says; an answer it cannot read, as text.
fn in_turn(answer: InTurn, fencing: Fencing) -> Result<Turn, String> {
    match answer {
        InTurn::Acquired(drawn) => {
            let fence = fence(drawn)?;
            if fencing == Fencing::On && fence.is_none() {
                return Err("a fenced acquisition without a fencing token".to_owned());
            }
            Ok(Turn::Acquired { fence })
        }
        InTurn::Reentered(remaining, drawn) => match left(remaining) {
            Some(remaining) => Ok(Turn::Reentered {
                remaining,
                fence: fence(drawn)?,
            }),
            None => Err(format!("{answer:?}")),
        },
        InTurn::Queued(next, remaining) => Ok(Turn::Queued {
            next,
            remaining: left(remaining),
        }),
    }
}

fn record_answers((started, _, _, remaining): &RecordRow) -> bool {
    *started || remaining.is_some_and(|ms| ms > 0)
}

impl<DB: SqlBackend> LockStore for SqlStore<DB> {
    async fn acquire(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Acquire, StoreError> {
        let (pool, sql) = (&self.inner.pool, &DB::STATEMENTS);
        let claim = [
            Arg::Text(key.as_str()),
            Arg::Text(owner.as_str()),
            Arg::Int(millis(ttl)),
            Arg::Bool(fencing == Fencing::On),
        ];
        let read = [Arg::Text(key.as_str())];
        let row = Self::claim_or_read(
            || DB::fetch::<LockRow>(pool, sql.acquire, &claim),
            || DB::fetch::<LockRow>(pool, sql.read_lock, &read),
            lock_answers,
        );
        acquired(self.run("acquire", row).await?, owner, fencing)
            .map_err(|answer| StoreError::unexpected("acquire", answer))
    }

    async fn release(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        self.release_with("release", DB::STATEMENTS.release, key, owner)
            .await
    }

    /// [`release`](idem_core::LockStore::release), and on PostgreSQL a notification that wakes the
    /// key's waiters, in every instance (see [Waiting](SqlStore#waiting)).
    async fn release_and_signal(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let sql = DB::STATEMENTS.release_and_signal;
        self.release_with("release_and_signal", sql, key, owner)
            .await
    }

    /// Asks whether `key` is free ([`remaining`](idem_core::LockStore::remaining)), and again on each
    /// notification of a release (PostgreSQL) or poll (see [Waiting](SqlStore#waiting)):
    /// every waiter sees a release, and the first to acquire takes the key. The default
    /// [`acquire_or_register_waiter`](idem_core::LockStore::acquire_or_register_waiter) suits it: the wait
    /// subscribes to notifications before it first asks, so none between the two is lost.
    async fn wait_for_release(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        self.wait_for(
            "wait_for_release",
            (Topic::Lock, false),
            key,
            within,
            || async { Ok(self.remaining(key).await?.is_none()) },
        )
        .await
    }

    async fn renew(&self, key: &Key, owner: &Owner, ttl: Duration) -> Result<bool, StoreError> {
        let args = [
            Arg::Text(key.as_str()),
            Arg::Text(owner.as_str()),
            Arg::Int(millis(ttl)),
        ];
        let renewed = self.flag("renew", DB::STATEMENTS.renew, &args).await?;
        Ok(renewed.is_some())
    }

    async fn remaining(&self, key: &Key) -> Result<Option<Duration>, StoreError> {
        let args = [Arg::Text(key.as_str())];
        let ms = DB::fetch::<(i64,)>(&self.inner.pool, DB::STATEMENTS.remaining, &args);
        Ok(left(self.run("remaining", ms).await?.map(|(ms,)| ms)))
    }
}

impl<DB: SqlBackend> TokenStore for SqlStore<DB> {
    async fn put_token(
        &self,
        scope: &Key,
        token: &Key,
        ttl: Duration,
        keep: usize,
    ) -> Result<(), StoreError> {
        let keep = i64::try_from(keep.max(1)).unwrap_or(i64::MAX);
        let args = [
            Arg::Text(scope.as_str()),
            Arg::Text(token.as_str()),
            Arg::Int(millis(ttl)),
            Arg::Int(keep),
        ];
        self.run("put_token", DB::put_token(&self.inner.pool, &args))
            .await
    }

    async fn consume_token(&self, scope: &Key, token: &Key) -> Result<bool, StoreError> {
        let args = [Arg::Text(scope.as_str()), Arg::Text(token.as_str())];
        let live = self
            .flag("consume_token", DB::STATEMENTS.consume_token, &args)
            .await?;
        Ok(live == Some(true))
    }

    async fn has_token(&self, scope: &Key, token: &Key) -> Result<bool, StoreError> {
        let args = [Arg::Text(scope.as_str()), Arg::Text(token.as_str())];
        let live = self
            .flag("has_token", DB::STATEMENTS.has_token, &args)
            .await?;
        Ok(live == Some(true))
    }
}

impl<DB: SqlBackend> RecordStore for SqlStore<DB> {
    async fn begin_record(
        &self,
        key: &Key,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, StoreError> {
        let (pool, sql) = (&self.inner.pool, &DB::STATEMENTS);
        let claim = [
            Arg::Text(key.as_str()),
            Arg::Bytes(fingerprint.as_bytes()),
            Arg::Text(owner.as_str()),
            Arg::Int(millis(lease)),
        ];
        let read = [Arg::Text(key.as_str()), Arg::Bytes(fingerprint.as_bytes())];
        let row = Self::claim_or_read(
            || DB::fetch::<RecordRow>(pool, sql.begin_record, &claim),
            || DB::fetch::<RecordRow>(pool, sql.read_record, &read),
            record_answers,
        );
        begun(self.run("begin_record", row).await?)
            .map_err(|answer| StoreError::unexpected("begin_record", answer))
    }

    async fn complete_record(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let pool = On::Pool(&self.inner.pool);
        let completed = complete(pool, key, owner, &response, retention);
        let completed = self.run("complete_record", completed).await?;
        if completed {
            self.inner.waiters.wake_here(Topic::Record, key);
        }
        Ok(completed)
    }

    async fn renew_record(
        &self,
        key: &Key,
        owner: &Owner,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let args = [
            Arg::Text(key.as_str()),
            Arg::Text(owner.as_str()),
            Arg::Int(millis(lease)),
        ];
        let renewed = self.flag("renew_record", DB::STATEMENTS.renew_record, &args);
        Ok(renewed.await?.is_some())
    }

    async fn abandon_record(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        let args = [Arg::Text(key.as_str()), Arg::Text(owner.as_str())];
        let live = self.flag("abandon_record", DB::STATEMENTS.abandon_record, &args);
        let abandoned = live.await? == Some(true);
        if abandoned {
            self.inner.waiters.wake_here(Topic::Record, key);
        }
        Ok(abandoned)
    }

    async fn record_state(&self, key: &Key) -> Result<Option<RecordState>, StoreError> {
        let args = [Arg::Text(key.as_str())];
        let row = DB::fetch::<StateRow>(&self.inner.pool, DB::STATEMENTS.record_state, &args);
        let Some(row) = self.run("record_state", row).await? else {
            return Ok(None);
        };
        state(row)
            .map(Some)
            .map_err(|row| StoreError::unexpected("record_state", row))
    }

    /// Deletes the record's row, whoever's, and wakes the record's waiters (see
    /// [Waiting](SqlStore#waiting)), as [`abandon_record`](RecordStore::abandon_record)
    /// does.
    async fn remove_record(&self, key: &Key) -> Result<bool, StoreError> {
        let args = [Arg::Text(key.as_str())];
        let live = self.flag("remove_record", DB::STATEMENTS.remove_record, &args);
        let removed = live.await? == Some(true);
        self.inner.waiters.wake_here(Topic::Record, key);
        Ok(removed)
    }

    /// [`SqlStore::wait_for_record`]: woken by the record's end (see
    /// [Waiting](SqlStore#waiting)).
    async fn wait_for_record(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        SqlStore::wait_for_record(self, key, within).await
    }
}

/// The fair lock's queue is the table `idem_queue`: one row per waiting owner, ranked by
/// the order the database saw them arrive, with when its place lapses. An attempt is one
/// transaction over the lock's row and its queue; a wait asks whether its turn has come,
/// and again when a release or a waiter giving up its place wakes it (PostgreSQL) or
/// polls (SQLite), as [`wait_for_release`](idem_core::LockStore::wait_for_release) does.
impl<DB: SqlBackend> FairStore for SqlStore<DB> {
    async fn acquire_in_turn(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        place: Option<Duration>,
    ) -> Result<Turn, StoreError> {
        let (pool, key, owner) = (
            self.inner.pool.clone(),
            key.as_str().to_owned(),
            owner.as_str().to_owned(),
        );
        let (ttl, fenced, place) = (millis(ttl), fencing == Fencing::On, place.map(millis));
        let attempt =
            async move { DB::acquire_in_turn(&pool, &key, &owner, ttl, fenced, place).await };
        // A transaction: it runs to its end whatever the timeout.
        let attempt = to_the_end(attempt);
        in_turn(self.run("acquire_in_turn", attempt).await?, fencing)
            .map_err(|answer| StoreError::unexpected("acquire_in_turn", answer))
    }

    /// Reads whether the lock is free and `owner`'s place is the first live one in its
    /// queue, or `owner` has no place (its next attempt queues it again); then again when
    /// a notification of the key wakes it (PostgreSQL), at the latest every fallback poll,
    /// or every [`RELEASE_POLL_INTERVAL`](idem_core::store::RELEASE_POLL_INTERVAL) (SQLite):
    /// see [Waiting](SqlStore#waiting). It writes nothing of the lock or its queue (on
    /// PostgreSQL only the flag of the lock's row that announces a waiter). Every waiter of the key reads
    /// once on a release, and only the head sees its turn, so a release still sends one
    /// waiter to the lock.
    async fn wait_for_turn(
        &self,
        key: &Key,
        owner: &Owner,
        within: Duration,
    ) -> Result<bool, StoreError> {
        let args = [Arg::Text(key.as_str()), Arg::Text(owner.as_str())];
        self.wait_for(
            "wait_for_turn",
            (Topic::Lock, true),
            key,
            within,
            || async {
                let turn = self.flag("wait_for_turn", DB::STATEMENTS.is_turn, &args);
                Ok(turn.await? == Some(true))
            },
        )
        .await
    }

    /// One `DELETE` of the owner's place (on PostgreSQL with a notification of the key).
    /// The turn passes on by itself: the next waiter's
    /// [`wait_for_turn`](FairStore::wait_for_turn) sees its place come to the head.
    async fn leave_queue(&self, key: &Key, owner: &Owner) -> Result<(), StoreError> {
        let args = [Arg::Text(key.as_str()), Arg::Text(owner.as_str())];
        let leave = DB::execute(&self.inner.pool, DB::STATEMENTS.give_up_place, &args);
        self.run("leave_queue", leave).await.map(drop)
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use idem_core::conformance::eventually;

    use super::*;
    use crate::SqliteStore;

    #[tokio::test]
    async fn the_purge_starts_with_the_first_operation_and_stops_with_the_last_clone() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::builder()
            .with_purge_interval(Some(Duration::from_millis(1)))
            .open(dir.path().join("idem.db"))
            .await
            .unwrap();
        assert!(
            store.inner.purge.get().is_none(),
            "not before the first operation"
        );
        store.migrate().await.unwrap();
        store.remaining(&Key::new("k").unwrap()).await.unwrap();
        let (weak, clone) = (Arc::downgrade(&store.inner), store.clone());
        drop(store);
        let running = |weak: &std::sync::Weak<Inner<sqlx::Sqlite>>| {
            weak.upgrade()
                .and_then(|inner| inner.purge.get()?.as_ref().map(|task| !task.is_finished()))
        };
        assert_eq!(running(&weak), Some(true), "a clone keeps it running");
        drop(clone);
        eventually(Duration::from_secs(5), "the store is dropped", || async {
            weak.upgrade().is_none()
        })
        .await;
    }

    #[test]
    fn rows_that_make_no_sense_are_unexpected_answers() {
        let owner = Owner::new("me").unwrap();
        for row in [
            (false, None, Some(5), None),
            (false, Some("me".to_owned()), None, None),
            (false, Some("me".to_owned()), Some(5), Some(-1)),
            (true, None, None, None),
        ] {
            assert!(
                acquired(row.clone(), &owner, Fencing::On).is_err(),
                "{row:?}"
            );
        }
        for row in [
            (false, None, None, Some(5)),
            (false, Some(true), None, None),
        ] {
            assert!(begun(row.clone()).is_err(), "{row:?}");
        }
        for answer in [
            InTurn::Acquired(None),
            InTurn::Acquired(Some(-1)),
            InTurn::Reentered(None, None),
            InTurn::Reentered(Some(5), Some(-1)),
        ] {
            assert!(in_turn(answer.clone(), Fencing::On).is_err(), "{answer:?}");
        }
    }
}
