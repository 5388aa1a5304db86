//! Failovers: a `READONLY` reply behind a fixed address, Sentinel promoting a replica, and
//! what waiting for a replica's acknowledgement keeps.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idem_core::store::Fencing;
use idem_core::{Acquire, LockStore, Owner};
use idem_redis::{RedisStore, RedisStoreBuilder, ReplicasBehind};
use idem_tests::{Forwarder, RedisSentinels, RedisServer, eventually, lazy_store};
use redis::RedisError;

use crate::{LONG, Server, TIMEOUT, key};

/// A failover as a client behind a fixed address sees it: server A is demoted to a replica
/// of B and the address now leads to B, but the store's open connection still reaches A,
/// which refuses writes with `READONLY`. The store must then connect anew, to B.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_readonly_reply_after_a_failover_replaces_the_connection() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let address = Forwarder::start(a.port()).await;
    let store = lazy_store(
        RedisStore::builder().with_timeout(TIMEOUT),
        Server::url(address.url()),
    );
    let owner = Owner::random();
    store
        .acquire(&key("on-a"), &owner, LONG, Fencing::Off)
        .await
        .unwrap();

    a.command(&["REPLICAOF", "127.0.0.1", &b.port().to_string()]);
    address.redirect(b.port());

    let mut refused = 0;
    let mut attempts = 0;
    loop {
        attempts += 1;
        assert!(
            attempts <= 5,
            "still refused after {refused} READONLY replies"
        );
        let name = key(&format!("after-failover-{attempts}"));
        match store.acquire(&name, &owner, LONG, Fencing::Off).await {
            Ok(Acquire::Acquired { .. }) => break,
            // Redis 7 answers `READONLY`; before 7.0, a script quotes it in its own error.
            Err(error)
                if error.backend_error::<RedisError>().is_some_and(|error| {
                    error.code() == Some("READONLY") || error.to_string().contains("-READONLY")
                }) =>
            {
                refused += 1;
            }
            other => panic!("attempt {attempts}: {other:?}"),
        }
    }
    assert_eq!(
        (refused, attempts),
        (1, 2),
        "one READONLY from the demoted server, then a new connection to the new primary"
    );
    assert!(
        b.keys()
            .contains(&format!("idem:{{after-failover-{attempts}}}:lock")),
        "written to B: {:?}",
        b.keys()
    );
}

/// Through Redis Sentinel the store follows a failover: the master is killed, the
/// Sentinels promote the replica, the next operations reach the new master, and what the
/// replica had received before survives there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_sentinel_the_store_follows_a_failover() {
    let mut set = RedisSentinels::start();
    let store = set.store_with(RedisStore::builder().with_timeout(TIMEOUT));
    let (held, holder) = (key("held-through-failover"), Owner::random());
    assert!(matches!(
        store
            .acquire(&held, &holder, LONG, Fencing::On)
            .await
            .unwrap(),
        Acquire::Acquired { fence: Some(_) }
    ));
    let replicated = |set: &RedisSentinels| {
        set.replica()
            .keys()
            .iter()
            .any(|key| key.contains("held-through-failover"))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !replicated(&set) {
        assert!(Instant::now() < deadline, "the replica never had the key");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let took = set.fail_over();
    reaches_the_new_master(&store, "after-failover").await;
    assert_eq!(set.current_master_port(), Some(set.replica().port()));
    assert!(
        matches!(
            store
                .acquire(&held, &Owner::random(), LONG, Fencing::Off)
                .await
                .unwrap(),
            Acquire::Held { .. }
        ),
        "the replicated lock survived the failover"
    );
    assert!(
        store.release(&held, &holder).await.unwrap(),
        "and is still its holder's"
    );
    println!("failover: the Sentinels promoted the replica {took:?} after the master was killed");
}

/// How many of the keys `acquire` reported taken, in a stream of acquires that a failover
/// interrupts, the promoted replica no longer holds; and how many were reported taken.
async fn acquisitions_lost_in_a_failover(builder: RedisStoreBuilder) -> (usize, usize) {
    let mut set = RedisSentinels::start();
    let store = set.store_with(builder.with_timeout(TIMEOUT));
    let owner = Owner::random();
    let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|task| {
            let (store, owner, taken, stop) =
                (store.clone(), owner.clone(), taken.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0_u64;
                // Bounded: the failover stops them, and so does a count.
                while !stop.load(Ordering::SeqCst) && i < 200_000 {
                    let name = key(&format!("through-failover-{task}-{i}"));
                    i += 1;
                    if let Ok(Acquire::Acquired { .. }) =
                        store.acquire(&name, &owner, LONG, Fencing::Off).await
                    {
                        taken.lock().unwrap().push(name);
                    }
                }
            })
        })
        .collect();
    // Let the writers run, then kill the master under them.
    let started = Instant::now();
    while taken.lock().unwrap().len() < 2_000 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the writers do not write"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    set.fail_over();
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.await.unwrap();
    }
    let taken = taken.lock().unwrap().clone();
    reaches_the_new_master(&store, "probe").await;
    let mut lost = 0;
    for name in &taken {
        if store.remaining(name).await.unwrap().is_none() {
            lost += 1;
        }
    }
    (lost, taken.len())
}

/// A failover in the middle of a stream of acquires: with the store waiting for one
/// replica's acknowledgement, no acquisition it reported is lost; without, the figure is
/// printed (asynchronous replication may lose the last writes before the kill).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acquisitions_the_replica_acknowledged_survive_a_failover() {
    let (lost, taken) = acquisitions_lost_in_a_failover(
        RedisStore::builder().with_replica_acks(1, Duration::from_millis(200)),
    )
    .await;
    println!("failover, waiting for 1 replica: {lost} of {taken} acquisitions lost");
    assert_eq!(lost, 0, "of {taken}");
    let (lost, taken) = acquisitions_lost_in_a_failover(RedisStore::builder()).await;
    println!("failover, not waiting for replicas: {lost} of {taken} acquisitions lost");
}

/// With its replica gone, a store that waits for one refuses its decisive writes in time,
/// naming the replicas behind; reads and releases go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_its_replica_a_store_that_waits_for_one_refuses_in_time() {
    let mut set = RedisSentinels::start();
    let (timeout, within) = (Duration::from_secs(3), Duration::from_secs(1));
    let store = set.store_with(
        RedisStore::builder()
            .with_timeout(timeout)
            .with_replica_acks(1, within),
    );
    let owner = Owner::random();
    // With the replica up, the write is acknowledged (a loaded machine may need a retry,
    // each on a key of its own: an unacknowledged write still took its key).
    let mut attempt = 0;
    let acked = loop {
        attempt += 1;
        let name = key(&format!("acked-{attempt}"));
        match store.acquire(&name, &owner, LONG, Fencing::Off).await {
            Ok(Acquire::Acquired { .. }) => break name,
            other => assert!(attempt < 10, "never acknowledged: {other:?}"),
        }
    };
    set.stop_replica();
    let started = Instant::now();
    let refused = store
        .acquire(&key("unacked"), &owner, LONG, Fencing::Off)
        .await
        .expect_err("no replica acknowledges");
    assert!(started.elapsed() < timeout, "{:?}", started.elapsed());
    assert_eq!(
        refused.backend_error::<ReplicasBehind>(),
        Some(&ReplicasBehind {
            acknowledged: 0,
            wanted: 1
        })
    );
    assert!(
        store.remaining(&acked).await.unwrap().is_some(),
        "reads go on"
    );
    assert!(store.release(&acked, &owner).await.unwrap(), "and releases");
}

/// Waits until `store` takes the lock `probe` again, on the master a failover promoted.
async fn reaches_the_new_master(store: &RedisStore, probe: &str) {
    let owner = Owner::random();
    eventually(
        Duration::from_secs(10),
        "the store reaches the new master",
        || {
            let (store, owner) = (store.clone(), owner.clone());
            async move {
                matches!(
                    store.acquire(&key(probe), &owner, LONG, Fencing::Off).await,
                    Ok(Acquire::Acquired { .. } | Acquire::Reentered { .. })
                )
            }
        },
    )
    .await;
}
