//! [`PostgresStore`]: the statements in PostgreSQL's SQL.
//!
//! Times are `timestamptz`, read from the database's clock (`clock_timestamp()`), so
//! instances whose own clocks disagree still agree on what has expired. Fencing tokens come
//! from the sequence `idem_fence`. A refused `acquire` or `begin_record` reports the row it
//! met in the same statement (a data-modifying `WITH`), so a duplicate costs one statement
//! like a first request; only when that row changed under the statement (a concurrent
//! writer committed it after the statement's snapshot) does the store read it again. A fair
//! lock's attempt runs in a transaction that first takes an advisory lock on a hash of the
//! lock's name, so attempts on one lock run one after the other.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::backend::sealed::Dialect;
use crate::backend::{Migration, Statements, WaiterStatements, migrations};
use crate::builder::SqlStoreBuilder;
use crate::listener;
use crate::store::SqlStore;
use crate::task::Background;
use crate::wake::Waiters;

/// A [`SqlStore`] in PostgreSQL (feature `postgres`): the store for an application whose
/// business data is in PostgreSQL, so that a handler's business write and its idempotency
/// record commit together ([`complete_record_in`](SqlStore::complete_record_in)).
///
/// On a pool of the application's ([`build`](SqlStoreBuilder::build)), give its
/// connections a `statement_timeout` near the store's timeout, as
/// [`connect`](SqlStoreBuilder::connect) does: a statement the store gave up on (say,
/// one waiting for a lock) otherwise goes on in the database, and keeps its connection
/// busy, until it ends by itself.
///
/// ```no_run
/// use idem_sqlx::PostgresStore;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://shop@localhost/shop").await?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
pub type PostgresStore = SqlStore<Postgres>;

impl SqlStore<Postgres> {
    /// A store with the default settings on a pool of its own to `url`; see
    /// [`SqlStoreBuilder::connect`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), sqlx::Error> {
    /// let store = idem_sqlx::PostgresStore::connect("postgres://shop@localhost/shop").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The [`sqlx::Error`] when the URL cannot be read or no connection can be opened.
    pub async fn connect(url: &str) -> Result<Self, sqlx::Error> {
        Self::builder().connect(url).await
    }
}

impl SqlStoreBuilder<Postgres> {
    /// The store, on a pool of its own to `url` (`postgres://user:password@host/database`),
    /// with one connection opened now to check the URL. Each connection's
    /// `statement_timeout` is the store's timeout, so a statement the store gave up on does
    /// not go on running in the database either.
    ///
    /// To share the application's pool instead, use [`build`](Self::build).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), sqlx::Error> {
    /// let store = idem_sqlx::PostgresStore::builder()
    ///     .connect("postgres://shop@localhost/shop")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The [`sqlx::Error`] when the URL cannot be read or no connection can be opened.
    pub async fn connect(self, url: &str) -> Result<SqlStore<Postgres>, sqlx::Error> {
        let timeout = self.settings.timeout.as_millis().to_string();
        let options = PgConnectOptions::from_str(url)?.options([("statement_timeout", timeout)]);
        let pool = self.pool_options(PgPoolOptions::new());
        Ok(self.build(pool.connect_with(options).await?))
    }

    /// How often a waiter asks the database again when no notification woke it (default
    /// 500 ms; at least 1 ms): for a lock, a fair lock's turn or a record in progress.
    ///
    /// Waiters are woken by `NOTIFY`: the statements that release a lock, give up a place
    /// in a fair lock's queue, and complete or abandon a record notify the channel
    /// `idem_wake`, which the store listens on, when a waiter flagged the key's row.
    /// What no notification announces is found by this poll: a notification lost while the
    /// listener's connection was down, a flag lost with a crash of the database, a change
    /// made by an instance of another version (during a rolling upgrade from a version
    /// that kept its waiters in `idem_waiters`), or by a plain
    /// [`release`](idem_core::LockStore::release). (A lease running out is seen without it:
    /// waiters wait no longer than the lease they saw.) A longer period costs such a miss
    /// more; a shorter one costs the database a read per waiter per period.
    ///
    /// ```
    /// let builder = idem_sqlx::PostgresStore::builder()
    ///     .with_fallback_poll(std::time::Duration::from_secs(1));
    /// ```
    pub fn with_fallback_poll(mut self, every: Duration) -> Self {
        self.settings.fallback_poll = every.max(Duration::from_millis(1));
        self
    }
}

/// Milliseconds from the database's clock to `expires_at`, rounded up: at least 1 for a
/// row still live.
macro_rules! left_ms {
    () => {
        "ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint"
    };
}

/// Where the lock `$1` is read while it lasts.
macro_rules! live_lock {
    () => {
        " FROM idem_locks WHERE key = $1 AND expires_at > clock_timestamp()"
    };
}

/// A parameter's milliseconds from the database's clock.
macro_rules! in_ms {
    ($param:literal) => {
        concat!(
            "clock_timestamp() + ",
            $param,
            " * interval '1 millisecond'"
        )
    };
}

/// Notifies `<$topic>:<key>` for each row of `$rows` (which has the key as `key`) for
/// which `$when` holds: a `FROM` clause, on the listener's channel, delivered when the
/// statement's transaction commits. Each row is answered, notified or not.
macro_rules! notify_when {
    ($rows:literal, $topic:literal, $when:expr) => {
        concat!(
            " FROM ",
            $rows,
            " LEFT JOIN LATERAL (SELECT pg_notify('idem_wake', '",
            $topic,
            ":' || ",
            $rows,
            ".key) WHERE ",
            $when,
            ") AS woken ON true"
        )
    };
}

/// Notifies the rows of `$rows` that a waiter flagged (their `waited`, as the change
/// found it): see [`WAITERS`].
macro_rules! notify_flagged {
    ($rows:literal, $topic:literal) => {
        notify_when!($rows, $topic, concat!($rows, ".waited"))
    };
}

/// The row a waiter of `$1` (`l:<key>`, `r:<key>`) waits on in `$table`, with its flag,
/// if it is live (and `$live` holds), as the statement's snapshot has it.
macro_rules! waited_row {
    ($table:literal, $prefix:literal, $live:literal) => {
        concat!(
            "SELECT key, waited FROM ",
            $table,
            " WHERE key = substr($1, 3) AND left($1, 2) = '",
            $prefix,
            "' AND expires_at > clock_timestamp()",
            $live
        )
    };
}

/// Flags the row of [`waited_row!`] `waited`, unless it is already, or a statement that
/// changes it holds its lock (taken without waiting, `SKIP LOCKED`).
macro_rules! flag_row {
    ($table:literal, $prefix:literal, $live:literal) => {
        concat!(
            "UPDATE ",
            $table,
            " SET waited = true WHERE key IN (SELECT key FROM (",
            waited_row!($table, $prefix, $live),
            " AND NOT waited FOR NO KEY UPDATE SKIP LOCKED) AS free) RETURNING true"
        )
    };
}

/// Where a waiter announces itself (the column `waited` of the locks and the records,
/// migration 5): the statements that let waiters go notify only the rows a waiter flagged.
///
/// Why no waiter sleeps past the change it waits for, although the statement that makes
/// the change decides whether to notify before its transaction commits: a waiter
/// [subscribes](crate::wake::Waiters::subscribe) to the payload in its store, then flags
/// the live row it waits on (a lock, or a record in progress: the row its question looks
/// for, so a flagged row also answers "not yet"), and asks again when a notification wakes
/// it, flagging again only when what it waits for has not come. The flag and the change
/// are ordered by the row's own lock: the flag's `UPDATE` takes it without waiting (`SKIP
/// LOCKED`), and the statements that change the row (a release, a record completed,
/// abandoned or removed) take it before they read the flag they return. So either the flag
/// committed before the change took the row, and the change sees it and notifies at its
/// commit, while the waiter's store listens already; or the change holds the row, the flag
/// skips it, and the waiter asks again after
/// [`RELEASE_POLL_INTERVAL`](idem_core::store::RELEASE_POLL_INTERVAL) (10 ms) instead of
/// sleeping, until it can flag the row or sees the change. A row already flagged (by
/// another waiter) needs no write. The flag stays with the row: a lock's row goes with its
/// release, and a record's next change after its completion is rare.
///
/// A waiter finds no live row to flag when what it waits for has come (its question then
/// says so), or when it was taken again in between: it asks again shortly, and flags the
/// new row. A fair lock's waiter whose lock is free waits for the head of its queue instead:
/// its place in the queue announces it, since a fair attempt that takes the lock while
/// others hold places flags the lock's row itself, and a place given up notifies while
/// other places remain.
///
/// The flag's `UPDATE` commits asynchronously (a flag lost to a crash of the database
/// costs a fallback poll, as a lost notification does). The registry of earlier versions
/// (`idem_waiters`, its functions `idem_wake` and `idem_wake_changed`) is no longer
/// written nor read, only purged.
const WAITERS: WaiterStatements = WaiterStatements {
    register: concat!(
        "WITH live AS (",
        waited_row!("idem_locks", "l:", ""),
        " UNION ALL ",
        waited_row!("idem_records", "r:", " AND owner IS NOT NULL"),
        "), flagged AS (",
        flag_row!("idem_locks", "l:", ""),
        "), flagged_record AS (",
        flag_row!("idem_records", "r:", " AND owner IS NOT NULL"),
        ")
        SELECT CASE WHEN NOT EXISTS (SELECT FROM live) THEN $2
            ELSE NOT EXISTS (SELECT FROM live WHERE NOT waited)
                OR EXISTS (SELECT FROM flagged) OR EXISTS (SELECT FROM flagged_record) END
        WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL"
    ),
    flag_queued: "UPDATE idem_locks SET waited = true
        WHERE key = $1 AND NOT waited AND EXISTS (SELECT FROM idem_queue
            WHERE key = $1 AND owner <> $2 AND lapses_at > clock_timestamp())",
    purge: "DELETE FROM idem_waiters WHERE (payload, waiter) IN (
        SELECT payload, waiter FROM idem_waiters WHERE expires_at <= clock_timestamp()
        ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
};

/// `DELETE … RETURNING` the live flag of the row of key `$1` and owner `$2` in `$table`,
/// notifying its waiters under `$topic`.
macro_rules! delete_and_notify {
    ($table:literal, $topic:literal) => {
        concat!(
            "WITH gone AS (DELETE FROM ",
            $table,
            " WHERE key = $1 AND owner = $2
                RETURNING key, waited, expires_at > clock_timestamp() AS live)
            SELECT live",
            notify_flagged!("gone", $topic)
        )
    };
}

impl Dialect for Postgres {
    const STATEMENTS: Statements = Statements {
        acquire: concat!(
            "WITH claimed AS (
                INSERT INTO idem_locks AS held (key, owner, expires_at, fence)
                VALUES ($1, $2, ",
            in_ms!("$3"),
            ", CASE WHEN $4 THEN nextval('idem_fence') END)
                ON CONFLICT (key) DO UPDATE
                    SET owner = excluded.owner, expires_at = excluded.expires_at,
                        fence = excluded.fence
                    WHERE held.expires_at <= clock_timestamp()
                RETURNING fence
            )
            SELECT true, NULL::text, NULL::bigint, fence FROM claimed
            UNION ALL
            SELECT false, owner, ",
            left_ms!(),
            ", fence FROM idem_locks
            WHERE key = $1 AND expires_at > clock_timestamp()
                AND NOT EXISTS (SELECT FROM claimed)"
        ),
        read_lock: concat!("SELECT false, owner, ", left_ms!(), ", fence", live_lock!()),
        release: "DELETE FROM idem_locks WHERE key = $1 AND owner = $2
            RETURNING expires_at > clock_timestamp()",
        release_and_signal: delete_and_notify!("idem_locks", "l"),
        renew: concat!(
            "UPDATE idem_locks SET expires_at = ",
            in_ms!("$3"),
            " WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING true"
        ),
        remaining: concat!("SELECT ", left_ms!(), live_lock!()),
        put_token: &[concat!(
            "WITH put AS (
                INSERT INTO idem_tokens (scope, token, expires_at) VALUES ($1, $2, ",
            in_ms!("$3"),
            ")
                ON CONFLICT (scope, token) DO UPDATE
                    SET expires_at = excluded.expires_at, issued = excluded.issued
            )
            DELETE FROM idem_tokens
            WHERE scope = $1 AND token <> $2 AND issued <= (
                SELECT issued FROM idem_tokens WHERE scope = $1 AND token <> $2
                ORDER BY issued DESC OFFSET $4 - 1 LIMIT 1)"
        )],
        consume_token: "DELETE FROM idem_tokens WHERE scope = $1 AND token = $2
            RETURNING expires_at > clock_timestamp()",
        has_token: "SELECT expires_at > clock_timestamp() FROM idem_tokens
            WHERE scope = $1 AND token = $2",
        begin_record: concat!(
            "WITH claimed AS (
                INSERT INTO idem_records AS record (key, fingerprint, owner, expires_at)
                VALUES ($1, $2, $3, ",
            in_ms!("$4"),
            ")
                ON CONFLICT (key) DO UPDATE
                    SET fingerprint = excluded.fingerprint, owner = excluded.owner,
                        response = NULL, expires_at = excluded.expires_at
                    WHERE record.expires_at <= clock_timestamp()
                RETURNING true
            )
            SELECT true, NULL::boolean, NULL::bytea, NULL::bigint FROM claimed
            UNION ALL
            SELECT false, fingerprint = $2, CASE WHEN fingerprint = $2 THEN response END, ",
            left_ms!(),
            " FROM idem_records
            WHERE key = $1 AND expires_at > clock_timestamp()
                AND NOT EXISTS (SELECT FROM claimed)"
        ),
        read_record: concat!(
            "SELECT false, fingerprint = $2, CASE WHEN fingerprint = $2 THEN response END, ",
            left_ms!(),
            " FROM idem_records WHERE key = $1 AND expires_at > clock_timestamp()"
        ),
        complete_record: concat!(
            "WITH done AS (UPDATE idem_records SET owner = NULL, response = $3, expires_at = ",
            in_ms!("$4"),
            " WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
                RETURNING key, waited)
            SELECT true",
            notify_flagged!("done", "r")
        ),
        renew_record: concat!(
            "UPDATE idem_records SET expires_at = ",
            in_ms!("$3"),
            " WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING true"
        ),
        abandon_record: delete_and_notify!("idem_records", "r"),
        record_in_progress: "SELECT EXISTS (SELECT FROM idem_records
            WHERE key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp())",
        record_state: concat!(
            "SELECT fingerprint, response, ",
            left_ms!(),
            " FROM idem_records WHERE key = $1 AND expires_at > clock_timestamp()"
        ),
        remove_record: concat!(
            "WITH gone AS (DELETE FROM idem_records WHERE key = $1
                RETURNING key, waited, expires_at > clock_timestamp() AS live)
            SELECT live",
            notify_flagged!("gone", "r")
        ),
        // SKIP LOCKED: instances purging at once share the work instead of queueing, and
        // never wait on a row a request holds.
        purge_locks: "DELETE FROM idem_locks WHERE key IN (
            SELECT key FROM idem_locks WHERE expires_at <= clock_timestamp()
            ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        purge_tokens: "DELETE FROM idem_tokens WHERE (scope, token) IN (
            SELECT scope, token FROM idem_tokens WHERE expires_at <= clock_timestamp()
            ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        purge_records: "DELETE FROM idem_records WHERE key IN (
            SELECT key FROM idem_records WHERE expires_at <= clock_timestamp()
            ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        evict_tokens: "DELETE FROM idem_tokens WHERE (scope, token) IN (
            SELECT scope, token FROM idem_tokens
            WHERE issued <= (SELECT last_value FROM idem_token_issued) - $1
            ORDER BY issued LIMIT $2 FOR UPDATE SKIP LOCKED)",
        drop_lapsed_head: "DELETE FROM idem_queue
            WHERE key = $1 AND lapses_at <= clock_timestamp() AND arrival < coalesce(
                (SELECT min(arrival) FROM idem_queue
                WHERE key = $1 AND lapses_at > clock_timestamp()),
                9223372036854775807)",
        read_turn: concat!(
            "SELECT held.owner, ",
            left_ms!(),
            ", held.fence,
                (SELECT owner FROM idem_queue WHERE key = $1 ORDER BY arrival LIMIT 1)
            FROM (SELECT $1::text AS key) AS wanted
            LEFT JOIN idem_locks AS held
                ON held.key = wanted.key AND held.expires_at > clock_timestamp()"
        ),
        queue_place: concat!(
            "INSERT INTO idem_queue (key, owner, lapses_at) VALUES ($1, $2, ",
            in_ms!("$3"),
            ") ON CONFLICT (key, owner) DO UPDATE SET lapses_at = excluded.lapses_at"
        ),
        leave_queue: "DELETE FROM idem_queue WHERE key = $1 AND owner = $2",
        give_up_place: concat!(
            "WITH gone AS (DELETE FROM idem_queue WHERE key = $1 AND owner = $2 RETURNING key)
            SELECT true",
            notify_when!(
                "gone",
                "l",
                "EXISTS (SELECT FROM idem_queue AS behind WHERE behind.key = gone.key
                    AND behind.owner <> $2 AND behind.lapses_at > clock_timestamp())"
            )
        ),
        is_turn: "SELECT NOT EXISTS (SELECT 1 FROM idem_queue WHERE key = $1 AND owner = $2)
            OR (NOT EXISTS (
                    SELECT 1 FROM idem_locks WHERE key = $1 AND expires_at > clock_timestamp())
                AND NOT EXISTS (
                    SELECT 1 FROM idem_queue AS ahead
                    WHERE ahead.key = $1 AND ahead.lapses_at > clock_timestamp()
                        AND ahead.arrival < (
                            SELECT arrival FROM idem_queue WHERE key = $1 AND owner = $2)))",
        purge_queue: "DELETE FROM idem_queue WHERE (key, owner) IN (
            SELECT key, owner FROM idem_queue WHERE lapses_at <= clock_timestamp()
            ORDER BY lapses_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        create_migrations: "CREATE TABLE IF NOT EXISTS idem_migrations (
            version    bigint PRIMARY KEY,
            name       text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now())",
        applied_migrations: "SELECT version FROM idem_migrations",
        record_migration: "INSERT INTO idem_migrations (version, name) VALUES ($1, $2)",
    };

    const MIGRATIONS: &'static [Migration] = migrations!("postgres");

    const BEGIN_WRITE: &'static str = "BEGIN";

    const MIGRATION_LOCK: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(hashtext('idem_migrations'))");

    /// A transaction-scoped advisory lock on a hash of the lock's name (in a class of
    /// idem's own, the first key): fair attempts on one lock wait for each other, and
    /// attempts on other locks go on (two names with the same hash only share the wait).
    /// No row is locked, so it works for a lock that has no row yet.
    const QUEUE_LOCK: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(hashtext('idem_queue'), hashtext($1))");

    /// `query_canceled` (a `statement_timeout`) and `lock_not_available` (a
    /// `lock_timeout`).
    const TIMEOUT_CODES: &'static [&'static str] = &["57014", "55P03"];

    const WAITERS: Option<WaiterStatements> = Some(WAITERS);

    fn listen(pool: &sqlx::Pool<Self>, waiters: &Arc<Waiters>) -> Option<Background> {
        listener::spawn(pool, waiters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_that_let_waiters_go_notify_the_rows_a_waiter_flagged() {
        let sql = &Postgres::STATEMENTS;
        let notify = format!("pg_notify('{}', '", listener::CHANNEL);
        // The changes of a row its waiters flag notify when the row they changed was
        // flagged, with no function and no look elsewhere.
        for statement in [
            sql.release_and_signal,
            sql.complete_record,
            sql.abandon_record,
            sql.remove_record,
        ] {
            assert!(statement.contains(&notify), "{statement}");
            assert!(statement.contains("RETURNING key, waited"), "{statement}");
            assert!(
                statement.contains("WHERE gone.waited") || statement.contains("WHERE done.waited")
            );
            assert!(!statement.contains("idem_wake("), "{statement}");
            assert!(!statement.contains("idem_wake_changed"), "{statement}");
        }
        // A place given up notifies the places behind it.
        assert!(sql.give_up_place.contains(&notify));
        assert!(sql.give_up_place.contains("FROM idem_queue AS behind"));
        // A plain release (the anti-repeat path) and a fair attempt taking its own place
        // out wake nobody.
        for statement in [sql.release, sql.leave_queue] {
            assert!(!statement.contains("pg_notify"), "{statement}");
        }
        // A waiter flags the row of either kind it waits on, without waiting for its lock.
        let register = WAITERS.register;
        for table in ["idem_records", "idem_locks"] {
            assert!(register.contains(&format!("UPDATE {table} SET waited = true")));
        }
        assert_eq!(register.matches("FOR NO KEY UPDATE SKIP LOCKED").count(), 2);
        assert!(!register.contains("idem_waiters") && !register.contains("pg_advisory"));
    }
}
