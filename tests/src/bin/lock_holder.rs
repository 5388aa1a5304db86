//! Takes a lock in Redis, says so on stdout, and holds it until killed: the process whose
//! `SIGKILL` the lock suite uses to show that a dead holder's lock frees after its lease,
//! and whose `SIGSTOP` shows what fencing tokens are for.
//!
//! `lock_holder [--resource <sqlite-file>] <key> <lease-ms> <fixed|watchdog> <redis-url>...`
//! — one URL for a standalone server, the nodes' URLs for a cluster. Prints
//! `acquired <fencing token>`. With `--resource`, each line `write <value>` on its
//! standard input writes `value` to the resource the lock protects, a SQLite database
//! with two one-row tables: to `fenced` only if no holder with a higher token wrote
//! before (`fenced: wrote` or `fenced: refused`), and to `unfenced` as a holder without
//! fencing would (`unfenced: wrote`).

use std::process::ExitCode;
use std::time::Duration;

use idem_core::lock::Lease;
use idem_core::{Key, Lock};
use idem_redis::{RedisServer, RedisStore};
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::main]
async fn main() -> ExitCode {
    idem_tests::run_helper_process("lock_holder", hold).await
}

async fn hold(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let (resource, args) = match args.as_slice() {
        [flag, path, rest @ ..] if flag == "--resource" => (Some(path.clone()), rest.to_vec()),
        _ => (None, args),
    };
    let [key, lease_ms, mode, urls @ ..] = args.as_slice() else {
        return Err("usage: lock_holder <key> <lease-ms> <fixed|watchdog> <redis-url>...".into());
    };
    let lease = Duration::from_millis(lease_ms.parse()?);
    let lease = match mode.as_str() {
        "fixed" => Lease::Fixed(lease),
        "watchdog" => Lease::Watchdog(lease),
        other => return Err(format!("unknown lease kind {other:?}").into()),
    };
    let server = match urls {
        [] => return Err("no Redis URL".into()),
        [url] => RedisServer::url(url),
        nodes => RedisServer::cluster(
            deadpool_redis::cluster::Config::from_urls(nodes.to_vec())
                .create_pool(Some(deadpool_redis::Runtime::Tokio1))?,
        ),
    };
    let store = RedisStore::builder().connect(server).await?;
    let guard = Lock::new(store, Key::new(key.as_str())?, lease)
        .fenced()
        .try_acquire()
        .await?;
    let fence = guard.fencing_token().get();
    println!("acquired {fence}");
    if let Some(resource) = resource {
        write_on_request(&resource, fence).await?;
    }
    // Hold (and, with a watchdog lease, keep renewing) until killed.
    std::future::pending::<()>().await;
    drop(guard);
    Ok(())
}

/// Writes to the resource at `path` as its standard input asks, with fencing token
/// `fence`, until the input ends.
async fn write_on_request(path: &str, fence: u64) -> Result<(), Box<dyn std::error::Error>> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{path}")).await?;
    let fence = i64::try_from(fence)?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let Some(value) = line.strip_prefix("write ") else {
            continue;
        };
        let fenced = sqlx::query("UPDATE fenced SET value = ?1, fence = ?2 WHERE fence < ?2")
            .bind(value)
            .bind(fence)
            .execute(&pool)
            .await?;
        let fenced = if fenced.rows_affected() == 1 {
            "wrote"
        } else {
            "refused"
        };
        sqlx::query("UPDATE unfenced SET value = ?1")
            .bind(value)
            .execute(&pool)
            .await?;
        println!("fenced: {fenced}");
        println!("unfenced: wrote");
    }
    Ok(())
}
