//! A hundred waiting tasks never overlap, fenced or plain.

use std::time::Duration;

use idem_core::Lock;
use idem_core::lock::Lease;
use idem_tests::a_hundred_contenders_never_overlap;

use crate::{LONG, LockBackend, key};

lock_suite!(
    a_hundred_waiting_tasks_never_overlap,
    a_hundred_waiting_tasks_never_overlap_on_a_plain_lock,
);

/// The lock the tasks contend for, on `name`, kept by a watchdog.
fn contended<B: LockBackend>(backend: &B, name: &str) -> Lock<B::Store> {
    Lock::new(
        backend.store(),
        key(name),
        Lease::Watchdog(Duration::from_secs(5)),
    )
}

/// 100 tasks, each its own owner, wait for one fenced lock: no entry finds another task
/// inside, fencing tokens grow from one holder to the next, and every task gets its turn.
async fn a_hundred_waiting_tasks_never_overlap<B: LockBackend>(backend: B) {
    a_hundred_contenders_never_overlap(
        || {
            let lock = contended(&backend, "contended").fenced();
            async move { lock.acquire_within(LONG).await }
        },
        |guard| Some(guard.fencing_token().get()),
    )
    .await;
}

/// The same with plain locks: 100 tasks, each its own owner, wait for one lock; no entry
/// may find another task inside, and every task gets its turn.
async fn a_hundred_waiting_tasks_never_overlap_on_a_plain_lock<B: LockBackend>(backend: B) {
    a_hundred_contenders_never_overlap(
        || {
            let lock = contended(&backend, "contended-plain");
            async move { lock.acquire_within(LONG).await }
        },
        |_| None,
    )
    .await;
}
