//! Holding a lock: a second holder is refused and its wait times out, a stalled holder
//! cannot release its successor's lock, a deletion behind the holder is signalled, a fixed
//! lease reports its end.

use std::time::{Duration, Instant};

use idem_core::lock::{Fenced, Lease, LockError, LockLost, Unfenced};
use idem_core::{Lock, LockStore};

use crate::{LONG, LockBackend, Mode, delete_behind_its_back, key};

lock_suite!(
    try_acquire_refuses_while_held_and_a_wait_times_out,
    a_stalled_holder_cannot_release_the_next_holders_lock,
    a_lock_deleted_behind_its_holder_is_signalled,
    a_fixed_lease_reports_its_end,
);

async fn try_acquire_refuses_while_held_and_a_wait_times_out<B: LockBackend>(backend: B) {
    let lease = Lease::Fixed(LONG);
    let mine = Lock::new(backend.store(), key("busy"), lease);
    let theirs = Lock::new(backend.store(), key("busy"), lease);
    let guard = mine.try_acquire().await.unwrap();
    assert!(!guard.is_reentered());
    match theirs.try_acquire().await {
        Err(LockError::Held { remaining }) => assert!(remaining > LONG / 2, "{remaining:?}"),
        other => panic!("expected Held, got {other:?}"),
    }
    let started = Instant::now();
    match theirs.acquire_within(Duration::from_millis(150)).await {
        Err(LockError::TimedOut { waited }) => {
            assert!(waited >= Duration::from_millis(150), "{waited:?}");
        }
        other => panic!("expected TimedOut, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(guard.release().await.unwrap());
    let next = theirs
        .acquire_within(Duration::from_secs(5))
        .await
        .expect("free after the release");
    assert!(next.release().await.unwrap());
}

/// A mis-release: holder 1 stalls past its lease, holder 2 acquires, and
/// holder 1's release must neither free holder 2's lock nor pretend it still owned it.
async fn a_stalled_holder_cannot_release_the_next_holders_lock<B: LockBackend>(backend: B) {
    in_both_modes!(stalled_holder, backend, "stall")
}

async fn stalled_holder<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let lock = key(name);
    let lease = Lease::Fixed(Duration::from_millis(200));
    let first = F::make(Lock::new(backend.store(), lock.clone(), lease))
        .try_acquire()
        .await
        .unwrap();
    // The stall: past the lease, as in a long GC pause.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(Instant::now() > first.valid_until());

    let second = F::make(Lock::new(backend.store(), lock.clone(), Lease::Fixed(LONG)))
        .try_acquire()
        .await
        .expect("the stalled holder's lease ran out");

    assert!(
        !first.release().await.unwrap(),
        "holder 1 is told it no longer owned the lock"
    );
    let remaining = backend.store().remaining(&lock).await.unwrap();
    assert!(
        remaining.is_some_and(|r| r > LONG / 2),
        "holder 2's lock is intact: {remaining:?}"
    );
    assert!(matches!(
        F::make(Lock::new(backend.store(), lock, Lease::Fixed(LONG)))
            .try_acquire()
            .await,
        Err(LockError::Held { .. })
    ));
    assert!(second.release().await.unwrap());
}

/// Renewal failure is signalled to the holder, not just logged.
async fn a_lock_deleted_behind_its_holder_is_signalled<B: LockBackend>(backend: B) {
    in_both_modes!(deleted_behind_its_holder, backend, "deleted")
}

async fn deleted_behind_its_holder<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let lease = Duration::from_millis(300);
    let lock = F::make(Lock::new(
        backend.store(),
        key(name),
        Lease::Watchdog(lease),
    ));
    let guard = lock.try_acquire().await.unwrap();
    delete_behind_its_back(backend, lock.key(), lock.owner()).await;
    let lost = tokio::time::timeout(lease * 3, guard.lost())
        .await
        .expect("the holder learns within a lease");
    assert_eq!(lost, LockLost::NotHeld);
    assert!(!guard.release().await.unwrap());
}

async fn a_fixed_lease_reports_its_end<B: LockBackend>(backend: B) {
    let lock = Lock::new(
        backend.store(),
        key("short"),
        Lease::Fixed(Duration::from_millis(100)),
    );
    let guard = lock.try_acquire().await.unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lease ends");
    assert_eq!(lost, LockLost::Expired);
    assert!(Instant::now() >= guard.valid_until(), "not before its end");
}
