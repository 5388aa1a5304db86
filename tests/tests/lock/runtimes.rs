//! Guards and runtimes: dropped on a current-thread runtime or outside any, and acquiring
//! outside a runtime.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use idem_core::lock::{Lease, LockError};
use idem_core::{Lock, MemoryStore};
use idem_tests::{Counting, eventually};

use crate::{LONG, LockBackend, is_free, key};

lock_suite!(sync: [
    dropping_a_guard_on_a_current_thread_runtime_releases_it,
    a_guard_dropped_outside_a_runtime_is_left_to_its_lease,
]);

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A drop on a current-thread runtime cannot wait for the store (that would block the
/// only thread); the release runs in a spawned task as soon as the thread is free.
fn dropping_a_guard_on_a_current_thread_runtime_releases_it<B: LockBackend>() {
    let backend = current_thread_runtime().block_on(B::start());
    let store = backend.store();
    current_thread_runtime().block_on(async {
        let lock = Lock::new(
            store.clone(),
            key("dropped-here"),
            Lease::Watchdog(Duration::from_secs(30)),
        );
        drop(lock.try_acquire().await.unwrap());
        eventually(Duration::from_secs(5), "released in the background", || {
            is_free(&store, lock.key())
        })
        .await;
        let next = Lock::new(store.clone(), key("dropped-here"), Lease::Fixed(LONG))
            .try_acquire()
            .await
            .expect("free for the next holder");
        assert!(next.release().await.unwrap());
    });
}

/// Dropped on a thread with no runtime, a guard stops its watchdog and leaves the lock to
/// its lease: still held right after the drop, free within a lease.
fn a_guard_dropped_outside_a_runtime_is_left_to_its_lease<B: LockBackend>() {
    let backend = current_thread_runtime().block_on(B::start());
    // Worker threads of its own, so the watchdog runs while the guard is dropped elsewhere.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let lease = Duration::from_millis(300);
    let store = Counting::new(backend.store());
    let lock = Lock::new(store.clone(), key("orphan"), Lease::Watchdog(lease));
    let guard = runtime.block_on(lock.try_acquire()).unwrap();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    runtime.block_on(async {
        assert!(!is_free(&store, lock.key()).await, "not released");
        eventually(lease * 3, "freed by the lease", || {
            is_free(&store, lock.key())
        })
        .await;
        let renewed = store.renewals();
        tokio::time::sleep(lease).await;
        assert_eq!(store.renewals(), renewed, "the watchdog stopped");
    });
}

#[test]
fn acquiring_outside_a_runtime_is_an_error_not_a_panic() {
    let lock = Lock::new(MemoryStore::new(), key("no-runtime"), Lease::Fixed(LONG));
    let mut acquiring = pin!(lock.try_acquire());
    let polled = acquiring
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    assert!(matches!(polled, Poll::Ready(Err(LockError::NoRuntime))));
}
