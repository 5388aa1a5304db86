//! A store operation that is a transaction (a fair lock's attempt), cut off by the store's
//! timeout while its `BEGIN` waits for the database, must leave no connection of the pool
//! inside that transaction. sqlx (0.8.6) hands a connection whose `BEGIN` was cancelled
//! before its answer back to the pool inside the transaction that `BEGIN` opened: every
//! later statement on it — the next lock, record, token of any request — would run in
//! that transaction, uncommitted, holding its rows' locks (another instance waits on them
//! until its own timeout), and be lost when the connection ends. On a real PostgreSQL
//! server the harness starts, reached through a forwarder that stalls the link
//! mid-`BEGIN`.

use std::str::FromStr;
use std::time::Duration;

use idem_core::store::Fencing;
use idem_core::{Acquire, FairStore, Key, LockStore, Owner, StoreError};
use idem_sqlx::PostgresStore;
use idem_tests::{Forwarder, PostgresServer, eventually, postgres_url};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

const LONG: Duration = Duration::from_secs(60);
const TIMEOUT: Duration = Duration::from_millis(300);

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_attempt_cut_off_by_the_timeout_leaves_no_connection_in_its_transaction() {
    let server = PostgresServer::start();
    let other_instance = server.store().await;
    let link = Forwarder::start(server.port()).await;
    // One connection, which the operation after the cut-off one gets too; not pinged
    // before it is handed out (as `PostgresStore::connect` does), so the cut falls in
    // the `BEGIN`.
    let options = PgConnectOptions::from_str(&postgres_url(link.port())).expect("a URL");
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .expect("a pool through the link");
    let store = PostgresStore::builder()
        .with_timeout(TIMEOUT)
        .with_purge_interval(None)
        .build(pool);
    // sqlx checks a connection as it comes back to the pool: wait for that to end, so
    // that the stall below holds the `BEGIN`, not the check.
    eventually(
        Duration::from_secs(5),
        "the connection is back in the pool",
        || {
            let idle = store.pool().num_idle();
            async move { idle == 1 }
        },
    )
    .await;

    link.stall();
    let cut_off = store
        .acquire_in_turn(
            &key("fair"),
            &Owner::random(),
            LONG,
            Fencing::Off,
            Some(LONG),
        )
        .await;
    assert!(
        matches!(cut_off, Err(StoreError::Timeout(_))),
        "{cut_off:?}"
    );
    link.resume();

    let mine = store
        .acquire(&key("after"), &Owner::random(), LONG, Fencing::Off)
        .await;
    assert!(matches!(mine, Ok(Acquire::Acquired { .. })), "{mine:?}");
    // Committed: another instance sees the lock held.
    let theirs = other_instance
        .acquire(&key("after"), &Owner::random(), LONG, Fencing::Off)
        .await;
    assert!(
        matches!(theirs, Ok(Acquire::Held { .. })),
        "a lock taken after the cut-off attempt is not committed: {theirs:?}"
    );
}
