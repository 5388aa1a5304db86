//! The cases of the conformance suite, each an `async fn` generic over the
//! [`Backend`] it runs on. [`store_conformance!`](crate::store_conformance) makes a test of
//! each; they can also be called one by one.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Backend, all_at_once, eventually, started};
use crate::store::{Fencing, FencingToken};
use crate::{Acquire, Begin, Fingerprint, Key, LockStore, Owner, RecordStore, Store, TokenStore};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(50);
/// Tokens a scope keeps, where a case does not test that bound.
const KEEP: usize = 16;

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// `begin_record`, which must answer.
async fn begin<S: Store>(
    store: &S,
    record: &Key,
    owner: &Owner,
    fp: &Fingerprint,
    lease: Duration,
) -> Begin {
    store.begin_record(record, owner, fp, lease).await.unwrap()
}

/// `acquire` without fencing, which must answer.
async fn acquire<S: Store>(store: &S, lock: &Key, owner: &Owner, ttl: Duration) -> Acquire {
    store.acquire(lock, owner, ttl, Fencing::Off).await.unwrap()
}

/// The fencing token `owner` draws taking `lock`, which must be free.
async fn fenced<S: Store>(store: &S, lock: &Key, owner: &Owner, ttl: Duration) -> FencingToken {
    match store.acquire(lock, owner, ttl, Fencing::On).await.unwrap() {
        Acquire::Acquired { fence: Some(fence) } => fence,
        other => panic!("a fenced acquisition of a free lock, got {other:?}"),
    }
}

/// `complete_record`, which must answer.
async fn complete<S: Store>(
    store: &S,
    record: &Key,
    owner: &Owner,
    response: &'static [u8],
) -> bool {
    store
        .complete_record(record, owner, Bytes::from_static(response), LONG)
        .await
        .unwrap()
}

/// Asserts that anyone may take `lock` now.
async fn assert_free<S: Store>(store: &S, lock: &Key) {
    assert_eq!(
        acquire(store, lock, &Owner::random(), LONG).await,
        Acquire::Acquired { fence: None }
    );
}

super::suite! {
    $ __store_conformance_cases, (B: Backend);

    /// One winner among 1000 concurrent acquires.
    pub async fn one_winner_among_1000_concurrent_acquires() {
        let backend = B::start().await;
        let results = all_at_once(1000, |_| {
            let store = backend.store();
            async move {
                store
                    .acquire(&key("race"), &Owner::random(), LONG, Fencing::Off)
                    .await
                    .expect("acquire")
            }
        })
        .await;
        let winners = results
            .iter()
            .filter(|r| matches!(r, Acquire::Acquired { .. }))
            .count();
        let held = results
            .iter()
            .filter(|r| matches!(r, Acquire::Held { remaining } if *remaining > Duration::ZERO))
            .count();
        assert_eq!((winners, held), (1, 999));
    }

    /// One success among 1000 concurrent consumes.
    pub async fn one_success_among_1000_concurrent_consumes() {
        let backend = B::start().await;
        let (scope, token) = (key("client-a"), Key::hashed(["form", "client-a", "t0k3n"]));
        backend
            .store()
            .put_token(&scope, &token, LONG, KEEP)
            .await
            .expect("put");
        let results = all_at_once(1000, |_| {
            let (store, scope, token) = (backend.store(), scope.clone(), token.clone());
            async move { store.consume_token(&scope, &token).await.expect("consume") }
        })
        .await;
        assert_eq!(results.iter().filter(|&&consumed| consumed).count(), 1);
    }

    /// One start among 1000 concurrent begins.
    pub async fn one_start_among_1000_concurrent_begins() {
        let backend = B::start().await;
        let fp = Fingerprint::of(["POST", "/orders", "{}"]);
        let results = all_at_once(1000, |_| {
            let store = backend.store();
            async move {
                store
                    .begin_record(&key("idem-race"), &Owner::random(), &fp, LONG)
                    .await
                    .expect("begin")
            }
        })
        .await;
        let started = results.iter().filter(|r| **r == Begin::Started).count();
        let in_progress = results
            .iter()
            .filter(|r| matches!(r, Begin::InProgress { .. }))
            .count();
        assert_eq!((started, in_progress), (1, 999));
    }

    /// A non owner cannot release or renew.
    pub async fn a_non_owner_cannot_release_or_renew() {
        let (_backend, store) = started::<B>().await;
        let (holder, intruder, lock) = (Owner::random(), Owner::random(), key("held"));
        acquire(&store, &lock, &holder, LONG).await;

        assert!(!store.release(&lock, &intruder).await.unwrap());
        assert!(
            !store
                .renew(&lock, &intruder, Duration::from_millis(1))
                .await
                .unwrap()
        );

        let remaining = store.remaining(&lock).await.unwrap().expect("still held");
        assert!(
            remaining > LONG - Duration::from_secs(5),
            "TTL untouched: {remaining:?}"
        );
        assert!(matches!(
            acquire(&store, &lock, &intruder, LONG).await,
            Acquire::Held { .. }
        ));
        assert!(
            store.release(&lock, &holder).await.unwrap(),
            "the holder still owns it"
        );
    }

    /// The owner releases and renews.
    pub async fn the_owner_releases_and_renews() {
        let (_backend, store) = started::<B>().await;
        let (owner, lock) = (Owner::random(), key("mine"));
        acquire(&store, &lock, &owner, SHORT).await;
        assert!(store.renew(&lock, &owner, LONG).await.unwrap());
        let remaining = store.remaining(&lock).await.unwrap().expect("held");
        assert!(
            remaining > LONG - Duration::from_secs(5),
            "renewed: {remaining:?}"
        );

        assert!(store.release(&lock, &owner).await.unwrap());
        assert_eq!(store.remaining(&lock).await.unwrap(), None);
        assert!(
            !store.release(&lock, &owner).await.unwrap(),
            "released once"
        );
        assert!(
            !store.renew(&lock, &owner, LONG).await.unwrap(),
            "nothing to renew"
        );
        assert_free(&store, &lock).await;
    }

    /// The same owner reenters without changing the hold.
    pub async fn the_same_owner_reenters_without_changing_the_hold() {
        let (_backend, store) = started::<B>().await;
        let (owner, lock) = (Owner::new("worker-1").unwrap(), key("reentry"));
        let fence = fenced(&store, &lock, &owner, LONG).await;
        // The same owner again, as after a network timeout that hid a success.
        match store
            .acquire(&lock, &owner, SHORT, Fencing::On)
            .await
            .unwrap()
        {
            Acquire::Reentered {
                remaining,
                fence: again,
            } => {
                assert_eq!(again, Some(fence), "the fence of the current hold");
                assert!(
                    remaining > LONG - Duration::from_secs(5),
                    "TTL unchanged: {remaining:?}"
                );
            }
            other => panic!("expected reentry, got {other:?}"),
        }
        let plain = key("reentry-unfenced");
        acquire(&store, &plain, &owner, LONG).await;
        assert!(matches!(
            acquire(&store, &plain, &owner, LONG).await,
            Acquire::Reentered { fence: None, .. }
        ));
    }

    /// Expiry frees a lock.
    pub async fn expiry_frees_a_lock() {
        let (_backend, store) = started::<B>().await;
        let lock = key("expiring");
        acquire(&store, &lock, &Owner::random(), SHORT).await;
        let acquired_at = Instant::now();
        eventually(Duration::from_secs(5), "the lock expires", || {
            let store = store.clone();
            let lock = lock.clone();
            async move { store.remaining(&lock).await.unwrap().is_none() }
        })
        .await;
        assert!(
            acquired_at.elapsed() >= SHORT - Duration::from_millis(5),
            "not before its TTL"
        );
        assert_free(&store, &lock).await;
    }

    /// Fencing tokens grow across release and expiry.
    pub async fn fencing_tokens_grow_across_release_and_expiry() {
        let (_backend, store) = started::<B>().await;
        let lock = key("fenced");
        let mut last = 0;
        for round in 0..60 {
            let owner = Owner::random();
            let ttl = if round % 20 == 19 {
                Duration::from_millis(20)
            } else {
                LONG
            };
            let fence = fenced(&store, &lock, &owner, ttl).await;
            assert!(
                fence.get() > last,
                "round {round}: {} after {last}",
                fence.get()
            );
            last = fence.get();
            if ttl == LONG {
                assert!(store.release(&lock, &owner).await.unwrap());
            } else {
                // Let this one expire instead of releasing it.
                eventually(Duration::from_secs(5), "the lock expires", || {
                    let (store, lock) = (store.clone(), lock.clone());
                    async move { store.remaining(&lock).await.unwrap().is_none() }
                })
                .await;
            }
        }
    }

    /// A token is consumed once and expires.
    pub async fn a_token_is_consumed_once_and_expires() {
        let (_backend, store) = started::<B>().await;
        let (scope, kept, fleeting) = (key("client"), key("token-kept"), key("token-fleeting"));
        assert!(
            !store.consume_token(&scope, &kept).await.unwrap(),
            "never issued"
        );
        store.put_token(&scope, &kept, LONG, KEEP).await.unwrap();
        store
            .put_token(&scope, &fleeting, Duration::from_millis(20), KEEP)
            .await
            .unwrap();
        assert!(store.consume_token(&scope, &kept).await.unwrap());
        assert!(!store.consume_token(&scope, &kept).await.unwrap());

        tokio::time::sleep(Duration::from_millis(40)).await; // past its TTL, not a race
        assert!(
            !store.consume_token(&scope, &fleeting).await.unwrap(),
            "expired"
        );
    }

    /// Looking at a token tells whether it is live, and spends nothing.
    pub async fn looking_at_a_token_spends_nothing() {
        let (_backend, store) = started::<B>().await;
        let (alice, bob) = (key("alice"), key("bob"));
        let (kept, fleeting) = (key("token-kept"), key("token-fleeting"));
        assert!(
            !store.has_token(&alice, &kept).await.unwrap(),
            "never issued"
        );
        store.put_token(&alice, &kept, LONG, KEEP).await.unwrap();
        store
            .put_token(&alice, &fleeting, Duration::from_millis(20), KEEP)
            .await
            .unwrap();
        assert!(store.has_token(&alice, &kept).await.unwrap());
        assert!(store.has_token(&alice, &kept).await.unwrap(), "still there");
        assert!(
            !store.has_token(&bob, &kept).await.unwrap(),
            "another scope's token"
        );
        assert!(store.consume_token(&alice, &kept).await.unwrap(), "unspent");
        assert!(!store.has_token(&alice, &kept).await.unwrap(), "spent");

        tokio::time::sleep(Duration::from_millis(40)).await; // past its TTL, not a race
        assert!(
            !store.has_token(&alice, &fleeting).await.unwrap(),
            "expired"
        );
    }

    /// A scope keeps its newest tokens and only its own.
    pub async fn a_scope_keeps_its_newest_tokens_and_only_its_own() {
        let (_backend, store) = started::<B>().await;
        let (alice, bob) = (key("alice"), key("bob"));
        let token = |i: usize| key(&format!("alice-token-{i}"));
        for i in 0..10 {
            store.put_token(&alice, &token(i), LONG, 3).await.unwrap();
        }
        assert!(
            !store.consume_token(&bob, &token(9)).await.unwrap(),
            "another scope's token"
        );
        for i in 0..7 {
            assert!(
                !store.consume_token(&alice, &token(i)).await.unwrap(),
                "token {i} lapsed: only the newest 3 are kept"
            );
        }
        for i in 7..10 {
            assert!(store.consume_token(&alice, &token(i)).await.unwrap(), "{i}");
        }
        // Spending makes room: the next three put are all kept.
        for i in 10..13 {
            store.put_token(&alice, &token(i), LONG, 3).await.unwrap();
        }
        for i in 10..13 {
            assert!(store.consume_token(&alice, &token(i)).await.unwrap(), "{i}");
        }
    }

    /// A record replays what was completed.
    pub async fn a_record_replays_what_was_completed() {
        let (_backend, store) = started::<B>().await;
        let (record, first, retry) = (key("payment-1"), Owner::random(), Owner::random());
        let fp = Fingerprint::of(["POST", "/payments", r#"{"amount":10}"#]);
        // Not UTF-8, and with a NUL: stored byte for byte.
        let response = Bytes::from_static(b"HTTP/1.1 201\r\n\x00\xff\xfe body");

        assert_eq!(
            begin(&store, &record, &first, &fp, LONG).await,
            Begin::Started
        );
        assert!(matches!(
            store.begin_record(&record, &retry, &fp, LONG).await.unwrap(),
            Begin::InProgress { remaining } if remaining > Duration::ZERO
        ));
        assert!(
            store
                .complete_record(&record, &first, response.clone(), LONG)
                .await
                .unwrap()
        );
        assert_eq!(
            begin(&store, &record, &retry, &fp, LONG).await,
            Begin::Completed {
                response: response.clone()
            }
        );
        assert!(
            !complete(&store, &record, &first, b"again").await,
            "a completed record is final"
        );
        assert!(
            !store.abandon_record(&record, &first).await.unwrap(),
            "and cannot be abandoned"
        );
        assert_eq!(
            begin(&store, &record, &retry, &fp, LONG).await,
            Begin::Completed { response }
        );
    }

    /// A stale owner cannot complete a newer record.
    pub async fn a_stale_owner_cannot_complete_a_newer_record() {
        let (_backend, store) = started::<B>().await;
        let (record, stale, fresh) = (key("stale"), Owner::random(), Owner::random());
        let fp = Fingerprint::of(["same request"]);
        assert_eq!(
            begin(&store, &record, &stale, &fp, SHORT).await,
            Begin::Started
        );
        // The stale worker pauses past its lease; a retry begins the record anew.
        eventually(Duration::from_secs(5), "the lease runs out", || {
            let (store, record, fresh) = (store.clone(), record.clone(), fresh.clone());
            async move { begin(&store, &record, &fresh, &fp, LONG).await == Begin::Started }
        })
        .await;

        assert!(!complete(&store, &record, &stale, b"stale").await);
        assert!(!store.renew_record(&record, &stale, LONG).await.unwrap());
        assert!(!store.abandon_record(&record, &stale).await.unwrap());
        assert!(matches!(
            begin(&store, &record, &Owner::random(), &fp, LONG).await,
            Begin::InProgress { .. }
        ));

        assert!(complete(&store, &record, &fresh, b"fresh").await);
        assert!(!complete(&store, &record, &stale, b"stale").await);
        assert_eq!(
            begin(&store, &record, &Owner::random(), &fp, LONG).await,
            Begin::Completed {
                response: Bytes::from_static(b"fresh")
            }
        );
    }

    /// A different fingerprint is a mismatch.
    pub async fn a_different_fingerprint_is_a_mismatch() {
        let (_backend, store) = started::<B>().await;
        let (record, owner) = (key("reused-key"), Owner::random());
        let (fp, other) = (
            Fingerprint::of(["amount=10"]),
            Fingerprint::of(["amount=11"]),
        );
        begin(&store, &record, &owner, &fp, LONG).await;
        assert_eq!(
            begin(&store, &record, &Owner::random(), &other, LONG).await,
            Begin::Mismatch,
            "while in progress"
        );
        complete(&store, &record, &owner, b"ok").await;
        assert_eq!(
            begin(&store, &record, &Owner::random(), &other, LONG).await,
            Begin::Mismatch,
            "after completion"
        );
    }

    /// An abandoned record starts afresh.
    pub async fn an_abandoned_record_starts_afresh() {
        let (_backend, store) = started::<B>().await;
        let (record, owner) = (key("failed-attempt"), Owner::random());
        let fp = Fingerprint::of(["x"]);
        begin(&store, &record, &owner, &fp, LONG).await;
        assert!(
            !store
                .abandon_record(&record, &Owner::random())
                .await
                .unwrap(),
            "not the owner's"
        );
        assert!(store.abandon_record(&record, &owner).await.unwrap());
        assert!(
            !store.abandon_record(&record, &owner).await.unwrap(),
            "already gone"
        );
        // Another fingerprint is welcome now: nothing of the old record is left.
        assert_eq!(
            store
                .begin_record(&record, &Owner::random(), &Fingerprint::of(["y"]), LONG)
                .await
                .unwrap(),
            Begin::Started
        );
    }

    /// A running record is kept alive by renewal.
    pub async fn a_running_record_is_kept_alive_by_renewal() {
        let (_backend, store) = started::<B>().await;
        let (record, owner) = (key("long-handler"), Owner::random());
        let fp = Fingerprint::of(["slow"]);
        begin(&store, &record, &owner, &fp, SHORT).await;
        assert!(store.renew_record(&record, &owner, LONG).await.unwrap());
        tokio::time::sleep(SHORT * 2).await; // past the first lease: only the renewal keeps it
        match begin(&store, &record, &Owner::random(), &fp, LONG).await {
            Begin::InProgress { remaining } => {
                assert!(
                    remaining > LONG - Duration::from_secs(5),
                    "renewed lease: {remaining:?}"
                )
            }
            other => panic!("expected the record in progress, got {other:?}"),
        }
        assert!(
            !store
                .renew_record(&record, &Owner::random(), LONG)
                .await
                .unwrap()
        );
    }

    /// Locks tokens and records do not collide.
    pub async fn locks_tokens_and_records_do_not_collide() {
        let (_backend, store) = started::<B>().await;
        let (same, owner) = (key("shared-name"), Owner::random());
        acquire(&store, &same, &owner, LONG).await;
        assert!(
            !store.consume_token(&same, &same).await.unwrap(),
            "a lock is not a token"
        );
        store.put_token(&same, &same, LONG, KEEP).await.unwrap();
        assert_eq!(
            begin(&store, &same, &owner, &Fingerprint::of(["r"]), LONG).await,
            Begin::Started,
            "a lock is not a record"
        );
        assert!(store.consume_token(&same, &same).await.unwrap());
        assert!(
            store.release(&same, &owner).await.unwrap(),
            "the lock is intact"
        );
    }

    /// Huge and zero ttls are kept within bounds.
    pub async fn huge_and_zero_ttls_are_kept_within_bounds() {
        let (_backend, store) = started::<B>().await;
        let (huge, zero) = (key("forever"), key("instant"));
        assert!(matches!(
            store
                .acquire(&huge, &Owner::random(), Duration::MAX, Fencing::On)
                .await
                .unwrap(),
            Acquire::Acquired { .. }
        ));
        let remaining = store.remaining(&huge).await.unwrap().expect("held");
        assert!(
            remaining > Duration::from_secs(99 * 365 * 24 * 3600),
            "cut to a century: {remaining:?}"
        );
        store
            .put_token(&zero, &zero, Duration::ZERO, KEEP)
            .await
            .unwrap();
        store
            .begin_record(
                &zero,
                &Owner::random(),
                &Fingerprint::of(["z"]),
                Duration::MAX,
            )
            .await
            .unwrap();
    }

    /// A wait with no release ends when its time runs out; a release of the key then wakes a
    /// waiter that registered, also one that starts waiting only after the release: the
    /// registration, made in the step that found the key held, is what the release answers.
    pub async fn a_release_wakes_a_waiter() {
        let (_backend, store) = started::<B>().await;
        let (lock, holder, waiter) = (key("awaited"), Owner::random(), Owner::random());
        acquire(&store, &lock, &holder, LONG).await;
        let within = Duration::from_millis(50);
        let started = Instant::now();
        assert!(
            !store.wait_for_release(&lock, within).await.unwrap(),
            "nobody released the key"
        );
        assert!(started.elapsed() >= within, "not before its time ran out");

        assert!(matches!(
            store
                .acquire_or_register_waiter(&lock, &waiter, LONG, Fencing::Off, LONG)
                .await
                .unwrap(),
            Acquire::Held { .. }
        ));
        let waiting = tokio::spawn({
            let (store, lock) = (store.clone(), lock.clone());
            async move { store.wait_for_release(&lock, LONG).await.unwrap() }
        });
        assert!(store.release_and_signal(&lock, &holder).await.unwrap());
        let woken = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiter is woken long before its time runs out")
            .expect("the waiter does not panic");
        assert!(woken, "woken by the release");
        assert!(
            !store.release_and_signal(&lock, &holder).await.unwrap(),
            "released once"
        );
    }

    /// A release that nobody registered for wakes nobody, then or later: it leaves no wake-up
    /// behind for a waiter that comes along once the key is held again.
    pub async fn a_release_nobody_waits_for_leaves_no_wake_up() {
        let (_backend, store) = started::<B>().await;
        let (lock, holder) = (key("unawaited"), Owner::random());
        for fencing in [Fencing::Off, Fencing::On] {
            store.acquire(&lock, &holder, LONG, fencing).await.unwrap();
            assert!(store.release_and_signal(&lock, &holder).await.unwrap());
        }
        acquire(&store, &lock, &holder, LONG).await;
        assert!(
            !store.wait_for_release(&lock, SHORT).await.unwrap(),
            "woken by a release nobody waited for, with the key held"
        );
    }

    /// Two releases in a row, each after a registration, wake both waiters, even when neither
    /// had started waiting before the second release.
    pub async fn two_releases_wake_two_registered_waiters() {
        let (_backend, store) = started::<B>().await;
        let (lock, first, second) = (key("two-waiters"), Owner::random(), Owner::random());
        acquire(&store, &lock, &first, LONG).await;
        for waiter in [Owner::random(), Owner::random()] {
            let answer = store
                .acquire_or_register_waiter(&lock, &waiter, LONG, Fencing::Off, LONG)
                .await
                .unwrap();
            assert!(matches!(answer, Acquire::Held { .. }), "{answer:?}");
        }
        assert!(store.release_and_signal(&lock, &first).await.unwrap());
        acquire(&store, &lock, &second, LONG).await;
        assert!(store.release_and_signal(&lock, &second).await.unwrap());
        let waits = super::all_at_once(2, |_| {
            let (store, lock) = (store.clone(), lock.clone());
            async move { store.wait_for_release(&lock, LONG).await.unwrap() }
        });
        let woken = tokio::time::timeout(Duration::from_secs(5), waits)
            .await
            .expect("both waiters are woken long before their time runs out");
        assert_eq!(woken, [true, true]);
    }

    /// Registering to wait acquires like [`LockStore::acquire`]: a free key is taken (with a
    /// token only when fencing is asked for), the owner's own key is re-entered with the
    /// token of its hold, and only another owner's key is `Held`.
    pub async fn registering_to_wait_acquires_like_acquire() {
        let (_backend, store) = started::<B>().await;
        let owner = Owner::random();
        let (plain, fenced) = (key("plain-registering"), key("fenced-registering"));
        assert_eq!(
            store
                .acquire_or_register_waiter(&plain, &owner, LONG, Fencing::Off, SHORT)
                .await
                .unwrap(),
            Acquire::Acquired { fence: None }
        );
        assert!(matches!(
            store
                .acquire_or_register_waiter(&plain, &owner, LONG, Fencing::Off, SHORT)
                .await
                .unwrap(),
            Acquire::Reentered { fence: None, .. }
        ));
        assert!(matches!(
            store
                .acquire_or_register_waiter(&plain, &Owner::random(), LONG, Fencing::Off, SHORT)
                .await
                .unwrap(),
            Acquire::Held { remaining } if remaining > LONG / 2
        ));

        let Acquire::Acquired { fence: Some(drawn) } = store
            .acquire_or_register_waiter(&fenced, &owner, LONG, Fencing::On, SHORT)
            .await
            .unwrap()
        else {
            panic!("a free key is taken, with a token");
        };
        for registering in [true, false] {
            let answer = if registering {
                store
                    .acquire_or_register_waiter(&fenced, &owner, LONG, Fencing::On, SHORT)
                    .await
            } else {
                store.acquire(&fenced, &owner, LONG, Fencing::On).await
            };
            let Acquire::Reentered { fence, .. } = answer.unwrap() else {
                panic!("re-entered");
            };
            assert_eq!(fence, Some(drawn), "the token of the hold");
        }
        assert!(store.release_and_signal(&fenced, &owner).await.unwrap());
        let Acquire::Acquired { fence: Some(next) } = store
            .acquire_or_register_waiter(&fenced, &Owner::random(), LONG, Fencing::On, SHORT)
            .await
            .unwrap()
        else {
            panic!("free again, with a token");
        };
        assert!(next > drawn);
    }
}
