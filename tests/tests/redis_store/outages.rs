//! Outages and timeouts: nothing listening, a paused or restarted server, flushed scripts.

use std::time::{Duration, Instant};

use idem_core::store::Fencing;
use idem_core::{Acquire, Fingerprint, LockStore, Owner, RecordStore, StoreError, TokenStore};
use idem_redis::RedisStore;
use idem_tests::{RedisServer, hold_fenced, unreachable_redis_store};
use redis::RedisError;

use crate::{LONG, SLACK, TIMEOUT, acquire_anew, key};

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
    let store = unreachable_redis_store(TIMEOUT);
    // Refused at once: a connection error, not a wait for the timeout.
    each_operation_fails_in_time(&store, |e| e.backend_error::<RedisError>().is_some()).await;
}

#[tokio::test]
async fn a_paused_server_times_out_and_the_store_recovers() {
    let server = RedisServer::start();
    let warm = server.store_with(RedisStore::builder().with_timeout(TIMEOUT));
    acquire_anew(&warm, "before").await.unwrap();
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
            match acquire_anew(store, "after").await {
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
    let (lock, owner) = hold_fenced(&store, "flushed").await;
    store.renew(&lock, &owner, LONG).await.unwrap();
    server.command(&["SCRIPT", "FLUSH"]);
    assert!(
        store.renew(&lock, &owner, LONG).await.unwrap(),
        "NOSCRIPT, then loaded and run"
    );
    assert!(store.release(&lock, &owner).await.unwrap());
}

/// With replica acknowledgements, a call that waits for no replica (putting a form token,
/// looking one up) is bounded by the timeout alone, as `with_replica_acks` documents: the
/// time it allows for the replicas is not added to every call.
#[tokio::test]
async fn with_replica_acks_a_call_that_waits_for_no_replica_is_bounded_by_the_timeout() {
    let server = RedisServer::start();
    let within = Duration::from_secs(1);
    let builder = RedisStore::builder()
        .with_timeout(TIMEOUT)
        .with_replica_acks(1, within);
    let store = server.store_with(builder);
    let (scope, token) = (key("acks-scope"), key("acks-token"));
    store.put_token(&scope, &token, LONG, 8).await.unwrap();

    server.command(&["CLIENT", "PAUSE", "3000", "ALL"]);
    let put = store.put_token(&scope, &token, LONG, 8).await;
    let looked = store.has_token(&scope, &token).await;
    for (name, answer) in [
        ("put_token", put.map(drop)),
        ("has_token", looked.map(drop)),
    ] {
        let error = answer.expect_err(name);
        assert!(
            matches!(error, StoreError::Timeout(t) if t == TIMEOUT),
            "{name}: cut off after the timeout alone, not the replicas' time too: {error:?}"
        );
    }
}
