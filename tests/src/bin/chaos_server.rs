//! The server the chaos run drives (`idem_tests::chaos`): one guarded route of every
//! kind on a Redis or PostgreSQL store, whose handlers note every run they start and every
//! commit they make in a ledger that survives a `SIGKILL` (one append-only file per
//! process).
//!
//! ```text
//! chaos_server --name NAME --ledger DIR --state DIR
//!              (--redis URL | --sentinels URL,URL,... --master NAME | --postgres URL)
//!              [--timeout-ms 1000] [--lease-ms 10000] [--lock-lease-ms 10000]
//!              [--replica-acks N --acks-within-ms MS] [--work-ms 3] [--render-ms 3]
//! ```
//!
//! Prints `chaos server NAME (pid P): listening on http://127.0.0.1:PORT/` once it
//! serves. The routes (every request names its operation in `x-op`, and its client in
//! `x-client`):
//!
//! | route | guard | commits |
//! |---|---|---|
//! | `GET /form` | issues a one-time form token (`FormToken`), its value as the body | nothing |
//! | `POST /form` | spends it (`VerifyFormTokenLayer`; field `form_token`) | once per token |
//! | `POST /repeat` | `#[avoid_repeat(timeout = "60s")]`, per client | once per client and window |
//! | `POST /pay` | `Idempotency-Key`, required (`IdempotencyLayer`) | once per key |
//! | `POST /callback` | a key from the body's `source` and `seq`, one key space for every caller | once per delivery |
//! | `POST /withdraw/{ticket}` | a `Lock` per ticket; under it, "withdrawn already?" is looked up in a marker file, then the withdrawal is made | once per ticket |
//!
//! A handler notes `run`, works for `--work-ms`, notes `commit`, then renders for
//! `--render-ms` before it answers `201`: a process killed in the middle of handlers is
//! killed between those steps, and some of its handlers between their commit and the
//! moment the guard stores their response. A middleware outside the guards notes
//! `answer` when a response the handler produced leaves the server.
//!
//! On PostgreSQL (`--postgres`) every guard runs on `PostgresStore`, and the idempotency
//! routes (`/pay`, `/callback`) commit differently: their `commit` is a row of the
//! commits' table (`idem_tests::chaos::COMMITS_TABLE`), written in one transaction with
//! their completed record (`PostgresStore::commit_with_record`), so a kill leaves both or
//! neither. That transaction is bounded by the store's timeout; one that fails or runs
//! out answers `503` (the layer then removes the record, unless it committed after all),
//! and one whose record a retry took over answers `409` with `Retry-After`. The form route
//! keeps its ledger line in the file: its token is spent before the handler runs.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::http::{HeaderName, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_axum::idempotency::{IdempotencyRecord, RecordScope};
use idem_axum::identity::ClientHeader;
use idem_axum::lock::{Lease, Lock, LockError, LockGuard};
use idem_axum::store::{AnyStore, Key, LockStore, Owner};
use idem_axum::{
    FormToken, Idem, IdempotencyLayer, RedisServer, RedisStore, VerifyFormTokenLayer, avoid_repeat,
};
use idem_sqlx::sqlx::PgPool;
use idem_sqlx::{CommitError, PostgresStore};
use idem_tests::chaos::{CLIENT_HEADER, Event, Ledger, OP_HEADER, Route, note_commit_in};
use serde_json::json;

const USAGE: &str = "usage: chaos_server --name NAME --ledger DIR --state DIR \
(--redis URL | --sentinels URL,URL,... --master NAME | --postgres URL) [--timeout-ms N] \
[--lease-ms N] \
[--lock-lease-ms N] [--replica-acks N --acks-within-ms N] [--work-ms N] [--render-ms N]";

#[tokio::main]
async fn main() -> ExitCode {
    match serve().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("chaos_server: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let options = Options::from_args()?;
    let (store, db) = match (
        &options.postgres,
        &options.redis,
        options.sentinels.as_slice(),
    ) {
        (Some(url), None, []) => {
            // The harness created idem's tables before starting the instances.
            let store = PostgresStore::builder()
                .with_timeout(options.timeout)
                .connect(url)
                .await?;
            let db = store.pool().clone();
            (AnyStore::new(store), Some(db))
        }
        (None, Some(url), []) => (redis_store(&options, RedisServer::url(url)).await?, None),
        (None, None, [_, ..]) => {
            let sentinels = RedisServer::sentinel(&options.sentinels, &options.master);
            (redis_store(&options, sentinels).await?, None)
        }
        _ => return Err(format!("give one of --redis, --sentinels, --postgres; {USAGE}").into()),
    };
    let app = App {
        ledger: Arc::new(Ledger::create(&options.ledger, &options.name)?),
        store: store.clone(),
        db,
        timeout: options.timeout,
        state: Arc::new(options.state.clone()),
        work: options.work,
        render: options.render,
        lock_lease: options.lock_lease,
    };
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(HeaderName::from_static(CLIENT_HEADER)))
        .build();
    let router = routes(app, &idem, options.lease);
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    println!(
        "chaos server {} (pid {}): listening on http://{}/",
        options.name,
        std::process::id(),
        listener.local_addr()?
    );
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// The Redis store on `server`, as the options say.
async fn redis_store(
    options: &Options,
    server: RedisServer,
) -> Result<AnyStore, Box<dyn std::error::Error>> {
    // Lazy: the chaos run starts and kills Redis under the servers.
    let mut builder = RedisStore::builder()
        .with_timeout(options.timeout)
        .with_lazy_connect(true);
    if let Some((replicas, within)) = options.replica_acks {
        builder = builder.with_replica_acks(replicas, within);
    }
    Ok(AnyStore::new(builder.connect(server).await?))
}

fn routes(app: App, idem: &Idem, lease: Duration) -> Router {
    let pay = IdempotencyLayer::new()
        .with_required(true)
        .with_lease(lease);
    let callback = IdempotencyLayer::new()
        .with_idempotency_key_fn(|_head, body| {
            let delivery: serde_json::Value = serde_json::from_slice(body).ok()?;
            Some(format!(
                "{}:{}",
                delivery["source"].as_str()?,
                delivery["seq"].as_str()?
            ))
        })
        .with_record_scope(RecordScope::Shared)
        .with_required(true)
        .with_lease(lease);
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(
            Route::Form.path(),
            get(form_page).merge(post(place_order).route_layer(VerifyFormTokenLayer::new())),
        )
        .route(Route::Repeat.path(), post(repeat))
        .route(Route::Pay.path(), post(pay_in).route_layer(pay))
        .route(
            Route::Callback.path(),
            post(callback_in).route_layer(callback),
        )
        .route("/withdraw/{ticket}", post(withdraw))
        .layer(idem.layer())
        .layer(middleware::from_fn_with_state(app.clone(), note_answer))
        .with_state(app)
}

/// What the handlers share.
#[derive(Debug, Clone)]
struct App {
    ledger: Arc<Ledger>,
    store: AnyStore,
    /// On PostgreSQL, the store's pool: the idempotency routes commit in it.
    db: Option<PgPool>,
    /// The store's timeout, which bounds those routes' transactions too.
    timeout: Duration,
    /// Where the lock route keeps its "withdrawn" markers, one file per ticket.
    state: Arc<PathBuf>,
    work: Duration,
    render: Duration,
    lock_lease: Duration,
}

impl App {
    /// Notes `event`; a ledger that cannot be written ends the process, since a run
    /// whose counts are missing lines would report fewer executions than happened.
    fn note(&self, event: Event, route: Route, key: &str) {
        if let Err(error) = self.ledger.note(event, route, key) {
            eprintln!("chaos_server: the ledger cannot be written: {error}");
            std::process::abort();
        }
    }

    /// The work of every route: run, commit, render, answer `201`.
    async fn work(&self, route: Route, key: &str) -> Response {
        self.note(Event::Run, route, key);
        tokio::time::sleep(self.work).await;
        self.note(Event::Commit, route, key);
        tokio::time::sleep(self.render).await;
        ran(route, key, StatusCode::CREATED)
    }

    /// The work of an idempotency route: on PostgreSQL, its commit and its completed
    /// record in one transaction; elsewhere, [`work`](Self::work).
    ///
    /// The transaction runs in a task of its own, which the store's timeout stops waiting
    /// for but never cancels (as `PostgresStore::commit_with_record` says): sqlx gives a
    /// connection whose `BEGIN` was cancelled back to the pool inside that transaction,
    /// and the store's own statements on it (this pool is the store's) then ran
    /// uncommitted, unseen by the other instances.
    async fn work_with_record(
        &self,
        route: Route,
        key: &str,
        record: IdempotencyRecord,
    ) -> Response {
        let Some(db) = &self.db else {
            return self.work(route, key).await;
        };
        self.note(Event::Run, route, key);
        tokio::time::sleep(self.work).await;
        let committing = tokio::spawn(commit_with_record(
            db.clone(),
            route,
            key.to_owned(),
            record,
        ));
        let response = match tokio::time::timeout(self.timeout, committing).await {
            Ok(Ok(Ok(response))) => response,
            Ok(Ok(Err(CommitError::RecordLost))) => {
                let refusal = (StatusCode::CONFLICT, "a retry took this request over");
                return ([(header::RETRY_AFTER, "1")], refusal).into_response();
            }
            Ok(Ok(Err(_)) | Err(_)) | Err(_) => {
                let refusal = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the store failed; try again",
                );
                return ([(header::RETRY_AFTER, "1")], refusal).into_response();
            }
        };
        tokio::time::sleep(self.render).await;
        response
    }
}

/// Writes the commit of `key` on `route` and completes `record` with the response, in one
/// transaction on `db`; the response.
async fn commit_with_record(
    db: PgPool,
    route: Route,
    key: String,
    record: IdempotencyRecord,
) -> Result<Response, CommitError> {
    let store_error = |error| CommitError::Store(idem_axum::store::StoreError::backend(error));
    // Before the transaction, which a stalled link can hold up to the store's timeout: the
    // layer then answers its failure without one more call to the store.
    record.take_over();
    let mut tx = db.begin().await.map_err(store_error)?;
    note_commit_in(&mut tx, route, &key)
        .await
        .map_err(store_error)?;
    let (stored, response) = record
        .stored_response(ran(route, &key, StatusCode::CREATED))
        .await
        .map_err(|error| CommitError::Store(idem_axum::store::StoreError::backend(error)))?;
    let (key, owner, retention) = (record.key(), record.owner(), record.retention());
    PostgresStore::commit_with_record(tx, key, owner, stored, retention).await?;
    Ok(response)
}

/// Marks a response the handler produced, for [`note_answer`].
#[derive(Debug, Clone)]
struct Ran {
    route: Route,
    key: String,
}

/// The answer of a handler that ran: its body names the run (process and number), so
/// that a replay can be told from a second run.
fn ran(route: Route, key: &str, status: StatusCode) -> Response {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let body = json!({ "op": key, "pid": std::process::id(), "run": run });
    let mut response = (status, Json(body)).into_response();
    response.extensions_mut().insert(Ran {
        route,
        key: key.to_owned(),
    });
    response
}

/// Notes `answer` when a response a handler produced leaves: the guards (outside the
/// handler, inside this) have stored it, or handed it to their retry.
async fn note_answer(State(app): State<App>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if let Some(ran) = response.extensions().get::<Ran>() {
        app.note(Event::Answer, ran.route, &ran.key);
    }
    response
}

/// The operation a request belongs to: its `x-op` header.
#[derive(Debug)]
struct Op(String);

impl<S: Sync> FromRequestParts<S> for Op {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .headers
            .get(OP_HEADER)
            .and_then(|op| op.to_str().ok())
            .filter(|op| !op.is_empty() && !op.contains([' ', '/']))
            .map(|op| Self(op.to_owned()))
            .ok_or((StatusCode::BAD_REQUEST, "send the operation in x-op"))
    }
}

async fn form_page(token: FormToken) -> String {
    token.value().to_owned()
}

async fn place_order(State(app): State<App>, Op(key): Op) -> Response {
    app.work(Route::Form, &key).await
}

#[avoid_repeat(timeout = "60s")]
async fn repeat(State(app): State<App>, Op(key): Op) -> Response {
    app.work(Route::Repeat, &key).await
}

async fn pay_in(State(app): State<App>, Op(key): Op, record: IdempotencyRecord) -> Response {
    app.work_with_record(Route::Pay, &key, record).await
}

async fn callback_in(State(app): State<App>, Op(key): Op, record: IdempotencyRecord) -> Response {
    app.work_with_record(Route::Callback, &key, record).await
}

/// Withdraws once per ticket: under the ticket's lock, looks the withdrawal up and makes
/// it if it was not made. Without mutual exclusion two clicks would both find nothing
/// and both withdraw.
async fn withdraw(State(app): State<App>, Path(ticket): Path<String>) -> Response {
    if ticket.is_empty()
        || !ticket
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return (
            StatusCode::BAD_REQUEST,
            "a ticket is letters, digits and '-'",
        )
            .into_response();
    }
    let lease = Lease::Fixed(app.lock_lease);
    let lock = Lock::new(app.store.clone(), Key::hashed(["withdraw", &ticket]), lease);
    let guard = match lock.try_acquire().await {
        Ok(guard) => guard,
        Err(LockError::Held { .. }) => {
            return (
                StatusCode::CONFLICT,
                "a withdrawal of this ticket is running",
            )
                .into_response();
        }
        Err(_) => return (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response(),
    };
    let until = Instant::now() + app.lock_lease;
    app.note(Event::Run, Route::Withdraw, &ticket);
    let marker = app.state.join(&ticket);
    let status = if marker.exists() {
        StatusCode::OK
    } else {
        tokio::time::sleep(app.work).await;
        app.note(Event::Commit, Route::Withdraw, &ticket);
        if let Err(error) = std::fs::write(&marker, b"withdrawn") {
            eprintln!("chaos_server: cannot write {}: {error}", marker.display());
            std::process::abort();
        }
        StatusCode::CREATED
    };
    app.note(Event::Free, Route::Withdraw, &ticket);
    tokio::spawn(release(
        app.clone(),
        guard,
        lock.owner().clone(),
        ticket.clone(),
        until,
    ));
    ran(Route::Withdraw, &ticket, status)
}

/// Asks the store whether this owner still holds the lock (a renewal to the lease's
/// end, which changes nothing else, so it can be repeated after an answer that was lost)
/// and notes `lost-lock` when it does not; then releases it. Each step is tried again
/// every 100 ms while the store cannot answer, for as long as the lease lasts.
async fn release(
    app: App,
    guard: LockGuard<AnyStore>,
    owner: Owner,
    ticket: String,
    until: Instant,
) {
    let key = guard.key().clone();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left < Duration::from_millis(100) {
            return;
        }
        match app.store.renew(&key, &owner, left).await {
            Ok(true) => break,
            Ok(false) => {
                app.note(Event::LostLock, Route::Withdraw, &ticket);
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let mut released = guard.release().await;
    while released.is_err() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        released = app.store.release_and_signal(&key, &owner).await;
    }
}

/// What the command line asks for.
#[derive(Debug)]
struct Options {
    name: String,
    ledger: PathBuf,
    state: PathBuf,
    redis: Option<String>,
    sentinels: Vec<String>,
    postgres: Option<String>,
    master: String,
    timeout: Duration,
    lease: Duration,
    lock_lease: Duration,
    replica_acks: Option<(u32, Duration)>,
    work: Duration,
    render: Duration,
}

impl Options {
    fn from_args() -> Result<Self, String> {
        let mut options = Self {
            name: String::new(),
            ledger: PathBuf::new(),
            state: PathBuf::new(),
            redis: None,
            sentinels: Vec::new(),
            postgres: None,
            master: String::new(),
            timeout: Duration::from_secs(1),
            lease: Duration::from_secs(10),
            lock_lease: Duration::from_secs(10),
            replica_acks: None,
            work: Duration::from_millis(3),
            render: Duration::from_millis(3),
        };
        let (mut acks, mut acks_within) = (None, None);
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
            let millis = || {
                value
                    .parse()
                    .map(Duration::from_millis)
                    .map_err(|_| format!("{flag} takes milliseconds, not {value:?}"))
            };
            match flag.as_str() {
                "--name" => options.name = value,
                "--ledger" => options.ledger = value.into(),
                "--state" => options.state = value.into(),
                "--redis" => options.redis = Some(value),
                "--postgres" => options.postgres = Some(value),
                "--sentinels" => options.sentinels = value.split(',').map(str::to_owned).collect(),
                "--master" => options.master = value,
                "--timeout-ms" => options.timeout = millis()?,
                "--lease-ms" => options.lease = millis()?,
                "--lock-lease-ms" => options.lock_lease = millis()?,
                "--work-ms" => options.work = millis()?,
                "--render-ms" => options.render = millis()?,
                "--acks-within-ms" => acks_within = Some(millis()?),
                "--replica-acks" => {
                    acks = Some(
                        value
                            .parse()
                            .map_err(|_| format!("--replica-acks {value:?}"))?,
                    );
                }
                _ => return Err(format!("unknown argument {flag:?}; {USAGE}")),
            }
        }
        if options.name.is_empty()
            || options.ledger.as_os_str().is_empty()
            || options.state.as_os_str().is_empty()
        {
            return Err(format!(
                "--name, --ledger and --state are required; {USAGE}"
            ));
        }
        options.replica_acks = match (acks, acks_within) {
            (Some(replicas), Some(within)) => Some((replicas, within)),
            (None, None) => None,
            _ => return Err("--replica-acks and --acks-within-ms go together".to_owned()),
        };
        Ok(options)
    }
}
