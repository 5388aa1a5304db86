//! Form tokens with replay (`VerifyFormTokenLayer::with_replay`) over HTTP, on
//! `MemoryStore` and on a real Redis: a failed submission can be posted again, a token
//! replays only its own route's response, and a replay is counted once. Every "ran once"
//! or "one at a time" claim counts handler runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use idem_axum::identity::ClientCookie;
use idem_axum::{FormToken, Idem, VerifyFormTokenLayer, store::Store};
use idem_tests::{Backend, all_at_once, body_text, form_token_in, problem_code, send};
use tower_http::catch_panic::CatchPanicLayer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata};

idem_tests::on_every_store!(
    a_submission_that_answered_5xx_can_be_posted_again,
    a_submission_that_panicked_can_be_posted_again,
    a_double_click_on_a_failing_submission_runs_one_handler_at_a_time,
    a_token_spent_on_one_route_is_refused_on_another,
    a_hook_adjusts_each_form_replay_and_the_submission_runs_once,
    a_repeat_is_woken_by_the_first_submission_not_polling,
);

/// On one thread: the outcomes are counted by a subscriber set for this thread only, and a
/// post's answer may run in a task of its own (a form post runs to its end without its
/// client), which a runtime of several threads could run on another.
mod counted_once {
    #[tokio::test(flavor = "current_thread")]
    async fn memory() {
        super::a_form_replay_is_counted_once::<idem_tests::MemoryBackend>().await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn redis() {
        super::a_form_replay_is_counted_once::<idem_tests::RedisBackend>().await;
    }
}

/// How a route's handler behaves on its first run.
#[derive(Debug, Clone, Copy)]
enum FirstRun {
    Succeeds,
    Answers500,
    Panics,
}

/// One route's handler: how often it ran, and the most runs at once.
#[derive(Debug, Clone)]
struct Handler {
    first: FirstRun,
    runs: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

impl Handler {
    fn new(first: FirstRun) -> Self {
        Self {
            first,
            runs: Arc::default(),
            running: Arc::default(),
            most_at_once: Arc::default(),
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn most_at_once(&self) -> usize {
        self.most_at_once.load(Ordering::SeqCst)
    }

    /// Places an order and redirects to it; the first run fails as `first` says, after a
    /// pause long enough for a double click's second post to arrive.
    async fn place(State(handler): State<Self>) -> Response {
        let run = handler.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let running = handler.running.fetch_add(1, Ordering::SeqCst) + 1;
        handler.most_at_once.fetch_max(running, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        handler.running.fetch_sub(1, Ordering::SeqCst);
        match (run, handler.first) {
            (1, FirstRun::Answers500) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            (1, FirstRun::Panics) => panic!("the first run fails"),
            _ => (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, format!("/orders/{run}"))],
            )
                .into_response(),
        }
    }
}

async fn order_form(token: FormToken) -> Html<String> {
    Html(format!(
        r#"<form method="post">{}</form>"#,
        token.hidden_input()
    ))
}

/// A shop on `store` whose `POST /orders` is `handler`, and whose `POST /other` — another
/// route, replay on as well — is `other`.
fn shop<S: Store>(store: S, handler: &Handler, other: &Handler) -> Router {
    let replaying = VerifyFormTokenLayer::new().with_replay(true);
    shop_guarded_by(store, handler, other, &replaying)
}

/// [`shop`], its form routes guarded by `layer`.
fn shop_guarded_by<S: Store>(
    store: S,
    handler: &Handler,
    other: &Handler,
    layer: &VerifyFormTokenLayer,
) -> Router {
    let route = |handler: &Handler| {
        post(Handler::place)
            .route_layer(layer.clone())
            .with_state(handler.clone())
    };
    let by_cookie = ClientCookie::new("session");
    let idem = Idem::builder().with_client_identity(by_cookie);
    Router::new()
        .route("/form", get(order_form))
        .route("/orders", route(handler))
        .route("/other", route(other))
        .layer(idem.with_store(store).build().layer())
        .layer(CatchPanicLayer::new())
}

/// Alice's browser on one shop.
#[derive(Clone)]
struct Browser(Router);

impl Browser {
    fn request(path: &str) -> axum::http::request::Builder {
        Request::builder()
            .uri(path)
            .header(header::COOKIE, "session=alice")
    }

    /// Loads the form page; the token in it.
    async fn load_form(&self) -> String {
        let page = send(&self.0, Self::request("/form").body(Body::empty()).unwrap()).await;
        assert_eq!(page.status(), StatusCode::OK);
        form_token_in(&body_text(page).await)
    }

    /// Submits the page's form with `token` to `path`.
    async fn submit(&self, path: &str, token: &str) -> Response {
        let form = Self::request(path)
            .method("POST")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("item=cup&form_token={token}")))
            .unwrap();
        send(&self.0, form).await
    }
}

fn replayed(response: &Response) -> bool {
    response.headers().contains_key("idempotent-replayed")
}

fn location(response: &Response) -> &str {
    response.headers()[header::LOCATION].to_str().unwrap()
}

/// Submits a page whose first submission fails, again, and a third time: the second
/// runs the handler, the third replays it.
async fn posted_again_after(first: FirstRun, store: impl Store) {
    let handler = Handler::new(first);
    let browser = Browser(shop(store, &handler, &Handler::new(FirstRun::Succeeds)));
    let token = browser.load_form().await;
    let failed = browser.submit("/orders", &token).await;
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let again = browser.submit("/orders", &token).await;
    assert_eq!(
        again.status(),
        StatusCode::SEE_OTHER,
        "the page can be posted again"
    );
    assert!(!replayed(&again));
    assert_eq!(location(&again), "/orders/2");
    let third = browser.submit("/orders", &token).await;
    assert!(replayed(&third), "a success is replayed");
    assert_eq!(location(&third), "/orders/2");
    assert_eq!(handler.runs(), 2);
}

async fn a_submission_that_answered_5xx_can_be_posted_again<B: Backend>() {
    let backend = B::start().await;
    posted_again_after(FirstRun::Answers500, backend.store()).await;
}

async fn a_submission_that_panicked_can_be_posted_again<B: Backend>() {
    let backend = B::start().await;
    posted_again_after(FirstRun::Panics, backend.store()).await;
}

/// Twenty posts of one page at once, the first run failing: the handler runs once at a
/// time, twice in all — the failure, then one retry — and every other post lands where the
/// retry did.
async fn a_double_click_on_a_failing_submission_runs_one_handler_at_a_time<B: Backend>() {
    let backend = B::start().await;
    let handler = Handler::new(FirstRun::Answers500);
    let browser = Browser(shop(
        backend.store(),
        &handler,
        &Handler::new(FirstRun::Succeeds),
    ));
    let token = browser.load_form().await;
    let answers = all_at_once(20, |_| {
        let (browser, token) = (browser.clone(), token.clone());
        async move { browser.submit("/orders", &token).await }
    })
    .await;
    assert_eq!(handler.most_at_once(), 1, "one handler run at a time");
    assert_eq!(handler.runs(), 2, "the failure, then one retry");
    let failed = answers
        .iter()
        .filter(|answer| answer.status().is_server_error());
    assert_eq!(failed.count(), 1);
    let landed: Vec<_> = answers
        .iter()
        .filter(|answer| !answer.status().is_server_error())
        .collect();
    assert!(
        landed.iter().all(|answer| location(answer) == "/orders/2"),
        "{landed:?}"
    );
    assert_eq!(landed.iter().filter(|answer| replayed(answer)).count(), 18);
}

/// A token spent on `/orders` and posted to `/other`: refused as without replay, never
/// answered with `/orders`' response.
async fn a_token_spent_on_one_route_is_refused_on_another<B: Backend>() {
    let backend = B::start().await;
    let (orders, other) = (
        Handler::new(FirstRun::Succeeds),
        Handler::new(FirstRun::Succeeds),
    );
    let browser = Browser(shop(backend.store(), &orders, &other));
    let token = browser.load_form().await;
    assert_eq!(
        browser.submit("/orders", &token).await.status(),
        StatusCode::SEE_OTHER
    );
    let elsewhere = browser.submit("/other", &token).await;
    assert_eq!(elsewhere.status(), StatusCode::CONFLICT);
    assert!(!replayed(&elsewhere));
    assert_eq!(problem_code(elsewhere).await, "invalid-form-token");
    assert_eq!(other.runs(), 0, "/other never ran");
    let back = browser.submit("/orders", &token).await;
    assert!(replayed(&back), "its own route still replays it");
    assert_eq!(orders.runs(), 1);
}

/// The hook on replays sees and adjusts each repeat of a spent token; the first
/// submission, not a replay, does not go through it, and no repeat runs the handler.
async fn a_hook_adjusts_each_form_replay_and_the_submission_runs_once<B: Backend>() {
    let backend = B::start().await;
    let hooked = Arc::new(AtomicUsize::new(0));
    let layer = VerifyFormTokenLayer::new().with_replay(true).on_replay({
        let hooked = Arc::clone(&hooked);
        move |replayed| {
            let count = hooked.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!(replayed.status(), StatusCode::SEE_OTHER);
            let headers = replayed.headers_mut();
            headers.insert("x-double-submit", count.into());
        }
    });
    let handler = Handler::new(FirstRun::Succeeds);
    let other = Handler::new(FirstRun::Succeeds);
    let browser = Browser(shop_guarded_by(backend.store(), &handler, &other, &layer));
    let token = browser.load_form().await;
    let first = browser.submit("/orders", &token).await;
    assert!(!first.headers().contains_key("x-double-submit"));
    for count in ["1", "2"] {
        let repeat = browser.submit("/orders", &token).await;
        assert!(replayed(&repeat));
        assert_eq!(location(&repeat), "/orders/1", "the kept response");
        assert_eq!(
            repeat.headers()["x-double-submit"],
            count,
            "this repeat's own"
        );
        // A browser does not read a key's retention: forms do not advertise it.
        assert!(!repeat.headers().contains_key("idempotency-ttl"));
    }
    assert!(!first.headers().contains_key("idempotency-ttl"));
    assert_eq!(handler.runs(), 1, "three posts, one submission");
}

/// One replay, one count: under `form_token`, not under `idempotency` as well.
async fn a_form_replay_is_counted_once<B: Backend>() {
    let backend = B::start().await;
    let browser = Browser(shop(
        backend.store(),
        &Handler::new(FirstRun::Succeeds),
        &Handler::new(FirstRun::Succeeds),
    ));
    let token = browser.load_form().await;
    assert!(!replayed(&browser.submit("/orders", &token).await));
    let outcomes = Outcomes::default();
    let counting = tracing::subscriber::set_default(outcomes.clone());
    assert!(replayed(&browser.submit("/orders", &token).await));
    drop(counting);
    assert_eq!(outcomes.count("form_token", "replayed"), 1);
    assert_eq!(outcomes.count("idempotency", "replayed"), 0);
}

/// Every outcome a guard reports (`guard`, `outcome`): each report is one event and one
/// increment of `idem_outcomes_total`.
#[derive(Debug, Clone, Default)]
struct Outcomes(Arc<Mutex<Vec<(String, String)>>>);

impl Outcomes {
    fn count(&self, guard: &str, outcome: &str) -> usize {
        let reported = self.0.lock().unwrap();
        reported
            .iter()
            .filter(|(g, o)| g == guard && o == outcome)
            .count()
    }
}

/// The `idem.guard` and `idem.outcome` fields of one event.
#[derive(Default)]
struct Labels {
    guard: Option<String>,
    outcome: Option<String>,
}

impl Visit for Labels {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "idem.guard" => self.guard = Some(value.to_owned()),
            "idem.outcome" => self.outcome = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl tracing::Subscriber for Outcomes {
    fn enabled(&self, _metadata: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut labels = Labels::default();
        event.record(&mut labels);
        if let (Some(guard), Some(outcome)) = (labels.guard, labels.outcome) {
            self.0.lock().unwrap().push((guard, outcome));
        }
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// A repeat that waits for its first submission's answer is woken by its completion
/// rather than looking at the record every 20 ms: two looks (when it arrived, and once
/// woken), however long the first runs. Polling, it looked about fifteen times in the
/// 300 ms it waits here.
async fn a_repeat_is_woken_by_the_first_submission_not_polling<B: Backend>() {
    let backend = B::start().await;
    let store = idem_tests::Counting::new(backend.store());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let place = |State(gate): State<Arc<tokio::sync::Semaphore>>| async move {
        gate.acquire().await.expect("the gate stays open").forget();
        (StatusCode::SEE_OTHER, [(header::LOCATION, "/orders/1")])
    };
    let by_cookie = ClientCookie::new("session");
    let layer = VerifyFormTokenLayer::new().with_replay(true);
    let router = Router::new()
        .route("/form", get(order_form))
        .route(
            "/orders",
            post(place).route_layer(layer).with_state(Arc::clone(&gate)),
        )
        .layer(
            Idem::builder()
                .with_client_identity(by_cookie)
                .with_store(store.clone())
                .build()
                .layer(),
        );
    let browser = Browser(router);
    let token = browser.load_form().await;
    let post = || {
        let (browser, token) = (browser.clone(), token.clone());
        tokio::spawn(async move { browser.submit("/orders", &token).await })
    };
    let long = Duration::from_secs(30);
    let first = post();
    idem_tests::eventually(long, "the first began", || async {
        store.record_begins() == 1
    })
    .await;
    let repeat = post();
    idem_tests::eventually(long, "the repeat looked", || async {
        store.record_begins() == 2
    })
    .await;
    // Long enough for a polling repeat to look several times; a woken one does not.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.record_begins(), 2, "no look while the first runs");
    gate.add_permits(1);
    let (first, repeat) = (first.await.unwrap(), repeat.await.unwrap());
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert!(replayed(&repeat), "the repeat replays the first's answer");
    assert_eq!(location(&repeat), "/orders/1");
    assert_eq!(store.record_begins(), 3, "one look once woken");
}
