//! A hundred waiting tasks never overlap, fenced or plain.

use std::time::Duration;

use idem_core::Lock;
use idem_core::lock::Lease;
use idem_tests::a_hundred_contenders_never_overlap;

use crate::{LONG, LockBackend, key};

lock_suite!(
    async: [
        a_hundred_waiting_tasks_never_overlap,
        a_hundred_waiting_tasks_never_overlap_on_a_plain_lock,
    ],
    sync: [],
);

/// 100 tasks, each its own owner, wait for one fenced lock: no entry finds another task
/// inside, fencing tokens grow from one holder to the next, and every task gets its turn.
async fn a_hundred_waiting_tasks_never_overlap<B: LockBackend>() {
    let backend = B::start().await;
    a_hundred_contenders_never_overlap(
        || {
            let lock = Lock::new(
                backend.store(),
                key("contended"),
                Lease::Watchdog(Duration::from_secs(5)),
            )
            .fenced();
            async move { lock.acquire_within(LONG).await }
        },
        |guard| Some(guard.fencing_token().get()),
    )
    .await;
}

/// The same with plain locks: 100 tasks, each its own owner, wait for one lock; no entry
/// may find another task inside, and every task gets its turn.
async fn a_hundred_waiting_tasks_never_overlap_on_a_plain_lock<B: LockBackend>() {
    let backend = B::start().await;
    a_hundred_contenders_never_overlap(
        || {
            let lock = Lock::new(
                backend.store(),
                key("contended-plain"),
                Lease::Watchdog(Duration::from_secs(5)),
            );
            async move { lock.acquire_within(LONG).await }
        },
        |_| None,
    )
    .await;
}
