//! The example through its router (no sockets), on a `MemoryStore`: holders never
//! overlap, a waiter wakes on release, and the row refuses a stale token; the row's
//! writes are counted.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use example_lock::LockExample;
use idem_axum::MemoryStore;
use idem_tests::{Answer, all_at_once, answer, u64_field};
use serde_json::Value;
use tempfile::TempDir;

/// The example with `lease`, on a database of its own.
async fn app(lease: Duration) -> (Router, TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let example = LockExample::open(MemoryStore::new(), &dir.path().join("row.db"))
        .await
        .expect("the database")
        .with_lease(lease);
    (example.router(), dir)
}

/// `POST /writes?QUERY`.
async fn write(app: &Router, query: &str) -> Answer {
    let request = Request::post(format!("/writes?{query}")).body(Body::empty());
    answer(app, request.unwrap()).await
}

/// Two writes that contend for the lock: `first` in a task of its own, then `second`
/// `pause` later, while the first may still hold it. Answers both, once both are in.
async fn overlapping_writes(
    app: &Router,
    first: &'static str,
    pause: Duration,
    second: &str,
) -> (Answer, Answer) {
    let first = {
        let app = app.clone();
        tokio::spawn(async move { write(&app, first).await })
    };
    tokio::time::sleep(pause).await;
    let second = write(app, second).await;
    (first.await.unwrap(), second)
}

async fn row(app: &Router) -> Value {
    answer(app, Request::get("/row").body(Body::empty()).unwrap())
        .await
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_the_lock_past_its_lease_and_the_waiter_wakes_on_release() {
    let (app, _dir) = app(Duration::from_millis(300)).await;
    let (first, second) = overlapping_writes(
        &app,
        "text=first&work_ms=1100",
        Duration::from_millis(100),
        "text=second",
    )
    .await;
    assert_eq!(
        (first.status, second.status),
        (StatusCode::OK, StatusCode::OK)
    );
    let (first, second) = (first.json(), second.json());

    // Held for more than three leases, yet the second got the lock only once released.
    let released = u64_field(&first, "released_at_ms");
    let acquired = u64_field(&second, "acquired_at_ms");
    assert!(acquired >= released, "{first} {second}");
    // Woken by the release, not by a poll (a waiter re-checks on its own once a second).
    assert!(acquired - released < 500, "{first} {second}");
    assert!(u64_field(&second, "fencing_token") > u64_field(&first, "fencing_token"));
    assert_eq!(row(&app).await["writes"], 2);
    assert_eq!(row(&app).await["text"], "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_late_write_is_refused_by_its_fencing_token() {
    let (app, _dir) = app(Duration::from_millis(200)).await;
    let (stalled, fresh) = overlapping_writes(
        &app,
        "text=stalled&stall_ms=700",
        Duration::from_millis(350),
        "text=fresh",
    )
    .await;
    assert_eq!(fresh.status, StatusCode::OK, "{fresh:?}");
    assert_eq!(stalled.status, StatusCode::CONFLICT, "{stalled:?}");
    let (fresh, stalled) = (fresh.json(), stalled.json());
    assert_eq!(stalled["written"], false);
    assert!(u64_field(&fresh, "fencing_token") > u64_field(&stalled, "fencing_token"));
    let seen = format!("fencing token {}", u64_field(&fresh, "fencing_token"));
    assert!(
        stalled["refused"].as_str().unwrap().contains(&seen),
        "{stalled}"
    );

    let row = row(&app).await;
    assert_eq!((&row["text"], &row["writes"]), (&"fresh".into(), &1.into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_holders_at_once_hold_the_lock_one_after_another() {
    let (app, _dir) = app(Duration::from_secs(1)).await;
    let held = all_at_once(20, |i| {
        let app = app.clone();
        async move { write(&app, &format!("text={i}&work_ms=10")).await }
    })
    .await;
    let mut held: Vec<Value> = held
        .into_iter()
        .map(|answer| {
            assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
            answer.json()
        })
        .collect();
    held.sort_by_key(|held| u64_field(held, "fencing_token"));
    for pair in held.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(
            u64_field(after, "acquired_at_ms") >= u64_field(before, "released_at_ms"),
            "overlapping holders: {before} {after}"
        );
    }
    assert_eq!(row(&app).await["writes"], 20);
}
