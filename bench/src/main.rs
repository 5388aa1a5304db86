//! The server `bench/http.sh` drives with `wrk`: one route per guarded case
//! ([`idem_bench::guard_cases`], whose docs list them) on a `MemoryStore` (under
//! `/memory`) and, with `--redis URL`, on a `RedisStore` (under `/redis`), beside the
//! unguarded baselines ([`idem_bench::unguarded_routes`]: `/bare`, `/plain/form`,
//! `/plain/order`) and, with `--redis`, the bare redis-rs baselines of the Redis cases
//! ([`idem_bench::bare_redis_routes`], under `/bare-redis`), which send the same Redis
//! commands with plain redis-rs and no guard.
//!
//! ```text
//! idem-bench --port 8080 [--redis redis://127.0.0.1:6379] [--workers 1]
//! ```
//!
//! Every guarded route takes its client from the `x-client` header, so the load generator
//! decides whether a request is a new key (a new `x-client` or `Idempotency-Key` each
//! time) or a replay (the same ones again). Two more routes measure memory:
//!
//! | route | case |
//! |---|---|
//! | `POST /flood?n=N&ttl_ms=T` | puts `N` fresh keys with that TTL into a `MemoryStore` of its own |
//! | `GET /flood` | that store's `entry_count` |

use idem_axum::store::LockStore;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::post;
use idem_axum::{
    MemoryStore, RedisServer, RedisStore,
    store::{Acquire, Fencing, Key, Owner},
};
use idem_bench::{bare_redis_connection, bare_redis_routes, guard_cases, unguarded_routes};

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
    let mut app = unguarded_routes()
        .route(
            "/flood",
            post(flood)
                .get(flood_entries)
                .with_state(MemoryStore::new()),
        )
        .merge(guard_cases("/memory", MemoryStore::new()));
    if let Some(url) = &options.redis {
        let store = RedisStore::builder().connect(RedisServer::url(url)).await?;
        app = app
            .merge(guard_cases("/redis", store))
            .merge(bare_redis_routes(bare_redis_connection(url).await?));
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
