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
    /// `idem_wake`, which the store listens on, when a waiter is registered for the key.
    /// What no notification announces is found by this poll: a notification lost while the
    /// listener's connection was down, a registration lost with a crash of the database, a
    /// change made by an instance of a version that does not notify, or by a plain
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

/// Wakes the waiters of each row of `$rows` (which has the key as `key`): a `FROM` clause
/// that calls a function with the payload `<$topic>:<key>`, which notifies the listener's
/// channel, delivered when the statement's transaction commits, only when a waiter is
/// registered for that payload (see [`WAITERS`]). By default `idem_wake_changed`
/// (migration 4), for a statement that changed the row the waiters wait on, whose lock
/// orders it with their registrations; `idem_wake` (migration 3), which takes an advisory
/// lock for that, for a change of a row that waiters do not lock.
macro_rules! notify_each {
    ($rows:literal, $topic:literal) => {
        notify_each!($rows, $topic, "idem_wake_changed")
    };
    ($rows:literal, $topic:literal, $function:literal) => {
        concat!(
            " FROM ",
            $rows,
            " CROSS JOIN LATERAL (SELECT ",
            $function,
            "('",
            $topic,
            ":' || ",
            $rows,
            ".key)) AS woken"
        )
    };
}

/// Whether the row a waiter of `$1` (`l:<key>`, `r:<key>`) waits on in `$table` is absent,
/// or locked `FOR SHARE` by this statement: taken without waiting, so `false` while a
/// statement that changes the row holds it.
macro_rules! row_absent_or_shared {
    ($table:literal) => {
        concat!(
            "(SELECT count(*) FROM ",
            $table,
            " WHERE key = substr($1, 3)) = (SELECT count(*) FROM (SELECT FROM ",
            $table,
            " WHERE key = substr($1, 3) FOR SHARE SKIP LOCKED) AS shared)"
        )
    };
}

/// The advisory lock that orders a waiter's registration and `idem_wake`'s look at the
/// registrations: the class `hashtext('idem_wake')`, the payload's hash. `idem_wake` takes
/// it shared until its transaction ends; a registration tries to take it exclusively.
macro_rules! wake_lock {
    ($payload:literal) => {
        concat!("hashtext('idem_wake'), hashtext(", $payload, ")")
    };
}

/// The registry of waiters (the table `idem_waiters`, migration 3): the statements that
/// let waiters go notify only the payloads a waiter is registered for.
///
/// Why no waiter sleeps past the change it waits for, although the statement that makes
/// the change decides whether to notify before its transaction commits: a waiter
/// [subscribes](crate::wake::Waiters::subscribe) to the payload in its store, then
/// registers, then asks the database, and asks again when a notification wakes it. The
/// registration (committed asynchronously: a registration lost to a crash of the database
/// costs a fallback poll, as a lost notification does) is ordered with the statements that
/// look for it in one of two ways, and takes both:
///
/// - **The row waited on.** It locks the lock's or the record's row `FOR SHARE` until it
///   commits (or finds none), and the statements that change that row (a release, a
///   record completed, abandoned or removed) lock the row before their function,
///   `idem_wake_changed`, looks for registrations with a snapshot taken after (a
///   `VOLATILE` function's statement, in READ COMMITTED). So either the registration
///   committed before the change took the row, and the look sees it and notifies at the
///   commit, while the waiter's store listens already; or the change holds the row, the
///   registration skips it and does not register, and the waiter asks again.
/// - **An advisory lock** of its payload, taken exclusively, for the one change of a row
///   no waiter locks (a place given up in a fair lock's queue): that statement's
///   `idem_wake` takes the lock shared before it looks, so the two cannot overlap, and
///   whichever comes second sees the other's work.
///
/// The registration only *tries* both locks, so that a waiter never waits for a
/// transaction of the application's (around [`complete_record_in`](SqlStore::complete_record_in))
/// to end: when it fails, no row is inserted, and the waiter asks, then tries again after
/// [`RELEASE_POLL_INTERVAL`](idem_core::store::RELEASE_POLL_INTERVAL) (10 ms), polling as
/// a SQLite waiter does until it is registered. The fallback poll stays, for a notification
/// lost while the listener reconnects.
const WAITERS: WaiterStatements = WaiterStatements {
    register: concat!(
        "INSERT INTO idem_waiters (payload, waiter, expires_at)
        SELECT $1, $2, ",
        in_ms!("$3"),
        "
        WHERE pg_try_advisory_xact_lock(",
        wake_lock!("$1"),
        ")
            AND CASE left($1, 2) WHEN 'r:' THEN ",
        row_absent_or_shared!("idem_records"),
        " ELSE ",
        row_absent_or_shared!("idem_locks"),
        " END
            AND set_config('synchronous_commit', 'off', true) IS NOT NULL
        ON CONFLICT (payload, waiter) DO UPDATE SET expires_at = excluded.expires_at
        RETURNING true"
    ),
    unregister: "DELETE FROM idem_waiters WHERE payload = $1 AND waiter = $2
        AND set_config('synchronous_commit', 'off', true) IS NOT NULL",
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
                RETURNING key, expires_at > clock_timestamp() AS live)
            SELECT live",
            notify_each!("gone", $topic)
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
            " WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING key)
            SELECT true",
            notify_each!("done", "r")
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
                RETURNING key, expires_at > clock_timestamp() AS live)
            SELECT live",
            notify_each!("gone", "r")
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
            notify_each!("gone", "l", "idem_wake")
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
    fn the_statements_that_let_waiters_go_wake_the_registered_ones_on_the_listeners_channel() {
        let sql = &Postgres::STATEMENTS;
        let wakes = |statement: &str, function: &str| statement.contains(&format!("{function}('"));
        // The changes of a row its waiters lock look without an advisory lock.
        for statement in [
            sql.release_and_signal,
            sql.complete_record,
            sql.abandon_record,
            sql.remove_record,
        ] {
            assert!(wakes(statement, "idem_wake_changed"), "{statement}");
            assert!(!wakes(statement, "idem_wake"), "{statement}");
            assert!(!statement.contains("pg_notify"), "{statement}");
        }
        assert!(wakes(sql.give_up_place, "idem_wake"));
        // A plain release (the anti-repeat path) and a fair attempt taking its own place
        // out wake nobody.
        for statement in [sql.release, sql.leave_queue] {
            assert!(!statement.contains("idem_wake"), "{statement}");
        }
        // Both functions notify the channel the listener listens on; `idem_wake` takes the
        // lock a registration tries, `idem_wake_changed` none, and a registration locks the
        // row of either kind it waits on.
        let migration = |name: &str| {
            Postgres::MIGRATIONS
                .iter()
                .find(|migration| migration.name == name)
                .expect("the migration")
                .sql
        };
        let notify = format!("pg_notify('{}', $1)", listener::CHANNEL);
        let lock = wake_lock!("$1");
        let (waiters, changed) = (migration("idem_waiters"), migration("idem_wake_changed"));
        assert!(waiters.contains(&notify) && changed.contains(&notify));
        assert!(waiters.contains(&format!("pg_advisory_xact_lock_shared({lock})")));
        assert!(!changed.contains("pg_advisory"));
        let register = WAITERS.register;
        assert!(register.contains(&format!("pg_try_advisory_xact_lock({lock})")));
        for table in ["idem_records", "idem_locks"] {
            let shared = format!("FROM {table} WHERE key = substr($1, 3) FOR SHARE SKIP LOCKED");
            assert!(register.contains(&shared), "{register}");
        }
    }
}
