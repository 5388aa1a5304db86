//! What can go wrong setting up a [`RedisStore`](crate::RedisStore), and the one error of
//! its own an operation reports.

use idem_core::StoreError;
use idem_core::key::KeyError;

#[cfg(doc)]
use crate::EvictionCheck;

/// Why a [`RedisStore`](crate::RedisStore) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisSetupError {
    /// The URL is not a Redis URL.
    #[error("invalid Redis URL")]
    Url(#[source] redis::RedisError),
    /// The namespace holds a character or length [`Key::new`](idem_core::Key::new) refuses.
    #[error("invalid namespace")]
    Namespace(#[source] KeyError),
    /// The server could not be reached, or did not answer the check, within the timeout.
    #[error("could not connect to Redis")]
    Connect(#[source] StoreError),
    /// The server is older than Redis 6.0, the oldest the store runs on.
    #[error("{version} is too old for idem, which needs Redis 6.0 or newer")]
    UnsupportedVersion {
        /// The server's account of its version, such as `Redis 5.0.14`.
        version: String,
    },
    /// The server may evict keys (its `maxmemory-policy` is not `noeviction`) and the
    /// store was set to [`EvictionCheck::Refuse`] such a server.
    #[error(
        "Redis may evict live keys (maxmemory-policy {policy}) and the store refuses such a server: set maxmemory-policy noeviction"
    )]
    EvictionPolicy {
        /// The server's `maxmemory-policy`, such as `allkeys-lru`.
        policy: String,
    },
}

/// A decisive write reached fewer replicas than the store was built to wait for
/// ([`RedisStoreBuilder::with_replica_acks`](crate::RedisStoreBuilder::with_replica_acks)): a failover now could forget it. The
/// source of the [`StoreError::Backend`] the operation returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{acknowledged} of the {wanted} replicas wanted acknowledged the write in time")]
pub struct ReplicasBehind {
    /// The replicas that acknowledged it.
    pub acknowledged: u32,
    /// The replicas the store waits for.
    pub wanted: u32,
}
