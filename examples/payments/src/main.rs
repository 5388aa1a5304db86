//! `example-payments`: runs the payments API.
//!
//! ```text
//! example-payments [--port N] [--db PATH | --postgres URL] [--redis URL] [--lease-ms N] [--provider-ms N]
//! ```
//!
//! | option | environment | default |
//! |---|---|---|
//! | `--port N` | `PORT` | 3001 |
//! | `--db PATH` | `DATABASE_PATH` | `payments.db` in a new temporary directory, removed when the server stops |
//! | `--postgres URL` | `DATABASE_URL` | none: the payments are in SQLite; with a URL (`postgres://user@host/db`), in that PostgreSQL database, and so are the records |
//! | `--redis URL` | `IDEM_REDIS_URL` | none: the records are in the database, committed with the payments |
//! | `--lease-ms N` | | 10000 |
//! | `--provider-ms N` | | 0: how long the (simulated) payment provider takes to answer |
//!
//! An option wins over its variable. `IDEM_EXAMPLE_CRASH_AFTER_COMMIT=1` is for tests
//! only: the server kills itself right after the first payment commits.

use std::path::PathBuf;
use std::time::Duration;

use example_cli::{CommandLine, serve_guarded};
use example_payments::{Payments, Records};
use idem_axum::{RedisServer, RedisStore};

const USAGE: &str = "usage: example-payments [--port N] [--db PATH | --postgres URL] [--redis URL] [--lease-ms N] \
     [--provider-ms N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let command_line = CommandLine::parse(
        USAGE,
        &[
            "--db",
            "--postgres",
            "--redis",
            "--lease-ms",
            "--provider-ms",
        ],
    )?;
    let port = command_line.port(3001)?;
    let lease = Duration::from_millis(command_line.number("--lease-ms", 10_000)?.max(1));
    let provider_time = Duration::from_millis(command_line.number("--provider-ms", 0)?);
    let redis = command_line.value("--redis");
    let records = match redis {
        Some(url) => Records::InRedis(RedisStore::builder().connect(RedisServer::url(url)).await?),
        None => Records::InDatabase,
    };
    let postgres = command_line
        .value("--postgres")
        .map(str::to_owned)
        .or_else(|| std::env::var("DATABASE_URL").ok().filter(|v| !v.is_empty()));
    if postgres.is_some() && command_line.value("--db").is_some() {
        return Err(format!("give --db or --postgres, not both; {USAGE}").into());
    }
    // Kept until the server stops, which removes it with the default database.
    let temporary = tempfile::tempdir()?;
    let (payments, database) = match postgres {
        Some(url) => {
            let payments = Payments::open_postgres(&url, records).await?;
            (payments, format!("PostgreSQL at {url}"))
        }
        None => {
            let db = command_line
                .value("--db")
                .map(str::to_owned)
                .or_else(|| {
                    std::env::var("DATABASE_PATH")
                        .ok()
                        .filter(|v| !v.is_empty())
                })
                .map_or_else(|| temporary.path().join("payments.db"), PathBuf::from);
            let payments = Payments::open(&db, records).await?;
            (payments, format!("SQLite at {}", db.display()))
        }
    };
    let payments = payments
        .with_lease(lease)
        .with_provider_time(provider_time)
        .with_crash_after_commit(example_cli::crash::switched_on());
    let kept = redis.map_or_else(
        || "the database, committed with the payments".to_owned(),
        |url| format!("Redis at {url}, stored after the payments commit"),
    );
    println!("payments in {database}; idempotency records in {kept}");
    serve_guarded(
        "payments example",
        payments.router(),
        &[payments.idem()],
        port,
    )
    .await?;
    Ok(())
}
