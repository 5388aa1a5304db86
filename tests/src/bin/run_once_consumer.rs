//! A queue consumer that applies one message with `idem_core::run_once` — a payment row
//! in a SQLite database — and is killed (it aborts) right after its transaction commits,
//! before its run returns: the process whose death the run-once suite uses to show what
//! completing the record in the work's own transaction prevents.
//!
//! `run_once_consumer <sqlite-file> <in-transaction|after-commit>`: with
//! `in-transaction` the record completes in the payment's transaction; with
//! `after-commit` the payment commits alone, and the run would complete the record after
//! the work returned. The record's lease is 500 ms.

use std::convert::Infallible;
use std::process::ExitCode;
use std::time::Duration;

use idem_core::run_once::RunOnce;
use idem_sqlx::SqliteStore;

#[tokio::main]
async fn main() -> ExitCode {
    idem_tests::run_helper_process("run_once_consumer", consume).await
}

async fn consume(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let [file, mode] = args.as_slice() else {
        return Err("usage: run_once_consumer <sqlite-file> <in-transaction|after-commit>".into());
    };
    let in_transaction = match mode.as_str() {
        "in-transaction" => true,
        "after-commit" => false,
        other => return Err(format!("unknown mode {other:?}").into()),
    };
    let store = SqliteStore::open(file).await?;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{file}")).await?;
    let once = RunOnce::new(store, "payments").with_lease(Duration::from_millis(500));
    once.run("message-1", "pay 12.99", |attempt| async move {
        let mut tx = pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .expect("a transaction");
        sqlx::query("INSERT INTO payments VALUES ('message-1')")
            .execute(&mut *tx)
            .await
            .expect("the payment");
        if in_transaction {
            let stored = attempt.stored("paid").expect("JSON");
            SqliteStore::commit_with_record(
                tx,
                attempt.key(),
                attempt.owner(),
                stored,
                attempt.retention(),
            )
            .await
            .expect("committed with the record");
        } else {
            tx.commit().await.expect("committed");
        }
        // Killed here: after the commit, before the run returns.
        std::process::abort();
        #[allow(unreachable_code)]
        Ok::<String, Infallible>("paid".to_owned())
    })
    .await?;
    Ok(())
}
