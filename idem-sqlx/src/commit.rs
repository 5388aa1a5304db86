//! [`SqlStore::commit_with_record`]: a handler's transaction and its idempotency record,
//! committed as one.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use idem_core::{Key, Owner, StoreError};
use sqlx::Transaction;

use crate::backend::SqlBackend;
use crate::store::SqlStore;

/// Why [`SqlStore::commit_with_record`] did not commit. The transaction is rolled back (or,
/// for a commit that failed on its way to the database, in whatever state the database
/// left it: the writes and the record then committed together or not at all).
#[derive(Debug)]
#[non_exhaustive]
pub enum CommitError {
    /// The record is no longer this attempt's: its lease ran out and a retry began the key
    /// again. The transaction was rolled back, so the business writes did not happen; the
    /// retry's outcome is the request's. Answer so that the client asks again (idem's own
    /// answer to a retry while another attempt runs is `409 Conflict`).
    RecordLost,
    /// Completing the record or committing failed.
    Store(StoreError),
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::RecordLost => {
                "the idempotency record is no longer this attempt's (its lease ran out and a \
                 retry began the key again); the transaction was rolled back"
            }
            Self::Store(_) => "the transaction and its idempotency record could not be committed",
        })
    }
}

impl Error for CommitError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::RecordLost => None,
            Self::Store(error) => Some(error),
        }
    }
}

impl<DB: SqlBackend> SqlStore<DB> {
    /// Completes the record `owner` began with `response` inside `transaction`, and commits:
    /// the handler's writes and its stored response commit together, or neither does.
    ///
    /// [`complete_record_in`](Self::complete_record_in) and the commit, with the case where
    /// the record was lost turned into a rollback and [`CommitError::RecordLost`], so that
    /// no handler can commit its writes under a record another attempt now owns.
    /// In PostgreSQL's `REPEATABLE READ` and `SERIALIZABLE`, a transaction may have to be
    /// run again: see [Isolation](Self::complete_record_in).
    ///
    #[cfg_attr(feature = "sqlite", doc = "```")]
    #[cfg_attr(not(feature = "sqlite"), doc = "```ignore")]
    /// use std::time::Duration;
    /// use bytes::Bytes;
    /// use idem_core::{Begin, Fingerprint, Key, Owner, RecordStore};
    /// use idem_sqlx::{CommitError, SqliteStore, sqlx};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let file = dir.path().join("shop.db");
    /// # let store = SqliteStore::open(&file).await?;
    /// # store.migrate().await?;
    /// # let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", file.display())).await?;
    /// # sqlx::query("CREATE TABLE orders (item TEXT)").execute(&db).await?;
    /// # let (key, attempt) = (Key::hashed(["POST /orders", "key-7f3a"]), Owner::random());
    /// # store.begin_record(&key, &attempt, &Fingerprint::of(["book"]), Duration::from_secs(30)).await?;
    /// let mut tx = db.begin_with("BEGIN IMMEDIATE").await?;
    /// sqlx::query("INSERT INTO orders (item) VALUES ('book')").execute(&mut *tx).await?;
    /// let response = Bytes::from_static(b"201 Created: order 1");
    /// let retention = Duration::from_secs(24 * 3600);
    /// match SqliteStore::commit_with_record(tx, &key, &attempt, response, retention).await {
    ///     Ok(()) => {}                           // the order and its response, committed
    ///     Err(CommitError::RecordLost) => {}     // a retry owns the key: no order was made
    ///     Err(error) => return Err(error.into()), // the database failed: no order either
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Bounding it
    ///
    /// To bound the transaction's time (say, by the store's
    /// [`timeout`](Self::timeout)), stop *waiting* for it rather than dropping it: run it in
    /// a task of its own and put the timeout on the task's handle. sqlx (0.8.6, PostgreSQL)
    /// gives a connection whose `BEGIN` was cancelled before its answer back to the pool
    /// inside the transaction that `BEGIN` opened; the statements of whatever uses it next,
    /// the store's among them when it shares the pool, then run uncommitted.
    ///
    /// # Errors
    ///
    /// [`CommitError::RecordLost`] when the record is no longer `owner`'s (the transaction is
    /// rolled back); [`CommitError::Store`] when the completing statement or the commit
    /// fails.
    pub async fn commit_with_record(
        mut transaction: Transaction<'_, DB>,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> Result<(), CommitError> {
        let completed =
            Self::complete_record_in(&mut *transaction, key, owner, response, retention)
                .await
                .map_err(CommitError::Store)?;
        if !completed {
            // A failed rollback leaves the connection closed, which ends the transaction
            // all the same: what the caller must hear is that the record was lost.
            let _ = transaction.rollback().await;
            return Err(CommitError::RecordLost);
        }
        transaction
            .commit()
            .await
            .map_err(|error| CommitError::Store(StoreError::backend(error)))
    }
}
