//! PostgreSQL and SQLite stores for [idem](https://github.com/idem-rs/idem), on sqlx: the
//! idempotency record lives in the application's own database, so a handler can commit
//! its business write and the stored response **in one transaction**.
//!
//! [`PostgresStore`] (feature `postgres`) and [`SqliteStore`] (feature `sqlite`) implement
//! [`idem_core::Store`], so every guard of idem runs on them (anti-repeat windows, one-time
//! form tokens, `Idempotency-Key` records, the distributed [`Lock`](idem_core::Lock)), and
//! [`idem_core::FairStore`], so a [`FairLock`](idem_core::FairLock) runs on them too; they
//! pass the same conformance suites as the memory and Redis stores. What they add is
//! [`commit_with_record`](SqlStore::commit_with_record): completing a record inside a
//! transaction of the caller's, and committing both
//! ([`complete_record_in`](SqlStore::complete_record_in) is the completing statement
//! alone).
//!
//! Why that matters: with a store apart from the business data, a handler commits its
//! order and *then* stores the response. A crash between the two leaves an order and a
//! record still in progress; when its lease runs out, the client's retry runs the handler
//! again, and the order is placed twice. In the same transaction, the order and the
//! stored response commit together or not at all: a retry finds either both (and gets the
//! stored response) or neither (and runs afresh).
//!

// On docs.rs, items behind a feature say which.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(feature = "sqlite", doc = "```")]
#![cfg_attr(not(feature = "sqlite"), doc = "```ignore")]
//! use std::time::Duration;
//! use bytes::Bytes;
//! use idem_core::{Begin, Fingerprint, Key, Owner, RecordStore};
//! use idem_sqlx::{SqliteStore, sqlx};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let file = dir.path().join("shop.db");
//! let store = SqliteStore::open(&file).await?;
//! store.migrate().await?; // idem's tables, beside the application's
//!
//! let shop = sqlx::SqlitePool::connect(&format!("sqlite://{}", file.display())).await?;
//! sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)").execute(&shop).await?;
//!
//! // A request with an idempotency key: begin its record.
//! let key = Key::hashed(["POST /orders", "client-42", "key-7f3a"]);
//! let fingerprint = Fingerprint::of(["POST", "/orders", r#"{"item":"book"}"#]);
//! let (attempt, lease) = (Owner::random(), Duration::from_secs(30));
//! assert_eq!(store.begin_record(&key, &attempt, &fingerprint, lease).await?, Begin::Started);
//!
//! // The handler: the order and the stored response in one transaction. Were the record
//! // lost (its lease ran out, a retry began the key), the order would be rolled back.
//! let response = Bytes::from_static(b"201 Created: order 1");
//! let mut tx = shop.begin_with("BEGIN IMMEDIATE").await?;
//! sqlx::query("INSERT INTO orders (item) VALUES ('book')").execute(&mut *tx).await?;
//! let retention = Duration::from_secs(24 * 3600);
//! SqliteStore::commit_with_record(tx, &key, &attempt, response.clone(), retention).await?;
//!
//! // The client retries: it gets the stored response, and there is one order.
//! let retry = store.begin_record(&key, &Owner::random(), &fingerprint, lease).await?;
//! assert_eq!(retry, Begin::Completed { response });
//! let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders").fetch_one(&shop).await?;
//! assert_eq!(orders, 1);
//! # Ok(()) }
//! ```
//!
//! # Which store
//!
//! | store | for | a decision costs | a crash after the business commit, before the response is stored |
//! |---|---|---|---|
//! | `MemoryStore` (idem-core) | one process | a mutex | the record dies with the process: a retry runs the handler again |
//! | `RedisStore` (idem-redis) | many instances, guards in the sub-millisecond | one Redis round trip | the record stays in progress; once its lease runs out a retry runs the handler again |
//! | [`PostgresStore`], [`SqliteStore`] | exactly-once with the business data | one SQL statement (see the table below), a write to the database's log | cannot happen: the record commits with the writes ([`commit_with_record`](SqlStore::commit_with_record)), and a retry replays the stored response |
//!
//! Every store makes each decision atomically and fences completion; what sets the SQL
//! stores apart is only that last column. `BENCHMARKS.md` in the repository counts it: a
//! server killed right after its commit, then retried, ran the handler twice on every
//! crash with the records in Redis and never with them in SQLite.
//!
//! With idem-axum, a handler behind `IdempotencyLayer` takes the record the layer began
//! (`IdempotencyRecord`) and commits it with its writes; the layer, on a runtime whose
//! store is this one, then finds the record completed and leaves it:
//!
//! ```rust,ignore
//! async fn create_order(State(db): State<SqlitePool>, record: IdempotencyRecord, Json(order): Json<NewOrder>)
//!     -> Result<Response, AppError> {
//!     let mut tx = db.begin_with("BEGIN IMMEDIATE").await?;
//!     let id = insert_order(&mut tx, &order).await?;
//!     let (stored, response) = record.stored_response((StatusCode::CREATED, Json(id))).await?;
//!     SqliteStore::commit_with_record(tx, record.key(), record.owner(), stored, record.retention()).await?;
//!     Ok(response)
//! }
//! ```
//!
//! # What this store guarantees, and what it does not
//!
//! - **One decision, one atomic statement.** Every "first or repeat" decision is one
//!   statement (`INSERT … ON CONFLICT … DO UPDATE … WHERE <expired>`, `DELETE …
//!   RETURNING`, `UPDATE … WHERE owner = $2 RETURNING`): the primary key and the row lock
//!   make it atomic, never a read that decides a later write. A thousand concurrent
//!   acquires, from one pool or from several instances' pools, have one winner. A fair
//!   lock's attempt, which must read its queue before it writes, is the one exception: a
//!   short transaction that the other attempts on that lock wait for.
//! - **Exactly-once with the business data**, where the memory and Redis stores cannot
//!   give it: a record completed with
//!   [`complete_record_in`](SqlStore::complete_record_in) commits with the handler's own
//!   writes. Fenced like [`complete_record`](idem_core::RecordStore::complete_record): an
//!   attempt whose lease ran out (and whose key another attempt began) gets `false` and
//!   rolls back. What it does not do: make a handler's calls to *other* systems (a payment
//!   provider, an email) happen once; pass those an idempotency key of their own.
//! - **Durable as the database is.** A window, token, record or lock is a row: it
//!   survives a restart of the application and of the database (PostgreSQL with its
//!   default `fsync`; SQLite with the application's `synchronous` setting), unlike the
//!   memory store, and unlike a Redis without persistence.
//! - **Clocks.** PostgreSQL compares expiry with the database's clock
//!   (`clock_timestamp()`), so instances whose clocks are skewed still agree on what has
//!   expired. SQLite uses its own clock (the machine's, which every process on the file
//!   shares), read when the statement runs.
//! - **Slower than Redis**, by design: each decision is a statement in a database that
//!   writes its log; `BENCHMARKS.md` in the repository has the figures, next to a bare
//!   `INSERT` on the same database. Use it where a record must commit with the data, or
//!   where the database is the only shared thing the instances have.
//! - **Waiters are woken on PostgreSQL, and poll on SQLite.** A waiter for a lock
//!   ([`wait_for_release`](idem_core::LockStore::wait_for_release)), a
//!   [`FairLock`](idem_core::FairLock)'s turn or a record in progress
//!   ([`wait_for_record`](SqlStore::wait_for_record)) asks the database, and asks again
//!   when woken. On PostgreSQL the statements that release a lock
//!   ([`release_and_signal`](idem_core::LockStore::release_and_signal), which a `Lock`'s
//!   release runs), give up a place in a fair lock's queue, and complete or abandon a
//!   record also `NOTIFY` the channel `idem_wake` with the key, **when a waiter flagged
//!   the row**: a waiter sets the `waited` column of the lock or the record it waits on
//!   before it asks, and the change reads the flag from its own `RETURNING`. PostgreSQL
//!   commits the transactions that notify one at a time, so a notification nobody waits
//!   for would slow every other commit; without waiters these statements cost what a
//!   plain `DELETE` or `UPDATE` does. Each
//!   store listens on the channel with one connection of its own (outside its pool), so a
//!   release in one instance wakes the waiters of every instance within a round trip. A
//!   waiter also asks every [fallback poll](SqlStoreBuilder::with_fallback_poll) (default
//!   500 ms), so that a notification lost while the listener reconnects, or never sent,
//!   costs at most that.
//!   SQLite has no notifications: its waiters ask every 10 ms
//!   ([`RELEASE_POLL_INTERVAL`](idem_core::store::RELEASE_POLL_INTERVAL)), a `SELECT`
//!   each. See [Waiting](SqlStore#waiting), and `BENCHMARKS.md` in the repository for the
//!   hand-off latency either way.
//! - **No request waits longer than the timeout.** Every operation, taking a connection
//!   from the pool included, is cut off after the store's
//!   [timeout](SqlStoreBuilder::with_timeout) (default 1 s) with
//!   [`StoreError::Timeout`](idem_core::StoreError::Timeout), as is a database that
//!   gives up waiting itself (a PostgreSQL `statement_timeout` or `lock_timeout`, SQLite's
//!   busy timeout). Other failures are
//!   [`StoreError::Backend`](idem_core::StoreError::Backend) with the [`sqlx::Error`] as
//!   its typed source, and a row the store cannot read is
//!   [`StoreError::UnexpectedAnswer`](idem_core::StoreError::UnexpectedAnswer), never a
//!   panic. A fair lock's attempt, which is a transaction, is never cut off in the
//!   middle: its caller stops waiting at the timeout, and the transaction runs to its end
//!   in a task of its own (sqlx would otherwise give its connection back to the pool
//!   inside the transaction its cancelled `BEGIN` opened). A transaction of the
//!   application's around [`commit_with_record`](SqlStore::commit_with_record) needs the
//!   same care (see there).
//!
//! # Schema
//!
//! Everything is prefixed `idem_`: the tables `idem_locks` (windows and locks),
//! `idem_tokens`, `idem_records`, `idem_queue` (the fair locks' waiters) and
//! `idem_migrations` (which migrations ran), and for fencing tokens PostgreSQL's sequence
//! `idem_fence` (and `idem_token_issued`, which orders tokens, and `idem_queue_arrival`,
//! which orders waiters) or SQLite's one-row table `idem_fence` with the two triggers that
//! move it. On PostgreSQL, the locks' and records' column `waited` is set by a waiter, so
//! that a change notifies only when somebody waits for it; the table `idem_waiters` and
//! the functions `idem_wake` and `idem_wake_changed` are where earlier versions kept
//! their waiters, which this one only purges. [`SqlStore::migrate`] creates them; an application
//! may instead copy the files of the crate's `migrations/postgres` or
//! `migrations/sqlite` folder into its own migrations. The store never creates or
//! changes anything else.
//!
//! Statements per operation (each one round trip; "+1" only when the row changed between
//! the two; a transaction's `BEGIN` and `COMMIT` are two more):
//!
//! | operation | PostgreSQL | SQLite |
//! |---|---|---|
//! | `acquire` | 1: `INSERT … ON CONFLICT DO UPDATE … WHERE <expired>` in a `WITH` that also reports the row it met (+1 `SELECT`) | 1 upsert when the key was free; 2 when held (the upsert, then a `SELECT` of the holder) |
//! | `release`, `consume_token` | 1 `DELETE … RETURNING` | 1 |
//! | `release_and_signal`, `abandon_record` | 1 `DELETE … RETURNING` in a `WITH` that also `pg_notify`s the key when the row was flagged by a waiter (see below) | 1 `DELETE … RETURNING` |
//! | `renew`, `renew_record` | 1 `UPDATE … RETURNING` | 1 |
//! | `complete_record` | 1 `UPDATE … RETURNING` in a `WITH` that also `pg_notify`s a flagged row | 1 `UPDATE … RETURNING` |
//! | `remaining`, `has_token` | 1 `SELECT` | 1 |
//! | [`consume_token_in`](SqlStore::consume_token_in), [`complete_record_in`](SqlStore::complete_record_in) | `consume_token`'s and `complete_record`'s, in the caller's transaction | the same |
//! | `put_token` | 1: the upsert and the `DELETE` of the scope's lapsed tokens in one `WITH` | a `BEGIN IMMEDIATE` transaction of 2 (`REPLACE`, `DELETE`) |
//! | `begin_record` | 1, like `acquire` (+1) | 1 when started; 2 otherwise |
//! | `acquire_or_register_waiter` | the trait's default: `acquire` | the same |
//! | `wait_for_release` | an `UPDATE` flagging the lock's row `waited` (a read only, when a waiter flagged it already), which also answers whether the lock is held (one `remaining` after it when it is not); on each notification of the key and at least every 500 ms, one `remaining`, and the flag again while the lock is held | one `remaining` every 10 ms |
//! | [`wait_for_record`](SqlStore::wait_for_record) | the same, with a `SELECT` of the record | one `SELECT` every 10 ms |
//! | `acquire_in_turn` ([`FairStore`](idem_core::FairStore)) | a transaction: `pg_advisory_xact_lock` on the name, a `DELETE` of the lapsed places at the head, a `SELECT` of the holder and the head; then `acquire`'s upsert, a `DELETE` of the caller's place and an `UPDATE` flagging the lock's row when others hold places, or an upsert of its place (or nothing) | a `BEGIN IMMEDIATE` transaction of the same, without the advisory lock and the flag |
//! | `wait_for_turn` | the same, with a `SELECT` of the turn after each flag; it writes only the flag of the lock's row | one `SELECT` every 10 ms; it never writes |
//! | `leave_queue` | 1 `DELETE` in a `WITH` that also `pg_notify`s the key while other places remain | 1 `DELETE` |
//! | [`purge`](SqlStore::purge) | 6 `DELETE`s of at most a batch each (the sixth: expired rows earlier versions left in `idem_waiters`) | 5 |
//!
//! A waiter's flag commits asynchronously (`synchronous_commit` off for that transaction:
//! it is worth a fallback poll at most), and its `UPDATE` takes the row's lock without
//! waiting (`SKIP LOCKED`), which the statements that release, complete, abandon or remove
//! the row take before they read the flag. A waiter therefore flags the row either before
//! a change reads it (and is notified) or after the change committed (and its question
//! sees it). When the row is locked (a change is committing, say in an application's
//! transaction around [`complete_record_in`](SqlStore::complete_record_in)), or was taken
//! again since the waiter's last look, the waiter asks again after 10 ms instead of
//! sleeping. A fair lock's waiter behind a free lock has no row to flag: its place in the
//! queue announces it, since a fair attempt that takes the lock while others hold places
//! flags the row itself, and a place given up notifies while other places remain. The
//! notifying statements look nowhere else and take no lock beyond their row's: an
//! advisory lock in each cost a first idempotent request about a tenth of its rate, and a
//! look at a table of waiters about as much again. The flag goes with its row (a lock's
//! release deletes it); a record flagged once notifies its later changes too.
//!
//! Fencing tokens come from a sequence (PostgreSQL `idem_fence`; SQLite the `idem_fence`
//! row, moved up by a trigger of the statement that draws a token), in the statement
//! that acquires: they grow across release, expiry, purge and restarts.
//!
//! # The fair lock's queue
//!
//! A [`FairLock`](idem_core::FairLock)'s waiters are rows of `idem_queue`: the lock's name,
//! the owner, its arrival (from PostgreSQL's sequence `idem_queue_arrival`, SQLite's
//! rowid, drawn when the owner takes its place, so the order is the one the database saw)
//! and when its place lapses (by the database's clock, as expiry is). An attempt
//! (`acquire_in_turn`) reads the lock and its queue, then writes, in one transaction that
//! attempts on the same lock wait for: PostgreSQL takes a transaction-scoped advisory lock
//! on a hash of the name (so it works before the lock has a row), SQLite takes its write
//! lock with `BEGIN IMMEDIATE`. It takes the lock with `acquire`'s own statement, so
//! fencing tokens come from the same sequence.
//!
//! A release is `release_and_signal`'s `DELETE` and leaves the queue alone: `wait_for_turn`
//! reads whether the lock is free and the waiter's place is the first one not lapsed (or
//! the waiter has lost its place, so that its next attempt queues it again), and reads
//! again when the release's notification wakes it (PostgreSQL; at the latest every
//! fallback poll) or every 10 ms (SQLite). Only the head of the queue sees its turn, so a
//! release still sends one waiter to the lock, not all of them; on PostgreSQL each waiter
//! of the lock reads once per release, on SQLite once per 10 ms. Leaving the queue is one
//! `DELETE` (which notifies, on PostgreSQL): the next waiter's read sees its place come to
//! the head. A lapsed place at the head of a queue is dropped by the next attempt on the
//! lock (a lapse notifies nobody: the waiter behind it sees it at its next read, at the
//! latest when the fair lock renews its place); the purge deletes the others.
//!
//! # Expiry and the purge
//!
//! Every row carries its expiry, and an expired row counts as absent to every operation
//! the moment it expires. Deleting it is the purge's work: a task the store starts with
//! its first operation runs [`SqlStore::purge`] every second
//! ([`with_purge_interval`](SqlStoreBuilder::with_purge_interval); `None` leaves it to the
//! application), deleting at most 1,000 expired rows of each table per run
//! ([`with_purge_batch`](SqlStoreBuilder::with_purge_batch)), lapsed places of fair locks'
//! queues included, so a run's cost is bounded
//! however much has piled up. It stops when the last clone of the store is dropped.
//! PostgreSQL purges with `FOR UPDATE SKIP LOCKED`, so instances purging at once share the
//! work and never wait on a request's row.
//!
//! One-time tokens have a capacity of their own (default 250,000,
//! [`with_token_capacity`](SqlStoreBuilder::with_token_capacity)): each run also evicts
//! the tokens issued before the newest that many, oldest first, so a flood of form
//! pages costs its users a form reload and never grows the table without bound. Each
//! client (token scope) keeps only its newest tokens, the `keep` of
//! [`put_token`](idem_core::TokenStore::put_token), in the same statement that puts one; two
//! puts in one scope at the same instant may leave it one token over until the next.
//!
//! # SQLite and concurrency
//!
//! SQLite lets one writer at a time into a database. `SqliteStore::open` gives the store
//! one connection of its own, in WAL mode (readers go on while it writes), with a busy
//! timeout equal to the store's timeout: the operations of one process queue for that
//! connection in order rather than polling SQLite's lock, and other processes on the
//! file wait for the lock up to the timeout. Each decision is one statement, and the
//! operations of several statements (`put_token`, a fair lock's `acquire_in_turn`) run in
//! `BEGIN IMMEDIATE`, which takes the write lock before reading. An application writing to the same file in a transaction should begin
//! it the same way (`pool.begin_with("BEGIN IMMEDIATE")`), as the example does.
//!
//! # One type, two databases
//!
//! [`PostgresStore`] and [`SqliteStore`] are `SqlStore<sqlx::Postgres>` and
//! `SqlStore<sqlx::Sqlite>`: what an operation does around its statements (claiming,
//! then reading the holder when the claim was refused; the timeout; error mapping; the
//! purge; the migrations) is the same for both and written once, and what differs — the
//! SQL, and the few choices above — lives with each database's statements. A database is
//! a [`SqlBackend`], implemented by this crate for the two it has statements for.
//!
#![cfg_attr(feature = "postgres", doc = "[`PostgresStore`]: crate::PostgresStore")]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "[`PostgresStore`]: https://docs.rs/idem-sqlx/latest/idem_sqlx/type.PostgresStore.html"
)]
#![cfg_attr(feature = "sqlite", doc = "[`SqliteStore`]: crate::SqliteStore")]
#![cfg_attr(
    not(feature = "sqlite"),
    doc = "[`SqliteStore`]: https://docs.rs/idem-sqlx/latest/idem_sqlx/type.SqliteStore.html"
)]

mod backend;
mod builder;
mod commit;
#[cfg(feature = "postgres")]
mod listener;
#[cfg(feature = "postgres")]
mod postgres;
mod purge;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod task;
mod wake;

pub use backend::SqlBackend;
pub use builder::SqlStoreBuilder;
pub use commit::CommitError;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use purge::Purged;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
/// The sqlx this crate is built on, for pools and transactions of the same version.
pub use sqlx;
pub use store::SqlStore;

/// The README's examples, compiled (and run where they can be) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
