//! [`SqlStoreBuilder`]: the settings of a [`SqlStore`].

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use sqlx::pool::Pool;

use crate::backend::SqlBackend;
use crate::store::SqlStore;

/// The settings every [`SqlStore`] has.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) timeout: Duration,
    pub(crate) purge_interval: Option<Duration>,
    pub(crate) purge_batch: i64,
    pub(crate) token_capacity: i64,
    /// How often a waiter that listens for notifications (PostgreSQL) asks again without
    /// one.
    pub(crate) fallback_poll: Duration,
}

/// Settings for a [`SqlStore`]; made by [`SqlStore::builder`]
/// (`PostgresStore::builder()`, `SqliteStore::builder()`).
///
/// Waiters (for a lock, a fair lock's turn, a record in progress) are woken by
/// PostgreSQL's `NOTIFY`, and ask again at least every
/// [fallback poll](SqlStoreBuilder::with_fallback_poll) (PostgreSQL only); on SQLite,
/// which has no notifications, they poll every 10 ms
/// ([`RELEASE_POLL_INTERVAL`](idem_core::store::RELEASE_POLL_INTERVAL)).
pub struct SqlStoreBuilder<DB> {
    pub(crate) settings: Settings,
    database: PhantomData<fn() -> DB>,
}

impl<DB> Default for SqlStoreBuilder<DB> {
    fn default() -> Self {
        Self {
            settings: Settings {
                timeout: Duration::from_secs(1),
                purge_interval: Some(Duration::from_secs(1)),
                purge_batch: 1_000,
                token_capacity: 250_000,
                fallback_poll: Duration::from_millis(500),
            },
            database: PhantomData,
        }
    }
}

impl<DB> fmt::Debug for SqlStoreBuilder<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStoreBuilder")
            .field("settings", &self.settings)
            .finish()
    }
}

fn clamped(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

impl<DB: SqlBackend> SqlStoreBuilder<DB> {
    /// How long an operation may take, waiting for a connection from the pool included
    /// (default 1 s; at least 1 ms). Past it the operation fails with
    /// [`StoreError::Timeout`](idem_core::StoreError::Timeout).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// let builder = idem_sqlx::SqliteStore::builder().with_timeout(std::time::Duration::from_millis(500));
    /// # }
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How often the store purges expired rows by itself (default every second; at least
    /// every millisecond), or `None` to leave it to the application, which then calls
    /// [`SqlStore::purge`] itself (from a scheduled job, say).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// let builder = idem_sqlx::SqliteStore::builder().with_purge_interval(None);
    /// # }
    /// ```
    pub fn with_purge_interval(mut self, every: Option<Duration>) -> Self {
        self.settings.purge_interval = every.map(|every| every.max(Duration::from_millis(1)));
        self
    }

    /// The most rows of each table one purge run deletes (default 1,000; at least 1). A
    /// store whose keys expire faster than this per purge interval keeps expired rows for
    /// longer (they count as absent all the same); raise it, or the interval's rate.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// let builder = idem_sqlx::SqliteStore::builder().with_purge_batch(5_000);
    /// # }
    /// ```
    pub fn with_purge_batch(mut self, rows: usize) -> Self {
        self.settings.purge_batch = clamped(rows.max(1));
        self
    }

    /// The most one-time tokens kept (default 250,000): the purge evicts tokens issued
    /// before the newest this many, oldest first, so a flood of form pages costs its
    /// users a form reload and never grows the table without bound. Between two purge
    /// runs the table may pass it by what was issued meanwhile.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// let builder = idem_sqlx::SqliteStore::builder().with_token_capacity(100_000);
    /// # }
    /// ```
    pub fn with_token_capacity(mut self, tokens: usize) -> Self {
        self.settings.token_capacity = clamped(tokens);
        self
    }

    /// The store, on `pool`. The purge starts with the first operation.
    ///
    /// sqlx pings a pooled connection before handing it out unless the pool was built
    /// with `test_before_acquire(false)`: a second round trip for every operation, which
    /// the pools of `connect` (PostgreSQL) and `open` (SQLite) leave out.
    ///
    /// ```no_run
    /// # #[cfg(feature = "sqlite")]
    /// # async fn example() -> Result<(), sqlx::Error> {
    /// let pool = sqlx::SqlitePool::connect("sqlite://idem.db").await?;
    /// let store = idem_sqlx::SqliteStore::builder().build(pool);
    /// # Ok(()) }
    /// ```
    pub fn build(self, pool: Pool<DB>) -> SqlStore<DB> {
        SqlStore::with_settings(pool, self.settings)
    }

    /// `pool`, as the store's own pool is made: taking a connection waits no longer than
    /// the store's timeout.
    ///
    /// The pool does not ping a connection before handing it out (sqlx's default): that
    /// would cost every operation a second round trip. sqlx still checks each connection
    /// when it comes back, after the operation, and drops one that broke.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) fn pool_options(
        &self,
        pool: sqlx::pool::PoolOptions<DB>,
    ) -> sqlx::pool::PoolOptions<DB> {
        pool.acquire_timeout(self.settings.timeout)
            .test_before_acquire(false)
    }
}
