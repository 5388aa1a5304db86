//! The cases of the conformance suite for waiting on a record in progress,
//! [`wait_for_record`](crate::RecordStore::wait_for_record): its waiters released when it
//! is completed, abandoned or removed, or its lease runs out, and back by their bound when
//! nothing happens. [`store_conformance!`](crate::store_conformance) runs them with the
//! others; the removal needs [`remove_record`](crate::RecordStore::remove_record).

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Backend, started};
use crate::{Begin, Fingerprint, Key, Owner, RecordStore, Store};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(50);
/// Far longer than any store takes to wake a waiter or to see a record end (a polling
/// store looks every few milliseconds, PostgreSQL's fallback every 500 ms), and far
/// shorter than [`LONG`], the bound of the waits that must be released.
const RELEASED_WITHIN: Duration = Duration::from_secs(10);
/// Waiters of one record, half of them on another instance's store.
const WAITERS: usize = 8;

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// How a case ends the record its waiters wait for.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Completed,
    Abandoned,
    Removed,
}

/// Begins `record` with `lease`, which must start it: its owner.
async fn begun<S: Store>(
    store: &S,
    record: &Key,
    fingerprint: &Fingerprint,
    lease: Duration,
) -> Owner {
    let owner = Owner::random();
    let begun = store.begin_record(record, &owner, fingerprint, lease).await;
    assert_eq!(begun.expect("begin_record"), Begin::Started);
    owner
}

/// Waits for `record` on `store` for at most `within`, in a task of its own: what the
/// wait answered, and how long it took, or a panic if it is not back within
/// [`RELEASED_WITHIN`].
async fn wait<S: Store>(store: &S, record: &Key, within: Duration) -> (bool, Duration) {
    let started = Instant::now();
    let waited = store.wait_for_record(record, within);
    let answer = tokio::time::timeout(RELEASED_WITHIN, waited).await;
    let answer = answer
        .unwrap_or_else(|_| panic!("a wait of {within:?} not back within {RELEASED_WITHIN:?}"));
    (answer.expect("wait_for_record"), started.elapsed())
}

super::suite! {
    $ __wait_conformance_cases, (B: Backend);

    /// Waiters of a record in progress, on this instance's store and another's, are all
    /// released when it is completed, abandoned or removed, and each then finds what the
    /// ending left: the stored response, or the key free.
    pub async fn record_waiters_are_released_when_it_ends() {
        let (backend, store) = started::<B>().await;
        let fingerprint = Fingerprint::of(["POST", "/orders", "{}"]);
        for ending in [Ending::Completed, Ending::Abandoned, Ending::Removed] {
            let record = key(&format!("waited-{ending:?}"));
            let owner = begun(&store, &record, &fingerprint, LONG).await;
            let waiters: Vec<_> = (0..WAITERS)
                .map(|i| {
                    let store = match i % 2 {
                        0 => backend.store(),
                        _ => backend.store_of_another_instance(),
                    };
                    let record = record.clone();
                    tokio::spawn(async move { wait(&store, &record, LONG).await })
                })
                .collect();
            // Time for the waiters to start waiting; one that starts after the ending
            // finds the record ended, which this case accepts as well.
            tokio::time::sleep(SHORT).await;
            let ended = match ending {
                Ending::Completed => {
                    let response = Bytes::from_static(b"201 Created");
                    store.complete_record(&record, &owner, response, LONG).await
                }
                Ending::Abandoned => store.abandon_record(&record, &owner).await,
                Ending::Removed => store.remove_record(&record).await,
            };
            assert!(ended.expect("the ending"), "{ending:?}");
            for waiter in waiters {
                let (answer, _) = waiter.await.expect("the waiter");
                assert!(answer, "released by the record {ending:?}");
            }
            let again = store.begin_record(&record, &Owner::random(), &fingerprint, LONG).await;
            let expected = match ending {
                Ending::Completed => Begin::Completed { response: Bytes::from_static(b"201 Created") },
                Ending::Abandoned | Ending::Removed => Begin::Started,
            };
            assert_eq!(again.expect("begin_record"), expected, "{ending:?}");
        }
    }

    /// A wait on a record that nothing ends comes back by its bound, answering `false`
    /// only once the bound has passed; one on a record whose lease runs out comes back by
    /// the lease's end, and the key is then free; one on a record not in progress (none,
    /// or completed) is `true`.
    pub async fn a_record_waiter_returns_by_its_bound() {
        let (_backend, store) = started::<B>().await;
        let fingerprint = Fingerprint::of(["POST", "/orders", "{}"]);

        let running = key("running");
        begun(&store, &running, &fingerprint, LONG).await;
        let (answer, waited) = wait(&store, &running, SHORT).await;
        assert!(answer || waited >= SHORT, "`false` only once the bound passed: {waited:?}");

        let expiring = key("expiring");
        begun(&store, &expiring, &fingerprint, SHORT).await;
        let mut looks = 0;
        loop {
            looks += 1;
            assert!(looks < 10_000, "the lease never ran out");
            let _ = wait(&store, &expiring, LONG).await;
            let again = store.begin_record(&expiring, &Owner::random(), &fingerprint, LONG).await;
            match again.expect("begin_record") {
                Begin::Started => break,
                Begin::InProgress { .. } => {}
                other => panic!("a record whose lease ran out, got {other:?}"),
            }
        }

        let (none, _) = wait(&store, &key("none"), LONG).await;
        assert!(none, "no record: nothing to wait for");
        let done = key("done");
        let owner = begun(&store, &done, &fingerprint, LONG).await;
        let response = Bytes::from_static(b"200 OK");
        assert!(store.complete_record(&done, &owner, response, LONG).await.expect("complete"));
        let (completed, _) = wait(&store, &done, LONG).await;
        assert!(completed, "a completed record: nothing to wait for");
    }
}
