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

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use example_webshop::Shop;
use idem_axum::{MemoryStore, RedisStore};

/// The port when neither `--port` nor `PORT` gives one.
const DEFAULT_PORT: u16 = 3000;

/// How often expired browser sessions are deleted from the database.
const SESSION_CLEANUP: Duration = Duration::from_secs(60 * 60);

const USAGE: &str = "usage: example-webshop [--port N] [--db URL] [--redis URL]";

/// What the command line and the environment ask for.
#[derive(Debug)]
struct Config {
    port: u16,
    db: String,
    redis: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let config = Config::from_args_and_env()?;
    let db = example_webshop::connect(&config.db).await?;
    let shop = match &config.redis {
        Some(url) => Shop::new(db, RedisStore::from_url(url)?),
        None => Shop::new(db, MemoryStore::new()),
    };
    let cleanup = shop.clone();
    tokio::spawn(async move {
        if let Err(error) = cleanup.delete_expired_sessions(SESSION_CLEANUP).await {
            eprintln!("expired sessions are no longer deleted: {error}");
        }
    });
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, config.port))).await?;
    let store = config.redis.as_deref().unwrap_or("the in-memory store");
    println!(
        "database {} (with the records of API orders and payments), guards on {store}",
        config.db
    );
    println!("idem example shop: open http://{}/", listener.local_addr()?);
    axum::serve(listener, shop.router())
        .with_graceful_shutdown(async {
            // Without a signal handler there is nothing to wait for: serve until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await?;
    Ok(())
}

impl Config {
    /// Options win over variables, which win over the defaults.
    fn from_args_and_env() -> Result<Self, String> {
        let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let mut port = env("PORT");
        let mut db = env("DATABASE_URL");
        let mut redis = env("IDEM_REDIS_URL");
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let slot = match arg.as_str() {
                "--port" => &mut port,
                "--db" => &mut db,
                "--redis" => &mut redis,
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown argument {other:?}; {USAGE}")),
            };
            *slot = Some(args.next().ok_or(format!("{arg} needs a value; {USAGE}"))?);
        }
        let port = port.map_or(Ok(DEFAULT_PORT), |p| {
            p.parse().map_err(|_| format!("invalid port {p:?}"))
        })?;
        let db = match db {
            Some(db) => db,
            None => default_database()?,
        };
        Ok(Self { port, db, redis })
    }
}

/// `data/webshop.db` beside this crate's manifest (ignored by git), so `cargo run -p
/// example-webshop` works from anywhere with no setup and keeps its orders across runs.
fn default_database() -> Result<String, String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(format!("sqlite://{}", dir.join("webshop.db").display()))
}
