//! The SQLite database: connecting, migrating, and the rows the shop reads.

use std::error::Error;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{SqliteExecutor, SqlitePool};

use crate::{client, records};

/// Connects to the SQLite database at `url` (`sqlite://path/to/shop.db`, created when
/// missing) and brings its schema up to date: the shop's tables, idem's, which hold the
/// idempotency records of API orders and payment callbacks, and the browsers' sessions
/// (`tower_sessions`).
///
/// Write-ahead logging lets readers run beside the writer, and the busy timeout makes a
/// writer wait for another — from this process or another instance on the same file —
/// instead of failing at once.
///
/// # Errors
///
/// The URL is malformed, the file cannot be opened, or a migration fails.
pub async fn connect(url: &str) -> Result<SqlitePool, Box<dyn Error + Send + Sync>> {
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30))
        .foreign_keys(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    sqlx::migrate!("./migrations").run(&pool).await?;
    records::migrate(&pool).await?;
    client::session_store(&pool).migrate().await?;
    Ok(pool)
}

/// Whether `error` is a unique-index violation: the database refusing a second row where
/// the domain allows one.
pub(crate) fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e) if e.is_unique_violation())
}

/// A product on sale.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct Product {
    pub(crate) id: i64,
    pub(crate) name: String,
    /// In cents.
    pub(crate) price: i64,
}

impl Product {
    /// The price as the pages show it.
    pub(crate) fn display_price(&self) -> String {
        format!("{}.{:02}", self.price / 100, self.price % 100)
    }

    /// The product `id`, if there is one.
    pub(crate) async fn find(
        db: impl SqliteExecutor<'_>,
        id: i64,
    ) -> Result<Option<Self>, sqlx::Error> {
        sqlx::query_as("SELECT id, name, price FROM products WHERE id = ?")
            .bind(id)
            .fetch_optional(db)
            .await
    }
}

/// An order, as the API shows it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct Order {
    pub(crate) id: i64,
    pub(crate) product_id: i64,
    pub(crate) quantity: i64,
    pub(crate) client: String,
}

impl Order {
    /// Places an order.
    pub(crate) async fn insert(
        db: impl SqliteExecutor<'_>,
        product_id: i64,
        quantity: i64,
        client: &str,
    ) -> Result<Self, sqlx::Error> {
        sqlx::query_as(
            "INSERT INTO orders (product_id, quantity, client) VALUES (?, ?, ?) \
             RETURNING id, product_id, quantity, client",
        )
        .bind(product_id)
        .bind(quantity)
        .bind(client)
        .fetch_one(db)
        .await
    }

    /// The order `id`, if there is one.
    pub(crate) async fn find(db: &SqlitePool, id: i64) -> Result<Option<Self>, sqlx::Error> {
        sqlx::query_as("SELECT id, product_id, quantity, client FROM orders WHERE id = ?")
            .bind(id)
            .fetch_optional(db)
            .await
    }
}
