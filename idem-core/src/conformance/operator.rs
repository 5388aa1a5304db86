//! The cases of the conformance suite for an operator's operations on records,
//! [`record_state`](crate::RecordStore::record_state) and
//! [`remove_record`](crate::RecordStore::remove_record): a record looked up by its key
//! alone and removed without its owner. [`store_conformance!`](crate::store_conformance)
//! runs them with the others.

use std::time::Duration;

use bytes::Bytes;

use super::{Backend, eventually, started};
use crate::store::Fencing;
use crate::{Acquire, Begin, Fingerprint, Key, LockStore, Owner, RecordState, RecordStore};
use crate::{Store, TokenStore};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(50);
/// What a store's clock may have cut from a time by the moment a case reads it back.
const SLACK: Duration = Duration::from_secs(5);

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// `record_state`, which must answer.
async fn state<S: Store>(store: &S, record: &Key) -> Option<RecordState> {
    store.record_state(record).await.expect("record_state")
}

/// `remove_record`, which must answer.
async fn remove<S: Store>(store: &S, record: &Key) -> bool {
    store.remove_record(record).await.expect("remove_record")
}

/// Begins `record` for a new owner with `fingerprint`, which must start it: the owner.
async fn started_by<S: Store>(store: &S, record: &Key, fingerprint: &Fingerprint) -> Owner {
    let owner = Owner::random();
    let begun = store.begin_record(record, &owner, fingerprint, LONG).await;
    assert_eq!(begun.expect("begin_record"), Begin::Started);
    owner
}

/// Asserts that `remaining` is a time a store kept for `ttl` may have left just now.
fn assert_about(remaining: Duration, ttl: Duration) {
    assert!(
        remaining <= ttl && remaining > ttl - SLACK,
        "{remaining:?} left of {ttl:?}"
    );
}

super::suite! {
    $ __operator_conformance_cases, (B: Backend);

    /// An operator sees a record in progress, then completed, with the fingerprint that
    /// began it, the bytes it stored and the time each state has left; nothing once it is
    /// abandoned.
    pub async fn an_operator_sees_what_a_record_holds() {
        let (_backend, store) = started::<B>().await;
        let (record, fingerprint) = (key("order-7"), Fingerprint::of(["POST", "/orders", "7"]));
        assert_eq!(state(&store, &record).await, None, "no record yet");

        let owner = started_by(&store, &record, &fingerprint).await;
        let Some(RecordState::InProgress { fingerprint: began, remaining }) =
            state(&store, &record).await
        else {
            panic!("in progress");
        };
        assert_eq!(began, fingerprint);
        assert_about(remaining, LONG);

        // Not UTF-8, and with a NUL: shown byte for byte.
        let response = Bytes::from_static(b"201\r\n\x00\xff body");
        let retention = LONG * 10;
        let completed = store.complete_record(&record, &owner, response.clone(), retention);
        assert!(completed.await.expect("complete_record"));
        let Some(RecordState::Completed { fingerprint: began, response: stored, remaining }) =
            state(&store, &record).await
        else {
            panic!("completed");
        };
        assert_eq!((began, stored), (fingerprint, response));
        assert_about(remaining, retention);

        let other = key("order-8");
        let owner = started_by(&store, &other, &fingerprint).await;
        assert!(store.abandon_record(&other, &owner).await.expect("abandon_record"));
        assert_eq!(state(&store, &other).await, None, "abandoned");
    }

    /// A record in progress is removed without its owner: the key runs afresh, with any
    /// fingerprint, and the attempt that began it can no longer complete, renew or
    /// abandon it.
    pub async fn an_operator_removes_a_record_in_progress() {
        let (_backend, store) = started::<B>().await;
        let record = key("stuck-payment");
        let stuck = started_by(&store, &record, &Fingerprint::of(["amount=10"])).await;

        assert!(remove(&store, &record).await, "a live record was there");
        assert_eq!(state(&store, &record).await, None);
        assert!(!remove(&store, &record).await, "already gone");
        let late = store.complete_record(&record, &stuck, Bytes::from_static(b"late"), LONG);
        assert!(!late.await.expect("complete_record"), "the removed attempt's");
        assert_eq!(state(&store, &record).await, None, "and it stored nothing");

        let retry = started_by(&store, &record, &Fingerprint::of(["amount=11"])).await;
        assert!(!store.renew_record(&record, &stuck, LONG).await.expect("renew_record"));
        assert!(!store.abandon_record(&record, &stuck).await.expect("abandon_record"));
        let done = store.complete_record(&record, &retry, Bytes::from_static(b"ok"), LONG);
        assert!(done.await.expect("complete_record"), "the retry's record is intact");
    }

    /// A completed record is removed: the next request with its key and its fingerprint
    /// runs again rather than being replayed, even one that was replayed before.
    pub async fn an_operator_removes_a_completed_record() {
        let (_backend, store) = started::<B>().await;
        let (record, fingerprint) = (key("kept-by-mistake"), Fingerprint::of(["429"]));
        let owner = started_by(&store, &record, &fingerprint).await;
        let stored = Bytes::from_static(b"429 too many requests");
        let completed = store.complete_record(&record, &owner, stored.clone(), LONG);
        assert!(completed.await.expect("complete_record"));
        for _ in 0..2 {
            let begun = store.begin_record(&record, &Owner::random(), &fingerprint, LONG).await;
            let expected = Begin::Completed { response: stored.clone() };
            assert_eq!(begun.expect("begin_record"), expected, "replayed");
        }

        assert!(remove(&store, &record).await);
        assert_eq!(state(&store, &record).await, None);
        started_by(&store, &record, &fingerprint).await;
    }

    /// A record whose time has ended is not shown, and removing it reports nothing
    /// removed; a lock and a token with the record's key are not records.
    pub async fn an_operator_sees_only_live_records() {
        let (_backend, store) = started::<B>().await;
        let (record, fingerprint) = (key("expiring"), Fingerprint::of(["x"]));
        let owner = Owner::random();
        let begun = store.begin_record(&record, &owner, &fingerprint, SHORT).await;
        assert_eq!(begun.expect("begin_record"), Begin::Started);
        eventually(Duration::from_secs(5), "the lease ends", || {
            let (store, record) = (store.clone(), record.clone());
            async move { state(&store, &record).await.is_none() }
        })
        .await;
        assert!(!remove(&store, &record).await, "nothing live to remove");

        let same = key("shared-name");
        let holder = Owner::random();
        let acquired = store.acquire(&same, &holder, LONG, Fencing::Off).await;
        assert_eq!(acquired.expect("acquire"), Acquire::Acquired { fence: None });
        store.put_token(&same, &same, LONG, 16).await.expect("put_token");
        assert_eq!(state(&store, &same).await, None, "a lock is not a record");
        assert!(!remove(&store, &same).await);
        assert!(store.release(&same, &holder).await.expect("release"), "the lock is intact");
        assert!(store.consume_token(&same, &same).await.expect("consume_token"), "and the token");
    }
}
