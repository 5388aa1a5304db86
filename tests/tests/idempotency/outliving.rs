//! Handlers that outlive their request, and the answers around them: one answer per key
//! when an attempt lost its lease, the key claimed again after a long outage, a body that
//! fails after the handler ran, the handler's own opt-out, a 413 from inside the layer,
//! the bound on detached handlers and the drain.

use idem_axum::store::RecordStore;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Extensions, HeaderMap, HeaderValue, Request, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem_axum::idempotency::IdempotencyRecord;
use idem_axum::identity::ClientHeader;
use idem_axum::store::Store;
use idem_axum::{Idem, IdempotencyLayer, MemoryStore, RedisStore};
use idem_tests::{Counting, Forwarder, RedisServer, Shop, eventually, send};
use tokio::task::JoinHandle;
use tower::limit::ConcurrencyLimitLayer;
use tower_http::compression::CompressionLayer;

use crate::{BODY, CLIENT, SHORT_LEASE, Seen, app, gated, post_key};

idem_tests::on_every_store!(
    shop_on(app):
    a_response_body_that_fails_after_the_handler_ran_is_not_run_again,
    a_response_the_handler_marks_do_not_keep_frees_its_key,
    a_413_from_a_body_limit_inside_the_layer_frees_its_key,
);

async fn a_response_body_that_fails_after_the_handler_ran_is_not_run_again(
    shop: Shop,
    app: Router,
) {
    let first = post_key(&app, "/broken-body", "broken-1").await;
    assert_eq!(first.status(), StatusCode::CREATED, "the handler answered");
    let read = axum::body::to_bytes(first.into_body(), usize::MAX).await;
    assert!(read.is_err(), "the first client sees its body fail");
    let retry = Seen::of(post_key(&app, "/broken-body", "broken-1").await).await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "{retry:?}");
    assert_eq!(retry.problem(), "response-not-replayable");
    assert!(retry.header("retry-after").is_none(), "it will not change");
    assert_eq!(shop.runs(), 1, "the handler ran once");
}

async fn a_response_the_handler_marks_do_not_keep_frees_its_key(shop: Shop, app: Router) {
    let invalid = crate::request("/validated", "alice", Some("v-1"), "{}");
    let refused = Seen::of(idem_tests::send(&app, invalid).await).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    // The corrected request, with the same key, runs: nothing was kept for the key.
    let corrected = crate::request("/validated", "alice", Some("v-1"), r#"{"amount":100}"#);
    let created = Seen::of(idem_tests::send(&app, corrected).await).await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");
    assert!(!created.replayed());
    let again = Seen::of(post_key(&app, "/validated", "v-1").await).await;
    assert!(again.replayed(), "the kept answer is the one not marked");
    assert_eq!(again.unmarked(), created);
    assert_eq!(shop.runs(), 1, "only the corrected request ran to its end");
}

async fn a_413_from_a_body_limit_inside_the_layer_frees_its_key(shop: Shop, app: Router) {
    let oversize = format!(r#"{{"note":"{}"}}"#, "x".repeat(100));
    let request = crate::request("/limited-inside", "alice", Some("big-1"), &oversize);
    let refused = Seen::of(idem_tests::send(&app, request).await).await;
    assert_eq!(refused.status, StatusCode::PAYLOAD_TOO_LARGE);
    // A smaller body under the same key is the client's corrected request, not a reuse
    // of the key for another one: nothing was kept for the refused one.
    let smaller = Seen::of(post_key(&app, "/limited-inside", "big-1").await).await;
    assert_eq!(smaller.status, StatusCode::CREATED, "{smaller:?}");
    assert_eq!(shop.runs(), 1, "only the smaller one ran the handler");
}

/// The answer to `request`, which must come within 5 s: a request that instead runs the
/// handler again would wait at the shop's shut gate.
async fn answered(request: impl Future<Output = axum::response::Response>) -> Seen {
    match tokio::time::timeout(Duration::from_secs(5), request).await {
        Ok(response) => Seen::of(response).await,
        Err(_) => panic!("no answer within 5 s: the handler ran again, and waits at its gate"),
    }
}

/// Runs each case on two instances of Redis and on two of a `MemoryStore`.
macro_rules! on_two_instances {
    ($($case:ident),+ $(,)?) => {
        mod two_on_redis {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                super::$case(super::TwoInstances::on_redis().await).await;
            })+
        }
        mod two_on_memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                super::$case(super::TwoInstances::on_memory().await).await;
            })+
        }
    };
}

on_two_instances!(
    an_attempt_that_lost_its_key_answers_with_the_winners_response,
    an_attempt_that_lost_its_key_answers_with_the_winners_response_in_its_own_coding,
    an_attempt_that_lost_its_key_to_a_running_retry_answers_409_with_the_retention,
    after_an_outage_longer_than_the_lease_the_key_is_claimed_again,
);

/// Two instances on one store. The first reaches it through a fault the test can turn on
/// — a Redis link it stalls, or a `MemoryStore` whose record renewals fail — the second
/// directly. Both serve `/gated` under one lease; the first's handler waits at the
/// shop's gate, the second's answers at once.
struct TwoInstances {
    fault: Fault,
    shop: Shop,
    stalled_one: Router,
    other_one: Router,
}

/// What keeps the first instance from its store.
enum Fault {
    Link { redis: RedisServer, link: Forwarder },
    Renewals(Counting<MemoryStore>),
}

impl TwoInstances {
    async fn on_redis() -> Self {
        let redis = RedisServer::start();
        let link = Forwarder::start(redis.port()).await;
        let through_link = RedisStore::builder()
            .with_timeout(Duration::from_millis(100))
            .connect(idem_axum::RedisServer::url(link.url()))
            .await
            .expect("Redis through the link");
        let other = redis.store();
        Self::on(through_link, other, Fault::Link { redis, link })
    }

    async fn on_memory() -> Self {
        let memory = MemoryStore::new();
        let faulty = Counting::new(memory.clone());
        Self::on(faulty.clone(), memory, Fault::Renewals(faulty))
    }

    fn on(first: impl Store, other: impl Store, fault: Fault) -> Self {
        let shop = Shop::new();
        Self {
            stalled_one: instance(first, &shop, post(gated)),
            other_one: instance(other, &shop, post(at_once)),
            fault,
            shop,
        }
    }

    /// Sends `key`'s first attempt to the first instance, and once its handler runs,
    /// keeps that instance from its store until the record has ended with its lease. The
    /// attempt's answer comes once the store is back and the gate opened.
    async fn first_attempt_past_its_lease(&self, key: &'static str) -> JoinHandle<Seen> {
        self.first_past_its_lease(crate::request("/gated", "alice", Some(key), BODY))
            .await
    }

    /// [`first_attempt_past_its_lease`](Self::first_attempt_past_its_lease), of `request`.
    async fn first_past_its_lease(&self, request: Request<Body>) -> JoinHandle<Seen> {
        let app = self.stalled_one.clone();
        let first = tokio::spawn(async move { Seen::of(send(&app, request).await).await });
        self.shop.until_runs(1).await;
        match &self.fault {
            Fault::Link { redis, link } => {
                link.stall();
                eventually(
                    Duration::from_secs(5),
                    "the record's lease runs out",
                    || {
                        let keys = redis.keys();
                        async move { keys.is_empty() }
                    },
                )
                .await;
            }
            Fault::Renewals(faulty) => {
                faulty.fail_record_renewals(true);
                // By the store's own clock: the last renewal came before the fault, so the
                // record has ended one lease after it at the latest.
                tokio::time::sleep(2 * SHORT_LEASE).await;
            }
        }
        first
    }

    /// The first instance reaches its store again.
    fn store_is_back(&self) {
        match &self.fault {
            Fault::Link { link, .. } => link.resume(),
            Fault::Renewals(faulty) => faulty.fail_record_renewals(false),
        }
    }
}

fn instance(store: impl Store, shop: &Shop, handler: axum::routing::MethodRouter<Shop>) -> Router {
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let guarded = IdempotencyLayer::new().with_lease(SHORT_LEASE);
    // Compression inside the layer: the winner's stored response is gzip-encoded.
    let always = |_: StatusCode, _: Version, _: &HeaderMap, _: &Extensions| true;
    Router::new()
        .route("/gated", handler.clone())
        .route(
            "/gated-gzip",
            handler.layer(CompressionLayer::new().compress_when(always)),
        )
        // Gated on both instances: the shop's gate lets their handlers through one at a
        // time, in the order they came to it.
        .route("/both-gated", post(gated))
        .route_layer(guarded)
        .with_state(shop.clone())
        .layer(idem.layer())
}

async fn at_once(State(shop): State<Shop>) -> (StatusCode, String) {
    (StatusCode::CREATED, format!("order {}", shop.ran()))
}

/// The first attempt of `request(key)` loses its lease while its store is out of reach,
/// and a retry on another instance takes the key and completes it. The first attempt's
/// client gets the retry's answer, the one the key replays, not the answer of its own
/// handler; that answer.
async fn lost_to_a_retry(
    two: &TwoInstances,
    request: impl Fn() -> Request<Body>,
    first_gets: &str,
) -> Seen {
    let first = two.first_past_its_lease(request()).await;
    let winner = Seen::of(send(&two.other_one, request()).await).await;
    assert_eq!(winner.status, StatusCode::CREATED);
    two.store_is_back();
    two.shop.open_gate();
    let first = first.await.expect("the first attempt answers");
    assert_eq!(
        first.unmarked(),
        winner,
        "one key, one answer: {first_gets}"
    );
    assert_eq!(two.shop.runs(), 2);
    winner
}

async fn an_attempt_that_lost_its_key_answers_with_the_winners_response(two: TwoInstances) {
    let request = || crate::request("/gated", "alice", Some("lost-1"), BODY);
    let winner = lost_to_a_retry(&two, request, "the first client gets the winner's").await;
    assert_eq!(
        winner.body, "order 2",
        "the retry took the free key and ran"
    );
    let replay = answered(post_key(&two.stalled_one, "/gated", "lost-1")).await;
    assert_eq!(replay.unmarked(), winner);
    assert_eq!(two.shop.runs(), 2);
}

/// As above, with the winner's response stored gzip-encoded (compression inside the
/// layer): the first client, which accepts gzip as the winner's did, gets it as a retry
/// of its own would, not a 409 for an encoding it was taken not to accept.
async fn an_attempt_that_lost_its_key_answers_with_the_winners_response_in_its_own_coding(
    two: TwoInstances,
) {
    let request = || {
        let mut request = crate::request("/gated-gzip", "alice", Some("lost-2"), BODY);
        let gzip = HeaderValue::from_static("gzip");
        request.headers_mut().insert(header::ACCEPT_ENCODING, gzip);
        request
    };
    let winner = lost_to_a_retry(&two, request, "in the coding its client accepts").await;
    assert_eq!(winner.header("content-encoding"), Some(b"gzip".as_slice()));
}

/// As above, but the retry that took the key still runs when the first attempt ends:
/// its client gets the 409 of a request in progress, as a retry of its own would, with
/// when to try again and how long the key is kept (`Idempotency-TTL`), the one refusal a
/// client retries under its key. Then the retry's answer is the key's.
async fn an_attempt_that_lost_its_key_to_a_running_retry_answers_409_with_the_retention(
    two: TwoInstances,
) {
    let request = || crate::request("/both-gated", "alice", Some("lost-3"), BODY);
    let first = two.first_past_its_lease(request()).await;
    let winner = tokio::spawn({
        let (app, request) = (two.other_one.clone(), request());
        async move { Seen::of(send(&app, request).await).await }
    });
    two.shop.until_runs(2).await;
    two.store_is_back();
    // The first attempt's handler came to the gate first: it alone goes through.
    two.shop.open_gate();
    let first = first.await.expect("the first attempt answers");
    assert_eq!(first.status, StatusCode::CONFLICT, "{first:?}");
    assert!(first.header("retry-after").is_some(), "{first:?}");
    assert_eq!(first.header("idempotency-ttl"), Some(b"86400".as_slice()));
    two.shop.open_gate();
    let winner = winner.await.expect("the retry answers");
    assert_eq!(winner.status, StatusCode::CREATED);
    assert_eq!(winner.header("idempotency-ttl"), Some(b"86400".as_slice()));
    let replay = answered(post_key(&two.stalled_one, "/both-gated", "lost-3")).await;
    assert_eq!(replay.unmarked(), winner);
    assert_eq!(two.shop.runs(), 2);
}

/// The first attempt's store is out of reach for longer than the lease, and nobody
/// takes the key meanwhile. At completion the key is free: the attempt claims it again
/// and stores its response, so a retry replays it rather than running the handler a
/// second time.
async fn after_an_outage_longer_than_the_lease_the_key_is_claimed_again(two: TwoInstances) {
    let first = two.first_attempt_past_its_lease("outage-1").await;
    two.store_is_back();
    two.shop.open_gate();
    let first = first.await.expect("the first attempt answers");
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.body, "order 1");
    for app in [&two.stalled_one, &two.other_one] {
        let retry = answered(post_key(app, "/gated", "outage-1")).await;
        assert!(retry.replayed(), "{retry:?}");
        assert_eq!(retry.unmarked(), first);
    }
    assert_eq!(two.shop.runs(), 1, "the handler ran once");
}

/// Handlers that take their record over, as a handler on a SQL store does to complete it
/// in its own transaction, on a store whose completions and removals of records the test
/// can stall (a link that stalls right after the handler's transaction).
#[derive(Clone)]
struct TakenOver {
    memory: MemoryStore,
    store: Counting<MemoryStore>,
    shop: Shop,
}

impl TakenOver {
    fn new() -> (Self, Idem, Router) {
        let memory = MemoryStore::new();
        let taken = Self {
            store: Counting::new(memory.clone()),
            memory,
            shop: Shop::new(),
        };
        let idem = Idem::builder()
            .with_store(taken.store.clone())
            .with_client_identity(ClientHeader::new(CLIENT))
            .build();
        let app = Router::new()
            .route("/commits", post(commits_then_stalls))
            .route("/fails", post(fails_as_the_store_stalls))
            .route_layer(IdempotencyLayer::new())
            .with_state(taken.clone())
            .layer(idem.layer());
        (taken, idem, app)
    }
}

/// Completes its own record, then the store stalls.
async fn commits_then_stalls(
    State(taken): State<TakenOver>,
    record: IdempotencyRecord,
) -> Response {
    let run = taken.shop.ran();
    let response = (StatusCode::CREATED, format!("order {run}"));
    let (stored, response) = record
        .stored_response(response)
        .await
        .expect("a body that reads");
    let completed = taken
        .store
        .complete_record(record.key(), record.owner(), stored, record.retention())
        .await;
    assert_eq!(
        completed.ok(),
        Some(true),
        "the handler completes its record"
    );
    taken.store.stall_record_endings(true);
    response
}

/// Takes its record over before its transaction, which fails as the store stalls.
async fn fails_as_the_store_stalls(
    State(taken): State<TakenOver>,
    record: IdempotencyRecord,
) -> Response {
    taken.shop.ran();
    record.take_over();
    taken.store.stall_record_endings(true);
    (StatusCode::SERVICE_UNAVAILABLE, "the transaction failed").into_response()
}

/// A handler that completed its record in its own transaction has used up to the store's
/// timeout already; the layer answers without asking the store again, so a link that
/// stalls right after that transaction does not hold the answer for a second timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_that_completed_its_record_is_answered_without_the_store() {
    let (taken, _idem, app) = TakenOver::new();
    let first = answered(post_key(&app, "/commits", "own-1")).await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    taken.store.stall_record_endings(false);
    let retry = answered(post_key(&app, "/commits", "own-1")).await;
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(
        retry.unmarked(),
        first,
        "the handler's own record is replayed"
    );
    assert_eq!(taken.shop.runs(), 1);
}

/// A handler that took its record over and whose transaction failed is answered while
/// its record's removal waits for the stalled store, in the background: a retry meanwhile
/// gets 409, the drain waits for the removal, and the record is gone once the store is
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_transaction_is_answered_while_its_record_is_removed_in_the_background() {
    let (taken, idem, app) = TakenOver::new();
    let failed = answered(post_key(&app, "/fails", "failed-1")).await;
    assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE, "{failed:?}");
    let retry = answered(post_key(&app, "/fails", "failed-1")).await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "{retry:?}");
    assert!(retry.header("retry-after").is_some());
    let cut_short = idem.shutdown(Duration::from_millis(100)).await;
    assert_eq!(cut_short.unfinished, 1, "the drain waits for the removal");
    taken.store.stall_record_endings(false);
    let drained = idem.shutdown(Duration::from_secs(5)).await;
    assert_eq!(drained.unfinished, 0, "{drained}");
    assert_eq!(taken.memory.entry_count(), 0, "the record is removed");
    assert_eq!(taken.shop.runs(), 1);
}

/// A handler that runs for `run_for`, counting how many run at once.
#[derive(Clone, Default)]
struct Running {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    gate: Shop,
}

async fn counted(State(running): State<Running>) -> StatusCode {
    let now = running.now.fetch_add(1, Ordering::SeqCst) + 1;
    running.most.fetch_max(now, Ordering::SeqCst);
    running.gate.ran();
    running.gate.pass_gate().await;
    running.now.fetch_sub(1, Ordering::SeqCst);
    StatusCode::CREATED
}

async fn immediate() -> StatusCode {
    StatusCode::CREATED
}

fn limited(idem: &Idem, running: &Running) -> Router {
    Router::new()
        .route("/gated", post(counted).route_layer(IdempotencyLayer::new()))
        .route("/now", post(immediate).route_layer(IdempotencyLayer::new()))
        .with_state(running.clone())
        .layer(ConcurrencyLimitLayer::new(1))
        .layer(idem.layer())
}

/// Sends a request to `/gated` and, once its handler runs, drops it, as a client that
/// goes away.
async fn abandoned_mid_handler(app: &Router, running: &Running) {
    let abandoned = tokio::spawn({
        let app = app.clone();
        async move { post_key(&app, "/gated", "first").await }
    });
    running.gate.until_runs(1).await;
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
}

/// A concurrency limit of one around the router frees its slot when a client goes
/// away, while the guard lets that client's handler run on. With a bound of no detached
/// handler, the next guarded request is refused with 503 until it ends: one handler at a
/// time, as the limit meant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn detached_handlers_count_against_a_bound_of_the_runtimes_own() {
    let idem = Idem::builder()
        .with_client_identity(ClientHeader::new(CLIENT))
        .with_detached_limit(0)
        .build();
    let running = Running::default();
    let app = limited(&idem, &running);
    abandoned_mid_handler(&app, &running).await;
    assert_eq!(idem.detached_handlers(), 1, "it runs on, detached");
    let refused = answered(post_key(&app, "/gated", "second")).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    assert_eq!(refused.problem(), "busy");
    assert_eq!(refused.header("retry-after"), Some(b"1".as_slice()));
    running.gate.open_gate();
    eventually(Duration::from_secs(5), "the detached handler ends", || {
        let idem = idem.clone();
        async move { idem.detached_handlers() == 0 }
    })
    .await;
    running.gate.open_gate();
    let admitted = Seen::of(post_key(&app, "/gated", "second").await).await;
    assert_eq!(admitted.status, StatusCode::CREATED);
    assert_eq!(
        running.most.load(Ordering::SeqCst),
        1,
        "one handler at a time"
    );
}

/// While the runtime drains, a new guarded request is refused with 503 and
/// `Retry-After`; the drain ends once the detached handler has, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_drain_refuses_new_guarded_requests_and_waits_for_detached_handlers() {
    let idem = Idem::builder()
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let running = Running::default();
    let app = limited(&idem, &running);
    abandoned_mid_handler(&app, &running).await;
    let draining = tokio::spawn({
        let idem = idem.clone();
        async move { idem.shutdown(Duration::from_secs(30)).await }
    });
    let key = AtomicUsize::new(0);
    eventually(Duration::from_secs(5), "new requests are refused", || {
        let app = app.clone();
        let key = format!("during-{}", key.fetch_add(1, Ordering::SeqCst));
        async move {
            let seen = Seen::of(post_key(&app, "/now", &key).await).await;
            seen.status == StatusCode::SERVICE_UNAVAILABLE && seen.problem() == "shutting-down"
        }
    })
    .await;
    let refused = answered(post_key(&app, "/gated", "during")).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.header("retry-after"), Some(b"1".as_slice()));
    assert!(!draining.is_finished(), "the drain waits for the handler");
    running.gate.open_gate();
    let drained = draining.await.expect("the drain ends");
    assert_eq!(drained.unfinished, 0);
    assert!(drained.finished >= 1, "{drained}");
    assert_eq!(running.gate.runs(), 1, "no request ran during the drain");
}
