//! Opens a `SqliteStore` on a database file and creates idem's tables, then exits: one of
//! the processes the SQL suite starts together on one new file, as instances of an
//! application starting at once do.
//!
//! `sqlite_opener <sqlite-file>`.

use std::process::ExitCode;

use idem_sqlx::SqliteStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    idem_tests::run_helper_process("sqlite_opener", open).await
}

async fn open(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let [file] = args.as_slice() else {
        return Err("usage: sqlite_opener <sqlite-file>".into());
    };
    let store = SqliteStore::open(file).await?;
    store.migrate().await?;
    Ok(())
}
