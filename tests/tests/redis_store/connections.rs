//! The store's connections: a pool shared with the application, blocking commands of the
//! application's own, and the bounded waiting connections of lock waiters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem_core::lock::Lease;
use idem_core::store::Fencing;
use idem_core::{Acquire, Lock, LockStore, Owner};
use idem_redis::RedisStore;
use idem_tests::{RedisCluster, RedisServer, eventually, lazy_store};

use crate::{LONG, SLACK, Server, TIMEOUT, acquire_anew, key};

#[tokio::test]
async fn a_store_can_share_an_existing_pool() {
    let server = RedisServer::start();
    let pool = deadpool_redis::Config::from_url(server.url())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let store = lazy_store(RedisStore::builder(), Server::pool(pool.clone()));
    let lock = key("pooled");
    store
        .acquire(&lock, &Owner::random(), LONG, Fencing::Off)
        .await
        .unwrap();
    let mut conn = pool.get().await.unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("idem:{pooled}:lock")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(exists);
}

/// Blocks every connection in `blockers` with `BLPOP key 0` on each of `queues` (one of
/// them per node, so that every socket of a cluster connection blocks), waits until
/// `blocked` servers' clients block, then checks the store still answers within its
/// timeout: its connections are not the application's.
async fn the_store_answers_while_the_application_blocks<C>(
    store: &RedisStore,
    blockers: Vec<C>,
    queues: &[String],
    servers: &[RedisServer],
    blocked: u64,
) where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    let tasks: Vec<_> = blockers
        .into_iter()
        .flat_map(|conn| {
            queues
                .iter()
                .map(move |queue| (conn.clone(), queue.clone()))
        })
        .map(|(mut conn, queue)| {
            tokio::spawn(async move {
                // Stalls its socket on the server for ever (or until the server stops);
                // the client may give up earlier, the server does not.
                let _ = redis::cmd("BLPOP")
                    .arg(&queue)
                    .arg(0)
                    .query_async::<redis::Value>(&mut conn)
                    .await;
            })
        })
        .collect();
    let blocked_now = || {
        servers
            .iter()
            .map(|server| server.info_number("clients", "blocked_clients"))
            .sum::<u64>()
    };
    eventually(
        Duration::from_secs(5),
        "the application's connections block",
        || async { blocked_now() == blocked },
    )
    .await;

    for i in 0..30 {
        let (name, owner) = (key(&format!("while-blocked-{i}")), Owner::random());
        let started = Instant::now();
        let acquired = store.acquire(&name, &owner, LONG, Fencing::Off).await;
        assert!(
            matches!(acquired, Ok(Acquire::Acquired { .. })),
            "acquire {i}: {acquired:?}"
        );
        assert!(store.release(&name, &owner).await.unwrap(), "release {i}");
        assert!(
            started.elapsed() < TIMEOUT + SLACK,
            "{:?}",
            started.elapsed()
        );
    }
    for task in tasks {
        task.abort();
    }
}

/// A store on `server` (a pool the application shares) that has connected already, so
/// that a socket it took from the pool would be there for the application's next checkout.
async fn connected_first(server: Server) -> RedisStore {
    let store = lazy_store(RedisStore::builder().with_timeout(TIMEOUT), server);
    acquire_anew(&store, "first").await.unwrap();
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_application_blpop_on_the_same_pool_does_not_stall_the_store() {
    let server = RedisServer::start();
    let pool = deadpool_redis::Config::from_url(server.url())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let store = connected_first(Server::pool(pool.clone())).await;

    let mut checked_out = Vec::new();
    for _ in 0..4 {
        checked_out.push(pool.get().await.unwrap());
    }
    let blockers = checked_out
        .iter()
        .map(|conn| redis::aio::MultiplexedConnection::clone(conn))
        .collect();
    let queues = ["app:queue".to_owned()];
    the_store_answers_while_the_application_blocks(
        &store,
        blockers,
        &queues,
        std::slice::from_ref(&server),
        4,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_application_blpop_on_the_same_cluster_pool_does_not_stall_the_store() {
    let cluster = RedisCluster::start();
    let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let store = connected_first(Server::cluster(pool.clone())).await;

    // One queue on each node, so that each blocker blocks its socket to every node.
    let nodes = cluster.nodes();
    let mut queues: Vec<String> = Vec::new();
    let mut nodes_hit = std::collections::BTreeSet::new();
    for i in 0.. {
        let queue = format!("app:{{q{i}}}");
        let slot: u64 = nodes[0].query(&["CLUSTER", "KEYSLOT", &queue]);
        let node = match slot {
            0..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        };
        if nodes_hit.insert(node) {
            queues.push(queue);
        }
        if nodes_hit.len() == nodes.len() {
            break;
        }
    }
    let mut checked_out = Vec::new();
    for _ in 0..4 {
        checked_out.push(pool.get().await.unwrap());
    }
    let blockers = checked_out
        .iter()
        .map(|conn| redis::cluster_async::ClusterConnection::clone(conn))
        .collect();
    the_store_answers_while_the_application_blocks(&store, blockers, &queues, nodes, 4 * 3).await;
}

/// What the server reports of its clients, read every 2 ms over one connection of the
/// test's own (which `connected_clients` counts), so that reading adds no connections.
#[derive(Debug, Default)]
struct Clients {
    most_connected: AtomicU64,
    most_blocked: AtomicU64,
    blocked: AtomicU64,
    /// Calls of `EVALSHA`: every attempt to take a lock is one.
    evalsha: AtomicU64,
}

impl Clients {
    async fn watch(server: &RedisServer) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let clients = Arc::new(Self::default());
        let watching = tokio::spawn({
            let clients = Arc::clone(&clients);
            async move {
                loop {
                    let mut info = String::new();
                    for section in ["clients", "commandstats"] {
                        let text: String = redis::cmd("INFO")
                            .arg(section)
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                        info.push_str(&text);
                    }
                    let number = |field: &str| -> u64 {
                        info.lines()
                            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
                            .map(|value| value.split(',').next().unwrap_or(value))
                            .map(|value| value.trim_start_matches("calls="))
                            .and_then(|value| value.trim().parse().ok())
                            .unwrap_or_default()
                    };
                    let blocked = number("blocked_clients");
                    clients.blocked.store(blocked, Ordering::SeqCst);
                    clients.most_blocked.fetch_max(blocked, Ordering::SeqCst);
                    let connected = number("connected_clients");
                    clients
                        .most_connected
                        .fetch_max(connected, Ordering::SeqCst);
                    clients
                        .evalsha
                        .store(number("cmdstat_evalsha"), Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        });
        (clients, watching)
    }
}

/// More lock waiters than the store may open waiting connections: the server never sees
/// more than that many, plus the store's shared connection and the test's own, and every
/// waiter still gets its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lock_waiters_beyond_the_bound_share_the_waiting_connections() {
    const BOUND: u64 = 4;
    const WAITERS: u64 = 24;
    let server = RedisServer::start();
    let store = server.store_with(RedisStore::builder().with_max_waiting_connections(4));
    let name = key("crowded");
    let holder = Lock::new(store.clone(), name.clone(), Lease::Fixed(LONG))
        .try_acquire()
        .await
        .unwrap();
    let (clients, watching) = Clients::watch(&server).await;

    let turns = Arc::new(AtomicU64::new(0));
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let lock = Lock::new(store.clone(), name.clone(), Lease::Fixed(LONG));
            let turns = Arc::clone(&turns);
            tokio::spawn(async move {
                let guard = lock.acquire_within(LONG).await.expect("a turn");
                turns.fetch_add(1, Ordering::SeqCst);
                assert!(guard.release().await.unwrap());
            })
        })
        .collect();
    eventually(
        Duration::from_secs(5),
        "every waiter found the lock held, and waits fill the bound",
        || async {
            clients.evalsha.load(Ordering::SeqCst) > WAITERS
                && clients.blocked.load(Ordering::SeqCst) >= BOUND
        },
    )
    .await;
    assert!(holder.release().await.unwrap());
    for waiter in waiters {
        waiter.await.expect("every waiter ends with its turn");
    }
    watching.abort();

    assert_eq!(turns.load(Ordering::SeqCst), WAITERS);
    let (connected, blocked) = (
        clients.most_connected.load(Ordering::SeqCst),
        clients.most_blocked.load(Ordering::SeqCst),
    );
    println!("{WAITERS} waiters, bound {BOUND}: at most {connected} clients, {blocked} blocked");
    assert!(blocked <= BOUND, "{blocked} clients blocked at once");
    // The store's shared connection, and the one the watching runs on.
    assert!(connected <= BOUND + 2, "{connected} clients at once");
}

/// At the bound, a waiter waits for a waiting connection to come free within its own wait,
/// and when none does, returns as timed out (`false`), not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_gets_no_waiting_connection_times_out() {
    let server = RedisServer::start();
    let store = server.store_with(RedisStore::builder().with_max_waiting_connections(1));
    let (name, holder) = (key("one-seat"), Owner::random());
    store
        .acquire(&name, &holder, LONG, Fencing::On)
        .await
        .unwrap();
    // Registered, as a lock's waiter is, so the release signals it.
    let held = store
        .acquire_or_register_waiter(&name, &Owner::random(), LONG, Fencing::On, LONG)
        .await
        .unwrap();
    assert!(matches!(held, Acquire::Held { .. }));
    let first = tokio::spawn({
        let (store, name) = (store.clone(), name.clone());
        async move { store.wait_for_release(&name, LONG).await }
    });
    eventually(
        Duration::from_secs(5),
        "the first waiter blocks",
        || async { server.info_number("clients", "blocked_clients") == 1 },
    )
    .await;

    let within = Duration::from_millis(200);
    let started = Instant::now();
    let second = store.wait_for_release(&name, within).await;
    let waited = started.elapsed();
    assert!(matches!(second, Ok(false)), "{second:?}");
    assert!(
        waited >= within && waited < within + SLACK,
        "waited {waited:?}"
    );
    assert_eq!(server.info_number("clients", "blocked_clients"), 1);

    assert!(store.release_and_signal(&name, &holder).await.unwrap());
    assert!(first.await.unwrap().unwrap(), "the first waiter is woken");
}
