//! The watchdog lease: it holds through three leases and stops when released or dropped.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use idem_core::Lock;
use idem_core::lock::{Fenced, Lease, LockError, Unfenced};
use idem_tests::{Backend, Counting, eventually};

use crate::{LONG, LockBackend, Mode, command_calls, is_free, key};

lock_suite!(
    the_watchdog_holds_through_three_leases_and_stops_when_released,
    the_watchdog_stops_when_the_guard_is_dropped,
);

/// The lease of the watched locks: short, so that a case sees several renewals.
const LEASE: Duration = Duration::from_millis(300);

/// The backend's store, counting renewals.
type Counted<B> = Counting<<B as Backend>::Store>;

/// A lock on `name` with a watchdog lease of [`LEASE`], on a store that counts renewals.
fn watched<B: LockBackend, F: Mode>(backend: &B, name: &str) -> (Counted<B>, Lock<Counted<B>, F>) {
    let store = Counting::new(backend.store());
    let lock = F::make(Lock::new(store.clone(), key(name), Lease::Watchdog(LEASE)));
    (store, lock)
}

async fn the_watchdog_holds_through_three_leases_and_stops_when_released<B: LockBackend>(
    backend: B,
) {
    in_both_modes!(watchdog_holds, backend, "watched")
}

async fn watchdog_holds<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let (store, lock) = watched::<B, F>(backend, name);
    let contender = F::make(Lock::new(backend.store(), key(name), Lease::Fixed(LONG)));
    let guard = lock.try_acquire().await.unwrap();

    // Work three times the lease, checking all along that nobody else gets the lock.
    let work_ends = Instant::now() + LEASE * 3;
    while Instant::now() < work_ends {
        tokio::time::sleep(LEASE / 6).await;
        assert!(
            matches!(contender.try_acquire().await, Err(LockError::Held { .. })),
            "held at {:?} into the work",
            work_ends.elapsed()
        );
        assert!(guard.valid_until() > Instant::now());
    }
    let renewals = store.renewals();
    // Every third of a lease over three leases: about nine.
    assert!((6..=12).contains(&renewals), "{renewals} renewals");

    assert!(guard.release().await.unwrap());
    let (renewed, commands) = (store.renewals(), command_calls(backend));
    // Two leases of silence: a watchdog still running would renew six times.
    tokio::time::sleep(LEASE * 2).await;
    assert_eq!(store.renewals(), renewed, "no renewal after release");
    let scripts = |calls: &BTreeMap<String, u64>| calls.get("evalsha").copied().unwrap_or(0);
    assert_eq!(
        scripts(&command_calls(backend)),
        scripts(&commands),
        "no renew traffic reaches Redis after release"
    );
}

async fn the_watchdog_stops_when_the_guard_is_dropped<B: LockBackend>(backend: B) {
    in_both_modes!(watchdog_stops_on_drop, backend, "dropped")
}

async fn watchdog_stops_on_drop<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let (store, lock) = watched::<B, F>(backend, name);
    let guard = lock.try_acquire().await.unwrap();
    eventually(LEASE, "a first renewal", || async { store.renewals() > 0 }).await;
    drop(guard);
    eventually(
        Duration::from_secs(5),
        "the dropped guard's release",
        || is_free(&store, lock.key()),
    )
    .await;
    let renewed = store.renewals();
    tokio::time::sleep(LEASE * 2).await;
    assert_eq!(store.renewals(), renewed, "no renewal after drop");
}
