//! [`SqliteStore`]: the statements in SQLite's SQL.
//!
//! Times are integer milliseconds since 1970 from SQLite's clock, read when a statement
//! runs: a database file is shared only by processes on one machine, so they share a
//! clock too, and a statement that waited for the write lock judges expiry by the time it
//! runs, not by the time it was queued. Fencing tokens come from the one-row table
//! `idem_fence`, moved up by a trigger in the statement that draws one.

use std::path::Path;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

use crate::backend::sealed::Dialect;
use crate::backend::{Migration, Statements, migrations};
use crate::builder::SqlStoreBuilder;
use crate::store::SqlStore;

/// A [`SqlStore`] in SQLite (feature `sqlite`): for an application that keeps its
/// business data in SQLite, on one machine.
///
/// SQLite lets one writer at a time into a database, and makes a second one wait (its busy
/// timeout) or fail. The store therefore writes through **one connection** of its own
/// ([`open`](SqlStoreBuilder::open)): concurrent operations of one process queue for it in
/// the pool, in order, instead of polling SQLite's lock; in WAL mode the application's own
/// connections keep reading meanwhile. Other processes on the same file (and the
/// application's writes) wait for the lock up to the store's timeout (SQLite's busy
/// timeout), and every statement that both reads and writes is one statement, or runs in a
/// `BEGIN IMMEDIATE` transaction, so no read decides a write that another writer can slip
/// in between.
///
/// ```
/// use std::time::Duration;
/// use idem_core::{Key, TokenStore};
/// use idem_sqlx::SqliteStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::open(dir.path().join("shop.db")).await?;
/// store.migrate().await?;
/// let (client, token) = (Key::hashed(["client-42"]), Key::hashed(["form-token", "t0k3n"]));
/// store.put_token(&client, &token, Duration::from_secs(600), 16).await?;
/// assert!(store.consume_token(&client, &token).await?);
/// # Ok(()) }
/// ```
pub type SqliteStore = SqlStore<Sqlite>;

impl SqlStore<Sqlite> {
    /// A store with the default settings on the database file at `path` (created if
    /// missing); see [`SqlStoreBuilder::open`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), sqlx::Error> {
    /// let store = idem_sqlx::SqliteStore::open("shop.db").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The [`sqlx::Error`] when the file cannot be opened or created.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, sqlx::Error> {
        Self::builder().open(path).await
    }
}

impl SqlStoreBuilder<Sqlite> {
    /// The store, on a pool of one connection of its own to the database file at `path`
    /// (created if missing), opened now: WAL journal mode, and a busy timeout equal to the
    /// store's timeout.
    ///
    /// To use a pool of your own instead, use [`build`](Self::build): give it WAL mode and a
    /// busy timeout, and preferably a single connection (see [`SqliteStore`]).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), sqlx::Error> {
    /// let store = idem_sqlx::SqliteStore::builder().open("shop.db").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The [`sqlx::Error`] when the file cannot be opened or created.
    ///
    /// Processes that open one new file at once contend for the switch to WAL, which
    /// SQLite answers `SQLITE_BUSY` without waiting out the busy timeout: `open` tries
    /// again, every 10 ms, until the store's timeout has passed.
    pub async fn open(self, path: impl AsRef<Path>) -> Result<SqlStore<Sqlite>, sqlx::Error> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(self.settings.timeout);
        let deadline = tokio::time::Instant::now() + self.settings.timeout;
        let pool = loop {
            let pool = self
                .pool_options(SqlitePoolOptions::new().max_connections(1))
                .connect_with(options.clone())
                .await;
            match pool {
                Err(error) if busy(&error) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                pool => break pool?,
            }
        };
        Ok(self.build(pool))
    }
}

/// Whether `error` is SQLite's `SQLITE_BUSY`, or one of its extended codes: another
/// connection holds the lock asked for.
fn busy(error: &sqlx::Error) -> bool {
    let code = error.as_database_error().and_then(|error| error.code());
    code.and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == 5)
}

/// SQLite's clock in milliseconds since 1970: `julianday` counts days (to the
/// millisecond) since noon of 24 November 4714 BC, and 1970 began 2440587.5 days later.
macro_rules! now_ms {
    () => {
        "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
    };
}

const RELEASE: &str = concat!(
    "DELETE FROM idem_locks WHERE key = $1 AND owner = $2 RETURNING expires_at > ",
    now_ms!()
);

const LEAVE_QUEUE: &str = "DELETE FROM idem_queue WHERE key = $1 AND owner = $2";

impl Dialect for Sqlite {
    const STATEMENTS: Statements = Statements {
        acquire: concat!(
            "INSERT INTO idem_locks (key, owner, expires_at, fence) VALUES ($1, $2, ",
            now_ms!(),
            " + $3, CASE WHEN $4 THEN (SELECT last + 1 FROM idem_fence) END)
            ON CONFLICT (key) DO UPDATE
                SET owner = excluded.owner, expires_at = excluded.expires_at,
                    fence = excluded.fence
                WHERE idem_locks.expires_at <= ",
            now_ms!(),
            " RETURNING true, NULL, NULL, fence"
        ),
        read_lock: concat!(
            "SELECT false, owner, expires_at - ",
            now_ms!(),
            ", fence FROM idem_locks WHERE key = $1 AND expires_at > ",
            now_ms!()
        ),
        release: RELEASE,
        // SQLite has no notifications: its waiters poll.
        release_and_signal: RELEASE,
        renew: concat!(
            "UPDATE idem_locks SET expires_at = ",
            now_ms!(),
            " + $3 WHERE key = $1 AND owner = $2 AND expires_at > ",
            now_ms!(),
            " RETURNING true"
        ),
        remaining: concat!(
            "SELECT expires_at - ",
            now_ms!(),
            " FROM idem_locks WHERE key = $1 AND expires_at > ",
            now_ms!()
        ),
        // Two statements (SQLite's `WITH` cannot hold a write), in one transaction.
        put_token: &[
            concat!(
                "REPLACE INTO idem_tokens (scope, token, expires_at) VALUES ($1, $2, ",
                now_ms!(),
                " + $3)"
            ),
            "DELETE FROM idem_tokens WHERE scope = $1 AND issued <= (
                SELECT issued FROM idem_tokens WHERE scope = $1
                ORDER BY issued DESC LIMIT 1 OFFSET $4)",
        ],
        consume_token: concat!(
            "DELETE FROM idem_tokens WHERE scope = $1 AND token = $2 RETURNING expires_at > ",
            now_ms!()
        ),
        has_token: concat!(
            "SELECT expires_at > ",
            now_ms!(),
            " FROM idem_tokens WHERE scope = $1 AND token = $2"
        ),
        begin_record: concat!(
            "INSERT INTO idem_records (key, fingerprint, owner, expires_at) VALUES ($1, $2, $3, ",
            now_ms!(),
            " + $4)
            ON CONFLICT (key) DO UPDATE
                SET fingerprint = excluded.fingerprint, owner = excluded.owner,
                    response = NULL, expires_at = excluded.expires_at
                WHERE idem_records.expires_at <= ",
            now_ms!(),
            " RETURNING true, NULL, NULL, NULL"
        ),
        read_record: concat!(
            "SELECT false, fingerprint = $2, CASE WHEN fingerprint = $2 THEN response END,
                expires_at - ",
            now_ms!(),
            " FROM idem_records WHERE key = $1 AND expires_at > ",
            now_ms!()
        ),
        complete_record: concat!(
            "UPDATE idem_records SET owner = NULL, response = $3, expires_at = ",
            now_ms!(),
            " + $4 WHERE key = $1 AND owner = $2 AND expires_at > ",
            now_ms!(),
            " RETURNING true"
        ),
        renew_record: concat!(
            "UPDATE idem_records SET expires_at = ",
            now_ms!(),
            " + $3 WHERE key = $1 AND owner = $2 AND expires_at > ",
            now_ms!(),
            " RETURNING true"
        ),
        abandon_record: concat!(
            "DELETE FROM idem_records WHERE key = $1 AND owner = $2 RETURNING expires_at > ",
            now_ms!()
        ),
        record_state: concat!(
            "SELECT fingerprint, response, expires_at - ",
            now_ms!(),
            " FROM idem_records WHERE key = $1 AND expires_at > ",
            now_ms!()
        ),
        remove_record: concat!(
            "DELETE FROM idem_records WHERE key = $1 RETURNING expires_at > ",
            now_ms!()
        ),
        record_in_progress: concat!(
            "SELECT EXISTS (SELECT 1 FROM idem_records
                WHERE key = $1 AND owner IS NOT NULL AND expires_at > ",
            now_ms!(),
            ")"
        ),
        purge_locks: concat!(
            "DELETE FROM idem_locks WHERE key IN (
                SELECT key FROM idem_locks WHERE expires_at <= ",
            now_ms!(),
            " ORDER BY expires_at LIMIT $1)"
        ),
        purge_tokens: concat!(
            "DELETE FROM idem_tokens WHERE issued IN (
                SELECT issued FROM idem_tokens WHERE expires_at <= ",
            now_ms!(),
            " ORDER BY expires_at LIMIT $1)"
        ),
        purge_records: concat!(
            "DELETE FROM idem_records WHERE key IN (
                SELECT key FROM idem_records WHERE expires_at <= ",
            now_ms!(),
            " ORDER BY expires_at LIMIT $1)"
        ),
        evict_tokens: "DELETE FROM idem_tokens WHERE issued IN (
            SELECT issued FROM idem_tokens
            WHERE issued <= (SELECT max(issued) FROM idem_tokens) - $1
            ORDER BY issued LIMIT $2)",
        // SQLite's clock counts whole milliseconds (it drops the rest), so a place counts
        // as lapsed only once the clock has passed `lapses_at`, never at it: it then lapses
        // no sooner than its lapse after it was renewed.
        drop_lapsed_head: concat!(
            "DELETE FROM idem_queue WHERE key = $1 AND lapses_at < ",
            now_ms!(),
            " AND arrival < coalesce(
                (SELECT min(arrival) FROM idem_queue WHERE key = $1 AND lapses_at >= ",
            now_ms!(),
            "), 9223372036854775807)"
        ),
        read_turn: concat!(
            "SELECT held.owner, held.expires_at - ",
            now_ms!(),
            ", held.fence,
                (SELECT owner FROM idem_queue WHERE key = $1 ORDER BY arrival LIMIT 1)
            FROM (SELECT $1 AS key) AS wanted
            LEFT JOIN idem_locks AS held
                ON held.key = wanted.key AND held.expires_at > ",
            now_ms!()
        ),
        queue_place: concat!(
            "INSERT INTO idem_queue (key, owner, lapses_at) VALUES ($1, $2, ",
            now_ms!(),
            " + $3) ON CONFLICT (key, owner) DO UPDATE SET lapses_at = excluded.lapses_at"
        ),
        leave_queue: LEAVE_QUEUE,
        give_up_place: LEAVE_QUEUE,
        is_turn: concat!(
            "SELECT NOT EXISTS (SELECT 1 FROM idem_queue WHERE key = $1 AND owner = $2)
            OR (NOT EXISTS (SELECT 1 FROM idem_locks WHERE key = $1 AND expires_at > ",
            now_ms!(),
            ") AND NOT EXISTS (
                    SELECT 1 FROM idem_queue AS ahead
                    WHERE ahead.key = $1 AND ahead.lapses_at >= ",
            now_ms!(),
            " AND ahead.arrival < (
                            SELECT arrival FROM idem_queue WHERE key = $1 AND owner = $2)))"
        ),
        purge_queue: concat!(
            "DELETE FROM idem_queue WHERE arrival IN (
                SELECT arrival FROM idem_queue WHERE lapses_at < ",
            now_ms!(),
            " ORDER BY lapses_at LIMIT $1)"
        ),
        create_migrations: "CREATE TABLE IF NOT EXISTS idem_migrations (
            version    INTEGER PRIMARY KEY,
            name       TEXT NOT NULL,
            applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
        applied_migrations: "SELECT version FROM idem_migrations",
        record_migration: "INSERT INTO idem_migrations (version, name) VALUES ($1, $2)",
    };

    const MIGRATIONS: &'static [Migration] = migrations!("sqlite");

    /// Takes the write lock at once: a deferred transaction that read first and then
    /// finds another writer committed meanwhile fails without waiting.
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";

    /// `BEGIN IMMEDIATE` already lets one migration at a time in.
    const MIGRATION_LOCK: Option<&'static str> = None;

    /// `BEGIN IMMEDIATE` already lets one fair attempt at a time in.
    const QUEUE_LOCK: Option<&'static str> = None;

    /// `SQLITE_BUSY` once the busy timeout has passed, and its variants for a database
    /// in recovery and a VFS that reports the timeout itself.
    const TIMEOUT_CODES: &'static [&'static str] = &["5", "261", "773"];
}
