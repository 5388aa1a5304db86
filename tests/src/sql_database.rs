//! A SQL database a test starts ([`PostgresBackend`], [`SqliteBackend`]), with what a test
//! needs to look at it from outside idem's store, as an application would: a pool of its
//! own, statements, counts.

use std::any::Any;
use std::future::Future;

use idem_sqlx::{PostgresStore, SqlBackend, SqlStore, SqlStoreBuilder, SqliteStore};
use sqlx::{Executor, FromRow, Pool, Postgres, Sqlite};

use crate::{Backend, PostgresBackend, SqliteBackend};

/// A database of one kind, with what a test needs to look at it from outside the store,
/// as the application would: with a pool of its own.
#[expect(
    async_fn_in_trait,
    reason = "the tests of this workspace await these futures where they are made"
)]
pub trait SqlDatabase: Backend<Store = SqlStore<Self::DB>> + Sized {
    /// The database sqlx speaks to.
    type DB: SqlBackend + Statements;

    /// Begins a transaction that writes, as an application does on this database.
    const BEGIN: &'static str;

    /// Locks idem's tables against writes, inside a transaction begun with
    /// [`BEGIN`](Self::BEGIN) (which is enough by itself in SQLite).
    const LOCK_TABLES: &'static str;

    /// The database's URL.
    fn url(&self) -> String;

    /// Another store (a pool of its own, as another instance would have) with the
    /// settings of `builder`, on this database, with the tables created.
    async fn store_with(&self, builder: SqlStoreBuilder<Self::DB>) -> SqlStore<Self::DB>;

    /// A pool of the application's own.
    async fn pool(&self) -> Pool<Self::DB> {
        Pool::connect(&self.url())
            .await
            .expect("the application's pool")
    }

    /// The rows of `table`.
    async fn count(&self, table: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        Self::DB::count(&self.pool().await, &sql)
            .await
            .expect("a count")
    }

    /// Runs `sql` on the application's pool.
    async fn execute(&self, sql: &str) {
        let pool = self.pool().await;
        Self::DB::execute(&pool, sql)
            .await
            .expect("the test's statement");
    }

    /// Holds a write lock on idem's tables, from a connection of its own, until dropped.
    async fn lock_tables(&self) -> Box<dyn Any + Send> {
        let mut tx = self
            .pool()
            .await
            .begin_with(Self::BEGIN)
            .await
            .expect("a transaction");
        Self::DB::execute_on(&mut tx, Self::LOCK_TABLES)
            .await
            .expect("the tables locked");
        Box::new(tx)
    }
}

/// Statements of the test's own, on any database sqlx runs them on.
pub trait Statements: sqlx::Database {
    /// The one integer `sql` answers.
    fn count<'a>(pool: &'a Pool<Self>, sql: &'a str) -> BoxFuture<'a, Result<i64, sqlx::Error>>;

    /// Runs `sql`, one statement or several.
    fn execute<'a>(pool: &'a Pool<Self>, sql: &'a str) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// Runs `sql` on a connection (in a transaction).
    fn execute_on<'a>(
        conn: &'a mut Self::Connection,
        sql: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;
}

impl<DB> Statements for DB
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    fn count<'a>(pool: &'a Pool<Self>, sql: &'a str) -> BoxFuture<'a, Result<i64, sqlx::Error>> {
        let row = pool.fetch_one(sqlx::raw_sql(sql));
        Box::pin(async move { <(i64,)>::from_row(&row.await?).map(|(count,)| count) })
    }

    fn execute<'a>(pool: &'a Pool<Self>, sql: &'a str) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        let done = pool.execute(sqlx::raw_sql(sql));
        Box::pin(async move { done.await.map(drop) })
    }

    fn execute_on<'a>(
        conn: &'a mut Self::Connection,
        sql: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        let done = conn.execute(sqlx::raw_sql(sql));
        Box::pin(async move { done.await.map(drop) })
    }
}

/// A boxed future, as [`Statements`] returns.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

impl SqlDatabase for PostgresBackend {
    type DB = Postgres;

    const BEGIN: &'static str = "BEGIN";

    const LOCK_TABLES: &'static str =
        "LOCK TABLE idem_locks, idem_tokens, idem_records IN ACCESS EXCLUSIVE MODE";

    fn url(&self) -> String {
        self.server.url()
    }

    async fn store_with(&self, builder: SqlStoreBuilder<Postgres>) -> PostgresStore {
        self.server.store_with(builder).await
    }
}

impl SqlDatabase for SqliteBackend {
    type DB = Sqlite;

    /// Takes the write lock at the start, so no other writer can slip in between the
    /// transaction's reads and its writes.
    const BEGIN: &'static str = "BEGIN IMMEDIATE";

    const LOCK_TABLES: &'static str = "SELECT 1";

    fn url(&self) -> String {
        format!("sqlite://{}", self.path().display())
    }

    async fn store_with(&self, builder: SqlStoreBuilder<Sqlite>) -> SqliteStore {
        let store = builder
            .open(self.path())
            .await
            .expect("a store on the file");
        store.migrate().await.expect("idem's tables");
        store
    }
}
