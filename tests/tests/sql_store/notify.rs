//! PostgreSQL wakes waiters with `NOTIFY`. Each case makes the waiter's fallback poll far
//! longer than the case may take, and lets go only once the waiter has asked and its
//! store's listener listens: from then on only a notification can wake it in time.
//!
//! It notifies only the rows a waiter flagged (their `waited` column), and a place given
//! up in a fair queue only while other places remain: the cases of [`Notifications`] read
//! what was notified on the channel, from a connection of their own, and check that a
//! change nobody waits for sends nothing, that a flag goes with its row, and that a waiter
//! that comes while a change is committing is not left to sleep.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::postgres::PgListener;

use super::*;

/// The waiter's fallback poll: no case waits for it.
const NEVER: Duration = Duration::from_secs(600);
/// How long a waiter may take to be woken; far below [`NEVER`].
const WOKEN_WITHIN: Duration = Duration::from_secs(10);

/// A database, a store for the holder, and one for the waiter (another instance),
/// whose connections name themselves `idem-waiter` to `pg_stat_activity`.
struct Instances {
    db: PostgresBackend,
    holder: PostgresStore,
    waiter: PostgresStore,
}

const WAITER: &str = "idem-waiter";

impl Instances {
    async fn start() -> Self {
        let db = PostgresBackend::start().await;
        Self {
            holder: db.store(),
            waiter: waiter_store(&db).await,
            db,
        }
    }

    async fn ask(&self, sql: &str) -> Option<String> {
        ask(&self.db, sql).await
    }

    /// The waiter's listener, once it listens: its pid, and when it connected.
    async fn listening(&self, not: Option<&str>) -> (String, String) {
        let sql = format!(
            "SELECT pid || ' ' || backend_start FROM pg_stat_activity
            WHERE application_name = '{WAITER} (idem listener)'
                AND query LIKE 'LISTEN%' AND pid::text <> '{}'",
            not.unwrap_or("")
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let found = loop {
            if let Some(found) = self.ask(&sql).await {
                break found;
            }
            assert!(Instant::now() < deadline, "the listener listens");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let (pid, started) = found.split_once(' ').expect("pid and start");
        (pid.to_owned(), started.to_owned())
    }

    /// Waits until the waiter has asked about `table` since `since` (a timestamp), and
    /// no question of its is running.
    async fn asked(&self, table: &str, since: &str) {
        let sql = format!(
            "SELECT CASE WHEN bool_or(state = 'idle' AND query LIKE '%{table}%'
                    AND query_start > '{since}'::timestamptz)
                AND NOT bool_or(state = 'active') THEN 'yes' END
            FROM pg_stat_activity WHERE application_name = '{WAITER}'"
        );
        eventually(Duration::from_secs(10), "the waiter asked", || async {
            self.ask(&sql).await.is_some()
        })
        .await;
    }

    /// The waiter's wait for `record` in progress, in a task of its own, once it has
    /// flagged the record's row.
    async fn record_waiter(
        &self,
        record: &Key,
    ) -> tokio::task::JoinHandle<Result<bool, StoreError>> {
        let waiting = tokio::spawn({
            let (waiter, record) = (self.waiter.clone(), record.clone());
            async move { waiter.wait_for_record(&record, LONG).await }
        });
        eventually(WOKEN_WITHIN, "the waiter flags the record", || async {
            flagged(&self.db, "idem_records", record).await == Some(true)
        })
        .await;
        waiting
    }

    async fn now(&self) -> String {
        self.ask("SELECT clock_timestamp()::text")
            .await
            .expect("now")
    }
}

/// What a waiter waits for, how it is let go, and what the waiter asks about.
#[derive(Debug, Clone, Copy)]
enum Case {
    Lock,
    FairTurn,
    FairPlaceGivenUp,
    RecordCompleted,
    RecordAbandoned,
}

impl Case {
    const ALL: [Self; 5] = [
        Self::Lock,
        Self::FairTurn,
        Self::FairPlaceGivenUp,
        Self::RecordCompleted,
        Self::RecordAbandoned,
    ];

    fn table(self) -> &'static str {
        match self {
            Self::Lock => "idem_locks",
            Self::FairTurn | Self::FairPlaceGivenUp => "idem_queue",
            Self::RecordCompleted | Self::RecordAbandoned => "idem_records",
        }
    }

    /// Makes the waiter wait: the key held, the waiter queued behind it.
    async fn hold(self, on: &Instances, name: &Key, holder: &Owner, waiter: &Owner) {
        let fp = Fingerprint::of(["order"]);
        let queue = |owner: Owner| async move {
            let queued = on
                .holder
                .acquire_in_turn(name, &owner, LONG, Fencing::Off, Some(LONG));
            queued.await
        };
        match self {
            Self::Lock => hold(&on.holder, name, holder).await,
            Self::FairTurn => {
                hold(&on.holder, name, holder).await;
                assert!(matches!(
                    queue(waiter.clone()).await,
                    Ok(Turn::Queued { next: true, .. })
                ));
            }
            Self::FairPlaceGivenUp => {
                // The lock is free, and `holder`'s place is ahead of the waiter's.
                let other = Owner::random();
                hold(&on.holder, name, &other).await;
                assert!(matches!(
                    queue(holder.clone()).await,
                    Ok(Turn::Queued { next: true, .. })
                ));
                assert!(matches!(
                    queue(waiter.clone()).await,
                    Ok(Turn::Queued { next: false, .. })
                ));
                assert!(on.holder.release(name, &other).await.unwrap());
            }
            Self::RecordCompleted | Self::RecordAbandoned => {
                let begun = on.holder.begin_record(name, holder, &fp, LONG).await;
                assert_eq!(begun.unwrap(), Begin::Started);
            }
        }
    }

    /// The waiter's wait: whether it was woken.
    async fn wait(self, on: &Instances, name: &Key, waiter: &Owner) -> bool {
        let within = Duration::from_secs(60);
        let answer = match self {
            Self::Lock => on.waiter.wait_for_release(name, within).await,
            Self::FairTurn | Self::FairPlaceGivenUp => {
                on.waiter.wait_for_turn(name, waiter, within).await
            }
            Self::RecordCompleted | Self::RecordAbandoned => {
                on.waiter.wait_for_record(name, within).await
            }
        };
        answer.expect("the wait")
    }

    /// Lets the waiter go, from the holder's instance.
    async fn let_go(self, on: &Instances, name: &Key, holder: &Owner) {
        let store = &on.holder;
        let done = match self {
            Self::Lock | Self::FairTurn => store.release_and_signal(name, holder).await,
            Self::FairPlaceGivenUp => store.leave_queue(name, holder).await.map(|()| true),
            Self::RecordCompleted => {
                let response = Bytes::from_static(b"done");
                store.complete_record(name, holder, response, LONG).await
            }
            Self::RecordAbandoned => store.abandon_record(name, holder).await,
        };
        assert!(done.expect("let go"), "{self:?}: let go");
    }
}

/// Another instance that waits: its fallback poll never comes, and its connections name
/// themselves [`WAITER`].
async fn waiter_store(db: &PostgresBackend) -> PostgresStore {
    let url = format!("{}?application_name={WAITER}", db.url());
    let store = PostgresStore::builder().with_fallback_poll(NEVER);
    store.connect(&url).await.expect("the waiter's store")
}

/// The one value `sql` answers, as text.
async fn ask(db: &PostgresBackend, sql: &str) -> Option<String> {
    let pool = db.server.pool().await;
    sqlx::query_scalar::<_, Option<String>>(sql)
        .fetch_optional(&pool)
        .await
        .expect("a question to pg_stat_activity")
        .flatten()
}

/// Takes the free lock `name` for `owner`.
async fn hold(store: &PostgresStore, name: &Key, owner: &Owner) {
    let acquired = store.acquire(name, owner, LONG, Fencing::Off).await;
    assert_eq!(acquired.unwrap(), Acquire::Acquired { fence: None });
}

/// Makes the waiter wait on `case`, lets it go once it asked (since `since`), and
/// checks a notification woke it.
async fn woken(on: &Instances, case: Case, since: &str) {
    let (name, holder, waiter) = (key(&format!("{case:?}")), Owner::random(), Owner::random());
    case.hold(on, &name, &holder, &waiter).await;
    let waiting = async {
        let started = Instant::now();
        (case.wait(on, &name, &waiter).await, started.elapsed())
    };
    let letting_go = async {
        on.asked(case.table(), since).await;
        case.let_go(on, &name, &holder).await;
    };
    let ((woken, waited), ()) = tokio::join!(waiting, letting_go);
    assert!(woken, "{case:?}: woken");
    assert!(waited < WOKEN_WITHIN, "{case:?}: woken after {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_is_woken_by_another_instance_long_before_its_fallback_poll() {
    let on = Instances::start().await;
    // The first wait starts the listener.
    let free = on.waiter.wait_for_release(&key("free"), LONG).await;
    assert!(free.unwrap(), "a free key is free at once");
    on.listening(None).await;
    for case in Case::ALL {
        let since = on.now().await;
        woken(&on, case, &since).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_is_woken_after_the_listener_connection_was_terminated() {
    let on = Instances::start().await;
    let free = on.waiter.wait_for_record(&key("free"), LONG).await;
    assert!(free.unwrap(), "no record is no record in progress");
    let (pid, _) = on.listening(None).await;
    let terminate = format!("SELECT pg_terminate_backend({pid})::text");
    assert_eq!(on.ask(&terminate).await.as_deref(), Some("true"));
    // A new connection listens; what was asked before it did may have missed a
    // notification, so only what is asked after it counts.
    let (_, reconnected) = on.listening(Some(&pid)).await;
    woken(&on, Case::Lock, &reconnected).await;
    woken(&on, Case::RecordCompleted, &reconnected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_listener_stops_with_the_store() {
    let on = Instances::start().await;
    let free = on.waiter.wait_for_release(&key("free"), LONG).await;
    assert!(free.unwrap());
    on.listening(None).await;
    let Instances { db, waiter, .. } = on;
    let sql = format!(
        "SELECT 'connected' FROM pg_stat_activity
        WHERE application_name = '{WAITER} (idem listener)'"
    );
    let clone = waiter.clone();
    drop(waiter);
    assert!(ask(&db, &sql).await.is_some(), "a clone keeps it");
    drop(clone);
    eventually(
        Duration::from_secs(10),
        "the listener disconnects",
        || async { ask(&db, &sql).await.is_none() },
    )
    .await;
}

/// What the statements notify on `idem_wake`, read by a connection of the test's own.
struct Notifications {
    listener: PgListener,
    db: Pool<sqlx::Postgres>,
}

impl Notifications {
    async fn listen(db: &PostgresBackend) -> Self {
        let mut listener = PgListener::connect(&db.url()).await.expect("a listener");
        listener.listen("idem_wake").await.expect("LISTEN");
        Self {
            listener,
            db: db.pool().await,
        }
    }

    /// The payloads notified since the last call: all of them, since PostgreSQL delivers
    /// notifications in the order their transactions committed, and the list ends with a
    /// marker notified now.
    async fn so_far(&mut self) -> Vec<String> {
        let marker = format!("marker:{}", Owner::random().as_str());
        sqlx::query("SELECT pg_notify('idem_wake', $1)")
            .bind(&marker)
            .execute(&self.db)
            .await
            .expect("the marker");
        let mut notified = Vec::new();
        loop {
            let next = tokio::time::timeout(WOKEN_WITHIN, self.listener.recv()).await;
            let payload = next.expect("the marker comes").expect("a notification");
            if payload.payload() == marker {
                return notified;
            }
            notified.push(payload.payload().to_owned());
        }
    }
}

/// Whether a waiter flagged the row of `key` in `table` (`None`: no row).
async fn flagged(db: &PostgresBackend, table: &str, key: &Key) -> Option<bool> {
    let sql = format!(
        "SELECT waited::text FROM {table} WHERE key = '{}'",
        key.as_str()
    );
    ask(db, &sql).await.map(|flag| flag == "true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_nobody_waits_for_notifies_nobody() {
    let on = Instances::start().await;
    let mut notifications = Notifications::listen(&on.db).await;
    // Each case's change, with its waiter queued (the fair cases) but not waiting. A place
    // given up is the one change that notifies all the same: the place behind it announces
    // a waiter, with no row to flag while the lock is free.
    for case in Case::ALL {
        let (name, holder, waiter) = (key(&format!("{case:?}")), Owner::random(), Owner::random());
        case.hold(&on, &name, &holder, &waiter).await;
        case.let_go(&on, &name, &holder).await;
        let expected: &[String] = match case {
            Case::FairPlaceGivenUp => &[format!("l:{}", name.as_str())],
            _ => &[],
        };
        assert_eq!(notifications.so_far().await, expected, "{case:?}");
    }
    // Completed inside a transaction of the application's.
    let (record, owner) = (key("in-transaction"), Owner::random());
    let fp = Fingerprint::of(["order"]);
    let begun = on.holder.begin_record(&record, &owner, &fp, LONG).await;
    assert_eq!(begun.unwrap(), Begin::Started);
    let response = Bytes::from_static(b"done");
    let committed = on
        .db
        .order_committed_with_record(&record, &owner, response)
        .await;
    committed.expect("committed with the record");
    assert_eq!(notifications.so_far().await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_key_a_waiter_waits_for_is_notified_while_it_waits() {
    let on = Instances::start().await;
    let mut notifications = Notifications::listen(&on.db).await;
    let (awaited, other, holder) = (key("awaited"), key("other"), Owner::random());
    hold(&on.holder, &awaited, &holder).await;
    hold(&on.holder, &other, &holder).await;
    let waiting = async {
        let started = Instant::now();
        let woken = on.waiter.wait_for_release(&awaited, LONG).await;
        (woken.expect("the wait"), started.elapsed())
    };
    let letting_go = async {
        eventually(WOKEN_WITHIN, "the waiter flags the lock", || async {
            flagged(&on.db, "idem_locks", &awaited).await == Some(true)
        })
        .await;
        assert_eq!(flagged(&on.db, "idem_locks", &other).await, Some(false));
        assert!(on.holder.release_and_signal(&other, &holder).await.unwrap());
        assert!(
            on.holder
                .release_and_signal(&awaited, &holder)
                .await
                .unwrap()
        );
    };
    let ((woken, waited), ()) = tokio::join!(waiting, letting_go);
    assert!(woken, "woken");
    assert!(waited < WOKEN_WITHIN, "woken after {waited:?}");
    assert_eq!(
        notifications.so_far().await,
        [format!("l:{}", awaited.as_str())]
    );
    // The flag went with the released row: the key's next hold is not flagged, and its
    // release notifies nobody.
    hold(&on.holder, &awaited, &holder).await;
    assert_eq!(flagged(&on.db, "idem_locks", &awaited).await, Some(false));
    assert!(
        on.holder
            .release_and_signal(&awaited, &holder)
            .await
            .unwrap()
    );
    assert_eq!(notifications.so_far().await, Vec::<String>::new());
}

/// Two hundred waiters in four instances come at once for one record in progress: they
/// flag its row together (all but one find it locked by another's flag, or flagged, and
/// ask again), and every one is woken by the completion's one notification, long before a
/// fallback poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundreds_of_waiters_on_one_record_are_woken_by_one_notification() {
    let on = Instances::start().await;
    let mut instances = vec![on.waiter.clone()];
    for _ in 1..4 {
        instances.push(waiter_store(&on.db).await);
    }
    let mut notifications = Notifications::listen(&on.db).await;
    let (record, owner, fp) = (key("crowded"), Owner::random(), Fingerprint::of(["order"]));
    let begun = on.holder.begin_record(&record, &owner, &fp, LONG).await;
    assert_eq!(begun.unwrap(), Begin::Started);
    let since = on.now().await;
    let (waiters, in_progress) = (200, Arc::new(AtomicUsize::new(0)));
    let waiting = all_at_once(waiters, |i| {
        let (store, record) = (instances[i % instances.len()].clone(), record.clone());
        let in_progress = Arc::clone(&in_progress);
        async move {
            in_progress.fetch_add(1, Ordering::SeqCst);
            let started = Instant::now();
            let woken = store.wait_for_record(&record, LONG).await;
            (woken.expect("the wait"), started.elapsed())
        }
    });
    let completing = async {
        eventually(WOKEN_WITHIN, "every waiter waits", || async {
            in_progress.load(Ordering::SeqCst) == waiters
        })
        .await;
        eventually(WOKEN_WITHIN, "the record is flagged", || async {
            flagged(&on.db, "idem_records", &record).await == Some(true)
        })
        .await;
        // The waiters have asked, and none is asking: most sleep now. (One that has not
        // flagged yet sees the completion in its question instead.)
        on.asked("idem_records", &since).await;
        let response = Bytes::from_static(b"done");
        let completed = on.holder.complete_record(&record, &owner, response, LONG);
        assert!(completed.await.unwrap(), "completed");
    };
    let (answers, ()) = tokio::join!(waiting, completing);
    assert_eq!(answers.len(), waiters);
    for (woken, waited) in answers {
        assert!(woken, "woken");
        assert!(waited < 2 * WOKEN_WITHIN, "woken after {waited:?}");
    }
    assert_eq!(
        notifications.so_far().await,
        [format!("r:{}", record.as_str())]
    );
}

/// A lock released and taken again in one transaction, before its waiter could ask: the
/// waiter, woken by the release, finds the new hold, flags its row (the flag went with the
/// released one), and the new holder's release wakes it in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_woken_to_a_lock_taken_again_flags_the_new_hold() {
    let on = Instances::start().await;
    let free = on.waiter.wait_for_release(&key("free"), LONG).await;
    assert!(free.unwrap(), "a free key is free at once");
    on.listening(None).await;
    let (name, first, second) = (key("retaken"), Owner::random(), Owner::random());
    hold(&on.holder, &name, &first).await;
    let waiting = async {
        let started = Instant::now();
        let woken = on.waiter.wait_for_release(&name, LONG).await;
        (woken.expect("the wait"), started.elapsed())
    };
    let letting_go = async {
        let is_flagged = || async { flagged(&on.db, "idem_locks", &name).await == Some(true) };
        eventually(WOKEN_WITHIN, "the waiter flags the first hold", is_flagged).await;
        let pool = on.db.pool().await;
        let mut tx = pool.begin().await.expect("a transaction");
        let released = sqlx::query(
            "WITH gone AS (DELETE FROM idem_locks WHERE key = $1 RETURNING key, waited)
            SELECT pg_notify('idem_wake', 'l:' || key) FROM gone WHERE waited",
        );
        let notified = released.bind(name.as_str()).execute(&mut *tx).await;
        assert_eq!(notified.expect("released").rows_affected(), 1, "notified");
        let taken = sqlx::query(
            "INSERT INTO idem_locks (key, owner, expires_at)
            VALUES ($1, $2, clock_timestamp() + interval '60 seconds')",
        );
        let taken = taken.bind(name.as_str()).bind(second.as_str());
        taken.execute(&mut *tx).await.expect("taken again");
        tx.commit().await.expect("commit");
        eventually(WOKEN_WITHIN, "the waiter flags the second hold", is_flagged).await;
        let released = on.holder.release_and_signal(&name, &second).await;
        assert!(released.unwrap(), "the second holder lets go");
    };
    let ((woken, waited), ()) = tokio::join!(waiting, letting_go);
    assert!(woken, "woken");
    assert!(waited < 2 * WOKEN_WITHIN, "woken after {waited:?}");
}

/// A record completed in a transaction of the application's looked for waiters before the
/// waiter came, and commits only after the waiter has asked (and seen it in progress):
/// the waiter cannot register until that transaction has ended, asks again meanwhile, and
/// sees the record completed soon after the commit, although nothing is notified.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_comes_while_a_completion_commits_is_not_left_asleep() {
    let on = Instances::start().await;
    let free = on.waiter.wait_for_release(&key("free"), LONG).await;
    assert!(free.unwrap(), "a free key is free at once");
    on.listening(None).await;
    let mut notifications = Notifications::listen(&on.db).await;
    let (record, owner, fp) = (
        key("committing"),
        Owner::random(),
        Fingerprint::of(["order"]),
    );
    let begun = on.holder.begin_record(&record, &owner, &fp, LONG).await;
    assert_eq!(begun.unwrap(), Begin::Started);
    let pool = on.db.pool().await;
    let mut tx = on.db.order(&pool).await;
    let response = Bytes::from_static(b"done");
    let completed = PostgresStore::complete_record_in(&mut tx, &record, &owner, response, LONG);
    assert!(completed.await.unwrap(), "completed, not committed yet");
    let since = on.now().await;
    let waiting = async {
        let started = Instant::now();
        let woken = on.waiter.wait_for_record(&record, LONG).await;
        (woken.expect("the wait"), started.elapsed())
    };
    let committing = async {
        on.asked("idem_records", &since).await;
        assert_eq!(
            flagged(&on.db, "idem_records", &record).await,
            Some(false),
            "not flagged while the completion commits"
        );
        tx.commit().await.expect("commit");
    };
    let ((woken, waited), ()) = tokio::join!(waiting, committing);
    assert!(woken, "the record is no longer in progress");
    assert!(waited < WOKEN_WITHIN, "seen after {waited:?}");
    assert_eq!(notifications.so_far().await, Vec::<String>::new());
}

/// In a REPEATABLE READ transaction, PostgreSQL refuses to update a row that changed after
/// the transaction's snapshot: a waiter (a retry of the same key) that flags the record
/// meanwhile makes the completion a serialization failure (40001), as a renewal of the
/// record's lease would. The record is still the attempt's: the same completion in a new
/// transaction commits, and wakes the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repeatable_read_completion_refused_for_a_waiters_flag_commits_when_retried() {
    let on = Instances::start().await;
    let (record, owner, fp) = (key("isolated"), Owner::random(), Fingerprint::of(["order"]));
    let begun = on.holder.begin_record(&record, &owner, &fp, LONG).await;
    assert_eq!(begun.unwrap(), Begin::Started);
    let pool = on.db.pool().await;
    let repeatable_read = || async {
        let mut tx = pool.begin().await.expect("a transaction");
        let level = sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
        level.execute(&mut *tx).await.expect("the isolation level");
        // The transaction's snapshot, taken by its first query.
        sqlx::query("SELECT 1")
            .execute(&mut *tx)
            .await
            .expect("a query");
        tx
    };
    let mut tx = repeatable_read().await;
    let waiting = on.record_waiter(&record).await;
    let response = Bytes::from_static(b"done");
    let refused =
        PostgresStore::complete_record_in(&mut tx, &record, &owner, response.clone(), LONG);
    let error = refused.await.expect_err("a serialization failure");
    let code = error
        .backend_error::<sqlx::Error>()
        .and_then(|error| error.as_database_error())
        .and_then(|error| error.code().map(|code| code.into_owned()));
    assert_eq!(code.as_deref(), Some("40001"), "{error}");
    tx.rollback().await.expect("rollback");

    let mut tx = repeatable_read().await;
    let completed = PostgresStore::complete_record_in(&mut tx, &record, &owner, response, LONG);
    assert!(completed.await.unwrap(), "still the attempt's record");
    tx.commit().await.expect("commit");
    assert!(waiting.await.unwrap().expect("the wait"), "woken");
}

/// A flag whose waiter died (or whose wait ended) wakes the row's next change only: it goes
/// with the row. The rows an earlier version registered in `idem_waiters` are purged once
/// expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flag_goes_with_its_row_and_the_earlier_registry_is_purged() {
    let on = Instances::start().await;
    let store = on.db.store_with(manual()).await;
    let mut notifications = Notifications::listen(&on.db).await;
    let (name, holder) = (key("dead"), Owner::random());
    hold(&store, &name, &holder).await;
    on.db
        .execute(&format!(
            "UPDATE idem_locks SET waited = true WHERE key = '{}'",
            name.as_str()
        ))
        .await;
    assert!(store.release_and_signal(&name, &holder).await.unwrap());
    assert_eq!(
        notifications.so_far().await,
        [format!("l:{}", name.as_str())]
    );
    hold(&store, &name, &holder).await;
    assert!(store.release_and_signal(&name, &holder).await.unwrap());
    assert_eq!(notifications.so_far().await, Vec::<String>::new());

    // A record: flagged while in progress, notified at its completion, and its later
    // removal too.
    let (record, fp) = (key("flagged-record"), Fingerprint::of(["order"]));
    let begun = store.begin_record(&record, &holder, &fp, LONG).await;
    assert_eq!(begun.unwrap(), Begin::Started);
    let waiting = on.record_waiter(&record).await;
    let response = Bytes::from_static(b"done");
    assert!(
        store
            .complete_record(&record, &holder, response, LONG)
            .await
            .unwrap()
    );
    assert!(waiting.await.unwrap().expect("the wait"), "woken");
    let payload = format!("r:{}", record.as_str());
    assert_eq!(notifications.so_far().await, std::slice::from_ref(&payload));
    assert!(store.remove_record(&record).await.unwrap());
    assert_eq!(notifications.so_far().await, [payload]);

    on.db
        .execute(
            "INSERT INTO idem_waiters (payload, waiter, expires_at)
            VALUES ('l:dead', 'died', clock_timestamp() - interval '1 millisecond')",
        )
        .await;
    let purged = store.purge().await.expect("purge");
    assert_eq!(purged.waiters, 1);
    assert_eq!(on.db.count("idem_waiters").await, 0);
}

/// The changes of a row its waiters lock (a lock's release, a record completed or
/// abandoned) look for waiters without the advisory lock a registration tries: their order
/// with a registration comes from the row's own lock. With another session holding that
/// advisory lock for the key, each still answers at once, where a statement that waited
/// for it would run into the store's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_changes_of_a_locked_row_take_no_advisory_lock() {
    let on = Instances::start().await;
    let pool = on.db.pool().await;
    let mut blocker = pool.begin().await.expect("a transaction");
    for payload in ["l:released", "r:completed", "r:abandoned"] {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('idem_wake'), hashtext($1))")
            .bind(payload)
            .execute(&mut *blocker)
            .await
            .expect("the waiters' advisory lock, held");
    }
    let (released, owner) = (key("released"), Owner::random());
    hold(&on.holder, &released, &owner).await;
    assert!(
        on.holder
            .release_and_signal(&released, &owner)
            .await
            .unwrap()
    );
    let fp = Fingerprint::of(["order"]);
    for (name, complete) in [("completed", true), ("abandoned", false)] {
        let record = key(name);
        let begun = on.holder.begin_record(&record, &owner, &fp, LONG).await;
        assert_eq!(begun.unwrap(), Begin::Started);
        if complete {
            let response = Bytes::from_static(b"done");
            let completed = on.holder.complete_record(&record, &owner, response, LONG);
            assert!(completed.await.unwrap(), "{name}");
        } else {
            assert!(
                on.holder.abandon_record(&record, &owner).await.unwrap(),
                "{name}"
            );
        }
    }
    blocker.rollback().await.expect("rollback");
}
