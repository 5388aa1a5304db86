//! The chaos run's clients: operations of every guarded kind, most of their requests
//! duplicates, each answer recorded; what a client would retry is retried, within
//! bounds, on any instance.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode, header};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::deployment::Instances;
use super::{CLIENT_HEADER, Chaos, OP_HEADER, Route, monotonic_ns};
use crate::{Answer, HttpClient, eventually, http_client, send_over_tcp};

/// How long the driver waits for one answer before it counts the request as unanswered.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times one send is tried at most.
const MAX_ATTEMPTS: u32 = 200;

/// How many re-sends of completed operations run at once after a fault.
const CHECKS_AT_ONCE: usize = 16;

/// How far back before a fault completed operations are re-sent from: well inside the
/// anti-repeat window (60 s), so that a refusal is still what a kept window gives.
const CHECK_WINDOW: Duration = Duration::from_secs(30);

/// The share of each route among operations, in percent.
const MIX: [(Route, u32); 5] = [
    (Route::Form, 20),
    (Route::Repeat, 20),
    (Route::Pay, 25),
    (Route::Callback, 20),
    (Route::Withdraw, 15),
];

/// What one request was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    /// `GET /form`, for a token.
    Page,
    /// The first request of an operation.
    First,
    /// A duplicate sent while the first may still run: a double click, a client's retry
    /// on another instance, a callback on the other channel, another click on the lock.
    Duplicate,
    /// A duplicate sent once the first ones were answered: a resubmission after "back",
    /// a retry after a lost answer, a redelivery.
    Late,
    /// A duplicate of an operation completed before a fault that could lose data.
    Check,
}

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// A response, read whole.
    Answered {
        /// Its status.
        status: StatusCode,
        /// Whether it was a stored response replayed.
        replayed: bool,
    },
    /// The connection failed or closed before a whole response came.
    Failed,
    /// No response within [`EXCHANGE_TIMEOUT`].
    TimedOut,
}

/// One request and its answer.
#[derive(Debug, Clone)]
pub(super) struct Exchange {
    pub(super) route: Route,
    pub(super) kind: Kind,
    pub(super) instance: usize,
    /// When it was sent ([`monotonic_ns`]).
    pub(super) sent_at: u64,
    pub(super) took: Duration,
    pub(super) outcome: Outcome,
}

/// One operation, as its client saw it.
#[derive(Debug, Clone)]
pub(super) struct Operation {
    pub(super) route: Route,
    pub(super) key: String,
    /// The form token it submitted.
    token: Option<String>,
    /// When its first success arrived ([`monotonic_ns`]).
    pub(super) completed_at: Option<u64>,
    /// The body of its first success.
    first_body: Option<Bytes>,
    /// Whether a send gave up (its bounds passed without a final answer).
    pub(super) gave_up: bool,
    /// Whether two successes of one idempotent operation had different bodies: a replay
    /// that was not the first response.
    pub(super) differing_answers: bool,
}

/// What a re-send after a fault found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The record was there: the stored response replayed, or the repeat refused.
    Kept,
    /// It was not: the handler ran again, or a replay was not the first response.
    Lost,
    /// No final answer within the bounds.
    Unsettled,
}

/// A completed operation sent again after a fault.
#[derive(Debug, Clone)]
pub(super) struct Check {
    pub(super) route: Route,
    pub(super) verdict: Verdict,
}

/// One request of an operation, to be sent (and re-sent) as it is.
#[derive(Debug, Clone)]
struct Send {
    route: Route,
    key: String,
    token: Option<String>,
    page: bool,
}

impl Send {
    fn new(route: Route, key: &str, token: Option<String>) -> Self {
        Self {
            route,
            key: key.to_owned(),
            token,
            page: false,
        }
    }

    /// The request to the instance at `base`; `click` tells apart the clients of
    /// concurrent clicks on the lock route.
    fn request(&self, base: &str, click: usize) -> Request<Body> {
        let key = self.key.as_str();
        let start = |method: Method, path: &str| {
            Request::builder()
                .method(method)
                .uri(format!("{base}{path}"))
                .header(OP_HEADER, key)
        };
        let json = |body: serde_json::Value| Body::from(body.to_string());
        let request = match (self.route, self.page) {
            (Route::Form, true) => start(Method::GET, Route::Form.path())
                .header(CLIENT_HEADER, key)
                .body(Body::empty()),
            (Route::Form, false) => start(Method::POST, Route::Form.path())
                .header(CLIENT_HEADER, key)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!(
                    "form_token={}",
                    self.token.as_deref().unwrap_or_default()
                ))),
            (Route::Repeat, _) => start(Method::POST, Route::Repeat.path())
                .header(CLIENT_HEADER, key)
                .body(Body::empty()),
            (Route::Pay, _) => start(Method::POST, Route::Pay.path())
                .header(CLIENT_HEADER, key)
                .header("idempotency-key", key)
                .header(header::CONTENT_TYPE, "application/json")
                .body(json(serde_json::json!({ "op": key, "amount": 100 }))),
            (Route::Callback, _) => start(Method::POST, Route::Callback.path())
                .header(header::CONTENT_TYPE, "application/json")
                .body(json(
                    serde_json::json!({ "source": "psp", "seq": key, "amount": 100 }),
                )),
            (Route::Withdraw, _) => start(Method::POST, &format!("/withdraw/{key}"))
                .header(CLIENT_HEADER, format!("{key}-click{click}"))
                .body(Body::empty()),
        };
        request.expect("a well-formed request")
    }

    /// Whether `answer` is final, or one a client retries: a `503`, and on the routes
    /// that wait for their first attempt, a `409` with `Retry-After` (it still runs).
    fn settles(&self, answer: &Answer) -> bool {
        match answer.status {
            StatusCode::SERVICE_UNAVAILABLE => false,
            StatusCode::CONFLICT if matches!(self.route, Route::Pay | Route::Callback) => {
                !answer.headers.contains_key(header::RETRY_AFTER)
            }
            _ => true,
        }
    }
}

/// A send's final answer, `None` when its bounds passed first, and when it arrived.
#[derive(Debug)]
struct Final {
    answer: Option<Answer>,
    at: u64,
}

impl Final {
    fn succeeded(&self) -> bool {
        self.answer
            .as_ref()
            .is_some_and(|answer| answer.status.is_success())
    }
}

/// Sends the operations and keeps what came back.
#[derive(Debug)]
pub(super) struct Driver {
    instances: Arc<Instances>,
    http: HttpClient,
    seed: u64,
    concurrency: usize,
    /// How long one send is retried at most: past the records' lease, which a killed
    /// instance's records hold their keys for.
    patience: Duration,
    checks_per_route: usize,
    sent: AtomicU64,
    exchanges: Mutex<Vec<Exchange>>,
    operations: Mutex<Vec<Operation>>,
    checks: Mutex<Vec<Check>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panicking task held it; the records are whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Driver {
    pub(super) fn new(chaos: &Chaos, instances: Arc<Instances>) -> Self {
        Self {
            instances,
            http: http_client(),
            seed: chaos.seed,
            concurrency: chaos.concurrency,
            patience: chaos.lease * 3 + Duration::from_secs(10),
            checks_per_route: chaos.verify,
            sent: AtomicU64::new(0),
            exchanges: Mutex::new(Vec::new()),
            operations: Mutex::new(Vec::new()),
            checks: Mutex::new(Vec::new()),
        }
    }

    /// How many requests were sent so far.
    pub(super) fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    pub(super) fn exchanges(&self) -> MutexGuard<'_, Vec<Exchange>> {
        lock(&self.exchanges)
    }

    pub(super) fn operations(&self) -> MutexGuard<'_, Vec<Operation>> {
        lock(&self.operations)
    }

    pub(super) fn checks(&self) -> MutexGuard<'_, Vec<Check>> {
        lock(&self.checks)
    }

    /// Waits until every instance answers.
    ///
    /// # Panics
    ///
    /// When one does not within 30 s.
    pub(super) async fn until_serving(&self) {
        for index in 0..self.instances.len() {
            let url = format!("{}/health", self.instances.base(index));
            eventually(Duration::from_secs(30), "an instance serves", || {
                let request = Request::get(url.as_str()).body(Body::empty());
                let http = self.http.clone();
                async move {
                    let request = request.expect("a well-formed request");
                    send_over_tcp(&http, request)
                        .await
                        .is_ok_and(|answer| answer.status == StatusCode::OK)
                }
            })
            .await;
        }
    }

    /// Runs operations, `concurrency` at a time, until `requests` were sent and
    /// `faults_over` says the faults are over, or `deadline` passes; then waits for
    /// those running to end (each is bounded).
    pub(super) async fn send(
        self: &Arc<Self>,
        requests: u64,
        faults_over: impl Fn() -> bool,
        deadline: Instant,
    ) {
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let mut running = JoinSet::new();
        let mut number = 0;
        while (self.sent() < requests || !faults_over()) && Instant::now() < deadline {
            let permit = Arc::clone(&permits)
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let driver = Arc::clone(self);
            running.spawn(async move {
                driver.operation(number).await;
                drop(permit);
            });
            number += 1;
            while let Some(ended) = running.try_join_next() {
                ended.expect("an operation does not panic");
            }
        }
        while let Some(ended) = running.join_next().await {
            ended.expect("an operation does not panic");
        }
    }

    /// Operation `number`: its route and instances drawn from the seed; a burst of
    /// concurrent sends, then one more once they were answered.
    async fn operation(self: Arc<Self>, number: u64) {
        let mut rng = fastrand::Rng::with_seed(self.seed.wrapping_mul(1_000_003) ^ number);
        let mut draw = rng.u32(0..100);
        let (route, _) = MIX
            .into_iter()
            .find(|(_, share)| {
                let found = draw < *share;
                draw = draw.saturating_sub(*share);
                found
            })
            .expect("the shares add up to 100");
        let key = format!("{route}-{number}");
        let mut instances: Vec<usize> = (0..self.instances.len()).collect();
        rng.shuffle(&mut instances);
        let mut operation = Operation {
            route,
            key: key.clone(),
            token: None,
            completed_at: None,
            first_body: None,
            gave_up: false,
            differing_answers: false,
        };
        if route == Route::Form {
            let page = Send {
                page: true,
                ..Send::new(route, &key, None)
            };
            let page = self.until_final(&page, 0, instances[0], Kind::Page).await;
            match page.answer {
                Some(answer) if answer.status == StatusCode::OK => {
                    operation.token = Some(answer.text());
                }
                _ => {
                    operation.gave_up = true;
                    self.operations().push(operation);
                    return;
                }
            }
        }
        let send = Send::new(route, &key, operation.token.clone());
        let burst = if route == Route::Withdraw { 3 } else { 2 };
        let mut sends = JoinSet::new();
        for click in 0..burst {
            let stagger = Duration::from_millis(if click == 0 { 0 } else { rng.u64(0..=5) });
            let instance = instances[click % instances.len()];
            let kind = if click == 0 {
                Kind::First
            } else {
                Kind::Duplicate
            };
            let (driver, send) = (Arc::clone(&self), send.clone());
            sends.spawn(async move {
                tokio::time::sleep(stagger).await;
                driver.until_final(&send, click, instance, kind).await
            });
        }
        let mut finals = sends.join_all().await;
        tokio::time::sleep(Duration::from_millis(rng.u64(0..200))).await;
        let instance = instances[rng.usize(..instances.len())];
        finals.push(self.until_final(&send, burst, instance, Kind::Late).await);

        operation.gave_up = finals.iter().any(|end| end.answer.is_none());
        let first = finals
            .iter()
            .filter(|end| end.succeeded())
            .min_by_key(|end| end.at);
        if let Some(first) = first {
            operation.completed_at = Some(first.at);
            let body = first.answer.as_ref().map(|answer| answer.body.clone());
            if matches!(route, Route::Pay | Route::Callback) {
                operation.differing_answers = finals
                    .iter()
                    .filter(|end| end.succeeded())
                    .any(|end| end.answer.as_ref().map(|answer| &answer.body) != body.as_ref());
            }
            operation.first_body = body;
        }
        self.operations().push(operation);
    }

    /// Sends `send` to `instance` until its answer is final, each retry to an instance
    /// drawn at random (as a load balancer would), backing off from 25 ms to 500 ms,
    /// for at most [`MAX_ATTEMPTS`] and the driver's patience.
    async fn until_final(&self, send: &Send, click: usize, instance: usize, kind: Kind) -> Final {
        let until = Instant::now() + self.patience;
        let mut instance = instance;
        for attempt in 0..MAX_ATTEMPTS {
            if let Some(answer) = self.exchange(send, click, instance, kind).await
                && send.settles(&answer)
            {
                return Final {
                    answer: Some(answer),
                    at: monotonic_ns(),
                };
            }
            if Instant::now() >= until {
                break;
            }
            let backoff =
                Duration::from_millis(25 << attempt.min(5)).min(Duration::from_millis(500));
            tokio::time::sleep(backoff).await;
            instance = fastrand::usize(..self.instances.len());
        }
        Final {
            answer: None,
            at: monotonic_ns(),
        }
    }

    /// Sends `send` once to `instance` and records the exchange.
    async fn exchange(
        &self,
        send: &Send,
        click: usize,
        instance: usize,
        kind: Kind,
    ) -> Option<Answer> {
        // Timed from before the instance's address is read: a request built with the
        // address of an instance killed meanwhile is then dated inside its downtime.
        let (sent_at, clock) = (monotonic_ns(), Instant::now());
        let request = send.request(&self.instances.base(instance), click);
        self.sent.fetch_add(1, Ordering::SeqCst);
        let in_flight = self.instances.enter(instance);
        let answered =
            tokio::time::timeout(EXCHANGE_TIMEOUT, send_over_tcp(&self.http, request)).await;
        let took = clock.elapsed();
        drop(in_flight);
        let (outcome, answer) = match answered {
            Ok(Ok(answer)) => (
                Outcome::Answered {
                    status: answer.status,
                    replayed: answer.replayed(),
                },
                Some(answer),
            ),
            Ok(Err(_)) => (Outcome::Failed, None),
            Err(_) => (Outcome::TimedOut, None),
        };
        self.exchanges().push(Exchange {
            route: send.route,
            kind,
            instance,
            sent_at,
            took,
            outcome,
        });
        answer
    }

    /// Sends again, once each (retried until final), the last operations of each route
    /// but the lock's that completed in the [`CHECK_WINDOW`] before `fault_started`, and
    /// judges what came back.
    pub(super) async fn verify(self: &Arc<Self>, fault_started: u64) {
        let since =
            fault_started.saturating_sub(u64::try_from(CHECK_WINDOW.as_nanos()).unwrap_or(0));
        let mut due = Vec::new();
        {
            let operations = self.operations();
            for route in [Route::Form, Route::Repeat, Route::Pay, Route::Callback] {
                let mut completed: Vec<&Operation> = operations
                    .iter()
                    .filter(|operation| operation.route == route)
                    .filter(|operation| {
                        operation
                            .completed_at
                            .is_some_and(|at| at > since && at < fault_started)
                    })
                    .collect();
                completed.sort_by_key(|operation| std::cmp::Reverse(operation.completed_at));
                due.extend(completed.into_iter().take(self.checks_per_route).cloned());
            }
        }
        let permits = Arc::new(Semaphore::new(CHECKS_AT_ONCE));
        let mut checks = JoinSet::new();
        for operation in due {
            let permit = Arc::clone(&permits)
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let driver = Arc::clone(self);
            checks.spawn(async move {
                let send = Send::new(operation.route, &operation.key, operation.token.clone());
                let instance = fastrand::usize(..driver.instances.len());
                let end = driver.until_final(&send, 0, instance, Kind::Check).await;
                drop(permit);
                let verdict = judge(&operation, end.answer.as_ref());
                driver.checks().push(Check {
                    route: operation.route,
                    verdict,
                });
            });
        }
        checks.join_all().await;
    }
}

/// Whether the answer to a completed operation sent again shows its record kept.
fn judge(operation: &Operation, answer: Option<&Answer>) -> Verdict {
    let Some(answer) = answer else {
        return Verdict::Unsettled;
    };
    match operation.route {
        Route::Pay | Route::Callback => {
            if answer.status.is_success()
                && answer.replayed()
                && Some(&answer.body) == operation.first_body.as_ref()
            {
                Verdict::Kept
            } else {
                Verdict::Lost
            }
        }
        Route::Form | Route::Repeat | Route::Withdraw => match answer.status {
            StatusCode::CONFLICT => Verdict::Kept,
            status if status.is_success() => Verdict::Lost,
            _ => Verdict::Unsettled,
        },
    }
}
