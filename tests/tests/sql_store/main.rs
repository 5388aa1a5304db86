//! What only the SQL stores (`idem_sqlx`) have to get right, beyond the conformance suite:
//! their migrations, the bounded purge and the token capacity, timeouts on a database
//! that does not answer, completing a record inside the application's own transaction,
//! several instances (pools) on one database, fencing tokens across a restart, rows the
//! store cannot read, fair locks whose queue is a table (their turns across instances, and
//! the places they leave), and waiting for a record in progress. Every case runs on a real
//! PostgreSQL server and on a SQLite file; the cases of `notify` check, on PostgreSQL only,
//! that waiters are woken by `NOTIFY` from another instance, also after the listener's
//! connection was terminated, that the listener stops with the store, that only the rows
//! a waiter flagged are notified, and that one notification wakes hundreds of waiters.

use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_core::lock::{Lease, LockError};
use idem_core::store::{Fencing, Turn};
use idem_core::{
    Acquire, Begin, FairStore, Fingerprint, Key, Lock, LockStore, Owner, RecordStore, Store,
    StoreError, TokenStore,
};
use idem_sqlx::{CommitError, PostgresStore, SqlBackend, SqlStore, SqlStoreBuilder};
use idem_tests::{
    Backend, PostgresBackend, SqlDatabase, Statements, all_at_once, eventually, hold_fenced,
};
use sqlx::{Pool, Transaction};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(20);
/// The store timeout of the timeout cases, and what they allow on top of it.
const TIMEOUT: Duration = Duration::from_millis(300);
const SLACK: Duration = Duration::from_millis(300);

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// What these cases do with an order of the application's, on either database.
trait Orders: SqlDatabase {
    /// A transaction of the application's own on `pool` that has inserted an order.
    async fn order<'p>(&self, pool: &'p Pool<Self::DB>) -> Transaction<'p, Self::DB> {
        Self::DB::execute(pool, "CREATE TABLE IF NOT EXISTS orders (item TEXT)")
            .await
            .expect("the orders table");
        let mut tx = pool.begin_with(Self::BEGIN).await.expect("a transaction");
        Self::DB::execute_on(&mut tx, "INSERT INTO orders (item) VALUES ('book')")
            .await
            .expect("the order");
        tx
    }

    /// Inserts an order and completes `key`'s record in one transaction of the
    /// application's own, then commits it or rolls it back: what `complete_record_in`
    /// answered.
    async fn order_in_transaction(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        commit: bool,
    ) -> Result<bool, StoreError> {
        let pool = self.pool().await;
        let mut tx = self.order(&pool).await;
        let completed =
            SqlStore::<Self::DB>::complete_record_in(&mut tx, key, owner, response, LONG).await;
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
        completed
    }

    /// Inserts an order and commits it with `key`'s record (`commit_with_record`).
    async fn order_committed_with_record(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
    ) -> Result<(), CommitError> {
        let pool = self.pool().await;
        let tx = self.order(&pool).await;
        SqlStore::<Self::DB>::commit_with_record(tx, key, owner, response, LONG).await
    }
}

impl<D: SqlDatabase> Orders for D {}

/// A store that purges only when asked.
fn manual<DB: SqlBackend>() -> SqlStoreBuilder<DB> {
    SqlStore::<DB>::builder().with_purge_interval(None)
}

/// Waits until `key`'s lock has expired.
async fn until_expired<S: Store + Clone>(store: &S, key: &Key) {
    eventually(Duration::from_secs(5), "the lock expires", || {
        let (store, key) = (store.clone(), key.clone());
        async move { store.remaining(&key).await.unwrap().is_none() }
    })
    .await;
}

/// Begins `record` as `stale` with a short lease, and waits until a retry, `fresh`, has
/// begun it again once the lease ran out.
async fn taken_over<S: Store + Clone>(store: &S, record: &Key, stale: &Owner, fresh: &Owner) {
    let fp = Fingerprint::of(["order"]);
    store.begin_record(record, stale, &fp, SHORT).await.unwrap();
    eventually(
        Duration::from_secs(5),
        "the lease runs out and a retry begins",
        || {
            let (store, record, fresh) = (store.clone(), record.clone(), fresh.clone());
            async move {
                store
                    .begin_record(&record, &fresh, &fp, LONG)
                    .await
                    .unwrap()
                    == Begin::Started
            }
        },
    )
    .await;
}

macro_rules! on_both_databases {
    ($($case:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case::<idem_tests::PostgresBackend>().await;
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case::<idem_tests::SqliteBackend>().await;
                }
            )+
        }
    };
}

on_both_databases!(
    migrations_run_twice_and_from_several_instances_at_once,
    the_purge_deletes_expired_rows_and_keeps_live_ones,
    a_purge_run_deletes_at_most_a_batch_of_each_table,
    tokens_past_the_capacity_are_evicted_oldest_first,
    the_store_purges_by_itself,
    a_locked_database_is_a_timeout_not_a_hang,
    a_record_completed_in_a_rolled_back_transaction_stays_in_progress,
    a_record_completed_in_a_committed_transaction_is_replayed,
    a_stale_owner_cannot_complete_inside_a_transaction,
    commit_with_record_rolls_back_the_writes_of_an_attempt_that_lost_its_record,
    several_instances_on_one_database_have_one_winner,
    fencing_tokens_keep_growing_across_a_restart,
    a_row_the_store_cannot_read_is_an_unexpected_answer,
    fair_locks_of_several_instances_take_turns_in_arrival_order,
    a_fair_waiter_that_times_out_or_is_cancelled_leaves_the_queue,
);

async fn migrations_run_twice_and_from_several_instances_at_once<D: SqlDatabase>() {
    let db = D::start().await;
    let stores = [
        db.store_with(manual()).await,
        db.store_with(manual()).await,
        db.store_with(manual()).await,
    ];
    let results = all_at_once(stores.len(), |i| {
        let store = stores[i].clone();
        async move { store.migrate().await }
    })
    .await;
    for result in results {
        result.expect("migrate");
    }
    db.store().migrate().await.expect("and once more");
    assert_eq!(
        db.count("idem_migrations").await,
        5,
        "each of the five migrations once"
    );
    // The migrated tables take a fenced lock.
    hold_fenced(&db.store(), "after").await;
}

async fn the_purge_deletes_expired_rows_and_keeps_live_ones<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db.store_with(manual()).await;
    let (owner, fp, scope) = (Owner::random(), Fingerprint::of(["x"]), key("client"));
    // A fair lock held, and a waiter with a long place at the head of its queue: the
    // short places behind it lapse there, where only the purge deletes them.
    let (fair, head) = (key("fair"), Owner::random());
    let turn = store
        .acquire_in_turn(&fair, &owner, LONG, Fencing::Off, None)
        .await
        .unwrap();
    assert_eq!(turn, Turn::Acquired { fence: None });
    let turn = store
        .acquire_in_turn(&fair, &head, LONG, Fencing::Off, Some(LONG))
        .await
        .unwrap();
    assert!(matches!(turn, Turn::Queued { next: true, .. }), "{turn:?}");
    for i in 0..10 {
        let ttl = if i < 6 { SHORT } else { LONG };
        let name = key(&format!("k{i}"));
        store.put_token(&scope, &name, ttl, 100).await.unwrap();
        store.begin_record(&name, &owner, &fp, ttl).await.unwrap();
        let waiter = Owner::new(format!("waiter-{i}")).unwrap();
        let turn = store
            .acquire_in_turn(&fair, &waiter, LONG, Fencing::Off, Some(ttl))
            .await
            .unwrap();
        assert!(matches!(turn, Turn::Queued { .. }), "{turn:?}");
        // Last, so that once this lock has expired every short-lived row has.
        store
            .acquire(&name, &owner, ttl, Fencing::On)
            .await
            .unwrap();
    }
    until_expired(&store, &key("k5")).await;

    let purged = store.purge().await.expect("purge");
    assert_eq!(
        (
            purged.locks,
            purged.tokens,
            purged.records,
            purged.evicted_tokens,
            purged.places,
        ),
        (6, 6, 6, 0, 6)
    );
    for table in ["idem_tokens", "idem_records"] {
        assert_eq!(db.count(table).await, 4, "{table}: the live rows are left");
    }
    assert_eq!(db.count("idem_locks").await, 5, "the live locks are left");
    assert_eq!(db.count("idem_queue").await, 5, "the live places are left");
    // The live places keep their order: once the head leaves, the first of the others
    // is next.
    store.leave_queue(&fair, &head).await.unwrap();
    let first_live = Owner::new("waiter-6").unwrap();
    let turn = store
        .acquire_in_turn(&fair, &first_live, LONG, Fencing::Off, None)
        .await
        .unwrap();
    assert!(matches!(turn, Turn::Queued { next: true, .. }), "{turn:?}");
    assert!(store.release(&key("k9"), &owner).await.unwrap());
    assert!(store.consume_token(&scope, &key("k9")).await.unwrap());
    assert!(
        store
            .complete_record(&key("k9"), &owner, Bytes::from_static(b"ok"), LONG)
            .await
            .unwrap()
    );
    assert_eq!(store.purge().await.unwrap(), Default::default());
}

async fn a_purge_run_deletes_at_most_a_batch_of_each_table<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db.store_with(manual().with_purge_batch(4)).await;
    // A fair lock held, and a waiter with a long place at the head of its queue: the
    // short places behind it lapse there, where only the purge deletes them.
    let (owner, fair) = (Owner::random(), key("fair"));
    for place in [None, Some(LONG)] {
        store
            .acquire_in_turn(&fair, &Owner::random(), LONG, Fencing::Off, place)
            .await
            .unwrap();
    }
    for i in 0..10 {
        let name = key(&format!("k{i}"));
        store
            .acquire_in_turn(&fair, &Owner::random(), LONG, Fencing::Off, Some(SHORT))
            .await
            .unwrap();
        store
            .acquire(&name, &owner, SHORT, Fencing::Off)
            .await
            .unwrap();
    }
    until_expired(&store, &key("k9")).await;
    let mut runs = Vec::new();
    loop {
        let purged = store.purge().await.unwrap();
        runs.push((purged.locks, purged.places));
        if purged.locks == 0 {
            break;
        }
    }
    assert_eq!(runs, [(4, 4), (4, 4), (2, 2), (0, 0)]);
}

async fn tokens_past_the_capacity_are_evicted_oldest_first<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db
        .store_with(manual().with_token_capacity(5).with_purge_batch(100))
        .await;
    let token = |i: usize| key(&format!("token-{i}"));
    let scope = |i: usize| key(&format!("client-{i}"));
    for i in 0..20 {
        store
            .put_token(&scope(i), &token(i), LONG, 16)
            .await
            .unwrap();
    }
    assert_eq!(store.purge().await.unwrap().evicted_tokens, 15);
    assert_eq!(db.count("idem_tokens").await, 5);
    for i in 0..15 {
        assert!(
            !store.consume_token(&scope(i), &token(i)).await.unwrap(),
            "{i} evicted"
        );
    }
    for i in 15..20 {
        assert!(
            store.consume_token(&scope(i), &token(i)).await.unwrap(),
            "{i} kept"
        );
    }
}

async fn the_store_purges_by_itself<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db
        .store_with(
            SqlStore::<D::DB>::builder().with_purge_interval(Some(Duration::from_millis(10))),
        )
        .await;
    for i in 0..10 {
        let name = key(&format!("k{i}"));
        store
            .acquire(&name, &Owner::random(), SHORT, Fencing::Off)
            .await
            .unwrap();
    }
    eventually(
        Duration::from_secs(10),
        "the expired rows are purged",
        || async { db.count("idem_locks").await == 0 },
    )
    .await;
}

async fn a_locked_database_is_a_timeout_not_a_hang<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db.store_with(manual().with_timeout(TIMEOUT)).await;
    let lock = db.lock_tables().await;
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        store.acquire(&key("blocked"), &Owner::random(), LONG, Fencing::Off),
    )
    .await
    .expect("the store answers; it does not hang");
    let elapsed = started.elapsed();
    assert!(
        matches!(answer, Err(StoreError::Timeout(timeout)) if timeout == TIMEOUT),
        "{answer:?}"
    );
    assert!(elapsed < TIMEOUT + SLACK, "took {elapsed:?}");
    drop(lock);
    // The connection the timeout cut off is of use again, or replaced.
    eventually(Duration::from_secs(5), "the store answers again", || {
        let store = store.clone();
        async move {
            store
                .acquire(&key("free"), &Owner::random(), LONG, Fencing::Off)
                .await
                .is_ok()
        }
    })
    .await;
}

async fn a_record_completed_in_a_rolled_back_transaction_stays_in_progress<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db.store();
    let (record, owner, fp) = (key("order-1"), Owner::random(), Fingerprint::of(["order"]));
    assert_eq!(
        store
            .begin_record(&record, &owner, &fp, LONG)
            .await
            .unwrap(),
        Begin::Started
    );
    let completed = db
        .order_in_transaction(&record, &owner, Bytes::from_static(b"created"), false)
        .await;
    assert!(completed.expect("complete_record_in"), "completed inside");
    assert!(matches!(
        store
            .begin_record(&record, &Owner::random(), &fp, LONG)
            .await
            .unwrap(),
        Begin::InProgress { .. }
    ));
    assert_eq!(
        db.count("orders").await,
        0,
        "the order was rolled back with it"
    );
    // Still the owner's to complete (or to abandon).
    assert!(store.abandon_record(&record, &owner).await.unwrap());
}

async fn a_record_completed_in_a_committed_transaction_is_replayed<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db.store();
    // Completed and committed in two calls, then with `commit_with_record`.
    for (orders, in_one_call) in [(1, false), (2, true)] {
        let (record, owner) = (key(&format!("order-{orders}")), Owner::random());
        let fp = Fingerprint::of(["order"]);
        store
            .begin_record(&record, &owner, &fp, LONG)
            .await
            .unwrap();
        // Not UTF-8: stored byte for byte.
        let response = Bytes::from_static(b"201 \x00\xff created");
        if in_one_call {
            db.order_committed_with_record(&record, &owner, response.clone())
                .await
                .expect("commit_with_record");
        } else {
            let completed = db
                .order_in_transaction(&record, &owner, response.clone(), true)
                .await;
            assert!(completed.expect("complete_record_in"));
        }
        assert_eq!(
            store
                .begin_record(&record, &Owner::random(), &fp, LONG)
                .await
                .unwrap(),
            Begin::Completed { response }
        );
        assert_eq!(db.count("orders").await, orders);
        assert!(
            !store
                .complete_record(&record, &owner, Bytes::from_static(b"again"), LONG)
                .await
                .unwrap(),
            "completed once"
        );
    }
}

async fn a_stale_owner_cannot_complete_inside_a_transaction<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db.store();
    let (record, stale, fresh) = (key("order-3"), Owner::random(), Owner::random());
    taken_over(&store, &record, &stale, &fresh).await;
    let completed = db
        .order_in_transaction(&record, &stale, Bytes::from_static(b"stale"), false)
        .await;
    assert!(
        !completed.expect("complete_record_in"),
        "fenced: the caller rolls back"
    );
    assert!(
        store
            .complete_record(&record, &fresh, Bytes::from_static(b"fresh"), LONG)
            .await
            .unwrap()
    );
}

async fn commit_with_record_rolls_back_the_writes_of_an_attempt_that_lost_its_record<
    D: SqlDatabase,
>() {
    let db = D::start().await;
    let store = db.store();
    let (record, stale, fresh) = (key("order-4"), Owner::random(), Owner::random());
    taken_over(&store, &record, &stale, &fresh).await;
    let lost = db
        .order_committed_with_record(&record, &stale, Bytes::from_static(b"stale"))
        .await;
    assert!(matches!(lost, Err(CommitError::RecordLost)), "{lost:?}");
    assert_eq!(
        db.count("orders").await,
        0,
        "the stale attempt's order is gone"
    );
    db.order_committed_with_record(&record, &fresh, Bytes::from_static(b"fresh"))
        .await
        .expect("the retry commits its own");
    assert_eq!(db.count("orders").await, 1);
}

async fn several_instances_on_one_database_have_one_winner<D: SqlDatabase>() {
    let db = D::start().await;
    let stores = [
        db.store(),
        db.store_of_another_instance(),
        db.store_with(SqlStore::<D::DB>::builder()).await,
        db.store_with(SqlStore::<D::DB>::builder()).await,
    ];
    let fp = Fingerprint::of(["race"]);
    let results = all_at_once(400, |i| {
        let store = stores[i % stores.len()].clone();
        async move {
            let acquired = store
                .acquire(&key("race"), &Owner::random(), LONG, Fencing::On)
                .await
                .expect("acquire");
            let begun = store
                .begin_record(&key("race"), &Owner::random(), &fp, LONG)
                .await
                .expect("begin_record");
            (acquired, begun)
        }
    })
    .await;
    let winners = results
        .iter()
        .filter(|(acquired, _)| matches!(acquired, Acquire::Acquired { .. }))
        .count();
    let started = results
        .iter()
        .filter(|(_, begun)| *begun == Begin::Started)
        .count();
    assert_eq!((winners, started), (1, 1));
}

async fn fencing_tokens_keep_growing_across_a_restart<D: SqlDatabase>() {
    let db = D::start().await;
    let lock = key("fenced");
    let mut last = 0;
    for _ in 0..3 {
        // A new store and pool each time, as a restarted instance has.
        let store = db.store_with(manual()).await;
        let owner = Owner::random();
        let Ok(Acquire::Acquired { fence: Some(fence) }) =
            store.acquire(&lock, &owner, LONG, Fencing::On).await
        else {
            panic!("the lock is free");
        };
        assert!(fence.get() > last, "{} after {last}", fence.get());
        last = fence.get();
        assert!(store.release(&lock, &owner).await.unwrap());
    }
}

async fn a_row_the_store_cannot_read_is_an_unexpected_answer<D: SqlDatabase>() {
    let db = D::start().await;
    let store = db.store();
    let (lock, owner) = hold_fenced(&store, "tampered").await;
    db.execute("UPDATE idem_locks SET fence = -5").await;
    let answer = store.acquire(&lock, &owner, LONG, Fencing::On).await;
    assert!(
        matches!(
            &answer,
            Err(StoreError::UnexpectedAnswer { operation: "acquire", answer }) if answer.contains("-5")
        ),
        "{answer:?}"
    );
}

/// Waits until `key`'s queue has `places` places.
async fn until_queued<D: SqlDatabase>(db: &D, places: i64) {
    eventually(Duration::from_secs(5), "the waiter is queued", || async {
        db.count("idem_queue").await == places
    })
    .await;
}

async fn fair_locks_of_several_instances_take_turns_in_arrival_order<D: SqlDatabase>() {
    let db = D::start().await;
    let stores = [db.store(), db.store_of_another_instance()];
    let name = key("fair-instances");
    let fair = |i: usize| Lock::new(stores[i % 2].clone(), name.clone(), Lease::Fixed(LONG)).fair();
    let holder = fair(0).try_acquire().await.expect("the free lock");
    let (taken, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..3 {
        let (lock, taken) = (fair(i + 1), taken.clone());
        waiters.push(tokio::spawn(async move {
            let guard = lock
                .acquire_within(Duration::from_secs(10))
                .await
                .expect("its turn comes");
            taken.send(i).expect("the test listens");
            guard.release().await.expect("released");
        }));
        // Each waiter queues before the next one starts: that is the arrival order.
        until_queued(&db, i64::try_from(i).unwrap() + 1).await;
    }
    drop(taken);
    assert!(holder.release().await.unwrap());
    for waiter in waiters {
        waiter.await.expect("the waiter's task");
    }
    let mut turns = Vec::new();
    while let Some(i) = order.recv().await {
        turns.push(i);
    }
    assert_eq!(turns, [0, 1, 2], "the order they came in, across instances");
    assert_eq!(db.count("idem_queue").await, 0, "each took its place out");
}

async fn a_fair_waiter_that_times_out_or_is_cancelled_leaves_the_queue<D: SqlDatabase>() {
    let db = D::start().await;
    let name = key("fair-leaving");
    let fair = || Lock::new(db.store(), name.clone(), Lease::Fixed(LONG)).fair();
    let holder = fair().try_acquire().await.expect("the free lock");
    let timed_out = fair().acquire_within(Duration::from_millis(100)).await;
    assert!(
        matches!(timed_out, Err(LockError::TimedOut { .. })),
        "{timed_out:?}"
    );
    assert_eq!(db.count("idem_queue").await, 0, "left when it timed out");
    let cancelled = tokio::spawn({
        let lock = fair();
        async move { lock.acquire_within(LONG).await.map(drop) }
    });
    until_queued(&db, 1).await;
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    eventually(
        Duration::from_secs(5),
        "the cancelled waiter leaves",
        || async { db.count("idem_queue").await == 0 },
    )
    .await;
    assert!(holder.release().await.unwrap());
}

async fn a_record_waiter_sees_the_record_end<D: SqlDatabase>() {
    let db = D::start().await;
    let (store, other) = (db.store(), db.store_of_another_instance());
    let (record, owner, fp) = (key("awaited"), Owner::random(), Fingerprint::of(["order"]));
    assert!(
        other
            .wait_for_record(&record, LONG)
            .await
            .expect("no record"),
        "no record is no record in progress"
    );
    store
        .begin_record(&record, &owner, &fp, LONG)
        .await
        .unwrap();
    let started = Instant::now();
    let within = Duration::from_millis(50);
    assert!(!other.wait_for_record(&record, within).await.unwrap());
    assert!(started.elapsed() >= within, "not before its time ran out");
    let waiting = tokio::spawn({
        let (other, record) = (other.clone(), record.clone());
        async move { other.wait_for_record(&record, LONG).await.unwrap() }
    });
    assert!(
        store
            .complete_record(&record, &owner, Bytes::from_static(b"done"), LONG)
            .await
            .unwrap()
    );
    let ended = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    assert!(ended.expect("woken").expect("the waiter's task"));
    assert!(
        other.wait_for_record(&record, LONG).await.unwrap(),
        "a completed record is no longer in progress"
    );
}

mod record_waiting {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() {
        super::a_record_waiter_sees_the_record_end::<idem_tests::PostgresBackend>().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() {
        super::a_record_waiter_sees_the_record_end::<idem_tests::SqliteBackend>().await;
    }
}

mod notify;
mod opening;
