//! The key layout: namespaces and hash tags, what building refuses, Redis Cluster slots.

use std::collections::BTreeMap;

use idem_core::store::Fencing;
use idem_core::{Acquire, Fingerprint, LockStore, Owner, RecordStore, TokenStore};
use idem_redis::{RedisSetupError, RedisStore};
use idem_tests::{RedisCluster, RedisServer};

use crate::{LONG, Server, key};

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

/// A client's token set and its bucket's live as long as their longest-lived token,
/// whichever order the tokens come in: on Redis 7 with one `PEXPIRE … GT` (a set just
/// made has no TTL, which `GT` counts as for ever, so it takes the TTL as it is), and by
/// `PTTL` first where the server is taken for one before 7.0.
#[tokio::test]
async fn token_sets_live_as_long_as_their_longest_token() {
    let server = RedisServer::start();
    for (script, namespace) in [(false, "seven"), (true, "six")] {
        let store = server.store_with(
            RedisStore::builder()
                .with_namespace(namespace)
                .with_script_acquire(script),
        );
        let short = std::time::Duration::from_secs(5);
        for (scope, ttls) in [
            ("long-first", [LONG, short]),
            ("short-first", [short, LONG]),
        ] {
            for (i, ttl) in ttls.into_iter().enumerate() {
                let token = key(&format!("{scope}-{i}"));
                store.put_token(&key(scope), &token, ttl, 16).await.unwrap();
            }
            let suffix = format!(":scope:{scope}");
            let keys = server.keys();
            let own = keys
                .iter()
                .find(|k| k.starts_with(namespace) && k.ends_with(&suffix))
                .expect("the client's set");
            let bucket = format!("{}:all", own.strip_suffix(&suffix).unwrap_or_default());
            for set in [own, &bucket] {
                let left: i64 = server.query(&["PTTL", set]);
                assert!(
                    left > short.as_millis() as i64,
                    "{namespace} {scope}: {set} lives {left} ms, not its longest token's 60 s"
                );
            }
        }
    }
}
