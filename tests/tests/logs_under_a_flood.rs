//! The logs under a flood of refused requests. A per-request refusal that logs at `warn`
//! or above writes its first line at once, then at most one line per interval
//! (`idem_core::throttled::INTERVAL`), which carries how many refusals went unwritten since
//! (`suppressed`): 100,000 refusals spread over 100 seconds write a dozen lines, not
//! 100,000, and those lines still account for every refusal. The metric, where there is
//! one, counts each.
//!
//! The flood runs on Tokio's paused clock, advanced a second every 1,000 refusals. The
//! throttles are per call site and per process, so each test here floods a call site of
//! its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, Request, StatusCode};
use axum::routing::post;
use idem_axum::identity::ClientHeader;
use idem_axum::{AvoidRepeatLayer, Idem, MemoryStore};
use idem_tests::send;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use tokio::sync::Notify;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

const CLIENT: HeaderName = HeaderName::from_static("x-client");

/// The refused requests of a flood.
const FLOOD: u64 = 100_000;
/// Refusals a second of the paused clock: the flood spans 100 seconds.
const PER_SECOND: u64 = 1_000;
/// The interval between two lines of one call site.
const INTERVAL: Duration = idem_core::throttled::INTERVAL;
/// The most lines a flood may write: one per interval of the 100 seconds it spans, the
/// first, and the one written an interval after it.
const MOST_LINES: u64 = FLOOD / PER_SECOND / INTERVAL.as_secs() + 2;

/// The lines written at `WARN` and above, and the refusals they say went unwritten.
#[derive(Debug, Clone, Default)]
struct Lines(Arc<Mutex<Tally>>);

#[derive(Debug, Default)]
struct Tally {
    lines: u64,
    suppressed: u64,
    messages: Vec<String>,
}

impl Lines {
    fn count(&self) -> u64 {
        self.0.lock().unwrap().lines
    }

    /// Asserts that at most [`MOST_LINES`] lines were written, each saying `message`, and
    /// that they account for `refusals`: each was written, or counted as suppressed by
    /// the next line.
    fn assert_account_for(&self, refusals: u64, message: &str) {
        let tally = self.0.lock().unwrap();
        assert!(
            tally.lines <= MOST_LINES,
            "{refusals} refusals wrote {} lines, more than {MOST_LINES}",
            tally.lines
        );
        assert!(
            tally.lines >= 2,
            "a line per interval, carrying the count: {tally:?}"
        );
        assert!(
            tally.messages.iter().all(|line| line.contains(message)),
            "{:?}",
            tally.messages
        );
        assert_eq!(
            tally.lines + tally.suppressed,
            refusals,
            "every refusal is a line or counted in one"
        );
    }
}

impl<S: Subscriber> Layer<S> for Lines {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        // `ERROR` ranks below `WARN`: the levels grow with verbosity.
        if *event.metadata().level() > Level::WARN {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut tally = self.0.lock().unwrap();
        tally.lines += 1;
        tally.suppressed += fields.suppressed;
        tally.messages.push(fields.message);
    }
}

/// The fields of one line that the tally reads.
#[derive(Default)]
struct Fields {
    suppressed: u64,
    message: String,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "suppressed" {
            self.suppressed = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

/// A recorder of one counter with one label's value, the others ignored.
#[derive(Debug)]
struct OneCounter {
    name: &'static str,
    label: (&'static str, &'static str),
    count: Arc<AtomicU64>,
}

impl OneCounter {
    fn new(name: &'static str, label: (&'static str, &'static str)) -> Self {
        let count = Arc::default();
        Self { name, label, count }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

impl Recorder for OneCounter {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labelled = key
            .labels()
            .any(|label| (label.key(), label.value()) == self.label);
        if key.name() == self.name && labelled {
            Counter::from_arc(Arc::clone(&self.count))
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn post_as(path: &str, client: &str) -> Request<Body> {
    Request::post(path)
        .header(CLIENT, client)
        .body(Body::empty())
        .unwrap()
}

/// Sends `/orders` as `client-1` to `client-{count}`, advancing the clock a second every
/// [`PER_SECOND`] requests; each is refused with 503.
async fn flood(app: &Router, count: u64) {
    for i in 1..=count {
        if i % PER_SECOND == 0 {
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        let refused = send(app, post_as("/orders", &format!("client-{i}"))).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}

/// An interval after the flood, one refusal more: its line carries the count of the
/// flood's last interval.
async fn one_interval_later(app: &Router) {
    tokio::time::advance(INTERVAL).await;
    let refused = send(app, post_as("/orders", "one-interval-later")).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
}

/// Sends a refused request, a flood of them, and one more an interval later: the first is
/// logged at once, the lines (each saying `message`) account for every refusal, and
/// `counter` counts each one.
async fn refuse_a_flood(app: &Router, lines: &Lines, counter: &OneCounter, message: &str) {
    let first = send(app, post_as("/orders", "client-0")).await;
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(lines.count(), 1, "the first refusal is logged at once");
    flood(app, FLOOD - 1).await;
    one_interval_later(app).await;
    lines.assert_account_for(FLOOD + 1, message);
    assert_eq!(
        counter.count(),
        FLOOD + 1,
        "{} counts every refusal",
        counter.name
    );
}

/// A runtime with no room for detached handlers runs one: every guarded request is
/// refused with `busy`, logged as one line per interval, and counted, each, by
/// `idem_unadmitted_total`.
#[tokio::test(start_paused = true)]
async fn refusals_over_the_detached_bound_write_a_line_per_interval() {
    let lines = Lines::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    let busy = OneCounter::new("idem_unadmitted_total", ("reason", "busy"));
    let _recorder = metrics::set_default_local_recorder(&busy);
    let idem = Idem::builder()
        .with_client_identity(ClientHeader::new(CLIENT))
        .with_detached_limit(0)
        .build();
    let started = Arc::new(Notify::new());
    let window = || AvoidRepeatLayer::new(Duration::from_secs(3600));
    let app = Router::new()
        .route(
            "/slow",
            post({
                let started = Arc::clone(&started);
                move || async move {
                    started.notify_one();
                    std::future::pending::<StatusCode>().await
                }
            })
            .route_layer(window()),
        )
        .route(
            "/orders",
            post(|| async { StatusCode::CREATED }).route_layer(window()),
        )
        .layer(idem.layer());
    // A client that goes away once its handler runs: the handler runs on, detached.
    let abandoned = tokio::spawn({
        let app = app.clone();
        async move { send(&app, post_as("/slow", "gone")).await }
    });
    started.notified().await;
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
    assert_eq!(idem.detached_handlers(), 1);

    refuse_a_flood(&app, &lines, &busy, "new guarded requests are refused").await;
}

/// A store that is full fails every new window: each request is refused (the runtime
/// fails closed), logged as one line per interval, and counted, each, by
/// `idem_store_errors_total`.
#[tokio::test(start_paused = true)]
async fn store_failures_write_a_line_per_interval_and_are_all_counted() {
    let lines = Lines::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    let errors = OneCounter::new("idem_store_errors_total", ("policy", "fail_closed"));
    let _recorder = metrics::set_default_local_recorder(&errors);
    let idem = Idem::builder()
        .with_store(MemoryStore::builder().with_capacity(1).build())
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let app = Router::new()
        .route(
            "/orders",
            post(|| async { StatusCode::CREATED })
                .route_layer(AvoidRepeatLayer::new(Duration::from_secs(3600))),
        )
        .layer(idem.layer());
    // The store's one entry, taken for the hour.
    let taken = send(&app, post_as("/orders", "first")).await;
    assert_eq!(taken.status(), StatusCode::CREATED);

    refuse_a_flood(&app, &lines, &errors, "refused (fail closed)").await;
}
