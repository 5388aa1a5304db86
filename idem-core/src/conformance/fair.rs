//! The cases of the conformance suite for a [`FairStore`], each an `async fn` generic over
//! a [`Backend`] whose store is one. [`fair_store_conformance!`](crate::fair_store_conformance)
//! makes a test of each.

use std::time::{Duration, Instant};

use super::{Backend, all_at_once, eventually, started};
use crate::store::{Fencing, Turn};
use crate::{FairStore, Key, LockStore, Owner};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(50);
/// What a store's clock may cut from a time: Redis and SQLite count whole milliseconds.
const CLOCK_GRAIN: Duration = Duration::from_millis(2);

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// `acquire_in_turn` with a long place.
async fn queue<S: FairStore>(store: &S, lock: &Key, owner: &Owner) -> Turn {
    store
        .acquire_in_turn(lock, owner, LONG, Fencing::Off, Some(LONG))
        .await
        .expect("acquire_in_turn")
}

/// Asserts that `owner`'s turn has come: it takes `lock`.
async fn assert_takes_turn<S: FairStore>(store: &S, lock: &Key, owner: &Owner) {
    assert_eq!(
        queue(store, lock, owner).await,
        Turn::Acquired { fence: None }
    );
}

/// The answer to a waiter whose turn has not come while the lock is free.
const NOT_YET: Turn = Turn::Queued {
    next: false,
    remaining: None,
};

/// A started backend, to keep until the case ends, its store, and a lock named `name`
/// that its holder, returned last, has taken.
async fn held<B: Backend<Store: FairStore>>(name: &str) -> (B, B::Store, Key, Owner) {
    let (backend, store) = started::<B>().await;
    let (lock, holder) = (key(name), Owner::random());
    assert_takes_turn(&store, &lock, &holder).await;
    (backend, store, lock, holder)
}

fn queued(turn: &Turn) -> bool {
    matches!(turn, Turn::Queued { .. })
}

super::suite! {
    $ __fair_store_conformance_cases, (B: Backend<Store: FairStore>);

    /// A held lock and three owners queued one after the other: each release goes to the
    /// next of them in that order, whoever asks first.
    pub async fn a_fair_lock_is_granted_in_arrival_order() {
        let (_backend, store) = started::<B>().await;
        let lock = key("fair-order");
        let (holder, waiters) = (
            Owner::random(),
            [Owner::random(), Owner::random(), Owner::random()],
        );
        assert_eq!(
            queue(&store, &lock, &holder).await,
            Turn::Acquired { fence: None }
        );
        for (i, waiter) in waiters.iter().enumerate() {
            let turn = queue(&store, &lock, waiter).await;
            let Turn::Queued { next, remaining } = turn else {
                panic!("waiter {i} was not queued: {turn:?}");
            };
            assert_eq!(next, i == 0, "only the first waiter is next");
            assert!(
                remaining.is_some_and(|left| left > LONG / 2),
                "{remaining:?}"
            );
        }
        let mut releasing = holder;
        for (i, waiter) in waiters.iter().enumerate() {
            assert!(store.release_and_signal(&lock, &releasing).await.unwrap());
            // The ones behind ask first, and are refused while the lock is free.
            for later in waiters[i + 1..].iter().rev() {
                let turn = queue(&store, &lock, later).await;
                assert_eq!(turn, NOT_YET, "waiter {i}'s turn");
            }
            assert_eq!(
                queue(&store, &lock, waiter).await,
                Turn::Acquired { fence: None },
                "waiter {i}"
            );
            releasing = waiter.clone();
        }
        assert!(store.release_and_signal(&lock, &releasing).await.unwrap());
        // The queue is empty again: a newcomer takes the lock at once.
        assert_takes_turn(&store, &lock, &Owner::random()).await;
    }

    /// A newcomer never takes a free lock past a waiter, queueing or not; it queues behind.
    pub async fn a_newcomer_never_takes_the_lock_past_a_waiter() {
        let (_backend, store, lock, holder) = held::<B>("fair-newcomer").await;
        let (waiter, newcomer) = (Owner::random(), Owner::random());
        assert!(queued(&queue(&store, &lock, &waiter).await));
        assert!(store.release_and_signal(&lock, &holder).await.unwrap());
        let trying = store
            .acquire_in_turn(&lock, &newcomer, LONG, Fencing::Off, None)
            .await
            .unwrap();
        assert_eq!(trying, NOT_YET);
        assert_eq!(queue(&store, &lock, &newcomer).await, NOT_YET);
        assert_takes_turn(&store, &lock, &waiter).await;
        assert!(store.release_and_signal(&lock, &waiter).await.unwrap());
        assert_takes_turn(&store, &lock, &newcomer).await;
    }

    /// A place that is not renewed lapses: a waiter that died stops holding up the one behind
    /// it once its place has lapsed, and not before.
    pub async fn a_lapsed_place_is_skipped() {
        let (_backend, store, lock, holder) = held::<B>("fair-lapse").await;
        let (dead, alive) = (Owner::random(), Owner::random());
        let lapse = Duration::from_millis(300);
        // Taken before the call, so the place lapses no earlier than this plus `lapse`, give
        // or take the millisecond a store's clock may cut.
        let queued_at = Instant::now();
        let dying = store
            .acquire_in_turn(&lock, &dead, LONG, Fencing::Off, Some(lapse))
            .await
            .unwrap();
        assert!(queued(&dying));
        assert!(queued(&queue(&store, &lock, &alive).await));
        assert!(store.release_and_signal(&lock, &holder).await.unwrap());
        let turn = queue(&store, &lock, &alive).await;
        if queued_at.elapsed() < lapse - CLOCK_GRAIN {
            assert_eq!(turn, NOT_YET, "the place has not lapsed yet");
        }
        eventually(
            Duration::from_secs(5),
            "the lapsed place is dropped",
            || async { queue(&store, &lock, &alive).await == Turn::Acquired { fence: None } },
        )
        .await;
        assert!(
            queued_at.elapsed() >= lapse - CLOCK_GRAIN,
            "taken only once the place lapsed"
        );
    }

    /// A release hands the turn to the head of the queue and wakes it, and it only; a turn
    /// handed before the wait began is not lost.
    pub async fn a_release_wakes_the_head_of_the_queue_only() {
        let (_backend, store, lock, holder) = held::<B>("fair-wake").await;
        let (first, second) = (Owner::random(), Owner::random());
        queue(&store, &lock, &first).await;
        queue(&store, &lock, &second).await;
        assert!(
            !store.wait_for_turn(&lock, &first, SHORT).await.unwrap(),
            "no release yet"
        );
        let second_waits = tokio::spawn({
            let (store, lock, second) = (store.clone(), lock.clone(), second.clone());
            async move {
                store
                    .wait_for_turn(&lock, &second, Duration::from_millis(500))
                    .await
                    .unwrap()
            }
        });
        assert!(store.release_and_signal(&lock, &holder).await.unwrap());
        let woken = tokio::time::timeout(
            Duration::from_secs(5),
            store.wait_for_turn(&lock, &first, LONG),
        )
        .await
        .expect("the head is woken long before its time runs out");
        assert!(woken.unwrap(), "the head is woken");
        assert!(!second_waits.await.unwrap(), "the waiter behind it is not");
        assert_takes_turn(&store, &lock, &first).await;
    }

    /// A waiter that gives up leaves the queue, and if it was the head of a free lock's
    /// queue, the turn passes to the one behind it.
    pub async fn leaving_the_queue_passes_the_turn_on() {
        let (_backend, store, lock, holder) = held::<B>("fair-leave").await;
        let (leaving, next) = (Owner::random(), Owner::random());
        queue(&store, &lock, &leaving).await;
        queue(&store, &lock, &next).await;
        assert!(store.release_and_signal(&lock, &holder).await.unwrap());
        assert!(
            queued(&queue(&store, &lock, &next).await),
            "not its turn yet"
        );
        store.leave_queue(&lock, &leaving).await.unwrap();
        assert_takes_turn(&store, &lock, &next).await;
        // Leaving without a place changes nothing.
        store.leave_queue(&lock, &leaving).await.unwrap();
        assert!(store.release_and_signal(&lock, &next).await.unwrap());
        assert_takes_turn(&store, &lock, &leaving).await;
    }

    /// Taking a turn keeps what a lock is: fencing tokens that grow, re-entry with the hold's
    /// token, release by the owner only.
    pub async fn a_fair_lock_keeps_fencing_reentry_and_ownership() {
        let (_backend, store) = started::<B>().await;
        let lock = key("fair-fenced");
        let fenced = |owner: Owner| {
            let (store, lock) = (store.clone(), lock.clone());
            async move {
                store
                    .acquire_in_turn(&lock, &owner, LONG, Fencing::On, Some(LONG))
                    .await
                    .unwrap()
            }
        };
        let (first, second) = (Owner::random(), Owner::random());
        let Turn::Acquired { fence: Some(token) } = fenced(first.clone()).await else {
            panic!("a fenced acquisition draws a token");
        };
        let Turn::Reentered { fence: again, .. } = fenced(first.clone()).await else {
            panic!("the holder re-enters");
        };
        assert_eq!(again, Some(token), "re-entry keeps the hold's token");
        assert!(queued(&fenced(second.clone()).await));
        assert!(
            !store.release_and_signal(&lock, &second).await.unwrap(),
            "not its lock"
        );
        assert!(store.release_and_signal(&lock, &first).await.unwrap());
        let Turn::Acquired { fence: Some(later) } = fenced(second).await else {
            panic!("the next holder draws a token");
        };
        assert!(later > token, "{later:?} after {token:?}");
    }

    /// One winner among 200 concurrent first attempts on a free lock; the others are queued.
    pub async fn one_winner_among_200_concurrent_fair_attempts() {
        let backend = B::start().await;
        let results = all_at_once(200, |_| {
            let store = backend.store();
            async move { queue(&store, &key("fair-race"), &Owner::random()).await }
        })
        .await;
        let won = results
            .iter()
            .filter(|turn| matches!(turn, Turn::Acquired { .. }))
            .count();
        assert_eq!(won, 1, "exactly one winner");
        let heads = results
            .iter()
            .filter(|turn| matches!(turn, Turn::Queued { next: true, .. }))
            .count();
        assert_eq!(heads, 1, "the first to queue is next, and only it");
    }
}
