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

/// Tokens spread over a cluster's masters: with the default 64 buckets placed on evenly
/// spaced slots, the 3 masters of the test cluster (slots split evenly) hold 21 or 22
/// buckets each, and many clients' tokens reach every master in about equal parts.
#[tokio::test]
async fn in_a_cluster_tokens_spread_over_every_master() {
    let cluster = RedisCluster::start();
    let store = cluster.store();
    let clients = 600;
    for i in 0..clients {
        let client = key(&format!("client-{i}"));
        store.put_token(&client, &client, LONG, 16).await.unwrap();
    }
    let mut scopes_on: BTreeMap<u16, usize> = BTreeMap::new();
    let mut buckets_on: BTreeMap<u16, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (port, redis_key) in cluster.keys_by_node() {
        if redis_key.contains(":scope:") {
            *scopes_on.entry(port).or_default() += 1;
        } else if let Some(bucket) = redis_key.strip_suffix(":all") {
            buckets_on
                .entry(port)
                .or_default()
                .insert(bucket.to_owned());
        }
    }
    assert_eq!(scopes_on.values().sum::<usize>(), clients);
    assert_eq!(
        scopes_on.len(),
        3,
        "every master holds tokens: {scopes_on:?}"
    );
    for (port, buckets) in &buckets_on {
        assert!(
            (21..=22).contains(&buckets.len()),
            "master {port} holds {} buckets",
            buckets.len()
        );
    }
    for (port, scopes) in &scopes_on {
        // An even share is 200; by chance alone a master's share of 600 hashed clients
        // strays far less than this.
        assert!(
            (140..=260).contains(scopes),
            "master {port} holds {scopes} clients"
        );
    }
}

/// A token an earlier version put, in its 64 buckets tagged `tokens/N`, is still spent
/// once after an upgrade, and seen before it is: those buckets are where such tokens are
/// looked for when a client's bucket does not hold them.
#[tokio::test]
async fn a_token_put_by_an_earlier_version_is_spent_once() {
    let server = RedisServer::start();
    let store = server.store();
    let (client, token) = (key("client-7"), key("token-7"));
    let expiry = (std::time::SystemTime::now() + LONG)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    // Where the earlier release put it depends on a hash of the client: put it in each of
    // the 64 scopes it might be in, as that version's script did in one.
    for bucket in 0..64 {
        let tag = format!("idem:{{tokens/{bucket}}}");
        let scope = format!("{tag}:scope:client-7");
        server.command(&["ZADD", &scope, &expiry, "token-7"]);
        let member = format!("{scope}\ntoken-7");
        server.command(&["ZADD", &format!("{tag}:all"), &expiry, &member]);
    }
    assert!(store.has_token(&client, &token).await.unwrap());
    assert!(store.consume_token(&client, &token).await.unwrap());
    assert!(!store.consume_token(&client, &token).await.unwrap());
    let members: usize = (0..64)
        .map(|bucket| server.query::<usize>(&["ZCARD", &format!("idem:{{tokens/{bucket}}}:all")]))
        .sum();
    assert_eq!(members, 63, "the spend left its own bucket's set too");
    // A token put now is in the client's placed bucket, and spent from there.
    let fresh = key("token-8");
    store.put_token(&client, &fresh, LONG, 16).await.unwrap();
    assert!(store.consume_token(&client, &fresh).await.unwrap());
    assert!(!store.has_token(&client, &fresh).await.unwrap());
}
