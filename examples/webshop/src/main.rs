//! `example-webshop`: runs the shop.
//!
//! ```text
//! example-webshop [--port N] [--db URL] [--redis URL] [--payment-provider URL] [--order-lease-ms N]
//! ```
//!
//! | option | environment | default |
//! |---|---|---|
//! | `--port N` | `PORT` | 3000 |
//! | `--db URL` | `DATABASE_URL` | `sqlite://<this crate>/data/webshop.db`, directory created |
//! | `--redis URL` | `IDEM_REDIS_URL` | none: the embedded `MemoryStore` |
//! | `--payment-provider URL` | | none: API orders are not charged; else each is charged through this provider's `POST /payments` (the payments example), with a key derived from the order's record |
//! | `--order-lease-ms N` | | 10000: how long an API order's attempt holds its key should the shop die running it |
//!
//! An option wins over its variable. With `--redis`, the guards' keys and the flash
//! sale's locks live in Redis, so several instances on one database behave as one shop.
//! The idempotency records of API orders and payment callbacks are always in the
//! database, committed with the order or the payment, and so are the browsers' sessions,
//! whose expired rows a background task deletes every hour.
//!
//! For tests only: `IDEM_EXAMPLE_CRASH_AFTER_CHARGE=1` makes the shop kill itself right
//! after the payment provider answered a charge; `IDEM_EXAMPLE_RANDOM_PAYMENT_KEYS=1`
//! charges with a random key per call, for comparison.

use std::path::PathBuf;
use std::time::Duration;

use example_cli::{CommandLine, serve_guarded};
use example_webshop::{PaymentProvider, Shop};

/// How often expired browser sessions are deleted from the database.
const SESSION_CLEANUP: Duration = Duration::from_secs(60 * 60);

const USAGE: &str = "usage: example-webshop [--port N] [--db URL] [--redis URL] \
                     [--payment-provider URL] [--order-lease-ms N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Before the store is made: the series it registers go to the recorder installed then.
    Shop::install_metrics();
    let command_line = CommandLine::parse(
        USAGE,
        &["--db", "--redis", "--payment-provider", "--order-lease-ms"],
    )?;
    let order_lease =
        Duration::from_millis(command_line.number("--order-lease-ms", 10_000)?.max(1));
    let port = command_line.port(3000)?;
    let db = match command_line
        .value("--db")
        .map(str::to_owned)
        .or_else(|| std::env::var("DATABASE_URL").ok().filter(|v| !v.is_empty()))
    {
        Some(db) => db,
        None => default_database()?,
    };
    let mut shop = Shop::new(
        example_webshop::connect(&db).await?,
        command_line.store().await?,
    )
    .with_order_lease(order_lease)
    .with_crash_after_commit(example_cli::crash::switched_on());
    if let Some(url) = command_line.value("--payment-provider") {
        shop = shop.with_payment_provider(PaymentProvider::new(url));
        // Not the provider's URL: the first URL the shop prints is its own.
        println!("API orders are charged through the payment provider (--payment-provider)");
    }
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
