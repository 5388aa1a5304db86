//! The server `bench/http.sh` drives with `wrk`: one route per guarded case, on a
//! `MemoryStore` (under `/memory`) and, with `--redis URL`, on a `RedisStore` (under
//! `/redis`), plus `/bare`, the same trivial handler unguarded.
//!
//! ```text
//! idem-bench --port 8080 [--redis redis://127.0.0.1:6379] [--workers 1]
//! ```
//!
//! Every guarded route takes its client from the `x-client` header, so the load generator
//! decides whether a request is a new key (a new `x-client` or `Idempotency-Key` each
//! time) or a replay (the same ones again):
//!
//! | route | case |
//! |---|---|
//! | `POST /bare` | no guard, no store |
//! | `POST /{store}/avoid_repeat` | `#[avoid_repeat(timeout = "2s")]` (`expire`) |
//! | `POST /{store}/avoid_repeat_finish` | `#[avoid_repeat(timeout = "2s", release = "finish")]` |
//! | `GET /{store}/form` | issues a form token (`FormToken` extractor), answers its value |
//! | `POST /{store}/order` | spends it: `VerifyFormTokenLayer` over a `Form` handler |
//! | `POST /{store}/idempotency` | `IdempotencyLayer`, records kept 5 s |
//! | `POST /{store}/lock` | a handler that takes and releases the `Lock` named by `x-client` |
//! | `GET /plain/form`, `POST /plain/order` | the form case's handlers without a guard: a 22-character value instead of a token, the same `Form` handler without the layer |
//! | `POST /flood?n=N&ttl_ms=T` | puts `N` fresh keys with that TTL into a `MemoryStore` of its own |
//! | `GET /flood` | that store's `entry_count` |
//!
//! Windows and retention are seconds, not the defaults (30 s, 24 h): at tens of thousands
//! of new keys a second, the defaults would fill `MemoryStore`'s million entries within
//! the run and time its capacity refusals instead of the guard. For the same reason the
//! form case keeps 64 live tokens per client, not 16: wrk cannot tell its connections
//! apart, so its one `x-client` stands for 32 connections each with a page open.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use idem_axum::client::ClientHeader;
use idem_axum::{
    FormToken, FormTokenConfig, Idem, IdempotencyLayer, MemoryStore, RedisServer, RedisStore,
    VerifyFormTokenLayer, avoid_repeat,
    lock::{Lease, Lock},
    store::{Acquire, AnyStore, Fencing, Key, Owner, Store},
};

const CLIENT: HeaderName = HeaderName::from_static("x-client");

/// What the command line asked for.
struct Options {
    port: u16,
    redis: Option<String>,
    workers: usize,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut options = Self {
            port: 8080,
            redis: None,
            workers: 1,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--port" => options.port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
                "--redis" => options.redis = Some(value()?),
                "--workers" => {
                    options.workers = value()?.parse().map_err(|e| format!("--workers: {e}"))?;
                }
                _ => {
                    return Err(format!(
                        "unknown argument {flag}; usage: idem-bench --port P [--redis URL] [--workers N]"
                    ));
                }
            }
        }
        Ok(options)
    }
}

async fn bare() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "2s")]
async fn avoid_repeat_expire() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "2s", release = "finish")]
async fn avoid_repeat_finish() -> &'static str {
    "ok"
}

async fn issue_token(token: FormToken) -> String {
    token.value().to_owned()
}

#[derive(serde::Deserialize)]
struct Order {
    item: String,
}

async fn place_order(Form(order): Form<Order>) -> String {
    order.item
}

/// The form case's page without a token: a value as long as a token's, so the client's
/// next request posts the same bytes as in the guarded case.
async fn plain_form() -> String {
    static PAGES: AtomicU64 = AtomicU64::new(0);
    format!("{:022}", PAGES.fetch_add(1, Ordering::Relaxed))
}

/// Takes the lock named by the client and releases it: what a handler that serialises its
/// work on one resource pays, without the work.
async fn lock(State(store): State<AnyStore>, headers: HeaderMap) -> StatusCode {
    let Some(name) = headers.get(&CLIENT) else {
        return StatusCode::BAD_REQUEST;
    };
    let key = Key::hashed([b"bench-lock", name.as_bytes()]);
    let lock = Lock::new(store, key, Lease::Fixed(Duration::from_secs(2)));
    match lock.try_acquire().await {
        Ok(guard) => match guard.release().await {
            Ok(true) => StatusCode::OK,
            Ok(false) => StatusCode::CONFLICT,
            Err(_) => StatusCode::SERVICE_UNAVAILABLE,
        },
        Err(_) => StatusCode::CONFLICT,
    }
}

/// The guarded routes over one store, under `prefix`, behind that store's
/// `idem.layer()`: mounted with full paths and merged, not nested, because `nest` costs
/// every request a rewritten URI (ten allocations) that would be counted as the guard's.
fn cases<S: Store>(prefix: &str, store: S) -> Router {
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let path = |case: &str| format!("{prefix}/{case}");
    Router::new()
        .route(&path("avoid_repeat"), post(avoid_repeat_expire))
        .route(&path("avoid_repeat_finish"), post(avoid_repeat_finish))
        .route(&path("form"), get(issue_token))
        .route(
            &path("order"),
            post(place_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .route(
            &path("idempotency"),
            post(bare).route_layer(IdempotencyLayer::new().with_retention(Duration::from_secs(5))),
        )
        .route(&path("lock"), post(lock).with_state(idem.store().clone()))
        .layer(Extension(FormTokenConfig::new().with_tokens_per_client(64)))
        .layer(idem.layer())
}

#[derive(serde::Deserialize)]
struct Flood {
    n: u64,
    ttl_ms: u64,
}

/// Fills the flood store with `n` keys no request will ever repeat, as a stream of
/// distinct clients would, through the store API the guards use.
async fn flood(
    State(store): State<MemoryStore>,
    Query(flood): Query<Flood>,
) -> (StatusCode, String) {
    let owner = Owner::random();
    let ttl = Duration::from_millis(flood.ttl_ms);
    let salt = Owner::random();
    for i in 0..flood.n {
        let key = Key::hashed([salt.as_str().as_bytes(), &i.to_le_bytes()[..]]);
        match store.acquire(&key, &owner, ttl, Fencing::Off).await {
            Ok(Acquire::Acquired { .. }) => {}
            other => {
                return (
                    StatusCode::INSUFFICIENT_STORAGE,
                    format!("key {i}: {other:?}; entries={}\n", store.entry_count()),
                );
            }
        }
    }
    (StatusCode::OK, format!("entries={}\n", store.entry_count()))
}

async fn flood_entries(State(store): State<MemoryStore>) -> String {
    format!("entries={}\n", store.entry_count())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = Options::parse()?;
    // A runtime of a fixed size, so that pinning the process to cores (http.sh) and the
    // worker count agree.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.workers.max(1))
        .enable_all()
        .build()?
        .block_on(serve(options))
}

async fn serve(options: Options) -> Result<(), Box<dyn std::error::Error>> {
    let mut app = Router::new()
        .route("/bare", post(bare))
        .route("/plain/form", get(plain_form))
        .route("/plain/order", post(place_order))
        .route(
            "/flood",
            post(flood)
                .get(flood_entries)
                .with_state(MemoryStore::new()),
        )
        .merge(cases("/memory", MemoryStore::new()));
    if let Some(url) = &options.redis {
        let store = RedisStore::builder().connect(RedisServer::url(url)).await?;
        app = app.merge(cases("/redis", store));
    }
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, options.port)))
            .await?;
    println!("idem-bench listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
