//! [`Store`]: the sum of the capabilities, what a guard runtime runs on.

#[cfg(doc)]
use crate::MemoryStore;
use crate::store::{LockStore, RecordStore, TokenStore};

/// A shared store of short-lived keys with atomic operations: every capability the guards
/// are made of, [`LockStore`] (windows and locks), [`TokenStore`] (one-time form tokens)
/// and [`RecordStore`] (idempotency records).
///
/// A store implements the three capability traits, and is a `Store` by that alone: there
/// is nothing more to implement. Code that needs one capability asks for that one (a
/// [`Lock`](crate::Lock) takes any [`LockStore`]); a guard runtime, which serves every
/// guard, takes a `Store`.
///
/// Implemented by [`MemoryStore`] (one process), and outside this crate by `RedisStore`
/// (crate `idem-redis`: many processes) and the SQL stores (crate `idem-sqlx`). Every
/// implementation passes the same conformance suite (feature `conformance`). Clones of a
/// store share its data.
pub trait Store: LockStore + TokenStore + RecordStore {}

impl<S: LockStore + TokenStore + RecordStore> Store for S {}
