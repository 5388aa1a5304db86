//! PostgreSQL wakes waiters with `NOTIFY`. Each case makes the waiter's fallback poll far
//! longer than the case may take, and lets go only once the waiter has asked and its
//! store's listener listens: from then on only a notification can wake it in time.

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
        let url = format!("{}?application_name={WAITER}", db.url());
        let waiter = PostgresStore::builder()
            .with_fallback_poll(NEVER)
            .connect(&url)
            .await
            .expect("the waiter's store");
        Self {
            holder: db.store(),
            waiter,
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
