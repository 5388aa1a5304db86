//! `example-lock [--port N] [--redis URL] [--db PATH] [--lease-ms N]`: serves the example
//! on `http://127.0.0.1:3005/`.
//!
//! | option | default |
//! |---|---|
//! | `--port N` (or `PORT`) | 3005 |
//! | `--redis URL` (or `IDEM_REDIS_URL`) | none: the lock in memory, this process's own |
//! | `--db PATH` | `row.db` in a new temporary directory, removed when the server stops |
//! | `--lease-ms N` | 1000 |
//!
//! Processes given one `--redis` and one `--db` share the lock and the row.

use std::time::Duration;

use example_cli::{CommandLine, serve};
use example_lock::LockExample;

const USAGE: &str = "usage: example-lock [--port N] [--redis URL] [--db PATH] [--lease-ms N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let command_line = CommandLine::parse(USAGE, &["--redis", "--db", "--lease-ms"])?;
    // Kept until the server stops, which removes it with the default database.
    let temporary = tempfile::tempdir()?;
    let db = command_line
        .value("--db")
        .map_or_else(|| temporary.path().join("row.db"), std::path::PathBuf::from);
    let lease = Duration::from_millis(command_line.number("--lease-ms", 1000)?.max(1));
    let example = LockExample::open(command_line.store().await?, &db)
        .await?
        .with_lease(lease);
    let what = format!(
        "lock example, the lock {} ({} ms lease), the row in {}",
        command_line.store_name(),
        lease.as_millis(),
        db.display()
    );
    serve(&what, example.router(), command_line.port(3005)?).await?;
    Ok(())
}
