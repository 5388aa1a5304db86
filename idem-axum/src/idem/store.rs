//! [`IdemStore`]: the store of an [`Idem`](crate::Idem) runtime, with the built-in stores
//! called directly.

use std::any::Any;

use idem_core::{AnyStore, LockStore, MemoryStore, RecordStore, Store, StoreError, TokenStore};
#[cfg(feature = "redis")]
use idem_redis::RedisStore;

/// The store an [`Idem`](crate::Idem) runtime runs on, as
/// [`IdemBuilder::with_store`](crate::IdemBuilder::with_store) was given it.
///
/// Its guards call a [`MemoryStore`] and (feature `redis`) a `RedisStore` directly, with
/// no allocation per call; any other store — the SQL stores of `idem-sqlx`, a store of
/// your own — through an [`AnyStore`], which boxes each call's future (one small
/// allocation, next to a SQL statement's round trip). A built-in store given inside an
/// `AnyStore` is found and called directly too
/// (`tests::built_in_stores_are_called_directly_and_others_through_any_store`).
///
/// Its public shape is the same with and without the feature `redis`: an opaque type,
/// no public fields or variants, the same trait implementations. The feature adds only
/// the direct path to a `RedisStore`; without it, every store but a `MemoryStore` — a
/// store of your own, a SQL store — is called through an `AnyStore`, as above.
///
/// It is a [`Store`] itself, so what takes a store (a [`Lock`](crate::lock::Lock), a
/// guard of your own) takes it; clones share the store.
///
/// ```
/// use std::time::Duration;
/// use idem_axum::{Idem, MemoryStore};
/// use idem_axum::lock::{Lease, Lock};
/// use idem_axum::store::Key;
///
/// let idem = Idem::new(MemoryStore::new());
/// let lock = Lock::new(idem.store().clone(), Key::new("nightly-run").unwrap(), Lease::Watchdog(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone)]
pub struct IdemStore(Repr);

#[derive(Debug, Clone)]
enum Repr {
    Memory(MemoryStore),
    #[cfg(feature = "redis")]
    Redis(RedisStore),
    Any(AnyStore),
}

impl IdemStore {
    /// `store`, called directly if it is a built-in store, else through an [`AnyStore`].
    pub(crate) fn new<S: Store>(store: S) -> Self {
        let mut store = Some(store);
        let given = &mut store as &mut dyn Any;
        if let Some(idem) = given.downcast_mut::<Option<IdemStore>>() {
            return idem.take().expect("taken once");
        }
        if let Some(memory) = given.downcast_mut::<Option<MemoryStore>>() {
            return Self(Repr::Memory(memory.take().expect("taken once")));
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = given.downcast_mut::<Option<RedisStore>>() {
            return Self(Repr::Redis(redis.take().expect("taken once")));
        }
        let erased = AnyStore::new(store.take().expect("taken once"));
        if let Some(idem) = erased.downcast_ref::<IdemStore>() {
            return idem.clone();
        }
        if let Some(memory) = erased.downcast_ref::<MemoryStore>() {
            return Self(Repr::Memory(memory.clone()));
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = erased.downcast_ref::<RedisStore>() {
            return Self(Repr::Redis(redis.clone()));
        }
        Self(Repr::Any(erased))
    }
}

/// What a guard does on the runtime's store, given it typed by [`IdemStore::typed`].
pub(crate) trait OnStore {
    /// What it comes to.
    type Output;

    /// Does it on `store`; `waits` says whether its calls may wait (all but a
    /// `MemoryStore`'s), and so need a timer ([`sharing_one_timer`](idem_core::store::sharing_one_timer)).
    fn on<St: Store + Clone>(self, store: St, waits: bool) -> Self::Output;
}

impl IdemStore {
    /// `work` on the store inside, typed: each built-in store's calls then have futures of
    /// their own size, not the largest store's (a `RedisStore` call's future would size
    /// every `MemoryStore` request's), and none is boxed.
    pub(crate) fn typed<W: OnStore>(&self, work: W) -> W::Output {
        match &self.0 {
            Repr::Memory(store) => work.on(store.clone(), false),
            #[cfg(feature = "redis")]
            Repr::Redis(store) => work.on(store.clone(), true),
            Repr::Any(store) => work.on(store.clone(), true),
        }
    }
}

/// Implements each capability for [`IdemStore`] by forwarding to the store inside, from
/// [`store_operations!`](idem_core::store_operations).
macro_rules! dispatch {
    (
        capabilities { $($cap:ident {
            $($op:ident($($r:ident: &$rt:ty),*; $($v:ident: $vt:ty),*) -> $out:ty;)*
        })* }
        fair { $($fair:tt)* }
    ) => {
        $(impl $cap for IdemStore {
            $(async fn $op(
                &self,
                $($r: &$rt,)*
                $($v: $vt,)*
            ) -> Result<$out, StoreError> {
                match &self.0 {
                    Repr::Memory(store) => store.$op($($r,)* $($v,)*).await,
                    #[cfg(feature = "redis")]
                    Repr::Redis(store) => store.$op($($r,)* $($v,)*).await,
                    Repr::Any(store) => store.$op($($r,)* $($v,)*).await,
                }
            })*
        })*
    };
}

idem_core::store_operations!(dispatch);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_stores_are_called_directly_and_others_through_any_store() {
        let memory = IdemStore::new(MemoryStore::new());
        assert!(matches!(memory.0, Repr::Memory(_)));
        let wrapped = IdemStore::new(AnyStore::new(MemoryStore::new()));
        assert!(
            matches!(wrapped.0, Repr::Memory(_)),
            "found inside an AnyStore"
        );
        let again = IdemStore::new(memory.clone());
        assert!(matches!(again.0, Repr::Memory(_)), "not wrapped twice");
        let custom = IdemStore::new(AnyStore::new(again));
        assert!(
            matches!(custom.0, Repr::Memory(_)),
            "not even inside an AnyStore"
        );
    }

    #[tokio::test]
    async fn a_store_of_another_kind_is_called_through_any_store_with_or_without_redis() {
        let pool = idem_sqlx::sqlx::SqlitePool::connect_lazy("sqlite::memory:")
            .expect("an in-memory SQLite URL");
        let sql = IdemStore::new(idem_sqlx::SqliteStore::new(pool));
        assert!(matches!(sql.0, Repr::Any(_)));
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_redis_store_is_called_directly() {
        use idem_redis::RedisServer;
        // Lazily connected: nothing listens there, and nothing is asked of it.
        let redis = RedisStore::builder()
            .with_lazy_connect(true)
            .connect(RedisServer::url("redis://127.0.0.1:1"))
            .await
            .expect("a lazy store connects on its first operation");
        assert!(matches!(IdemStore::new(redis.clone()).0, Repr::Redis(_)));
        assert!(
            matches!(IdemStore::new(AnyStore::new(redis)).0, Repr::Redis(_)),
            "found inside an AnyStore"
        );
    }
}
