//! Duplicate-submission protection and idempotency for [axum](https://docs.rs/axum)
//! services, on one instance or many.
//!
//! This is the crate an application imports. It re-exports the stores of
//! [`idem_core`] — [`MemoryStore`], the embedded default, and `RedisStore` (feature
//! `redis`, on by default) for applications that run as several instances — and will
//! carry the HTTP side: the `Idem` runtime and its layer, `#[avoid_repeat]`,
//! `AvoidRepeatLayer`, one-time form tokens and `IdempotencyLayer`.

pub use idem_core::{
    Acquire, Begin, Fencing, FencingToken, Fingerprint, Key, KeyError, MemoryStore,
    MemoryStoreBuilder, Owner, Store, StoreError,
};
#[cfg(feature = "redis")]
pub use idem_core::{RedisSetupError, RedisStore, RedisStoreBuilder};
