//! [`AnyStore`]: any [`Store`] behind one concrete, cloneable type.
//!
//! The [`Store`] trait uses `impl Future` returns, which keeps calls on a known store free
//! of allocation but makes the trait unusable as `dyn Store`. Code that must hold "some
//! store" without a type parameter — the HTTP runtime that extractors find in request
//! extensions — holds an `AnyStore`, which boxes each operation's future (one small
//! allocation per call) and forwards to the store inside.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Acquire, Begin, Fencing, Store, StoreError};
use crate::key::{Fingerprint, Key, Owner};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Any [`Store`], erased: `AnyStore::new(MemoryStore::new())`.
///
/// Clones share the store. `AnyStore` implements [`Store`] itself.
///
/// ```
/// use idem_core::{AnyStore, Key, MemoryStore, Store};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_core::StoreError> {
/// let store = AnyStore::new(MemoryStore::new());
/// let (client, token) = (Key::new("client-7").unwrap(), Key::new("t").unwrap());
/// store.put_token(&client, &token, std::time::Duration::from_secs(1), 16).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AnyStore(Arc<dyn ErasedStore>);

impl AnyStore {
    /// Erases `store`'s type.
    pub fn new<S: Store>(store: S) -> Self {
        Self(Arc::new(store))
    }
}

impl fmt::Debug for AnyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.debug(f)
    }
}

/// [`Store`] with boxed futures, so it can be a trait object.
trait ErasedStore: Send + Sync + 'static {
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> BoxFuture<'a, Acquire>;
    fn release<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> BoxFuture<'a, bool>;
    fn acquire_or_register_waiter<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        ttl: Duration,
        fencing: Fencing,
        wait: Duration,
    ) -> BoxFuture<'a, Acquire>;
    fn release_and_signal<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> BoxFuture<'a, bool>;
    fn wait_for_release<'a>(&'a self, key: &'a Key, within: Duration) -> BoxFuture<'a, bool>;
    fn renew<'a>(&'a self, key: &'a Key, owner: &'a Owner, ttl: Duration) -> BoxFuture<'a, bool>;
    fn remaining<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Option<Duration>>;
    fn put_token<'a>(
        &'a self,
        scope: &'a Key,
        token: &'a Key,
        ttl: Duration,
        keep: usize,
    ) -> BoxFuture<'a, ()>;
    fn consume_token<'a>(&'a self, scope: &'a Key, token: &'a Key) -> BoxFuture<'a, bool>;
    fn begin_record<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        fingerprint: &'a Fingerprint,
        lease: Duration,
    ) -> BoxFuture<'a, Begin>;
    fn complete_record<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        response: Bytes,
        retention: Duration,
    ) -> BoxFuture<'a, bool>;
    fn renew_record<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        lease: Duration,
    ) -> BoxFuture<'a, bool>;
    fn abandon_record<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> BoxFuture<'a, bool>;
}

impl<S: Store> ErasedStore for S {
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> BoxFuture<'a, Acquire> {
        Box::pin(Store::acquire(self, key, owner, ttl, fencing))
    }

    fn release<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> BoxFuture<'a, bool> {
        Box::pin(Store::release(self, key, owner))
    }

    fn acquire_or_register_waiter<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        ttl: Duration,
        fencing: Fencing,
        wait: Duration,
    ) -> BoxFuture<'a, Acquire> {
        Box::pin(Store::acquire_or_register_waiter(
            self, key, owner, ttl, fencing, wait,
        ))
    }

    fn release_and_signal<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> BoxFuture<'a, bool> {
        Box::pin(Store::release_and_signal(self, key, owner))
    }

    fn wait_for_release<'a>(&'a self, key: &'a Key, within: Duration) -> BoxFuture<'a, bool> {
        Box::pin(Store::wait_for_release(self, key, within))
    }

    fn renew<'a>(&'a self, key: &'a Key, owner: &'a Owner, ttl: Duration) -> BoxFuture<'a, bool> {
        Box::pin(Store::renew(self, key, owner, ttl))
    }

    fn remaining<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Option<Duration>> {
        Box::pin(Store::remaining(self, key))
    }

    fn put_token<'a>(
        &'a self,
        scope: &'a Key,
        token: &'a Key,
        ttl: Duration,
        keep: usize,
    ) -> BoxFuture<'a, ()> {
        Box::pin(Store::put_token(self, scope, token, ttl, keep))
    }

    fn consume_token<'a>(&'a self, scope: &'a Key, token: &'a Key) -> BoxFuture<'a, bool> {
        Box::pin(Store::consume_token(self, scope, token))
    }

    fn begin_record<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        fingerprint: &'a Fingerprint,
        lease: Duration,
    ) -> BoxFuture<'a, Begin> {
        Box::pin(Store::begin_record(self, key, owner, fingerprint, lease))
    }

    fn complete_record<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        response: Bytes,
        retention: Duration,
    ) -> BoxFuture<'a, bool> {
        Box::pin(Store::complete_record(
            self, key, owner, response, retention,
        ))
    }

    fn renew_record<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        lease: Duration,
    ) -> BoxFuture<'a, bool> {
        Box::pin(Store::renew_record(self, key, owner, lease))
    }

    fn abandon_record<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> BoxFuture<'a, bool> {
        Box::pin(Store::abandon_record(self, key, owner))
    }
}

impl Store for AnyStore {
    async fn acquire(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Acquire, StoreError> {
        self.0.acquire(key, owner, ttl, fencing).await
    }

    async fn release(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        self.0.release(key, owner).await
    }

    async fn acquire_or_register_waiter(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        wait: Duration,
    ) -> Result<Acquire, StoreError> {
        self.0
            .acquire_or_register_waiter(key, owner, ttl, fencing, wait)
            .await
    }

    async fn release_and_signal(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        self.0.release_and_signal(key, owner).await
    }

    async fn wait_for_release(&self, key: &Key, within: Duration) -> Result<bool, StoreError> {
        self.0.wait_for_release(key, within).await
    }

    async fn renew(&self, key: &Key, owner: &Owner, ttl: Duration) -> Result<bool, StoreError> {
        self.0.renew(key, owner, ttl).await
    }

    async fn remaining(&self, key: &Key) -> Result<Option<Duration>, StoreError> {
        self.0.remaining(key).await
    }

    async fn put_token(
        &self,
        scope: &Key,
        token: &Key,
        ttl: Duration,
        keep: usize,
    ) -> Result<(), StoreError> {
        self.0.put_token(scope, token, ttl, keep).await
    }

    async fn consume_token(&self, scope: &Key, token: &Key) -> Result<bool, StoreError> {
        self.0.consume_token(scope, token).await
    }

    async fn begin_record(
        &self,
        key: &Key,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, StoreError> {
        self.0.begin_record(key, owner, fingerprint, lease).await
    }

    async fn complete_record(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        self.0
            .complete_record(key, owner, response, retention)
            .await
    }

    async fn renew_record(
        &self,
        key: &Key,
        owner: &Owner,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        self.0.renew_record(key, owner, lease).await
    }

    async fn abandon_record(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        self.0.abandon_record(key, owner).await
    }
}
