//! idem beside its peers, for `bench/peers.sh`: one small axum server per contestant, and a
//! lock load generator.
//!
//! ```text
//! idem-peers serve --kind KIND --port P [--redis URL] [--workers 1]
//! idem-peers lock --impl bare|idem|rslock --keys distinct|hot --redis URL
//!                 [--tasks 50] [--seconds 5] [--workers 1]
//! ```
//!
//! `serve` answers `POST /` with one handler, the same in every kind, behind the kind's
//! guard, and `GET /runs` with how many times that handler ran:
//!
//! | kind | guard on `POST /` |
//! |---|---|
//! | `bare` | none |
//! | `idem-memory`, `idem-redis` | idem's `IdempotencyLayer` on `MemoryStore` / `RedisStore` |
//! | `idem-redis-uncached` | the same on a `RedisStore` without its copy of replayed records |
//! | `idempotent-memory`, `idempotent-redis` | `idempotent` 2.x's `IdempotencyLayer` on its `MemoryStore` / `ValkeyStore` |
//! | `axum-idempotent` | `axum-idempotent` 0.6's `IdempotentLayer` (Idempotency-Key header mode) in `ruts` sessions on a `MokaStore` |
//!
//! Every guard keeps a response 5 s, so that new-key runs of tens of thousands of requests a
//! second hold the same few hundred thousand records in each. The handler sleeps 200 ms when
//! the request has `x-slow: 1` (the correctness checks' concurrent retries), else answers at
//! once.
//!
//! `lock` runs `--tasks` tokio tasks for `--seconds`, each taking and releasing a lock in a
//! loop (one attempt, no waiting: a miss yields and tries again), on its own key
//! (`distinct`) or all on one (`hot`), and prints
//! `pairs=N misses=M overlaps=O seconds=S pairs_per_second=R`. On the hot key a holder yields
//! once before it releases, so that the others try while it holds, and `overlaps` counts an
//! acquisition made while another task held the key: it must be 0.
//!
//! | impl | acquire | release |
//! |---|---|---|
//! | `bare` | redis-rs `SET key token NX PX 2000` on one multiplexed connection | a Lua compare-and-delete (`EVALSHA`) |
//! | `idem` | `idem_core::Lock::try_acquire` on a `RedisStore` | `LockGuard::release` |
//! | `rslock` | `LockManager::lock` on one server, one try | `LockManager::unlock` |

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::{get, post};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long every guard keeps a response.
const RETENTION: Duration = Duration::from_secs(5);
/// The lease of every lock.
const LEASE: Duration = Duration::from_secs(2);

static RUNS: AtomicU64 = AtomicU64::new(0);

/// The handler every kind guards: counts its runs, answers `ok`.
async fn work(headers: HeaderMap) -> &'static str {
    RUNS.fetch_add(1, Ordering::Relaxed);
    if headers.get("x-slow").is_some_and(|v| v == "1") {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    "ok"
}

async fn runs() -> String {
    format!("{}\n", RUNS.load(Ordering::Relaxed))
}

/// The command line: a subcommand, then `--flag value` pairs.
struct Args {
    command: String,
    flags: Vec<(String, String)>,
}

impl Args {
    fn parse() -> Result<Self, Error> {
        let mut args = std::env::args().skip(1);
        let command = args
            .next()
            .ok_or("usage: idem-peers serve|lock --flag value ...")?;
        let mut flags = Vec::new();
        while let Some(flag) = args.next() {
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            flags.push((flag.trim_start_matches("--").to_owned(), value));
        }
        Ok(Self { command, flags })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .find(|(flag, _)| flag == name)
            .map(|(_, value)| value.as_str())
    }

    fn required(&self, name: &str) -> Result<&str, Error> {
        self.get(name)
            .ok_or_else(|| format!("--{name} is required").into())
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, Error>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(name) {
            None => Ok(default),
            Some(value) => value.parse().map_err(|e| format!("--{name}: {e}").into()),
        }
    }
}

fn main() -> Result<(), Error> {
    let args = Args::parse()?;
    // A runtime of a fixed size, so that pinning the process to a core (peers.sh) and the
    // worker count agree.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.number("workers", 1usize)?.max(1))
        .enable_all()
        .build()?;
    match args.command.as_str() {
        "serve" => runtime.block_on(serve(&args)),
        "lock" => runtime.block_on(lock(&args)),
        other => Err(format!("unknown command {other}: serve or lock").into()),
    }
}

async fn serve(args: &Args) -> Result<(), Error> {
    let kind = args.required("kind")?;
    let port: u16 = args.number("port", 8080)?;
    let redis = || args.required("redis");
    let guarded = Router::new().route("/", post(work));
    let app = match kind {
        "bare" => guarded,
        "idem-memory" => idem_router(guarded, idem_axum::MemoryStore::new()),
        "idem-redis" => idem_router(
            guarded,
            idem_axum::RedisStore::builder()
                .connect(idem_axum::RedisServer::url(redis()?))
                .await?,
        ),
        "idem-redis-uncached" => idem_router(
            guarded,
            idem_axum::RedisStore::builder()
                .with_replay_cache(0)
                .connect(idem_axum::RedisServer::url(redis()?))
                .await?,
        ),
        "idempotent-memory" => guarded.layer(
            idempotent::middleware::IdempotencyLayer::new(
                idempotent::memory::MemoryStore::builder().try_build()?,
            )
            .completed_ttl(RETENTION),
        ),
        "idempotent-redis" => guarded.layer(
            idempotent::middleware::IdempotencyLayer::new(
                idempotent::valkey::ValkeyStore::with_url(redis()?)
                    .prefix("idempotent-peers")
                    .try_build()
                    .await?,
            )
            .completed_ttl(RETENTION),
        ),
        "axum-idempotent" => {
            let store = Arc::new(ruts::store::moka::MokaStore::builder().build());
            let options = axum_idempotent::IdempotentOptions::default()
                .use_idempotency_key_header(Some("idempotency-key"), true)
                .expire_after(RETENTION.as_secs() as i64);
            guarded
                .layer(axum_idempotent::IdempotentLayer::<
                    ruts::store::moka::MokaStore,
                >::new(options))
                .layer(
                    ruts::SessionLayer::new(store)
                        .with_cookie_options(ruts::CookieOptions::build().name("session")),
                )
                .layer(tower_cookies::CookieManagerLayer::new())
        }
        other => return Err(format!("unknown kind {other}").into()),
    };
    let app = app.route("/runs", get(runs));
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?;
    println!("idem-peers {kind} listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// idem's Idempotency-Key guard over `store`, configured as `bench/http.sh`'s: the client
/// from the `x-client` header, records kept [`RETENTION`].
fn idem_router<S: idem_axum::store::Store>(guarded: Router, store: S) -> Router {
    let idem = idem_axum::Idem::builder()
        .with_store(store)
        .with_client_identity(idem_axum::identity::ClientHeader::new(
            axum::http::HeaderName::from_static("x-client"),
        ))
        .build();
    guarded
        .route_layer(idem_axum::IdempotencyLayer::new().with_retention(RETENTION))
        .layer(idem.layer())
}

/// What a holder does between acquire and release. On the hot key it counts the holders
/// and yields once while holding, so that the other tasks try the lock while it is held: an
/// acquisition that finds another holder is an overlap. On distinct keys it does nothing.
#[derive(Default)]
struct Section {
    checked: bool,
    holders: AtomicU64,
    overlaps: AtomicU64,
}

impl Section {
    async fn run(&self) {
        if !self.checked {
            return;
        }
        if self.holders.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::task::yield_now().await;
        self.holders.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One lock implementation: `attempt` takes the lock named `key` once and, if it got it,
/// runs `held`'s section and releases it; answers whether it got it.
enum Locker {
    Bare {
        connection: redis::aio::MultiplexedConnection,
        release: Arc<redis::Script>,
    },
    Idem(idem_core::Lock<idem_redis::RedisStore>),
    Rslock(rslock::LockManager),
}

impl Locker {
    async fn attempt(&mut self, key: &str, token: u64, held: &Section) -> Result<bool, Error> {
        match self {
            Self::Bare {
                connection,
                release,
            } => {
                let token = token.to_string();
                let set: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE.as_millis() as u64)
                    .query_async(connection)
                    .await?;
                if set.is_none() {
                    return Ok(false);
                }
                held.run().await;
                let deleted: i64 = release
                    .key(key)
                    .arg(&token)
                    .invoke_async(connection)
                    .await?;
                if deleted != 1 {
                    return Err("bare: the release found another token".into());
                }
                Ok(true)
            }
            Self::Idem(lock) => match lock.try_acquire().await {
                Ok(guard) => {
                    held.run().await;
                    if guard.release().await? {
                        Ok(true)
                    } else {
                        Err("idem: the release found the lock lost".into())
                    }
                }
                Err(idem_core::lock::LockError::Held { .. }) => Ok(false),
                Err(e) => Err(e.into()),
            },
            Self::Rslock(manager) => match manager.lock(key.as_bytes(), LEASE).await {
                Ok(lock) => {
                    held.run().await;
                    manager.unlock(&lock).await;
                    Ok(true)
                }
                Err(rslock::LockError::Unavailable) => Ok(false),
                Err(e) => Err(e.into()),
            },
        }
    }
}

async fn lock(args: &Args) -> Result<(), Error> {
    let implementation = args.required("impl")?.to_owned();
    let hot = match args.required("keys")? {
        "hot" => true,
        "distinct" => false,
        other => return Err(format!("--keys {other}: distinct or hot").into()),
    };
    let url = args.required("redis")?.to_owned();
    let tasks: usize = args.number("tasks", 50)?;
    let seconds: f64 = args.number("seconds", 5.0)?;
    // Keys of this run only: a run never meets a lease left by an earlier one.
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();

    // One client per implementation, shared by the tasks, as an application would.
    let client = redis::Client::open(url.as_str())?;
    let bare_connection = client.get_multiplexed_async_connection().await?;
    let release = Arc::new(redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
    ));
    let idem_store = idem_redis::RedisStore::builder()
        .connect(idem_redis::RedisServer::url(&url))
        .await?;
    let mut manager = rslock::LockManager::new(vec![url.clone()]);
    manager.set_retry(1, Duration::from_millis(1));

    let key_of = |task: usize| {
        if hot {
            format!("peers-lock-{salt}-hot")
        } else {
            format!("peers-lock-{salt}-{task}")
        }
    };
    let mut lockers = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let key = key_of(task);
        let locker = match implementation.as_str() {
            "bare" => Locker::Bare {
                connection: bare_connection.clone(),
                release: release.clone(),
            },
            "idem" => Locker::Idem(idem_core::Lock::new(
                idem_store.clone(),
                idem_core::Key::hashed([key.as_bytes()]),
                idem_core::lock::Lease::Fixed(LEASE),
            )),
            "rslock" => Locker::Rslock(manager.clone()),
            other => return Err(format!("--impl {other}: bare, idem or rslock").into()),
        };
        lockers.push((key, locker));
    }
    // Warm up every implementation's connections before the clock starts.
    for (key, locker) in &mut lockers {
        locker
            .attempt(&format!("{key}-warm-up"), 0, &Section::default())
            .await?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let section = Arc::new(Section {
        checked: hot,
        ..Section::default()
    });
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for (task, (key, mut locker)) in lockers.into_iter().enumerate() {
        let (stop, section) = (stop.clone(), section.clone());
        handles.push(tokio::spawn(async move {
            let (mut pairs, mut misses) = (0u64, 0u64);
            let mut token = (task as u64) << 40;
            while !stop.load(Ordering::Relaxed) {
                token += 1;
                let got = locker.attempt(&key, token, &section).await?;
                if got {
                    pairs += 1;
                } else {
                    misses += 1;
                    tokio::task::yield_now().await;
                }
            }
            Ok::<_, Error>((pairs, misses))
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut pairs, mut misses) = (0, 0);
    for handle in handles {
        let (p, m) = handle.await??;
        pairs += p;
        misses += m;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "pairs={pairs} misses={misses} overlaps={} seconds={elapsed:.3} pairs_per_second={:.1}",
        section.overlaps.load(Ordering::SeqCst),
        pairs as f64 / elapsed
    );
    Ok(())
}
