//! `example-payments`: runs the payments API.
//!
//! ```text
//! example-payments [--port N] [--db PATH] [--redis URL] [--lease-ms N]
//! ```
//!
//! | option | environment | default |
//! |---|---|---|
//! | `--port N` | `PORT` | 3001 |
//! | `--db PATH` | `DATABASE_PATH` | `payments.db` in a new temporary directory, removed when the server stops |
//! | `--redis URL` | `IDEM_REDIS_URL` | none: the records are in the database, committed with the payments |
//! | `--lease-ms N` | | 10000 |
//!
//! An option wins over its variable. `IDEM_EXAMPLE_CRASH_AFTER_COMMIT=1` is for tests
//! only: the server kills itself right after the first payment commits.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use example_payments::{CRASH_AFTER_COMMIT, Payments, Records};
use idem_axum::RedisStore;

const USAGE: &str = "usage: example-payments [--port N] [--db PATH] [--redis URL] [--lease-ms N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let options = Options::from_args_and_env()?;
    // Kept until the server stops, which removes it with the default database.
    let temporary = tempfile::tempdir()?;
    let db = options
        .db
        .unwrap_or_else(|| temporary.path().join("payments.db"));
    let records = match &options.redis {
        Some(url) => Records::InRedis(RedisStore::from_url(url)?),
        None => Records::InDatabase,
    };
    let payments = Payments::open(&db, records)
        .await?
        .with_lease(options.lease)
        .with_crash_after_commit(std::env::var(CRASH_AFTER_COMMIT).is_ok_and(|on| on == "1"));
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, options.port)))
            .await?;
    let kept = options.redis.as_deref().map_or_else(
        || "the database, committed with the payments".to_owned(),
        |url| format!("Redis at {url}, stored after the payments commit"),
    );
    println!("database {}; idempotency records in {kept}", db.display());
    println!(
        "payments example: listening on http://{}/",
        listener.local_addr()?
    );
    let app = payments
        .router()
        .into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            // Without a signal handler there is nothing to wait for: serve until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await?;
    Ok(())
}

/// What the command line and the environment ask for.
#[derive(Debug)]
struct Options {
    port: u16,
    db: Option<PathBuf>,
    redis: Option<String>,
    lease: Duration,
}

impl Options {
    /// Options win over variables, which win over the defaults.
    fn from_args_and_env() -> Result<Self, String> {
        let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let (mut port, mut db, mut redis) =
            (env("PORT"), env("DATABASE_PATH"), env("IDEM_REDIS_URL"));
        let mut lease = None;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let slot = match arg.as_str() {
                "--port" => &mut port,
                "--db" => &mut db,
                "--redis" => &mut redis,
                "--lease-ms" => &mut lease,
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown argument {other:?}; {USAGE}")),
            };
            *slot = Some(args.next().ok_or(format!("{arg} needs a value; {USAGE}"))?);
        }
        let number = |name: &str, value: Option<String>, default: u64| {
            value.map_or(Ok(default), |v| {
                v.parse().map_err(|_| format!("invalid {name} {v:?}"))
            })
        };
        Ok(Self {
            port: u16::try_from(number("port", port, 3001)?)
                .map_err(|_| "the port must be below 65536".to_owned())?,
            db: db.map(PathBuf::from),
            redis,
            lease: Duration::from_millis(number("lease", lease, 10_000)?.max(1)),
        })
    }
}
