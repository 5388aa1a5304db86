//! The bare redis-rs baselines of the Redis cases of `bench/http.sh`: unguarded routes that
//! send, with plain redis-rs, the same Redis commands per request as idem's guard on
//! `RedisStore` sends for that case, and answer what the guarded route answers.
//!
//! They measure the target "on Redis, a guard adds at most the CPU that bare redis-rs
//! spends sending the same commands, plus 1 µs": the server's CPU per request of a guarded
//! case minus that of its baseline is what the guard adds beyond the Redis traffic itself.
//!
//! What makes the commands the same:
//!
//! - **The same kind of connection**: one [`MultiplexedConnection`] shared by every
//!   request, opened with the settings `RedisStore` opens its own with (a deadpool
//!   manager's `create`, which is [`redis::Client::get_multiplexed_async_connection_with_config`],
//!   with no response or connection timeout). The store does not check connections out
//!   of a pool per operation either.
//! - **The same scripts, loaded the same way**: idem-redis's own `.lua` files, included
//!   from its source tree, each a [`redis::Script`] invoked with `invoke_async` (`EVALSHA`,
//!   `SCRIPT LOAD` and `EVALSHA` again after `NOSCRIPT`). The lock's release script is
//!   the fair queue's prelude followed by its body, as idem-redis builds it, so its SHA1
//!   is the one the store sends.
//! - **The same arguments, of about the same sizes**: owners are 32 hex digits (a version
//!   4 UUID, as `Owner::random`), TTLs are the guarded routes' (2 s windows and leases,
//!   10 s idempotency leases, 5 s retention, 30 min tokens, 64 tokens a client, the
//!   default token budget's share of a bucket). Keys follow the store's layout
//!   (`idem:{…}:lock`, `…:record`, `…:all`, `…:scope:…`) but name the request's own
//!   header values rather than a SHA-256 of them: hashing names is the guard's work, not
//!   Redis traffic. They are fresh per request exactly where the guard's are, since the
//!   same `wrk` script mode drives both.
//!
//! What a route does beyond the commands is the least that sending them needs: read the
//! `x-client` header (and the `Idempotency-Key`, the form's token), draw an owner or a
//! token, format the key names, and look at the answer.
//!
//! | route | guarded case (`/redis/…`) | commands per request (top-level; inside the script) |
//! |---|---|---|
//! | `POST /bare-redis/avoid_repeat` | `avoid_repeat expire` | `SET key owner NX PX 2000 GET` |
//! | `POST /bare-redis/avoid_repeat_finish` | `avoid_repeat finish` | `SET … NX PX 2000 GET`, `EVALSHA release.lua` (`GET`, `DEL`) |
//! | `GET /bare-redis/form` | `form token issue+verify`, the page | `EVALSHA put_token.lua` (`TIME`, `ZRANGEBYSCORE`, 2 × `ZADD`, 2 × `ZCARD`, 2 × `PTTL`, `PEXPIRE` when a set's TTL is shorter) |
//! | `POST /bare-redis/order` | `form token issue+verify`, the post | `EVALSHA consume_token.lua` (`TIME`, `ZSCORE`, 2 × `ZREM`) |
//! | `POST /bare-redis/idempotency` | `idempotency first request` | `SET record <in progress> NX PX 10000 GET`, `EVALSHA complete_record.lua` (`GET`, `SET`) |
//! | `POST /bare-redis/lock` | `lock acquire+release` | `SET … NX PX 2000 GET`, `EVALSHA` fair prelude + `release_and_signal.lua` (`GET`, `DEL`, `EXISTS`) |
//!
//! `idempotency replay` has no route here: a replay is answered from the store's copy in
//! the process and sends Redis nothing, so its bare redis-rs baseline is the bare handler
//! (`POST /bare`) itself.

use std::sync::LazyLock;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Form, Router};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Script};
use sha2::{Digest, Sha256};

use crate::CLIENT;

/// The directory of idem-redis's scripts, from this file.
macro_rules! idem_redis_script {
    ($name:literal) => {
        include_str!(concat!("../../idem-redis/src/scripts/", $name))
    };
}

static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(idem_redis_script!("release.lua")));
static RELEASE_AND_SIGNAL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        &[
            idem_redis_script!("fair_prelude.lua"),
            idem_redis_script!("release_and_signal.lua"),
        ]
        .concat(),
    )
});
static PUT_TOKEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(idem_redis_script!("put_token.lua")));
static CONSUME_TOKEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(idem_redis_script!("consume_token.lua")));
static COMPLETE_RECORD: LazyLock<Script> =
    LazyLock::new(|| Script::new(idem_redis_script!("complete_record.lua")));

/// The guarded routes' avoid-repeat window and lock lease, in milliseconds.
const WINDOW_MS: u64 = 2000;
/// How long an idempotency record is leased while its request runs: the layer's default.
const RECORD_LEASE_MS: u64 = 10_000;
/// How long a completed record is kept: the guarded route's retention (as the store
/// spells it, a string).
const RECORD_RETENTION_MS: &str = "5000";
/// How long a lock's untaken wake-up is kept: what the store passes its release script.
const SIGNAL_KEPT_MS: &str = "5000";
/// A form token's TTL, the tokens a client keeps and a bucket's budget: what the guarded
/// form route passes (`FormTokenConfig` defaults, 64 tokens a client, the store's default
/// capacity over its 64 buckets).
const TOKEN_TTL_MS: u64 = 30 * 60 * 1000;
const TOKENS_PER_CLIENT: u64 = 64;
const TOKEN_BUCKET_BUDGET: u64 = 3907;

/// The response the idempotency route stores for replays: the bare handler's status,
/// content type and body, about as many bytes as idem's encoding of them.
const STORED_RESPONSE: &[u8] = b"200\ncontent-type: text/plain; charset=utf-8\n\nok";

/// Opens the shared connection the baselines send everything over, as `RedisStore` opens
/// its own.
///
/// # Errors
///
/// The URL's or the connection's error.
pub async fn bare_redis_connection(url: &str) -> RedisResult<MultiplexedConnection> {
    let unbounded = redis::AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(None);
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&unbounded)
        .await
}

/// The baselines over `conn`, under `/bare-redis` (the table in the module's docs).
pub fn bare_redis_routes(conn: MultiplexedConnection) -> Router {
    Router::new()
        .route("/bare-redis/avoid_repeat", post(avoid_repeat_expire))
        .route("/bare-redis/avoid_repeat_finish", post(avoid_repeat_finish))
        .route("/bare-redis/form", get(issue_token))
        .route("/bare-redis/order", post(spend_token))
        .route("/bare-redis/idempotency", post(idempotency_first_request))
        .route("/bare-redis/lock", post(lock))
        .with_state(conn)
}

type Answer<T> = Result<T, StatusCode>;

/// The request's client: the `x-client` header, which `wrk` makes fresh per request where
/// the guarded case's keys are fresh.
fn client(headers: &HeaderMap) -> Answer<&str> {
    headers
        .get(&CLIENT)
        .and_then(|value| value.to_str().ok())
        .ok_or(StatusCode::BAD_REQUEST)
}

/// A fresh owner: 32 hex digits of a version 4 UUID.
fn owner() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn unavailable(_: redis::RedisError) -> StatusCode {
    StatusCode::SERVICE_UNAVAILABLE
}

/// `SET lock owner NX PX 2000 GET`, as the store's `acquire` on Redis 7: whether the lock
/// was free (and is now `owner`'s).
async fn take(conn: &mut MultiplexedConnection, lock: &str, owner: &str) -> Answer<bool> {
    let holder: Option<Vec<u8>> = redis::cmd("SET")
        .arg(lock)
        .arg(owner)
        .arg("NX")
        .arg("PX")
        .arg(WINDOW_MS)
        .arg("GET")
        .query_async(conn)
        .await
        .map_err(unavailable)?;
    Ok(holder.is_none())
}

/// Runs a script whose answer is 0 or 1.
async fn flag(
    conn: &mut MultiplexedConnection,
    script: &Script,
    keys: &[&str],
    args: &[&[u8]],
) -> Answer<bool> {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(*key);
    }
    for arg in args {
        invocation.arg(*arg);
    }
    let answer: i64 = invocation.invoke_async(conn).await.map_err(unavailable)?;
    Ok(answer == 1)
}

/// Takes the client's avoid-repeat window for a fresh owner: the window's key and owner.
async fn take_window(
    conn: &mut MultiplexedConnection,
    headers: &HeaderMap,
) -> Answer<(String, String)> {
    let lock = format!("idem:{{avoid_repeat/{}}}:lock", client(headers)?);
    let owner = owner();
    if !take(conn, &lock, &owner).await? {
        return Err(StatusCode::CONFLICT);
    }
    Ok((lock, owner))
}

/// `avoid_repeat expire`: takes the client's window, which then expires by itself.
async fn avoid_repeat_expire(
    State(mut conn): State<MultiplexedConnection>,
    headers: HeaderMap,
) -> Answer<&'static str> {
    take_window(&mut conn, &headers).await?;
    Ok("ok")
}

/// `avoid_repeat finish`: takes the client's window, answers, and gives it back.
async fn avoid_repeat_finish(
    State(mut conn): State<MultiplexedConnection>,
    headers: HeaderMap,
) -> Answer<&'static str> {
    let (lock, owner) = take_window(&mut conn, &headers).await?;
    flag(&mut conn, &RELEASE, &[&lock], &[owner.as_bytes()]).await?;
    Ok("ok")
}

/// `lock acquire+release`: takes the lock the client names and releases it, waking
/// whoever waits (nobody here), as `Lock::try_acquire` and the guard's `release` do.
async fn lock(State(mut conn): State<MultiplexedConnection>, headers: HeaderMap) -> StatusCode {
    let Ok(client) = client(&headers) else {
        return StatusCode::BAD_REQUEST;
    };
    let prefix = format!("idem:{{lock/{client}}}:");
    let lock = format!("{prefix}lock");
    let owner = owner();
    match take(&mut conn, &lock, &owner).await {
        Ok(true) => {}
        Ok(false) => return StatusCode::CONFLICT,
        Err(status) => return status,
    }
    let args = [
        owner.as_bytes(),
        SIGNAL_KEPT_MS.as_bytes(),
        prefix.as_bytes(),
    ];
    match flag(&mut conn, &RELEASE_AND_SIGNAL, &[&lock], &args).await {
        Ok(true) => StatusCode::OK,
        Ok(false) => StatusCode::CONFLICT,
        Err(status) => status,
    }
}

/// The keys of `client`'s tokens: its bucket's set and its own, under one hash tag.
fn token_keys(client: &str) -> (String, String) {
    let bucket = format!("idem:{{tokens/{client}}}");
    (format!("{bucket}:all"), format!("{bucket}:scope"))
}

/// The form's page: draws a token (128 bits, 22 characters of base64url) and stores it in
/// the client's set; answers the token, as the guarded page does.
async fn issue_token(
    State(mut conn): State<MultiplexedConnection>,
    headers: HeaderMap,
) -> Answer<String> {
    let (bucket, scope) = token_keys(client(&headers)?);
    let token = URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes());
    PUT_TOKEN
        .key(&bucket)
        .key(&scope)
        .arg(&token)
        .arg(TOKEN_TTL_MS)
        .arg(TOKENS_PER_CLIENT)
        .arg(TOKEN_BUCKET_BUDGET)
        .invoke_async::<()>(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(token)
}

/// The form's post: the guarded route's `Order` with the token beside it.
#[derive(serde::Deserialize)]
struct OrderWithToken {
    item: String,
    form_token: String,
}

/// The form's post: spends its token, then answers the item, as the guarded handler does.
async fn spend_token(
    State(mut conn): State<MultiplexedConnection>,
    headers: HeaderMap,
    Form(order): Form<OrderWithToken>,
) -> Answer<String> {
    let (bucket, scope) = token_keys(client(&headers)?);
    let args = [order.form_token.as_bytes()];
    if !flag(&mut conn, &CONSUME_TOKEN, &[&bucket, &scope], &args).await? {
        return Err(StatusCode::FORBIDDEN);
    }
    Ok(order.item)
}

/// `idempotency first request`: begins the record of the client's key, runs the handler
/// (which answers "ok") and stores its response. The fingerprint is the SHA-256 of the
/// body, the least that tells a replay from a reuse of the key for another payload; only
/// the first-request path is measured, so anything but "started" is answered 409.
async fn idempotency_first_request(
    State(mut conn): State<MultiplexedConnection>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer<&'static str> {
    let key = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .ok_or(StatusCode::BAD_REQUEST)?;
    let record = format!("idem:{{{}/{key}}}:record", client(&headers)?);
    let owner = owner();
    let fingerprint: [u8; 32] = Sha256::digest(&body).into();
    // The record in progress as the store lays it out: its state, the fingerprint, the owner.
    let running = [b"r", &fingerprint[..], owner.as_bytes()].concat();
    let found: Option<Vec<u8>> = redis::cmd("SET")
        .arg(&record)
        .arg(running)
        .arg("NX")
        .arg("PX")
        .arg(RECORD_LEASE_MS)
        .arg("GET")
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    if found.is_some() {
        return Err(StatusCode::CONFLICT);
    }
    let args = [
        owner.as_bytes(),
        STORED_RESPONSE,
        RECORD_RETENTION_MS.as_bytes(),
    ];
    flag(&mut conn, &COMPLETE_RECORD, &[&record], &args).await?;
    Ok("ok")
}
