//! The cases every store passes.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_core::RecordStore;
use idem_core::run_once::{RunError, RunOnce, RunOnceLayer, fingerprint_of};
use idem_core::{Owner, StoreError};
use idem_tests::{Backend, Counting, all_at_once, eventually};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tower::{ServiceExt, service_fn};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Charge {
    order: u64,
    cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    run: u32,
}

const CHARGE: Charge = Charge {
    order: 7,
    cents: 1299,
};

/// How often the work ran: each run gets the next number as its receipt.
#[derive(Clone, Default)]
struct Runs(Arc<AtomicU32>);

impl Runs {
    fn next(&self) -> Receipt {
        Receipt {
            run: self.0.fetch_add(1, Ordering::SeqCst) + 1,
        }
    }

    fn count(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

/// 300 calls at once, half through another instance's store, each waiting for the first's
/// result: the work runs once and every call gets its receipt.
pub(crate) async fn hundreds_of_concurrent_calls_from_two_instances_run_the_work_once<
    B: Backend,
>() {
    let backend = B::start().await;
    let wait = Duration::from_secs(30);
    let instances = [
        RunOnce::new(backend.store(), "charge").wait_while_in_progress(wait),
        RunOnce::new(backend.store_of_another_instance(), "charge").wait_while_in_progress(wait),
    ];
    let runs = Runs::default();
    let receipts = all_at_once(300, |i| {
        let (once, runs) = (instances[i % 2].clone(), runs.clone());
        async move {
            once.run("order-7", &CHARGE, |_| async move {
                // Long enough that every call arrives while the work runs.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, Infallible>(runs.next())
            })
            .await
        }
    })
    .await;
    assert_eq!(runs.count(), 1, "the work ran once");
    for receipt in receipts {
        assert_eq!(
            receipt.expect("every call gets the result"),
            Receipt { run: 1 }
        );
    }
}

/// Without a wait, a call while the first runs gets `InProgress` and does not run the
/// work; once the first ends, a call gets its result.
pub(crate) async fn a_call_while_the_first_runs_is_refused_then_replayed<B: Backend>() {
    let backend = B::start().await;
    let once = RunOnce::new(backend.store(), "charge");
    let runs = Runs::default();
    let (started, is_started) = oneshot::channel();
    let (finish, finishing) = oneshot::channel::<()>();
    let first = tokio::spawn({
        let (once, runs) = (once.clone(), runs.clone());
        async move {
            once.run("order-7", &CHARGE, |_| async move {
                started.send(()).expect("the test waits");
                finishing.await.expect("the test finishes the work");
                Ok::<_, Infallible>(runs.next())
            })
            .await
        }
    });
    is_started.await.expect("the first call runs the work");
    let during = once
        .run("order-7", &CHARGE, |_| async {
            Ok::<_, Infallible>(runs.next())
        })
        .await;
    assert!(
        matches!(during, Err(RunError::InProgress { remaining }) if remaining > Duration::ZERO),
        "{during:?}"
    );
    finish.send(()).expect("the work waits");
    assert_eq!(
        first.await.expect("no panic").expect("ran"),
        Receipt { run: 1 }
    );
    let after = once
        .run("order-7", &CHARGE, |_| async {
            Ok::<_, Infallible>(runs.next())
        })
        .await;
    assert_eq!(after.expect("replayed"), Receipt { run: 1 });
    assert_eq!(runs.count(), 1);
}

/// A call that waits for the first's result is woken by its completion rather than
/// looking at the record again and again: two looks (when it began, and once woken),
/// however long the first runs. Polling every 10 ms up to every 200 ms, it looked about
/// six times in the 300 ms it waits here.
pub(crate) async fn a_waiting_call_is_woken_by_the_first_not_polling<B: Backend>() {
    let backend = B::start().await;
    let store = Counting::new(backend.store());
    let once = RunOnce::new(store.clone(), "charge").wait_while_in_progress(LONG_WAIT);
    let runs = Runs::default();
    let (finish, finishing) = oneshot::channel::<()>();
    let first = tokio::spawn({
        let (once, runs) = (once.clone(), runs.clone());
        async move {
            once.run("order-7", &CHARGE, |_| async move {
                finishing.await.expect("the test finishes the work");
                Ok::<_, Infallible>(runs.next())
            })
            .await
        }
    });
    eventually(LONG_WAIT, "the first began", || async {
        store.record_begins() == 1
    })
    .await;
    let waiting = tokio::spawn({
        let (once, runs) = (once.clone(), runs.clone());
        async move {
            once.run("order-7", &CHARGE, |_| async move {
                Ok::<_, Infallible>(runs.next())
            })
            .await
        }
    });
    eventually(LONG_WAIT, "the second looked", || async {
        store.record_begins() == 2
    })
    .await;
    // Long enough for a polling waiter to look several times; a woken one does not.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.record_begins(), 2, "no look while the first runs");
    finish.send(()).expect("the work waits");
    assert_eq!(
        first.await.expect("no panic").expect("ran"),
        Receipt { run: 1 }
    );
    assert_eq!(
        waiting.await.expect("no panic").expect("replayed"),
        Receipt { run: 1 }
    );
    assert_eq!(store.record_begins(), 3, "one look once woken");
    assert_eq!(runs.count(), 1);
}

/// How long a case waits for what must happen.
const LONG_WAIT: Duration = Duration::from_secs(30);

/// A key sent again with another payload is a mismatch, before and after the first run
/// completed, and whatever the payload's map order; the work does not run for it.
pub(crate) async fn another_payload_under_the_key_is_refused<B: Backend>() {
    let backend = B::start().await;
    let once = RunOnce::new(backend.store(), "charge").wait_while_in_progress(Duration::ZERO);
    let runs = Runs::default();
    let work = |_| async { Ok::<_, Infallible>(runs.next()) };
    once.run("order-7", &CHARGE, work).await.expect("ran");
    let other = Charge { cents: 1, ..CHARGE };
    assert!(matches!(
        once.run("order-7", &other, work).await,
        Err(RunError::Mismatch)
    ));
    // The same fields in another order are the same payload.
    let reordered = serde_json::json!({ "cents": 1299, "order": 7 });
    assert_eq!(
        once.run("order-7", &reordered, work)
            .await
            .expect("replayed"),
        Receipt { run: 1 }
    );
    // Another scope, or another key, is another record.
    let refunds = RunOnce::new(backend.store(), "refund");
    assert_eq!(
        refunds.run("order-7", &other, work).await.expect("ran"),
        Receipt { run: 2 }
    );
    assert_eq!(runs.count(), 2);
}

/// A run whose work answers `Err` gives the key back: the next call runs the work. A
/// failure returned inside `Ok` is a result, kept and replayed.
pub(crate) async fn a_failure_frees_the_key_and_a_kept_one_is_replayed<B: Backend>() {
    let backend = B::start().await;
    let once = RunOnce::new(backend.store(), "charge");
    let runs = Runs::default();
    let failed = once
        .run("order-7", &CHARGE, |_| async {
            runs.next();
            Err::<Receipt, _>("the provider timed out")
        })
        .await;
    assert!(matches!(
        failed,
        Err(RunError::Failed("the provider timed out"))
    ));
    let retried = once
        .run("order-7", &CHARGE, |_| async {
            Ok::<_, Infallible>(runs.next())
        })
        .await;
    assert_eq!(retried.expect("ran again"), Receipt { run: 2 });

    let declined = |_| async {
        runs.next();
        Ok::<Result<Receipt, String>, Infallible>(Err("card declined".to_owned()))
    };
    let first = once.run("order-8", &CHARGE, declined).await.expect("kept");
    let again = once
        .run("order-8", &CHARGE, declined)
        .await
        .expect("replayed");
    assert_eq!(first, Err("card declined".to_owned()));
    assert_eq!(again, first);
    assert_eq!(runs.count(), 3, "the declined charge ran once");
}

/// A run that panics, and one whose future is dropped (a consumer's timeout), give the
/// key back: a call right after runs the work.
pub(crate) async fn a_panicked_or_dropped_run_frees_the_key<B: Backend>() {
    let backend = B::start().await;
    let once = RunOnce::new(backend.store(), "charge");
    let runs = Runs::default();
    let panicked = tokio::spawn({
        let once = once.clone();
        async move {
            once.run("order-7", &CHARGE, |_| async {
                panic!("the consumer's bug");
                #[allow(unreachable_code)]
                Ok::<Receipt, Infallible>(Receipt { run: 0 })
            })
            .await
        }
    });
    assert!(panicked.await.is_err(), "the panic reaches the caller");
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        once.run("order-8", &CHARGE, |_| {
            std::future::pending::<Result<Receipt, Infallible>>()
        }),
    )
    .await;
    assert!(dropped.is_err(), "the run was cut short");
    // The key is given back in a task of its own: soon, not necessarily at once.
    for order in ["order-7", "order-8"] {
        eventually(Duration::from_secs(5), "the key is given back", || async {
            !matches!(
                once.run(order, &CHARGE, |_| async {
                    Ok::<_, Infallible>(runs.next())
                })
                .await,
                Err(RunError::InProgress { .. })
            )
        })
        .await;
    }
    assert_eq!(runs.count(), 2, "each key ran afresh, once");
}

/// Work that runs three times its lease keeps its record: a call in the middle is refused,
/// not run.
pub(crate) async fn the_lease_is_renewed_while_the_work_runs<B: Backend>() {
    let backend = B::start().await;
    let lease = Duration::from_millis(600);
    let once = RunOnce::new(backend.store(), "charge").with_lease(lease);
    let runs = Runs::default();
    let (started, is_started) = oneshot::channel();
    let first = tokio::spawn({
        let (once, runs) = (once.clone(), runs.clone());
        async move {
            once.run("order-7", &CHARGE, |_| async move {
                started.send(()).expect("the test waits");
                tokio::time::sleep(lease * 3).await;
                Ok::<_, Infallible>(runs.next())
            })
            .await
        }
    });
    is_started.await.expect("the work runs");
    tokio::time::sleep(lease * 2).await;
    let during = once
        .run("order-7", &CHARGE, |_| async {
            Ok::<_, Infallible>(runs.next())
        })
        .await;
    assert!(
        matches!(during, Err(RunError::InProgress { .. })),
        "{during:?}"
    );
    assert_eq!(
        first.await.expect("no panic").expect("ran"),
        Receipt { run: 1 }
    );
    assert_eq!(runs.count(), 1);
}

/// A run whose process died (a record begun and never renewed) holds its key until its
/// lease ends; then a call takes the record over, runs the work once, and keeps its result.
pub(crate) async fn a_run_that_died_is_taken_over_once_its_lease_ends<B: Backend>() {
    let backend = B::start().await;
    let store = backend.store();
    let once = RunOnce::new(store.clone(), "charge");
    let (key, fingerprint) = (
        once.key_of("order-7"),
        fingerprint_of(&CHARGE).expect("JSON"),
    );
    store
        .begin_record(
            &key,
            &Owner::random(),
            &fingerprint,
            Duration::from_millis(300),
        )
        .await
        .expect("the dead run began its record");
    let runs = Runs::default();
    let work = |_| async { Ok::<_, Infallible>(runs.next()) };
    assert!(matches!(
        once.run("order-7", &CHARGE, work).await,
        Err(RunError::InProgress { .. })
    ));
    eventually(
        Duration::from_secs(10),
        "the record is taken over",
        || async { once.run("order-7", &CHARGE, work).await.is_ok() },
    )
    .await;
    assert_eq!(
        once.run("order-7", &CHARGE, work).await.expect("replayed"),
        Receipt { run: 1 }
    );
    assert_eq!(runs.count(), 1);
}

/// A service of messages behind `RunOnceLayer`, given each message twice, and a batch with
/// a redelivered and a failing message: each message's work runs once, the failing one's
/// key is reported, and the outbound key the work derives is the same in every run.
pub(crate) async fn a_message_layer_and_a_batch_run_each_message_once<B: Backend>() {
    let backend = B::start().await;
    let once = RunOnce::new(backend.store(), "order-events");
    let runs = Runs::default();
    let consumer = RunOnceLayer::new(once.clone(), |charge: &Charge| charge.order.to_string());
    let service = tower::Layer::layer(
        &consumer,
        service_fn({
            let runs = runs.clone();
            move |charge: Charge| {
                let runs = runs.clone();
                async move {
                    let attempt = idem_core::run_once::Attempt::current().expect("inside the run");
                    Ok::<_, StoreError>((
                        runs.next(),
                        attempt.outbound_key("charge").to_string(),
                        charge.cents,
                    ))
                }
            }
        }),
    );
    let first = service.clone().oneshot(CHARGE).await.expect("ran");
    let again = service.clone().oneshot(CHARGE).await.expect("replayed");
    assert_eq!(first, again);
    assert_eq!(runs.count(), 1);

    let batch = vec![
        CHARGE,
        Charge { order: 8, cents: 0 },
        Charge { order: 9, cents: 5 },
    ];
    let report = once
        .batch(|charge: &Charge| charge.order.to_string())
        .with_concurrency(2)
        .run(batch, |charge, attempt| {
            let runs = runs.clone();
            async move {
                if charge.cents == 0 {
                    return Err("nothing to charge");
                }
                Ok((
                    runs.next(),
                    attempt.outbound_key("charge").to_string(),
                    charge.cents,
                ))
            }
        })
        .await;
    assert_eq!(report.failed_keys().collect::<Vec<_>>(), ["8"]);
    let outcome = |i: usize| match &report.items[i].outcome {
        Some(Ok(result)) => result.clone(),
        other => panic!("message {i}: {other:?}"),
    };
    assert_eq!(
        outcome(0),
        first,
        "the redelivered message got its first result"
    );
    assert_eq!(runs.count(), 2, "only order 9 ran");

    // An ordered batch stops at its first failure, and reports the rest as not run.
    let ordered = once
        .batch(|charge: &Charge| charge.order.to_string())
        .ordered()
        .run(
            vec![
                Charge {
                    order: 10,
                    cents: 0,
                },
                Charge {
                    order: 11,
                    cents: 5,
                },
            ],
            |_, _| async { Err::<u32, _>("stop") },
        )
        .await;
    assert_eq!(ordered.failed_keys().collect::<Vec<_>>(), ["10", "11"]);
    assert!(ordered.items[1].outcome.is_none());
}
