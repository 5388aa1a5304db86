//! Takes a lock in Redis, says so on stdout, and holds it until killed: the process whose
//! `SIGKILL` the lock suite uses to show that a dead holder's lock frees after its lease.
//!
//! `lock_holder <key> <lease-ms> <fixed|watchdog> <redis-url>...` — one URL for a
//! standalone server, the nodes' URLs for a cluster. Prints `acquired <fencing token>`.

use std::process::ExitCode;
use std::time::Duration;

use idem_core::{Key, Lease, Lock, RedisStore};

#[tokio::main]
async fn main() -> ExitCode {
    match hold(std::env::args().skip(1).collect()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("lock_holder: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn hold(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let [key, lease_ms, mode, urls @ ..] = args.as_slice() else {
        return Err("usage: lock_holder <key> <lease-ms> <fixed|watchdog> <redis-url>...".into());
    };
    let lease = Duration::from_millis(lease_ms.parse()?);
    let lease = match mode.as_str() {
        "fixed" => Lease::Fixed(lease),
        "watchdog" => Lease::Watchdog(lease),
        other => return Err(format!("unknown lease kind {other:?}").into()),
    };
    let store = match urls {
        [] => return Err("no Redis URL".into()),
        [url] => RedisStore::from_url(url)?,
        nodes => {
            let pool = deadpool_redis::cluster::Config::from_urls(nodes.to_vec())
                .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
            RedisStore::builder().build_with_cluster_pool(pool)?
        }
    };
    let guard = Lock::new(store, Key::new(key.as_str())?, lease)
        .try_acquire()
        .await?;
    println!("acquired {}", guard.fencing_token().get());
    // Hold (and, with a watchdog lease, keep renewing) until killed.
    std::future::pending::<()>().await;
    drop(guard);
    Ok(())
}
