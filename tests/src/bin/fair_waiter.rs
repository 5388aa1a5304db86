//! Waits for a fair lock in Redis on request, and says when it got it: the process the
//! fair-lock suite runs twice (or kills) to show that waiters in several processes take
//! the lock in the order they queued.
//!
//! `fair_waiter <key> <place-timeout-ms> <redis-url>` — then, for each line
//! `wait <owner>` on its standard input, a task that takes the fair lock `<key>` as
//! `<owner>` and, holding it, increments the Redis counter `fair-order:<key>`: the
//! order of acquisition as Redis saw it. It prints
//! `acquired <owner> <order> <asked-at-µs> <acquired-at-µs>` (the wall clock, in
//! microseconds since 1970), holds the lock 2 ms and releases it.

use std::process::ExitCode;
use std::time::Duration;

use idem_core::lock::Lease;
use idem_core::{Key, Lock, Owner};
use idem_redis::{RedisServer, RedisStore};
use redis::AsyncCommands;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::main]
async fn main() -> ExitCode {
    idem_tests::run_helper_process("fair_waiter", wait).await
}

async fn wait(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let [key, place_ms, url] = args.as_slice() else {
        return Err("usage: fair_waiter <key> <place-timeout-ms> <redis-url>".into());
    };
    let place_timeout = Duration::from_millis(place_ms.parse()?);
    let store = RedisStore::builder().connect(RedisServer::url(url)).await?;
    let counter = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let key = Key::new(key.as_str())?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let Some(owner) = line.strip_prefix("wait ") else {
            return Err(format!("unknown request {line:?}").into());
        };
        let owner = Owner::new(owner)?;
        let lock = Lock::new(
            store.clone(),
            key.clone(),
            Lease::Fixed(Duration::from_secs(10)),
        )
        .with_owner(owner.clone())
        .fair()
        .with_place_timeout(place_timeout);
        let (mut counter, order_key) = (counter.clone(), format!("fair-order:{key}"));
        tokio::spawn(async move {
            let asked_at = idem_tests::micros_since_epoch();
            let guard = match lock.acquire_within(Duration::from_secs(60)).await {
                Ok(guard) => guard,
                Err(error) => {
                    println!("failed {} {error}", owner.as_str());
                    return;
                }
            };
            let acquired_at = idem_tests::micros_since_epoch();
            let order: u64 = counter.incr(&order_key, 1).await.expect("INCR");
            println!(
                "acquired {} {order} {asked_at} {acquired_at}",
                owner.as_str()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
            if let Err(error) = guard.release().await {
                println!("failed {} {error}", owner.as_str());
            }
        });
    }
    // Standard input closed: the test is over.
    Ok(())
}
