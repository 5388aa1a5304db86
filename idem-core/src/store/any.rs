//! [`AnyStore`]: any [`Store`] behind one concrete, cloneable type.
//!
//! The [`Store`] trait uses `impl Future` returns, which keeps calls on a known store free
//! of allocation but makes the trait unusable as `dyn Store`. Code that must hold "some
//! store" without a type parameter — the HTTP runtime that extractors find in request
//! extensions — holds an `AnyStore`, which boxes each operation's future (one small
//! allocation per call) and forwards to the store inside.

use super::{LockStore, RecordStore, Store, StoreError, TokenStore};
use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Any [`Store`], erased: `AnyStore::new(MemoryStore::new())`.
///
/// Clones share the store. `AnyStore` implements [`Store`] itself.
///
/// ```
/// use idem_core::{AnyStore, Key, MemoryStore, TokenStore};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_core::StoreError> {
/// let store = AnyStore::new(MemoryStore::new());
/// let (client, token) = (Key::new("client-7").unwrap(), Key::new("t").unwrap());
/// store.put_token(&client, &token, std::time::Duration::from_secs(1), 16).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AnyStore(Arc<dyn ErasedStore>);

impl AnyStore {
    /// Erases `store`'s type. An `AnyStore` given here is kept as it is, not erased twice.
    ///
    /// ```
    /// use idem_core::{AnyStore, MemoryStore};
    /// let store = AnyStore::new(AnyStore::new(MemoryStore::new()));
    /// assert!(store.downcast_ref::<MemoryStore>().is_some());
    /// ```
    pub fn new<S: Store>(store: S) -> Self {
        let mut store = Some(store);
        if let Some(erased) = (&mut store as &mut dyn Any).downcast_mut::<Option<AnyStore>>() {
            return erased.take().expect("taken once");
        }
        Self(Arc::new(store.expect("not taken")))
    }

    /// The store inside, if it is an `S`: how code that calls some stores directly (the
    /// guard runtime of idem-axum calls the built-in stores without boxing) finds them
    /// behind an `AnyStore`.
    ///
    /// ```
    /// use idem_core::{AnyStore, MemoryStore};
    /// let store = AnyStore::new(MemoryStore::new());
    /// assert!(store.downcast_ref::<MemoryStore>().is_some());
    /// ```
    pub fn downcast_ref<S: Store>(&self) -> Option<&S> {
        self.0.as_any().downcast_ref()
    }
}

impl fmt::Debug for AnyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.debug(f)
    }
}

/// Declares [`ErasedStore`] — the store operations with boxed futures, so it can be a
/// trait object — implements it for every [`Store`], and each capability for [`AnyStore`]
/// by forwarding, from [`store_operations!`](crate::store_operations). The borrowed
/// arguments live as long as the boxed future.
macro_rules! erased_store {
    (
        capabilities { $($cap:ident {
            $($op:ident($($r:ident: &$rt:ty),*; $($v:ident: $vt:ty),*) -> $out:ty;)*
        })* }
        fair { $($fair:tt)* }
    ) => {
        trait ErasedStore: Send + Sync + 'static {
            fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
            fn as_any(&self) -> &dyn Any;
            $($(fn $op<'a>(&'a self, $($r: &'a $rt,)* $($v: $vt,)*) -> BoxFuture<'a, $out>;)*)*
        }

        impl<S: Store> ErasedStore for S {
            fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }

            fn as_any(&self) -> &dyn Any {
                self
            }

            $($(fn $op<'a>(&'a self, $($r: &'a $rt,)* $($v: $vt,)*) -> BoxFuture<'a, $out> {
                Box::pin($cap::$op(self, $($r,)* $($v,)*))
            })*)*
        }

        $(impl $cap for AnyStore {
            $(fn $op(
                &self,
                $($r: &$rt,)*
                $($v: $vt,)*
            ) -> impl Future<Output = Result<$out, StoreError>> + Send {
                // An `async` block, whose type may name every lifetime of the arguments;
                // the boxed future's single one is their intersection, which it may not.
                async move { self.0.$op($($r,)* $($v,)*).await }
            })*
        })*
    };
}

crate::store_operations!(erased_store);
