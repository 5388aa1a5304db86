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

/// Declares [`ErasedStore`] — [`Store`] with boxed futures, so it can be a trait object —
/// implements it for every [`Store`], and [`Store`] for [`AnyStore`] by forwarding, from
/// one list of the operations: `name(borrowed: &Type, …; owned: Type, …) -> Output;`. The
/// borrowed arguments live as long as the boxed future.
macro_rules! erased_store {
    ($($op:ident($($r:ident: &$rt:ty),*; $($v:ident: $vt:ty),*) -> $out:ty;)*) => {
        trait ErasedStore: Send + Sync + 'static {
            fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
            $(fn $op<'a>(&'a self, $($r: &'a $rt,)* $($v: $vt,)*) -> BoxFuture<'a, $out>;)*
        }

        impl<S: Store> ErasedStore for S {
            fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }

            $(fn $op<'a>(&'a self, $($r: &'a $rt,)* $($v: $vt,)*) -> BoxFuture<'a, $out> {
                Box::pin(Store::$op(self, $($r,)* $($v,)*))
            })*
        }

        impl Store for AnyStore {
            $(async fn $op(&self, $($r: &$rt,)* $($v: $vt,)*) -> Result<$out, StoreError> {
                self.0.$op($($r,)* $($v,)*).await
            })*
        }
    };
}

erased_store! {
    acquire(key: &Key, owner: &Owner; ttl: Duration, fencing: Fencing) -> Acquire;
    release(key: &Key, owner: &Owner;) -> bool;
    acquire_or_register_waiter(
        key: &Key, owner: &Owner; ttl: Duration, fencing: Fencing, wait: Duration
    ) -> Acquire;
    release_and_signal(key: &Key, owner: &Owner;) -> bool;
    wait_for_release(key: &Key; within: Duration) -> bool;
    renew(key: &Key, owner: &Owner; ttl: Duration) -> bool;
    remaining(key: &Key;) -> Option<Duration>;
    put_token(scope: &Key, token: &Key; ttl: Duration, keep: usize) -> ();
    consume_token(scope: &Key, token: &Key;) -> bool;
    has_token(scope: &Key, token: &Key;) -> bool;
    begin_record(
        key: &Key, owner: &Owner, fingerprint: &Fingerprint; lease: Duration
    ) -> Begin;
    complete_record(
        key: &Key, owner: &Owner; response: Bytes, retention: Duration
    ) -> bool;
    renew_record(key: &Key, owner: &Owner; lease: Duration) -> bool;
    abandon_record(key: &Key, owner: &Owner;) -> bool;
}
