//! On the SQL stores: the work completes its record in its own transaction, with its own
//! writes (`Attempt::stored`, then `commit_with_record`). A run that dies right after its
//! commit — a panic here, a process killed with `SIGABRT` in the helper process's case —
//! has applied its message once, and a redelivery gets its result; the same run with the
//! record completed after the commit, apart from the writes, applies it twice.

use std::convert::Infallible;
use std::process::Command;
use std::time::Duration;

use idem_core::run_once::{RunError, RunOnce};
use idem_sqlx::SqlStore;
use idem_tests::{Backend, PostgresBackend, SqlDatabase, SqliteBackend, Statements, eventually};

const PAYMENTS: &str = "CREATE TABLE IF NOT EXISTS payments (message TEXT)";

/// A run that commits its payment and its record together, then panics before it
/// returns: the redelivery replays its result, and there is one payment. A run whose
/// record was taken by another meanwhile commits nothing.
async fn the_record_commits_with_the_works_writes<B: SqlDatabase>() {
    let backend = B::start().await;
    backend.execute(PAYMENTS).await;
    let pool = backend.pool().await;
    let once = RunOnce::new(backend.store(), "payments");
    let crashed = tokio::spawn({
        let (once, pool) = (once.clone(), pool.clone());
        async move {
            once.run("message-1", "pay 12.99", |attempt| async move {
                let mut tx = pool.begin_with(B::BEGIN).await.expect("a transaction");
                B::DB::execute_on(&mut tx, "INSERT INTO payments VALUES ('message-1')")
                    .await
                    .expect("the payment");
                let stored = attempt.stored("paid").expect("JSON");
                SqlStore::<B::DB>::commit_with_record(
                    tx,
                    attempt.key(),
                    attempt.owner(),
                    stored,
                    attempt.retention(),
                )
                .await
                .expect("committed");
                panic!("the consumer dies right after its commit");
                #[allow(unreachable_code)]
                Ok::<String, Infallible>("paid".to_owned())
            })
            .await
        }
    });
    assert!(crashed.await.is_err(), "the run died");
    let redelivered = once
        .run("message-1", "pay 12.99", |_| async {
            Ok::<String, Infallible>("paid again".into())
        })
        .await;
    assert_eq!(redelivered.expect("replayed"), "paid");
    assert_eq!(backend.count("payments").await, 1);

    // A run that took its record over and failed before its commit (rolled back): the
    // key is given back, and the redelivery runs the work.
    let failed = once
        .run("message-2", "pay 5.00", |attempt| async move {
            attempt.take_over();
            let mut tx = pool.begin_with(B::BEGIN).await.expect("a transaction");
            B::DB::execute_on(&mut tx, "INSERT INTO payments VALUES ('message-2')")
                .await
                .expect("the payment");
            Err::<String, _>("the provider declined; the transaction rolls back")
        })
        .await;
    assert!(matches!(failed, Err(RunError::Failed(_))), "{failed:?}");
    eventually(Duration::from_secs(5), "the redelivery runs", || async {
        once.run("message-2", "pay 5.00", |_| async {
            Ok::<_, Infallible>("ran".to_owned())
        })
        .await
        .is_ok_and(|answer| answer == "ran")
    })
    .await;
    assert_eq!(
        backend.count("payments").await,
        1,
        "the failed run's payment rolled back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_the_record_commits_with_the_works_writes() {
    the_record_commits_with_the_works_writes::<PostgresBackend>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_the_record_commits_with_the_works_writes() {
    the_record_commits_with_the_works_writes::<SqliteBackend>().await;
}

/// A consumer process killed right after its commit (`run_once_consumer`, which aborts
/// there), then the message delivered again: with the record in the work's transaction
/// the redelivery replays it and the payment is made once; with the record completed
/// after the commit, the redelivery runs the work again once the dead run's lease ends,
/// and the payment is made twice — what the transactional completion prevents.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_killed_after_its_commit_applies_the_message_once() {
    for (mode, payments) in [("in-transaction", 1), ("after-commit", 2)] {
        let backend = SqliteBackend::start().await;
        backend.execute(PAYMENTS).await;
        let status = Command::new(env!("CARGO_BIN_EXE_run_once_consumer"))
            .args([backend.path().to_str().expect("a UTF-8 path"), mode])
            .status()
            .expect("the consumer starts");
        assert!(
            !status.success(),
            "{mode}: the consumer died after its commit"
        );
        assert_eq!(
            backend.count("payments").await,
            1,
            "{mode}: its payment committed"
        );

        let once = RunOnce::new(backend.store(), "payments");
        let pool = backend.pool().await;
        eventually(
            Duration::from_secs(10),
            "the redelivery is answered",
            || async {
                let redelivered = once
                    .run("message-1", "pay 12.99", |_| async {
                        sqlx::query("INSERT INTO payments VALUES ('message-1')")
                            .execute(&pool)
                            .await
                            .expect("the payment");
                        Ok::<_, Infallible>("paid".to_owned())
                    })
                    .await;
                !matches!(redelivered, Err(RunError::InProgress { .. }))
            },
        )
        .await;
        assert_eq!(backend.count("payments").await, payments, "{mode}");
    }
}
