//! The `idem` binary against real stores the harness starts: Redis (a server and a
//! cluster), PostgreSQL and SQLite. On each, a record stuck in progress and a completed
//! one are shown by what the user saw of them and removed, and the application's next
//! request with the key runs afresh.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use http::{HeaderName, Method, Request, StatusCode};
use idem_axum::idempotency::RecordKeys;
use idem_axum::identity::{ClientHeader, ClientId};
use idem_axum::store::{Begin, Fingerprint, Owner, Store};
use idem_axum::{Idem, IdempotencyLayer};
use idem_core::run_once::RunOnce;
use idem_tests::{Backend, ClusterBackend, PostgresBackend, RedisBackend, SqliteBackend};
use tower::ServiceExt;

const LONG: Duration = Duration::from_secs(60);

/// What `idem ARGS` answered: its exit status and its output.
fn idem(args: &[&str]) -> (i32, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs");
    let text = [output.stdout, output.stderr].concat();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&text).into_owned(),
    )
}

/// `idem URL ACTION` on alice's `Idempotency-Key: pay-7` sent to `POST /payments`.
fn on_payment(url: &str, action: &str) -> (i32, String) {
    let record = [
        "--route",
        "/payments",
        "--client",
        "alice",
        "--key",
        "pay-7",
    ];
    idem(&[&[url, action][..], &record].concat())
}

/// Asserts that `answer` has status `status` and says `what`.
fn assert_answer((code, output): (i32, String), status: i32, what: &str) {
    assert_eq!(code, status, "{output}");
    assert!(output.contains(what), "{what:?} not in {output:?}");
}

/// A payment stuck in progress (its process died) and then a completed one are shown
/// and removed on `store`, whose URL is `url`, by route, client and key.
async fn records_are_shown_and_removed<S: Store>(store: &S, url: &str) {
    let alice = ClientId::new("alice");
    let keys = RecordKeys::new("default");
    let record = keys.idempotency(&Method::POST, "/payments", Some(&alice), "pay-7");
    assert_answer(on_payment(url, "show"), 1, "no record");

    let (fingerprint, stuck) = (Fingerprint::of(["POST", "/payments"]), Owner::random());
    let begun = store
        .begin_record(&record, &stuck, &fingerprint, LONG)
        .await;
    assert_eq!(begun.unwrap(), Begin::Started);
    assert_answer(on_payment(url, "show"), 0, "in progress, lease ends in");
    assert_answer(on_payment(url, "remove"), 0, "removed");
    assert_eq!(store.record_state(&record).await.unwrap(), None);
    let late = store
        .complete_record(&record, &stuck, "late".into(), LONG)
        .await;
    assert!(
        !late.unwrap(),
        "the stuck attempt can no longer complete it"
    );

    let owner = Owner::random();
    let begun = store
        .begin_record(&record, &owner, &fingerprint, LONG)
        .await;
    assert_eq!(begun.unwrap(), Begin::Started, "a retry runs afresh");
    let done = store
        .complete_record(&record, &owner, "201".into(), LONG)
        .await;
    assert!(done.unwrap());
    assert_answer(
        on_payment(url, "show"),
        0,
        "completed, 3 bytes stored, kept ",
    );
    assert_answer(on_payment(url, "remove"), 0, "removed");
    assert_answer(on_payment(url, "show"), 1, "no record");
}

/// A run-once key's record is shown by its scope and key and removed: the work runs again.
async fn a_run_once_record_is_removed<S: Store + Clone>(store: &S, url: &str) {
    let charges = AtomicU32::new(0);
    let once = RunOnce::new(store.clone(), "charge");
    let charge = || async {
        let run = once.run("order-7", &7, |_| async {
            Ok::<_, std::io::Error>(charges.fetch_add(1, Ordering::SeqCst) + 1)
        });
        run.await.unwrap()
    };
    assert_eq!(
        (charge().await, charge().await),
        (1, 1),
        "run once, then replayed"
    );
    let record = ["--run-once", "charge", "--key", "order-7"];
    assert_answer(
        idem(&[&[url, "show"][..], &record].concat()),
        0,
        "completed",
    );
    assert_answer(
        idem(&[&[url, "remove"][..], &record].concat()),
        0,
        "removed",
    );
    assert_eq!(charge().await, 2, "the work runs again");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_redis() {
    let backend = RedisBackend::start().await;
    let url = backend.server.url();
    records_are_shown_and_removed(&backend.store(), &url).await;
    // Without the process's copies of replayed records, which would outlive a removal made
    // by another process (the command line) until they end.
    let store = backend
        .server
        .store_with(idem_axum::RedisStore::builder().with_replay_cache(0));
    a_run_once_record_is_removed(&store, &url).await;
}

/// The record the application's `IdempotencyLayer` begins, on the route as declared,
/// is the one the command line finds: removed, the next request runs the handler again.
#[tokio::test(flavor = "multi_thread")]
async fn on_redis_the_layers_own_record() {
    const CLIENT: HeaderName = HeaderName::from_static("x-client");
    let backend = RedisBackend::start().await;
    let url = backend.server.url();
    // No copies of replayed records in the process, as above.
    let store = backend
        .server
        .store_with(idem_axum::RedisStore::builder().with_replay_cache(0));
    let runtime = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let runs = std::sync::Arc::new(AtomicU32::new(0));
    let counted = std::sync::Arc::clone(&runs);
    let pay = post(move || async move { counted.fetch_add(1, Ordering::SeqCst).to_string() });
    let app = Router::new()
        .route("/orders/{id}/pay", pay.route_layer(IdempotencyLayer::new()))
        .layer(runtime.layer());
    let send = || async {
        let request = Request::post("/orders/7/pay")
            .header(&CLIENT, "alice")
            .header("idempotency-key", "pay-7");
        let answer = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
    };
    send().await;
    send().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "replayed");
    let record = [
        "--route",
        "/orders/{id}/pay",
        "--client",
        "alice",
        "--key",
        "pay-7",
    ];
    assert_answer(
        idem(&[&[url.as_str(), "show"][..], &record].concat()),
        0,
        "completed",
    );
    assert_answer(
        idem(&[&[url.as_str(), "remove"][..], &record].concat()),
        0,
        "removed",
    );
    send().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "run again");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_redis_cluster() {
    let backend = ClusterBackend::start().await;
    let nodes: Vec<_> = backend
        .cluster
        .urls()
        .iter()
        .map(|url| url.trim_start_matches("redis://").to_owned())
        .collect();
    let url = format!("redis+cluster://{}", nodes.join(","));
    records_are_shown_and_removed(&backend.store(), &url).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres() {
    let backend = PostgresBackend::start().await;
    let url = backend.server.url();
    records_are_shown_and_removed(&backend.store(), &url).await;
    a_run_once_record_is_removed(&backend.store(), &url).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_sqlite() {
    let backend = SqliteBackend::start().await;
    let url = format!("sqlite://{}", backend.path().display());
    records_are_shown_and_removed(&backend.store(), &url).await;
    a_run_once_record_is_removed(&backend.store(), &url).await;
}

/// Mistakes in the command line are told apart from a missing record, and change nothing.
#[test]
fn mistakes_are_refused_with_the_usage() {
    for args in [
        &["sqlite://x.db", "show"][..],
        &["sqlite://x.db", "drop", "--run-once", "s", "--key", "k"],
        &["sqlite://x.db", "show", "--route", "/p", "--key", "k"],
        &[
            "sqlite://x.db",
            "show",
            "--route",
            "/p",
            "--client",
            "a",
            "--shared",
            "--key",
            "k",
        ],
        &["sqlite://x.db", "show", "--route", "/p", "--client", "a"],
        &[
            "sqlite://x.db",
            "show",
            "--run-once",
            "s",
            "--key",
            "k",
            "--key",
            "l",
        ],
        &[
            "sqlite://x.db",
            "show",
            "--route",
            "/p",
            "--method",
            "P O",
            "--shared",
            "--key",
            "k",
        ],
    ] {
        let (code, output) = idem(args);
        assert_eq!(code, 2, "{args:?}: {output}");
    }
    assert_answer(
        idem(&["mysql://db", "show", "--run-once", "s", "--key", "k"]),
        3,
        "not a store URL",
    );
}
