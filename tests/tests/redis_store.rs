//! What only `RedisStore` has to get right: outages and timeouts, reconnecting, reloading
//! scripts, its key layout and namespaces, Redis Cluster slots, and how many commands an
//! operation costs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_core::lock::Lease;
use idem_core::store::Fencing;
use idem_core::{Acquire, Begin, Fingerprint, Key, Lock, Owner, Store, StoreError};
// `RedisServer` is the harness's server process; idem-redis' names where a store finds it.
use idem_redis::RedisServer as Server;
use idem_redis::{EvictionCheck, RedisSetupError, RedisStore, RedisStoreBuilder, ReplicasBehind};
use idem_tests::{Forwarder, RedisCluster, RedisSentinels, RedisServer, eventually, unused_port};
use redis::RedisError;

const TIMEOUT: Duration = Duration::from_millis(300);
/// What the issue allows on top of the store's timeout before a call must have returned.
const SLACK: Duration = Duration::from_millis(100);
const LONG: Duration = Duration::from_secs(60);

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// Runs one of each kind of operation and checks each fails, typed, within the timeout.
async fn each_operation_fails_in_time(store: &RedisStore, is_expected: fn(&StoreError) -> bool) {
    let (k, owner) = (key("outage"), Owner::random());
    let fp = Fingerprint::of(["x"]);
    let started = Instant::now();
    let acquire = store
        .acquire(&k, &owner, LONG, Fencing::Off)
        .await
        .map(drop);
    let elapsed_acquire = started.elapsed();
    let started = Instant::now();
    let fenced = store.acquire(&k, &owner, LONG, Fencing::On).await.map(drop);
    let elapsed_fenced = started.elapsed();
    let started = Instant::now();
    let consume = store.consume_token(&k, &k).await.map(drop);
    let elapsed_consume = started.elapsed();
    let started = Instant::now();
    let begin = store.begin_record(&k, &owner, &fp, LONG).await.map(drop);
    let elapsed_begin = started.elapsed();
    for (name, result, elapsed) in [
        ("acquire", acquire, elapsed_acquire),
        ("acquire fenced", fenced, elapsed_fenced),
        ("consume_token", consume, elapsed_consume),
        ("begin_record", begin, elapsed_begin),
    ] {
        let error = result.expect_err(name);
        assert!(is_expected(&error), "{name}: unexpected error {error:?}");
        assert!(elapsed < TIMEOUT + SLACK, "{name} took {elapsed:?}");
    }
}

#[tokio::test]
async fn nothing_listening_is_a_typed_error_within_the_timeout() {
    let url = format!("redis://127.0.0.1:{}/", unused_port());
    let store = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .with_lazy_connect(true)
        .connect(Server::url(url))
        .await
        .unwrap();
    // Refused at once: a connection error, not a wait for the timeout.
    each_operation_fails_in_time(&store, |e| e.backend_error::<RedisError>().is_some()).await;
}

#[tokio::test]
async fn a_paused_server_times_out_and_the_store_recovers() {
    let server = RedisServer::start();
    let warm = server.store_with(RedisStore::builder().with_timeout(TIMEOUT));
    warm.acquire(&key("before"), &Owner::random(), LONG, Fencing::Off)
        .await
        .unwrap();
    let cold = server.store_with(RedisStore::builder().with_timeout(TIMEOUT));

    // Long enough for the eight checks below (300 ms each). `CLIENT UNPAUSE` would be
    // paused too, so the pause just runs out.
    server.command(&["CLIENT", "PAUSE", "4000", "ALL"]);
    let paused_at = Instant::now();
    each_operation_fails_in_time(
        &warm,
        |e| matches!(e, StoreError::Timeout(t) if *t == TIMEOUT),
    )
    .await;
    each_operation_fails_in_time(
        &cold,
        |e| matches!(e, StoreError::Timeout(t) if *t == TIMEOUT),
    )
    .await;
    assert!(
        paused_at.elapsed() < Duration::from_secs(4),
        "the checks ran inside the pause"
    );

    // Once the pause ends, both stores work again without being rebuilt.
    let deadline = paused_at + Duration::from_secs(10);
    for store in [&warm, &cold] {
        loop {
            match store
                .acquire(&key("after"), &Owner::random(), LONG, Fencing::Off)
                .await
            {
                Ok(_) => break,
                Err(StoreError::Timeout(_)) if Instant::now() < deadline => {}
                Err(error) => panic!("after the pause: {error:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_restarted_server_is_reconnected_and_its_scripts_reloaded() {
    let mut server = RedisServer::start();
    let store = server.store();
    let lock = key("restart");
    let owner = Owner::random();
    store
        .acquire(&lock, &owner, LONG, Fencing::On)
        .await
        .unwrap();

    server.restart(); // data, script cache and connections gone

    // The first call may meet the cut connection; the store then takes a fresh one.
    let mut failures = 0;
    let acquired = loop {
        match store.acquire(&lock, &owner, LONG, Fencing::On).await {
            Ok(acquired) => break acquired,
            Err(error) if failures == 0 => {
                let error = error.backend_error::<RedisError>().expect("a Redis error");
                assert!(
                    error.is_io_error() || error.is_connection_dropped(),
                    "{error:?}"
                );
                failures += 1;
            }
            Err(error) => panic!("after {failures} failure(s): {error:?}"),
        }
    };
    assert!(
        matches!(acquired, Acquire::Acquired { fence: Some(_) }),
        "{acquired:?}"
    );
    assert!(store.release(&lock, &owner).await.unwrap());
}

#[tokio::test]
async fn scripts_are_loaded_again_after_script_flush() {
    let server = RedisServer::start();
    let store = server.store();
    let (lock, owner) = (key("flushed"), Owner::random());
    store
        .acquire(&lock, &owner, LONG, Fencing::On)
        .await
        .unwrap();
    store.renew(&lock, &owner, LONG).await.unwrap();
    server.command(&["SCRIPT", "FLUSH"]);
    assert!(
        store.renew(&lock, &owner, LONG).await.unwrap(),
        "NOSCRIPT, then loaded and run"
    );
    assert!(store.release(&lock, &owner).await.unwrap());
}

#[tokio::test]
async fn keys_carry_the_namespace_and_one_hash_tag() {
    let server = RedisServer::start();
    let shop = server.store_with(RedisStore::builder().with_namespace("shop"));
    let other = server.store_with(RedisStore::builder().with_namespace("billing"));
    let (name, owner) = (key("order-7"), Owner::random());

    shop.acquire(&name, &owner, LONG, Fencing::On)
        .await
        .unwrap();
    let client = key("client-7");
    shop.put_token(&client, &name, LONG, 16).await.unwrap();
    shop.begin_record(&name, &owner, &Fingerprint::of(["f"]), LONG)
        .await
        .unwrap();
    let (tokens, guards): (Vec<String>, Vec<String>) = server
        .keys()
        .into_iter()
        .partition(|key| key.starts_with("shop:{tokens/"));
    assert_eq!(
        guards,
        [
            "shop:{order-7}:fence",
            "shop:{order-7}:lock",
            "shop:{order-7}:record",
        ]
    );
    // A client's tokens: its bucket's set and its own, under the bucket's one hash tag.
    let [all, scope] = <[String; 2]>::try_from(tokens).expect("two token keys");
    let bucket = all.strip_suffix(":all").expect("the bucket's set");
    assert_eq!(scope, format!("{bucket}:scope:client-7"));

    // Another namespace on the same server is another world.
    assert!(matches!(
        other
            .acquire(&name, &Owner::random(), LONG, Fencing::Off)
            .await
            .unwrap(),
        Acquire::Acquired { .. }
    ));
    assert!(!other.consume_token(&client, &name).await.unwrap());
    assert!(shop.consume_token(&client, &name).await.unwrap());
}

#[tokio::test]
async fn a_bad_namespace_or_url_is_refused_when_building() {
    let built = RedisStore::builder()
        .with_namespace("a{b}")
        .connect(Server::url("redis://127.0.0.1:1/"))
        .await;
    assert!(
        matches!(built, Err(RedisSetupError::Namespace(_))),
        "{built:?}"
    );
    let built = RedisStore::builder()
        .connect(Server::url("http://not-redis/"))
        .await;
    assert!(matches!(built, Err(RedisSetupError::Url(_))), "{built:?}");
}

#[tokio::test]
async fn a_store_can_share_an_existing_pool() {
    let server = RedisServer::start();
    let pool = deadpool_redis::Config::from_url(server.url())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let store = RedisStore::builder()
        .with_lazy_connect(true)
        .connect(Server::pool(pool.clone()))
        .await
        .unwrap();
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

#[tokio::test]
async fn in_a_cluster_every_operation_stays_in_one_slot() {
    let cluster = RedisCluster::start();
    let store = cluster.store();
    for i in 0..60 {
        let (name, owner) = (key(&format!("order-{i}")), Owner::random());
        store
            .acquire(&name, &owner, LONG, Fencing::On)
            .await
            .unwrap();
        store.put_token(&name, &name, LONG, 16).await.unwrap();
        store
            .begin_record(&name, &owner, &Fingerprint::of(["f"]), LONG)
            .await
            .unwrap();
    }
    let mut nodes_of: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for (port, redis_key) in cluster.keys_by_node() {
        let tag = redis_key
            .split(['{', '}'])
            .nth(1)
            .expect("a hash tag")
            .to_owned();
        nodes_of.entry(tag).or_default().push(port);
    }
    let guard_tags = nodes_of
        .iter()
        .filter(|(tag, _)| !tag.starts_with("tokens/"));
    assert_eq!(guard_tags.clone().count(), 60);
    for (tag, ports) in guard_tags {
        assert_eq!(ports.len(), 3, "{tag}: lock, fence, record");
    }
    for (tag, ports) in &nodes_of {
        assert!(
            ports.iter().all(|p| *p == ports[0]),
            "{tag} is split over nodes {ports:?}"
        );
    }
    let nodes_used: std::collections::BTreeSet<u16> =
        nodes_of.values().map(|ports| ports[0]).collect();
    assert_eq!(
        nodes_used.len(),
        3,
        "keys spread over every node, so the check above means something"
    );
}

#[tokio::test]
async fn the_accept_path_costs_one_command() {
    let server = RedisServer::start();
    let store = server.store();
    // Open the connection and load the release script first: neither is the accept path.
    store
        .release(&key("warm-up"), &Owner::random())
        .await
        .unwrap();

    let owners: Vec<(Key, Owner)> = (0..100)
        .map(|i| (Key::hashed([format!("k{i}")]), Owner::random()))
        .collect();
    let before = server.command_calls();
    for (k, owner) in &owners {
        store.acquire(k, owner, LONG, Fencing::Off).await.unwrap();
    }
    assert_eq!(
        server.command_calls_since(&before),
        BTreeMap::from([("set".to_owned(), 100)])
    );

    for (k, _) in &owners {
        store.put_token(k, k, LONG, 16).await.unwrap();
    }
    // Load the spending script first: that is not the accept path either.
    let warm_up = key("warm-up");
    assert!(!store.consume_token(&warm_up, &warm_up).await.unwrap());
    let before = server.command_calls();
    for (k, _) in &owners {
        assert!(store.consume_token(k, k).await.unwrap());
    }
    // One EVALSHA each (one round trip); the script's own commands show too.
    assert_eq!(
        server.command_calls_since(&before),
        BTreeMap::from([
            ("evalsha".to_owned(), 100),
            ("time".to_owned(), 100),
            ("zrem".to_owned(), 200),
            ("zscore".to_owned(), 100),
        ])
    );

    let before = server.command_calls();
    for (k, owner) in &owners {
        assert!(store.release(k, owner).await.unwrap());
    }
    // One EVALSHA each; the script's own GET and DEL show in the statistics too.
    assert_eq!(
        server.command_calls_since(&before),
        BTreeMap::from([
            ("del".to_owned(), 100),
            ("evalsha".to_owned(), 100),
            ("get".to_owned(), 100)
        ])
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_application_blpop_on_the_same_pool_does_not_stall_the_store() {
    let server = RedisServer::start();
    let pool = deadpool_redis::Config::from_url(server.url())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let store = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .with_lazy_connect(true)
        .connect(Server::pool(pool.clone()))
        .await
        .unwrap();
    // The store connects first, so that a socket it took from the pool would be there for
    // the application's next checkout.
    store
        .acquire(&key("first"), &Owner::random(), LONG, Fencing::Off)
        .await
        .unwrap();

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
    let store = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .with_lazy_connect(true)
        .connect(Server::cluster(pool.clone()))
        .await
        .unwrap();
    store
        .acquire(&key("first"), &Owner::random(), LONG, Fencing::Off)
        .await
        .unwrap();

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

/// A failover as a client behind a fixed address sees it: server A is demoted to a replica
/// of B and the address now leads to B, but the store's open connection still reaches A,
/// which refuses writes with `READONLY`. The store must then connect anew, to B.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_readonly_reply_after_a_failover_replaces_the_connection() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let address = Forwarder::start(a.port()).await;
    let store = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .with_lazy_connect(true)
        .connect(Server::url(address.url()))
        .await
        .unwrap();
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

#[tokio::test]
async fn a_server_that_may_evict_keys_is_refused_when_set_to() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let refuse = || {
        RedisStore::builder()
            .with_timeout(TIMEOUT)
            .with_eviction_policy_check(EvictionCheck::Refuse)
    };

    let connected = refuse().connect(Server::url(server.url())).await;
    match connected {
        Err(error @ RedisSetupError::EvictionPolicy { .. }) => {
            assert!(error.to_string().contains("allkeys-lru"), "{error}");
        }
        other => panic!("expected the policy to be refused, got {other:?}"),
    }

    // Built lazily, the store refuses on first use instead, and writes nothing.
    let lazy = refuse()
        .with_lazy_connect(true)
        .connect(Server::url(server.url()))
        .await
        .unwrap();
    for _ in 0..3 {
        let acquired = lazy
            .acquire(&key("evictable"), &Owner::random(), LONG, Fencing::Off)
            .await;
        assert!(
            matches!(
                acquired.as_ref().map_err(StoreError::backend_error::<RedisSetupError>),
                Err(Some(RedisSetupError::EvictionPolicy { policy })) if policy == "allkeys-lru"
            ),
            "{acquired:?}"
        );
    }
    assert_eq!(server.keys(), Vec::<String>::new());

    // Once the server is set right, the same store uses it.
    server.command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    eventually(
        Duration::from_secs(5),
        "the server is used again",
        || async {
            lazy.acquire(&key("evictable"), &Owner::random(), LONG, Fencing::Off)
                .await
                .is_ok()
        },
    )
    .await;
}

#[tokio::test]
async fn a_server_that_may_evict_keys_is_used_with_a_warning_by_default() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let store = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .connect(Server::url(server.url()))
        .await
        .expect("warned, not refused");
    assert!(matches!(
        store
            .acquire(&key("warned"), &Owner::random(), LONG, Fencing::Off)
            .await
            .unwrap(),
        Acquire::Acquired { .. }
    ));
}

#[tokio::test]
async fn a_noeviction_server_passes_the_check() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let store = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .with_eviction_policy_check(EvictionCheck::Refuse)
        .connect(Server::url(server.url()))
        .await
        .expect("noeviction passes");
    assert!(matches!(
        store
            .acquire(&key("kept"), &Owner::random(), LONG, Fencing::Off)
            .await
            .unwrap(),
        Acquire::Acquired { .. }
    ));
}

/// As on managed services that disable `CONFIG`: the policy cannot be read, so the check
/// is skipped (and logged), even when set to refuse.
#[tokio::test]
async fn a_server_that_will_not_tell_its_policy_is_used() {
    let server = RedisServer::start_with(&[
        "--maxmemory-policy",
        "allkeys-lru",
        "--rename-command",
        "CONFIG",
        "",
    ]);
    let store = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .with_eviction_policy_check(EvictionCheck::Refuse)
        .connect(Server::url(server.url()))
        .await
        .expect("an unreadable policy is not a refusal");
    assert!(matches!(
        store
            .acquire(&key("unchecked"), &Owner::random(), LONG, Fencing::Off)
            .await
            .unwrap(),
        Acquire::Acquired { .. }
    ));
}

/// Every primary is checked: one node that may evict is enough to refuse the cluster.
#[tokio::test]
async fn a_cluster_with_one_evicting_primary_is_refused_when_set_to() {
    let cluster = RedisCluster::start();
    let pool = || {
        deadpool_redis::cluster::Config::from_urls(cluster.urls())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap()
    };
    let refuse = || {
        RedisStore::builder()
            .with_timeout(Duration::from_secs(2))
            .with_eviction_policy_check(EvictionCheck::Refuse)
    };
    refuse()
        .connect(Server::cluster(pool()))
        .await
        .expect("every primary is noeviction");

    cluster.nodes()[2].command(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
    let connected = refuse().connect(Server::cluster(pool())).await;
    assert!(
        matches!(&connected, Err(RedisSetupError::EvictionPolicy { policy }) if policy == "volatile-ttl"),
        "{connected:?}"
    );
}

/// Servers before Redis 7.0 refuse `SET … NX … GET`; there `acquire` runs one script doing
/// the same. Forced here on a newer server: one `EVALSHA` per acquisition, whose `GET` and
/// `SET` count too, and never a `SET … GET` of its own.
#[tokio::test]
async fn before_redis_7_acquire_is_one_script() {
    let server = RedisServer::start();
    let store = server.store_with(RedisStore::builder().with_script_acquire(true));
    let owner = Owner::random();
    // Opens the connection, checks the server and loads the script.
    store
        .acquire(&key("warm-up"), &owner, LONG, Fencing::Off)
        .await
        .unwrap();

    let keys: Vec<Key> = (0..100).map(|i| key(&format!("k{i}"))).collect();
    let before = server.command_calls();
    for k in &keys {
        assert_eq!(
            store.acquire(k, &owner, LONG, Fencing::Off).await.unwrap(),
            Acquire::Acquired { fence: None }
        );
    }
    assert_eq!(
        server.command_calls_since(&before),
        BTreeMap::from([
            ("evalsha".to_owned(), 100),
            ("get".to_owned(), 100),
            ("set".to_owned(), 100)
        ])
    );
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

/// A flood of tokens from throwaway clients stays within the token capacity: the oldest
/// are evicted, every put succeeds, and a token issued after the flood is spent as usual.
#[tokio::test]
async fn a_token_flood_stays_within_the_token_capacity() {
    let server = RedisServer::start();
    let store = server.store_with(RedisStore::builder().with_token_capacity(640));
    let first = key("first-client");
    store.put_token(&first, &first, LONG, 16).await.unwrap();
    for batch in 0..20 {
        let puts = idem_tests::all_at_once(500, |i| {
            let (store, client) = (store.clone(), key(&format!("throwaway-{batch}-{i}")));
            async move { store.put_token(&client, &client, LONG, 16).await }
        });
        for put in puts.await {
            put.expect("a put never fails for lack of room");
        }
    }
    let held: usize = server
        .keys()
        .iter()
        .filter(|key| key.ends_with(":all"))
        .map(|key| server.query::<usize>(&["ZCARD", key]))
        .sum();
    assert!(held <= 640, "{held} tokens held");
    assert!(held >= 600, "the budget is used, not emptied: {held}");
    let scopes = server
        .keys()
        .iter()
        .filter(|k| k.contains(":scope:"))
        .count();
    assert_eq!(scopes, held, "an evicted token leaves its scope too");
    assert!(
        !store.consume_token(&first, &first).await.unwrap(),
        "the oldest token was evicted"
    );
    let late = key("late-client");
    store.put_token(&late, &late, LONG, 16).await.unwrap();
    assert!(store.consume_token(&late, &late).await.unwrap());
}

/// In a cluster too: evicting a token reaches into the set of the scope it belonged to,
/// which the script finds by name in its bucket's slot.
#[tokio::test]
async fn in_a_cluster_a_token_flood_evicts_within_each_bucket() {
    let cluster = RedisCluster::start();
    let store = cluster.store_with(RedisStore::builder().with_token_capacity(128));
    let first = key("first-client");
    store.put_token(&first, &first, LONG, 16).await.unwrap();
    let puts = idem_tests::all_at_once(2_000, |i| {
        let (store, client) = (store.clone(), key(&format!("throwaway-{i}")));
        async move { store.put_token(&client, &client, LONG, 16).await }
    });
    for put in puts.await {
        put.expect("a put never fails for lack of room");
    }
    let scopes = cluster
        .keys_by_node()
        .iter()
        .filter(|(_, key)| key.contains(":scope:"))
        .count();
    assert!(scopes <= 128, "{scopes} scopes hold tokens");
    assert!(
        !store.consume_token(&first, &first).await.unwrap(),
        "evicted"
    );
    let late = key("late-client");
    store.put_token(&late, &late, LONG, 16).await.unwrap();
    assert!(store.consume_token(&late, &late).await.unwrap());
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
    let probe = Owner::random();
    eventually(
        Duration::from_secs(10),
        "the store reaches the new master",
        || {
            let (store, probe) = (store.clone(), probe.clone());
            async move {
                matches!(
                    store
                        .acquire(&key("after-failover"), &probe, LONG, Fencing::Off)
                        .await,
                    Ok(Acquire::Acquired { .. } | Acquire::Reentered { .. })
                )
            }
        },
    )
    .await;
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
    let probe = Owner::random();
    eventually(
        Duration::from_secs(10),
        "the store reaches the new master",
        || {
            let (store, probe) = (store.clone(), probe.clone());
            async move {
                store
                    .acquire(&key("probe"), &probe, LONG, Fencing::Off)
                    .await
                    .is_ok()
            }
        },
    )
    .await;
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

/// A certificate authority made for one test, and a certificate it signed for 127.0.0.1,
/// written as PEM files into `dir`: (CA certificate PEM, certificate path, key path).
fn throwaway_tls(dir: &std::path::Path) -> (Vec<u8>, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("a CA key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("parameters");
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    let key = KeyPair::generate().expect("a key");
    let cert = params.signed_by(&key, &issuer).expect("a certificate");
    let (cert_path, key_path) = (dir.join("redis.crt"), dir.join("redis.key"));
    std::fs::write(&cert_path, cert.pem()).expect("the certificate file");
    std::fs::write(&key_path, key.serialize_pem()).expect("the key file");
    (
        ca_cert.pem().into_bytes(),
        cert_path.display().to_string(),
        key_path.display().to_string(),
    )
}

/// Over TLS (`rediss://`, feature `tls`): a store that trusts the server's CA works as
/// over plain TCP; one that trusts only the system's roots cannot talk to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_store_that_trusts_the_ca_works_and_one_that_does_not_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ca, cert, key_file) = throwaway_tls(dir.path());
    let tls_port = unused_port().to_string();
    let _server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key_file,
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let store = RedisStore::builder()
        .with_timeout(Duration::from_secs(2))
        .with_lazy_connect(true)
        .connect(Server::url_with_ca(&url, ca))
        .await
        .expect("a TLS store");
    let owner = Owner::random();
    assert!(matches!(
        store
            .acquire(&key("over-tls"), &owner, LONG, Fencing::On)
            .await,
        Ok(Acquire::Acquired { fence: Some(_) })
    ));
    assert!(store.release(&key("over-tls"), &owner).await.unwrap());

    let untrusting = RedisStore::builder()
        .with_timeout(Duration::from_secs(2))
        .with_lazy_connect(true)
        .connect(Server::url(&url))
        .await
        .expect("a valid URL");
    let refused = untrusting
        .acquire(&key("over-tls"), &owner, LONG, Fencing::Off)
        .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|error| error.backend_error::<RedisError>().is_some()),
        "a certificate from an unknown CA is refused: {refused:?}"
    );
}

/// What `begin_record` answers a new attempt at `k` with `fp`.
async fn begin(store: &RedisStore, k: &Key, fp: &Fingerprint) -> Begin {
    store
        .begin_record(k, &Owner::random(), fp, LONG)
        .await
        .unwrap()
}

/// Completes the record `k` for `fp` with `response`, kept for `retention`.
async fn complete(
    store: &RedisStore,
    k: &Key,
    fp: &Fingerprint,
    response: &'static [u8],
    retention: Duration,
) {
    let owner = Owner::random();
    assert_eq!(
        store.begin_record(k, &owner, fp, LONG).await.unwrap(),
        Begin::Started
    );
    assert!(
        store
            .complete_record(k, &owner, Bytes::from_static(response), retention)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_replayed_record_is_answered_again_without_a_round_trip() {
    let server = RedisServer::start();
    let (cached, uncached) = (
        server.store(),
        server.store_with(RedisStore::builder().with_replay_cache(0)),
    );
    let (k, fp, other) = (
        key("replayed"),
        Fingerprint::of(["body"]),
        Fingerprint::of(["another body"]),
    );
    complete(&cached, &k, &fp, b"stored", LONG).await;
    let completed = Begin::Completed {
        response: Bytes::from_static(b"stored"),
    };
    // The first replay asks Redis, on both stores.
    for store in [&cached, &uncached] {
        let before = server.command_calls();
        assert_eq!(begin(store, &k, &fp).await, completed);
        assert_eq!(server.command_calls_since(&before).get("evalsha"), Some(&1));
    }

    // Later ones: the copy answers the same fingerprint with the response and another
    // with a mismatch, as Redis does, and Redis hears nothing of it.
    let before = server.command_calls();
    for _ in 0..100 {
        assert_eq!(begin(&cached, &k, &fp).await, completed);
        assert_eq!(begin(&cached, &k, &other).await, Begin::Mismatch);
    }
    assert_eq!(server.command_calls_since(&before), BTreeMap::new());

    // Turned off, every replay is a round trip.
    for _ in 0..100 {
        assert_eq!(begin(&uncached, &k, &fp).await, completed);
    }
    assert_eq!(
        server.command_calls_since(&before).get("evalsha"),
        Some(&100)
    );
}

#[tokio::test]
async fn a_copied_record_ends_no_later_than_in_redis() {
    let server = RedisServer::start();
    let store = server.store();
    let (k, fp) = (key("short-lived"), Fingerprint::of(["body"]));
    complete(&store, &k, &fp, b"stored", Duration::from_millis(300)).await;
    assert!(matches!(
        begin(&store, &k, &fp).await,
        Begin::Completed { .. }
    ));
    let record = format!("idem:{{{}}}:record", k.as_str());
    eventually(
        Duration::from_secs(5),
        "the record expires in Redis",
        || async { server.query::<i64>(&["EXISTS", &record]) == 0 },
    )
    .await;
    // The moment Redis no longer has it, neither has the copy: the key runs afresh.
    assert_eq!(begin(&store, &k, &fp).await, Begin::Started);
}
