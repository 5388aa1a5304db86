//! Waking waiters: on release, one per release, a release just before the wait, and no
//! signal when nobody waits.

use std::collections::BTreeMap;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use idem_core::lock::{FencingMode, Lease};
use idem_core::store::Fencing;
use idem_core::{Acquire, Key, Lock, LockStore, Owner, Store};
use idem_tests::{Counting, eventually, hold_fenced, percentile};

use crate::{LONG, LockBackend, blocked_clients, command_calls, key, redis_connection};

lock_suite!(
    waiters_wake_on_release,
    one_release_wakes_one_waiter,
    a_release_just_before_the_wait_is_not_missed,
    an_uncontended_release_sends_no_signal,
);

/// A waiter blocked in the store wakes when the holder releases: one attempt that found
/// the lock held, one wait that ended woken (not timed out), one attempt that acquired.
async fn waiters_wake_on_release<B: LockBackend>(backend: B) {
    let mut hand_offs = Vec::new();
    for round in 0..20 {
        let lock = key(&format!("hand-off-{round}"));
        let holder = Lock::new(backend.store(), lock.clone(), Lease::Fixed(LONG))
            .try_acquire()
            .await
            .unwrap();
        let store = Counting::new(backend.store());
        let waiter = Lock::new(store.clone(), lock, Lease::Fixed(LONG));
        let waiting = tokio::spawn(async move {
            let guard = waiter.acquire_within(LONG).await.expect("woken");
            (Instant::now(), guard)
        });
        eventually(Duration::from_secs(5), "the waiter waits", || async {
            store.waits() == 1 && blocked_clients(&backend).is_none_or(|blocked| blocked == 1)
        })
        .await;
        let released_at = Instant::now();
        assert!(holder.release().await.unwrap());
        let (acquired_at, guard) = waiting.await.unwrap();
        hand_offs.push(acquired_at - released_at);
        assert_eq!(
            (store.acquires(), store.waits(), store.wakes()),
            (2, 1, 1),
            "round {round}: held, then woken (not timed out) and acquired"
        );
        assert!(guard.release().await.unwrap());
    }
    hand_offs.sort();
    println!(
        "hand-off after release on {}: median {:?}, p90 {:?}, max {:?} ({} rounds)",
        std::any::type_name::<B>(),
        percentile(&hand_offs, 50),
        percentile(&hand_offs, 90),
        hand_offs[hand_offs.len() - 1],
        hand_offs.len()
    );
}

/// A release wakes one waiter, not all of them (no herd), at the store level.
async fn one_release_wakes_one_waiter<B: LockBackend>(backend: B) {
    let store = backend.store();
    let (lock, holder) = hold_fenced(&store, "herd").await;
    let (registered, mut registrations) = tokio::sync::mpsc::unbounded_channel();
    let (woken, mut wakes) = tokio::sync::mpsc::unbounded_channel();
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let (store, lock) = (backend.store(), lock.clone());
            let (registered, woken) = (registered.clone(), woken.clone());
            tokio::spawn(async move {
                let held = store
                    .acquire_or_register_waiter(&lock, &Owner::random(), LONG, Fencing::On, LONG)
                    .await
                    .expect("acquire");
                assert!(matches!(held, Acquire::Held { .. }));
                let mut wait = pin!(store.wait_for_release(&lock, LONG));
                // One poll registers a waiter in memory (and starts a Redis one on its way).
                let first = poll_fn(|cx| Poll::Ready(wait.as_mut().poll(cx))).await;
                registered.send(()).unwrap();
                let signalled = match first {
                    Poll::Ready(signalled) => signalled,
                    Poll::Pending => wait.await,
                };
                woken.send(signalled.expect("wait")).unwrap();
            })
        })
        .collect();
    for _ in 0..5 {
        registrations.recv().await.unwrap();
    }
    eventually(
        Duration::from_secs(5),
        "five clients block in BLPOP",
        || async { blocked_clients(&backend).is_none_or(|blocked| blocked == 5) },
    )
    .await;

    assert!(store.release_and_signal(&lock, &holder).await.unwrap());
    assert_eq!(wakes.recv().await, Some(true), "one waiter woke");
    // A herd would have the other four awake well within this.
    let more = tokio::time::timeout(Duration::from_millis(300), wakes.recv()).await;
    assert!(more.is_err(), "a second waiter woke: {more:?}");
    if let Some(blocked) = blocked_clients(&backend) {
        assert_eq!(blocked, 4);
    }
    for waiter in waiters {
        waiter.abort();
    }
}

/// A waiter that saw the lock held (and registered in that step) but reaches the store
/// only after the release is woken all the same, and a wait with no release returns
/// `false` when its time is up.
async fn a_release_just_before_the_wait_is_not_missed<B: LockBackend>(backend: B) {
    let store = backend.store();
    let (lock, holder) = hold_fenced(&store, "early").await;
    assert_no_wake_up(&store, &lock, "nothing released").await;
    let held = store
        .acquire_or_register_waiter(&lock, &Owner::random(), LONG, Fencing::Off, LONG)
        .await
        .unwrap();
    assert!(matches!(held, Acquire::Held { .. }));
    assert!(store.release_and_signal(&lock, &holder).await.unwrap());
    let woken = tokio::time::timeout(Duration::from_secs(5), store.wait_for_release(&lock, LONG))
        .await
        .expect("woken at once, not after the wait's minute");
    assert!(woken.unwrap());
}

/// Locks nobody waits for, taken and released with `try_acquire` and with
/// `acquire_within`, plain and fenced, leave no wake-up: a waiter that comes along once
/// the lock is held again is not woken. On Redis, the releases ran no `RPUSH` and left no
/// waiter count or signal list behind.
async fn an_uncontended_release_sends_no_signal<B: LockBackend>(backend: B) {
    let store = backend.store();
    let lock = key("uncontended");
    let before = command_calls(&backend);
    for _ in 0..10 {
        let plain = Lock::new(store.clone(), lock.clone(), Lease::Fixed(LONG));
        take_and_release_twice(&plain).await;
        take_and_release_twice(&plain.fenced()).await;
    }
    let after = command_calls(&backend);
    let calls =
        |calls: &BTreeMap<String, u64>, command: &str| calls.get(command).copied().unwrap_or(0);
    for command in ["rpush", "lpush", "publish", "pexpire", "incr"] {
        let sent = calls(&after, command) - calls(&before, command);
        // Fenced acquisitions `INCR` the fencing counter, 20 of them; nothing else counts.
        let expected = if command == "incr" { 20 } else { 0 };
        assert!(
            backend.urls().is_empty() || sent == expected,
            "{sent} `{command}` for 40 uncontended lock pairs"
        );
    }
    for url in backend.urls() {
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg("*uncontended*")
            .query(&mut redis_connection(&url))
            .unwrap();
        assert!(
            keys.iter().all(|key| key.ends_with(":fence")),
            "only the fencing counter stays: {keys:?}"
        );
    }

    let holder = Owner::random();
    store
        .acquire(&lock, &holder, LONG, Fencing::Off)
        .await
        .unwrap();
    assert_no_wake_up(
        &store,
        &lock,
        "a wake-up was left by a release nobody waited for",
    )
    .await;
}

/// Checks that a 50 ms wait for `lock`'s release times out unwoken; `why` says what must
/// not have woken it.
async fn assert_no_wake_up(store: &impl Store, lock: &Key, why: &str) {
    let woken = store
        .wait_for_release(lock, Duration::from_millis(50))
        .await
        .unwrap();
    assert!(!woken, "{why}");
}

/// Takes and releases `lock` with `try_acquire`, then with `acquire_within`, checking that
/// each release freed it.
async fn take_and_release_twice<S: Store, F: FencingMode>(lock: &Lock<S, F>) {
    assert!(lock.try_acquire().await.unwrap().release().await.unwrap());
    assert!(
        lock.acquire_within(LONG)
            .await
            .unwrap()
            .release()
            .await
            .unwrap()
    );
}
