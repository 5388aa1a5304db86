//! What a [`SqlStore`](crate::SqlStore) needs from its database: the statements, in the
//! database's own SQL, and the few sqlx calls that run them.
//!
//! The control flow of every operation (claim, then report; loops; timeouts; the purge;
//! the migration runner) is written once, over [`SqlBackend`]; each database says only
//! what differs: its SQL, its timeout error codes, how a fair attempt keeps other attempts
//! on its lock out of its transaction, and whether it notifies waiters of changes.

use std::borrow::Cow;
use std::sync::Arc;

use self::sealed::{Dialect, Queries};
use crate::task::Background;
use crate::wake::Waiters;

/// A database a [`SqlStore`](crate::SqlStore) runs on: `sqlx::Postgres` (feature
/// `postgres`) and `sqlx::Sqlite` (feature `sqlite`).
///
/// Sealed: the store's correctness rests on each backend's statements, which live in this
/// crate.
pub trait SqlBackend: Dialect + Queries {}

impl<DB: Dialect + Queries> SqlBackend for DB {}

/// A row `acquire` and `read_lock` answer: whether the caller took
/// the key, else the holder, its milliseconds left and its fencing token.
pub(crate) type LockRow = (bool, Option<String>, Option<i64>, Option<i64>);

/// A row `begin_record` and `read_record` answer: whether the caller started the record,
/// else whether the fingerprint matches, the stored response (completed records with the
/// same fingerprint only) and the milliseconds left.
pub(crate) type RecordRow = (bool, Option<bool>, Option<Vec<u8>>, Option<i64>);

/// A row `record_state` answers: the fingerprint, the stored response (`NULL` in
/// progress) and the milliseconds left.
pub(crate) type StateRow = (Vec<u8>, Option<Vec<u8>>, i64);

/// A row `read_turn` answers: the live holder of the lock, its milliseconds left and its
/// fencing token (all `NULL` when the lock is free), and the owner at the head of its
/// queue (`NULL` when nobody waits).
pub(crate) type TurnRow = (Option<String>, Option<i64>, Option<i64>, Option<String>);

/// What one fair attempt found, as the database said it: the store reads the tokens and
/// milliseconds into a [`Turn`](idem_core::store::Turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InTurn {
    /// The caller took the lock; the fencing token drawn, if one was asked for.
    Acquired(Option<i64>),
    /// The caller already held the lock: its milliseconds left and its fencing token.
    Reentered(Option<i64>, Option<i64>),
    /// Someone else holds the lock or waits ahead: whether the caller is at the head of
    /// the queue, and the holder's milliseconds left (`None` when the lock is free).
    Queued(bool, Option<i64>),
}

/// Where a statement runs.
pub enum On<'a, DB: sqlx::Database> {
    /// On a connection of the store's pool.
    Pool(&'a sqlx::Pool<DB>),
    /// On a connection (in a transaction) of the caller's.
    Connection(&'a mut DB::Connection),
}

impl<DB: sqlx::Database> std::fmt::Debug for On<'_, DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pool(_) => "On::Pool",
            Self::Connection(_) => "On::Connection",
        })
    }
}

impl<'a, DB: sqlx::Database> From<&'a sqlx::Pool<DB>> for On<'a, DB> {
    fn from(pool: &'a sqlx::Pool<DB>) -> Self {
        Self::Pool(pool)
    }
}

/// A value bound to a statement's parameter (`$1`, `$2`, … in both dialects).
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// A key, an owner, a scope, a token.
    Text(&'a str),
    /// Milliseconds, counts.
    Int(i64),
    /// A switch.
    Bool(bool),
    /// A fingerprint, a response.
    Bytes(&'a [u8]),
}

/// The statements of one dialect. Parameters are listed as `$n name`; every statement
/// that answers a row answers the shape its `Queries` method reads.
#[derive(Debug)]
pub struct Statements {
    /// `$1 key, $2 owner, $3 ttl ms, $4 fenced` → a [`LockRow`]: claimed, or (PostgreSQL)
    /// the live row it met, or nothing.
    pub acquire: &'static str,
    /// `$1 key` → the live [`LockRow`], unclaimed.
    pub read_lock: &'static str,
    /// `$1 key, $2 owner` → whether the deleted row was live.
    pub release: &'static str,
    /// `$1 key, $2 owner` → [`release`](Self::release)'s row, and (PostgreSQL) a
    /// notification `l:<key>` to the key's waiters when a row was deleted.
    pub release_and_signal: &'static str,
    /// `$1 key, $2 owner, $3 ttl ms` → a row when renewed.
    pub renew: &'static str,
    /// `$1 key` → milliseconds left of the live row.
    pub remaining: &'static str,
    /// `$1 scope, $2 token, $3 ttl ms, $4 keep`: puts the token and lets the scope's
    /// tokens past the newest `keep` lapse; one statement, or several run in order in one
    /// write transaction.
    pub put_token: &'static [&'static str],
    /// `$1 scope, $2 token` → whether the deleted token was live.
    pub consume_token: &'static str,
    /// `$1 scope, $2 token` → whether the token is live.
    pub has_token: &'static str,
    /// `$1 key, $2 fingerprint, $3 owner, $4 lease ms` → a [`RecordRow`]: started, or
    /// (PostgreSQL) the live record it met, or nothing.
    pub begin_record: &'static str,
    /// `$1 key, $2 fingerprint` → the live [`RecordRow`], unstarted.
    pub read_record: &'static str,
    /// `$1 key, $2 owner, $3 response, $4 retention ms` → a row when completed; and
    /// (PostgreSQL) a notification `r:<key>` to the record's waiters, at the commit.
    pub complete_record: &'static str,
    /// `$1 key, $2 owner, $3 lease ms` → a row when renewed.
    pub renew_record: &'static str,
    /// `$1 key, $2 owner` → whether the deleted record was live and in progress; and
    /// (PostgreSQL) a notification `r:<key>` when a record was deleted.
    pub abandon_record: &'static str,
    /// `$1 key` → whether a live record in progress has the key.
    pub record_in_progress: &'static str,
    /// `$1 key` → a [`StateRow`] of the live record, unclaimed.
    pub record_state: &'static str,
    /// `$1 key` → whether the deleted record, whoever's, was live; and (PostgreSQL) a
    /// notification `r:<key>` when a record was deleted.
    pub remove_record: &'static str,
    /// `$1 batch`: deletes at most `batch` expired windows and locks.
    pub purge_locks: &'static str,
    /// `$1 batch`: deletes at most `batch` expired tokens.
    pub purge_tokens: &'static str,
    /// `$1 batch`: deletes at most `batch` expired records.
    pub purge_records: &'static str,
    /// `$1 capacity, $2 batch`: deletes at most `batch` of the tokens issued before the
    /// newest `capacity`.
    pub evict_tokens: &'static str,
    /// `$1 key`: deletes the lapsed places at the head of the key's queue, that is every
    /// lapsed place with no live one ahead of it.
    pub drop_lapsed_head: &'static str,
    /// `$1 key` → one [`TurnRow`].
    pub read_turn: &'static str,
    /// `$1 key, $2 owner, $3 lapse ms`: queues the owner at the back, or keeps its place,
    /// and sets the place to lapse that long from now.
    pub queue_place: &'static str,
    /// `$1 key, $2 owner`: deletes the owner's place, if it has one (inside a fair
    /// attempt that took the lock).
    pub leave_queue: &'static str,
    /// `$1 key, $2 owner`: [`leave_queue`](Self::leave_queue) for a waiter that gives up,
    /// and (PostgreSQL) a notification `l:<key>` when a place was deleted.
    pub give_up_place: &'static str,
    /// `$1 key, $2 owner` → whether the owner may try now: it has no place, or the lock
    /// is free and no live place ranks before the owner's. A read only.
    pub is_turn: &'static str,
    /// `$1 batch`: deletes at most `batch` lapsed places.
    pub purge_queue: &'static str,
    /// Creates the table of applied migrations, if missing.
    pub create_migrations: &'static str,
    /// → the applied migrations' versions.
    pub applied_migrations: &'static str,
    /// `$1 version, $2 name`.
    pub record_migration: &'static str,
}

/// The statements of waiters that announce themselves, where the database notifies them
/// (PostgreSQL): a waiter flags the row it waits on before it asks, so that the statements
/// that let waiters go notify only what somebody waits for (see [`Waiters`]).
#[derive(Debug)]
pub struct WaiterStatements {
    /// `$1 payload, $2 what to answer when no live row matches` → `true` when the waiter
    /// is announced: the live row it waits on is flagged (by this statement or before);
    /// `false` when a change of the row may be committing, and the waiter must ask again
    /// shortly instead.
    pub register: &'static str,
    /// `$1 key, $2 owner`, in a fair attempt's transaction that took the lock: flags the
    /// lock's row when other owners hold live places in its queue.
    pub flag_queued: &'static str,
    /// `$1 batch`: deletes at most `batch` expired rows of the registry of earlier
    /// versions.
    pub purge: &'static str,
}

/// One schema change the crate ships.
#[derive(Debug)]
pub struct Migration {
    /// Applied in increasing order, each once.
    pub version: i64,
    /// A name for people.
    pub name: &'static str,
    /// The statements.
    pub sql: &'static str,
}

/// The migrations a dialect ships, from `migrations/<dialect>/`: the same versions and
/// names on every database, each in the database's own SQL.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! migrations {
    ($dialect:literal) => {
        $crate::backend::migrations!($dialect:
            1 "idem_schema" "0001_idem_schema.sql",
            2 "idem_fair_queue" "0002_idem_fair_queue.sql",
            3 "idem_waiters" "0003_idem_waiters.sql",
            4 "idem_wake_changed" "0004_idem_wake_changed.sql",
            5 "idem_waited" "0005_idem_waited.sql",
        )
    };
    ($dialect:literal: $($version:literal $name:literal $file:literal,)*) => {
        &[$($crate::backend::Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../migrations/", $dialect, "/", $file)),
        },)*]
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use migrations;

pub(crate) mod sealed {
    use sqlx::{Database, Encode, Execute, Executor, FromRow, IntoArguments, Pool, Type};

    use super::{Arc, Arg, Background, InTurn, LockRow, Migration, On, RecordRow, StateRow};
    use super::{Statements, TurnRow, WaiterStatements, Waiters};

    /// A future the store can hold across an `.await` in its `Send` futures.
    pub(crate) type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

    /// What differs between databases.
    pub trait Dialect: Database + Sized {
        /// The statements.
        const STATEMENTS: Statements;
        /// The migrations, in order.
        const MIGRATIONS: &'static [Migration];
        /// Starts a transaction that writes: taking the write lock at once where the
        /// database would otherwise take it at the first write (SQLite).
        const BEGIN_WRITE: &'static str;
        /// Run first in the migration transaction, so that two instances starting at
        /// once migrate one after the other.
        const MIGRATION_LOCK: Option<&'static str>;
        /// `$1 key`, run first in a fair attempt's transaction, so that attempts on one
        /// lock run one after the other (PostgreSQL); `None` where beginning the
        /// transaction already does (SQLite's `BEGIN IMMEDIATE`).
        const QUEUE_LOCK: Option<&'static str>;
        /// Error codes that mean the database gave up waiting (a lock, a statement
        /// timeout), reported as [`idem_core::StoreError::Timeout`].
        const TIMEOUT_CODES: &'static [&'static str];
        /// How waiters announce themselves, where the database notifies them only when
        /// one waits (PostgreSQL); `None` where waiters poll (SQLite).
        const WAITERS: Option<WaiterStatements> = None;

        /// Starts the task that wakes `waiters` on the database's notifications of
        /// changes (see [`Waiters`]); `None` where the database sends none, and waiters
        /// poll (SQLite), or outside a Tokio runtime.
        fn listen(pool: &Pool<Self>, waiters: &Arc<Waiters>) -> Option<Background> {
            let _ = (pool, waiters);
            None
        }
    }

    /// Reads an `R` from a row of the database: for every row type the statements answer.
    pub trait Reads<R>: Database {
        /// The row, as an `R`.
        fn read(row: &Self::Row) -> Result<R, sqlx::Error>;
    }

    impl<DB: Database, R> Reads<R> for DB
    where
        for<'r> R: FromRow<'r, DB::Row>,
    {
        fn read(row: &DB::Row) -> Result<R, sqlx::Error> {
            R::from_row(row)
        }
    }

    /// Binds the [`Arg`]s of a statement that lives for `'q`: for every database whose
    /// driver encodes the four types an `Arg` holds. The one place those sqlx bounds are
    /// spelled out; code generic over the database asks for `Binds<'q>` (or
    /// `for<'q> Binds<'q>`) instead, which, unlike bounds on other types than the
    /// database, the compiler carries along.
    pub trait Binds<'q>: Database {
        /// `sql` with `args` bound to its parameters, in order, ready to run on any
        /// executor.
        fn statement(sql: &'q str, args: &'q [Arg<'q>]) -> impl Execute<'q, Self> + 'q;
    }

    impl<'q, DB> Binds<'q> for DB
    where
        DB: Database,
        DB::Arguments<'q>: IntoArguments<'q, DB>,
        &'q str: Encode<'q, DB> + Type<DB>,
        &'q [u8]: Encode<'q, DB> + Type<DB>,
        i64: Encode<'q, DB> + Type<DB>,
        bool: Encode<'q, DB> + Type<DB>,
    {
        fn statement(sql: &'q str, args: &'q [Arg<'q>]) -> impl Execute<'q, Self> + 'q {
            let mut query = sqlx::query(sql);
            for arg in args {
                query = match *arg {
                    Arg::Text(text) => query.bind(text),
                    Arg::Int(number) => query.bind(number),
                    Arg::Bool(switch) => query.bind(switch),
                    Arg::Bytes(bytes) => query.bind(bytes),
                };
            }
            query
        }
    }

    /// The sqlx calls the store makes, written once for every database whose driver
    /// encodes and decodes the types the statements use.
    pub trait Queries:
        Database
        + Sized
        + Reads<LockRow>
        + Reads<RecordRow>
        + Reads<StateRow>
        + Reads<TurnRow>
        + Reads<(bool,)>
        + Reads<(i64,)>
    {
        /// Runs a statement that answers at most one row, read as an `R`.
        fn fetch<'a, R: Send + 'a>(
            on: impl Into<On<'a, Self>>,
            sql: &'a str,
            args: &'a [Arg<'a>],
        ) -> BoxFuture<'a, Result<Option<R>, sqlx::Error>>
        where
            Self: Reads<R>;

        /// Runs a statement; the rows it changed.
        fn execute<'a>(
            pool: &'a Pool<Self>,
            sql: &'a str,
            args: &'a [Arg<'a>],
        ) -> BoxFuture<'a, Result<u64, sqlx::Error>>;

        /// Runs the [`put_token`](Statements::put_token) statements with `args`.
        fn put_token<'a>(
            pool: &'a Pool<Self>,
            args: &'a [Arg<'a>],
        ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

        /// Applies the migrations not applied yet, in one transaction.
        fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), sqlx::Error>>;

        /// [`FairStore::acquire_in_turn`](idem_core::FairStore::acquire_in_turn) in one
        /// transaction; `place_ms` is how long the caller's place lasts (`None`: it takes
        /// none).
        fn acquire_in_turn<'a>(
            pool: &'a Pool<Self>,
            key: &'a str,
            owner: &'a str,
            ttl_ms: i64,
            fenced: bool,
            place_ms: Option<i64>,
        ) -> BoxFuture<'a, Result<InTurn, sqlx::Error>>;
    }

    /// The rows a statement changed, which sqlx reports per database.
    pub trait RowsAffected {
        /// The rows changed.
        fn rows_affected(&self) -> u64;
    }

    #[cfg(feature = "postgres")]
    impl RowsAffected for sqlx::postgres::PgQueryResult {
        fn rows_affected(&self) -> u64 {
            self.rows_affected()
        }
    }

    #[cfg(feature = "sqlite")]
    impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
        fn rows_affected(&self) -> u64 {
            self.rows_affected()
        }
    }

    impl<DB> Queries for DB
    where
        DB: Dialect + for<'q> Binds<'q>,
        DB::QueryResult: RowsAffected,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        for<'r> LockRow: FromRow<'r, DB::Row>,
        for<'r> RecordRow: FromRow<'r, DB::Row>,
        for<'r> StateRow: FromRow<'r, DB::Row>,
        for<'r> TurnRow: FromRow<'r, DB::Row>,
        for<'r> (bool,): FromRow<'r, DB::Row>,
        for<'r> (i64,): FromRow<'r, DB::Row>,
    {
        fn fetch<'a, R: Send + 'a>(
            on: impl Into<On<'a, Self>>,
            sql: &'a str,
            args: &'a [Arg<'a>],
        ) -> BoxFuture<'a, Result<Option<R>, sqlx::Error>>
        where
            Self: Reads<R>,
        {
            match on.into() {
                On::Pool(pool) => fetch(pool, sql, args),
                On::Connection(conn) => fetch(conn, sql, args),
            }
        }

        fn execute<'a>(
            pool: &'a Pool<Self>,
            sql: &'a str,
            args: &'a [Arg<'a>],
        ) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
            let done = run(pool, sql, args);
            Box::pin(async move { Ok(done.await?.rows_affected()) })
        }

        fn put_token<'a>(
            pool: &'a Pool<Self>,
            args: &'a [Arg<'a>],
        ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
            Box::pin(async move {
                let [statement] = DB::STATEMENTS.put_token else {
                    let mut tx = pool.begin_with(DB::BEGIN_WRITE).await?;
                    for statement in DB::STATEMENTS.put_token {
                        run(&mut *tx, statement, args).await?;
                    }
                    return tx.commit().await;
                };
                run(pool, statement, args).await.map(drop)
            })
        }

        fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), sqlx::Error>> {
            // Each step is a future made outside this block: awaiting sqlx's generic
            // executor calls in here directly would not be provably `Send`.
            Box::pin(async move {
                let statements = &DB::STATEMENTS;
                let mut tx = pool.begin_with(DB::BEGIN_WRITE).await?;
                if let Some(lock) = DB::MIGRATION_LOCK {
                    raw(&mut *tx, lock).await?;
                }
                raw(&mut *tx, statements.create_migrations).await?;
                let applied = versions(&mut *tx, statements.applied_migrations).await?;
                for migration in DB::MIGRATIONS {
                    if applied.contains(&migration.version) {
                        continue;
                    }
                    raw(&mut *tx, migration.sql).await?;
                    let args = [Arg::Int(migration.version), Arg::Text(migration.name)];
                    run(&mut *tx, statements.record_migration, &args).await?;
                }
                tx.commit().await
            })
        }

        fn acquire_in_turn<'a>(
            pool: &'a Pool<Self>,
            key: &'a str,
            owner: &'a str,
            ttl_ms: i64,
            fenced: bool,
            place_ms: Option<i64>,
        ) -> BoxFuture<'a, Result<InTurn, sqlx::Error>> {
            Box::pin(async move {
                let sql = &DB::STATEMENTS;
                let (caller, key, owner) = (owner, Arg::Text(key), Arg::Text(owner));
                let (on_key, on_place) = ([key], [key, owner]);
                let claim = [key, owner, Arg::Int(ttl_ms), Arg::Bool(fenced)];
                // The steps below read, then write: the transaction makes them one step,
                // which the lock on the key's name (or SQLite's write lock) keeps other
                // attempts on the same lock out of.
                let mut tx = pool.begin_with(DB::BEGIN_WRITE).await?;
                if let Some(lock) = DB::QUEUE_LOCK {
                    run(&mut *tx, lock, &on_key).await?;
                }
                run(&mut *tx, sql.drop_lapsed_head, &on_key).await?;
                let (holder, mut remaining, fence, head): TurnRow =
                    fetch(&mut *tx, sql.read_turn, &on_key)
                        .await?
                        .ok_or(sqlx::Error::RowNotFound)?;
                if holder.as_deref() == Some(caller) {
                    tx.commit().await?;
                    return Ok(InTurn::Reentered(remaining, fence));
                }
                let at_head = head.as_deref() == Some(caller);
                if holder.is_none() && (head.is_none() || at_head) {
                    match claim_lock::<DB>(&mut tx, &claim, &on_key).await? {
                        Ok(drawn) => {
                            if at_head {
                                run(&mut *tx, sql.leave_queue, &on_place).await?;
                            }
                            // The places behind wait for this hold's release.
                            if let Some(waiters) = DB::WAITERS {
                                run(&mut *tx, waiters.flag_queued, &on_place).await?;
                            }
                            tx.commit().await?;
                            return Ok(InTurn::Acquired(drawn));
                        }
                        // Taken in between by a plain `acquire`, which the queue does not
                        // hold back: the caller queues behind that holder.
                        Err(left) => remaining = Some(left),
                    }
                }
                let next = match place_ms {
                    Some(lapse) => {
                        let args = [key, owner, Arg::Int(lapse)];
                        run(&mut *tx, sql.queue_place, &args).await?;
                        head.is_none() || at_head
                    }
                    None => at_head,
                };
                tx.commit().await?;
                Ok(InTurn::Queued(next, remaining))
            })
        }
    }

    /// `acquire`'s statement in a fair attempt's transaction, so the token is drawn as it
    /// draws one: the token drawn, or how long the lock stays held. A refusal that does not
    /// say by whom (or names a row that has expired since) is read again, and a read that
    /// finds none (released in between) claims again, as `acquire` does; the store's
    /// timeout bounds the loop.
    fn claim_lock<'a, DB: Dialect + Queries>(
        conn: &'a mut DB::Connection,
        claim: &'a [Arg<'a>],
        on_key: &'a [Arg<'a>],
    ) -> BoxFuture<'a, Result<Result<Option<i64>, i64>, sqlx::Error>> {
        Box::pin(async move {
            let sql = &DB::STATEMENTS;
            loop {
                let on = On::Connection(&mut *conn);
                let claimed: Option<LockRow> = DB::fetch(on, sql.acquire, claim).await?;
                match claimed {
                    Some((true, _, _, drawn)) => return Ok(Ok(drawn)),
                    Some((false, _, Some(left), _)) if left > 0 => return Ok(Err(left)),
                    _ => {}
                }
                let on = On::Connection(&mut *conn);
                let held: Option<LockRow> = DB::fetch(on, sql.read_lock, on_key).await?;
                if let Some((_, _, Some(left), _)) = held {
                    return Ok(Err(left));
                }
            }
        })
    }

    /// Runs `sql`, one statement or several, without parameters.
    fn raw<'a, DB, E>(executor: E, sql: &'a str) -> BoxFuture<'a, Result<(), sqlx::Error>>
    where
        DB: Database,
        E: Executor<'a, Database = DB>,
    {
        let done = executor.execute(sqlx::raw_sql(sql));
        Box::pin(async move { done.await.map(drop) })
    }

    /// The integers of the one-column rows `sql` answers.
    fn versions<'a, DB, E>(
        executor: E,
        sql: &'a str,
    ) -> BoxFuture<'a, Result<Vec<i64>, sqlx::Error>>
    where
        DB: Database,
        E: Executor<'a, Database = DB>,
        for<'r> (i64,): FromRow<'r, DB::Row>,
    {
        let rows = executor.fetch_all(sqlx::raw_sql(sql));
        Box::pin(async move {
            rows.await?
                .iter()
                .map(|row| <(i64,)>::from_row(row).map(|(version,)| version))
                .collect()
        })
    }

    /// Runs `sql` with `args` on `executor`.
    fn run<'a, DB, E>(
        executor: E,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> BoxFuture<'a, Result<DB::QueryResult, sqlx::Error>>
    where
        DB: Binds<'a>,
        E: Executor<'a, Database = DB>,
    {
        executor.execute(DB::statement(sql, args))
    }

    /// Runs `sql` with `args` on `executor` and reads its row, if any, as an `R`.
    fn fetch<'a, DB, E, R>(
        executor: E,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> BoxFuture<'a, Result<Option<R>, sqlx::Error>>
    where
        DB: Binds<'a> + Reads<R>,
        E: Executor<'a, Database = DB>,
        R: Send + 'a,
    {
        let row = executor.fetch_optional(DB::statement(sql, args));
        Box::pin(async move { row.await?.map(|row| DB::read(&row)).transpose() })
    }
}

/// Whether `error` means the database gave up waiting.
pub(crate) fn is_timeout<DB: SqlBackend>(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(error) => error
            .code()
            .is_some_and(|code: Cow<'_, str>| DB::TIMEOUT_CODES.contains(&&*code)),
        _ => false,
    }
}
