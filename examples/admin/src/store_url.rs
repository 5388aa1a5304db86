//! The store a URL names, opened as the application opens it.

use idem_axum::store::{AnyStore, StoreError};
use idem_axum::{RedisServer, RedisStore};
use idem_sqlx::sqlx::{PgPool, SqlitePool};
use idem_sqlx::{PostgresStore, SqliteStore};

/// Opens the store at `url`; a `RedisStore` in `redis_namespace` (its default unless
/// given).
///
/// # Errors
///
/// A URL of no known kind, or a store that cannot be reached, as a message.
pub(crate) async fn open(url: &str, redis_namespace: Option<&str>) -> Result<AnyStore, String> {
    let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
    match scheme {
        "redis" | "rediss" | "redis+unix" | "redis+cluster" | "redis+sentinel" => {
            let mut builder = RedisStore::builder();
            if let Some(namespace) = redis_namespace {
                builder = builder.with_namespace(namespace);
            }
            let store = builder.connect(redis_server(url)?).await;
            Ok(AnyStore::new(
                store.map_err(|error| format!("{url}: {error}"))?,
            ))
        }
        "postgres" | "postgresql" => {
            let pool = PgPool::connect(url)
                .await
                .map_err(|error| format!("{url}: {error}"))?;
            Ok(AnyStore::new(PostgresStore::new(pool)))
        }
        "sqlite" => {
            let pool = SqlitePool::connect(url)
                .await
                .map_err(|error| format!("{url}: {error}"))?;
            Ok(AnyStore::new(SqliteStore::new(pool)))
        }
        _ => Err(format!(
            "{url:?} is not a store URL (redis://, postgres://, sqlite://)"
        )),
    }
}

/// The Redis deployment `url` names: a server, a cluster
/// (`redis+cluster://a:7000,b:7001`) or a master behind sentinels
/// (`redis+sentinel://a:26379,b:26380/mymaster`).
fn redis_server(url: &str) -> Result<RedisServer, String> {
    if let Some(nodes) = url.strip_prefix("redis+cluster://") {
        let urls: Vec<String> = nodes
            .split(',')
            .map(|node| format!("redis://{node}"))
            .collect();
        let pool = deadpool_redis::cluster::Config::from_urls(urls)
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .map_err(|error| format!("{url}: {error}"))?;
        return Ok(RedisServer::cluster(pool));
    }
    if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        let (sentinels, master) = rest
            .split_once('/')
            .ok_or_else(|| format!("{url}: name the master after the sentinels: /MASTER"))?;
        let sentinels = sentinels.split(',').map(|node| format!("redis://{node}"));
        return Ok(RedisServer::sentinel(sentinels, master));
    }
    Ok(RedisServer::url(url))
}

/// What a store error says, with its source.
pub(crate) fn describe(error: &StoreError) -> String {
    match std::error::Error::source(error) {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}
