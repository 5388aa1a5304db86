//! A request whose client goes away while its record is begun — a mobile client that
//! drops its connection and retries at once — gives its key back: the retry runs, rather
//! than meeting a record nobody runs, in progress for the whole lease (10 s by default).
//! On a `MemoryStore` whose answers the test holds back, and on Redis behind a link that
//! stalls, for less and for more than the store's timeout.

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use idem_axum::{MemoryStore, RedisStore};
use idem_tests::{Counting, Forwarder, RedisServer, Shop, eventually};

use crate::{Seen, app, post_key};

/// The Redis store's timeout in these cases: a stall longer than it cuts off the give-back.
const TIMEOUT: Duration = Duration::from_millis(200);

/// Sends alice's first request with `key` to `/pay`, and drops it (its client gone) once
/// its record's begin reached the store and before the store's answer came back. When it
/// was dropped.
async fn dropped_at_its_begin<S>(app: &Router, store: &Counting<S>, key: &'static str) -> Instant {
    let first = tokio::spawn({
        let app = app.clone();
        async move { post_key(&app, "/pay", key).await }
    });
    eventually(
        Duration::from_secs(5),
        "the first request's begin reaches the store",
        || {
            let begun = store.record_begins() == 1;
            async move { begun }
        },
    )
    .await;
    first.abort();
    let dropped = Instant::now();
    assert!(
        first.await.is_err_and(|error| error.is_cancelled()),
        "the first request was dropped before its answer"
    );
    dropped
}

/// Waits for the dropped request's give-back to be answered (or to fail, the first
/// time): within 5 s, where a record left in progress holds the key for its 10 s lease.
async fn until_given_back<S>(store: &Counting<S>) {
    eventually(
        Duration::from_secs(5),
        "the dropped request gives its key back",
        || {
            let removed = store.record_removals() >= 1;
            async move { removed }
        },
    )
    .await;
}

/// Checks that the retry ran the handler, once in all, and says how long after `since`
/// it was answered.
fn assert_ran(retry: &Seen, shop: &Shop, on: &str, since: (&str, Instant)) {
    assert_eq!(retry.status, StatusCode::CREATED, "{on}: {retry:?}");
    assert!(!retry.replayed(), "{on}: the dropped request never ran");
    assert_eq!(shop.runs(), 1, "{on}: the handler ran once, for the retry");
    let (what, at) = since;
    let seconds = at.elapsed().as_secs_f64();
    println!("{on}: the retry answered {seconds:.3} s after {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_memory_the_retry_of_a_request_dropped_at_its_begin_runs() {
    let (store, shop) = (Counting::new(MemoryStore::new()), Shop::new());
    let app = app(store.clone(), &shop);
    store.stall_record_begins(true);
    let dropped = dropped_at_its_begin(&app, &store, "gone-1").await;
    store.stall_record_begins(false);
    until_given_back(&store).await;
    let retry = Seen::of(post_key(&app, "/pay", "gone-1").await).await;
    assert_ran(&retry, &shop, "memory", ("the drop", dropped));
}

/// Redis behind a link that holds every byte while it stalls, and delivers them in order
/// when it resumes; the store's operations are cut off after [`TIMEOUT`].
struct StalledLink {
    _redis: RedisServer,
    link: Forwarder,
    store: Counting<RedisStore>,
    shop: Shop,
    app: Router,
}

impl StalledLink {
    async fn start() -> Self {
        let redis = RedisServer::start();
        let link = Forwarder::start(redis.port()).await;
        let through_link = RedisStore::builder()
            .with_timeout(TIMEOUT)
            .connect(idem_axum::RedisServer::url(link.url()))
            .await
            .expect("Redis through the link");
        let (store, shop) = (Counting::new(through_link), Shop::new());
        let app = app(store.clone(), &shop);
        Self {
            _redis: redis,
            link,
            store,
            shop,
            app,
        }
    }
}

/// The link stalls with the begin in it, and resumes within the store's timeout: the
/// give-back follows the begin on the same connection, and frees the key once both
/// arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_redis_behind_a_stall_shorter_than_the_timeout_the_retry_runs() {
    let on = StalledLink::start().await;
    on.link.stall();
    let dropped = dropped_at_its_begin(&on.app, &on.store, "gone-2").await;
    on.link.resume();
    until_given_back(&on.store).await;
    let retry = Seen::of(post_key(&on.app, "/pay", "gone-2").await).await;
    let on_redis = "Redis, a stall shorter than the timeout";
    assert_ran(&retry, &on.shop, on_redis, ("the drop", dropped));
}

/// The link stalls for longer than the store's timeout: the give-back is cut off too, and
/// the store drops the connection. The give-back is sent again, ever less often (50 ms
/// apart, then up to 1 s), until the store answers: once the link resumes, the key is
/// free after at most one more pause, and a retry runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_redis_behind_a_stall_longer_than_the_timeout_the_retry_runs_once_it_ends() {
    let on = StalledLink::start().await;
    on.link.stall();
    let dropped = dropped_at_its_begin(&on.app, &on.store, "gone-3").await;
    until_given_back(&on.store).await;
    println!(
        "Redis, a stall longer than the timeout: the give-back failed {:.3} s after the drop",
        dropped.elapsed().as_secs_f64()
    );
    on.link.resume();
    let resumed = Instant::now();
    let mut refused = 0;
    let retry = loop {
        let retry = Seen::of(post_key(&on.app, "/pay", "gone-3").await).await;
        if retry.status != StatusCode::CONFLICT || resumed.elapsed() > Duration::from_secs(5) {
            break retry;
        }
        refused += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    println!(
        "Redis, a stall longer than the timeout: {refused} retries refused after the link resumed"
    );
    let on_redis = "Redis, a stall longer than the timeout";
    assert_ran(&retry, &on.shop, on_redis, ("the link resumed", resumed));
}
