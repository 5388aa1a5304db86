//! `example-webshop`: runs the shop.
//!
//! ```text
//! example-webshop [--port N] [--db URL] [--redis URL]
//! ```
//!
//! | option | environment | default |
//! |---|---|---|
//! | `--port N` | `PORT` | 3000 |
//! | `--db URL` | `DATABASE_URL` | `sqlite://<this crate>/data/webshop.db`, directory created |
//! | `--redis URL` | `IDEM_REDIS_URL` | none: the embedded `MemoryStore` |
//!
//! An option wins over its variable. With `--redis`, the guards' keys and the flash
//! sale's locks live in Redis, so several instances on one database behave as one shop.
//! The idempotency records of API orders and payment callbacks are always in the
//! database, committed with the order or the payment, and so are the browsers' sessions,
//! whose expired rows a background task deletes every hour.

use std::path::PathBuf;
use std::time::Duration;

use example_cli::{CommandLine, serve_guarded};
use example_webshop::Shop;

/// How often expired browser sessions are deleted from the database.
const SESSION_CLEANUP: Duration = Duration::from_secs(60 * 60);

const USAGE: &str = "usage: example-webshop [--port N] [--db URL] [--redis URL]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let command_line = CommandLine::parse(USAGE, &["--db", "--redis"])?;
    let port = command_line.port(3000)?;
    let db = match command_line
        .value("--db")
        .map(str::to_owned)
        .or_else(|| std::env::var("DATABASE_URL").ok().filter(|v| !v.is_empty()))
    {
        Some(db) => db,
        None => default_database()?,
    };
    let shop = Shop::new(
        example_webshop::connect(&db).await?,
        command_line.store().await?,
    )
    .with_crash_after_commit(example_cli::crash::switched_on());
    let cleanup = shop.clone();
    tokio::spawn(async move {
        if let Err(error) = cleanup.delete_expired_sessions(SESSION_CLEANUP).await {
            eprintln!("expired sessions are no longer deleted: {error}");
        }
    });
    println!(
        "database {db} (with the records of API orders and payments), guards {}",
        command_line.store_name()
    );
    serve_guarded("idem example shop", shop.router(), &shop.runtimes(), port).await?;
    Ok(())
}

/// `data/webshop.db` beside this crate's manifest (ignored by git), so `cargo run -p
/// example-webshop` works from anywhere with no setup and keeps its orders across runs.
fn default_database() -> Result<String, String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(format!("sqlite://{}", dir.join("webshop.db").display()))
}
