//! PostgreSQL and SQLite stores for idem (placeholder docs).

mod backend;
mod builder;
#[cfg(feature = "postgres")]
mod postgres;
mod purge;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

pub use backend::SqlBackend;
pub use builder::SqlStoreBuilder;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use purge::Purged;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use sqlx;
pub use store::SqlStore;
