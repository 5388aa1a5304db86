//! The conformance suite every [`Store`] passes (feature `conformance`).
//!
//! A store is only as good as its atomic steps: one winner among a thousand concurrent
//! acquires, a token spent once, a record completed only by its owner, fencing tokens that
//! keep growing. These cases check exactly that, with real concurrency and real expiry,
//! and they are the same for every store in this repository — the memory store, Redis
//! standalone and Cluster — so a store written outside it can prove the same things with
//! one line.
//!
//! Describe how to start your store with a [`Backend`], then generate a `#[tokio::test]`
//! per case with [`store_conformance!`](crate::store_conformance):
//!
//! ```
//! use idem_core::MemoryStore;
//! use idem_core::conformance::Backend;
//!
//! /// In a real crate: a client to a server, or a pool on a fresh database.
//! struct MyBackend(MemoryStore);
//!
//! impl Backend for MyBackend {
//!     type Store = MemoryStore;
//!
//!     async fn start() -> Self {
//!         Self(MemoryStore::new())
//!     }
//!
//!     fn store(&self) -> MemoryStore {
//!         self.0.clone()
//!     }
//! }
//!
//! idem_core::store_conformance!(MyBackend);
//! # fn main() {}
//! ```
//!
//! The generated tests run on Tokio's multi-threaded runtime, so the crate that invokes
//! the macro needs `tokio` with the `macros` and `rt-multi-thread` features among its
//! dev-dependencies. Each case starts a backend of its own: [`Backend::start`] should give
//! an empty store (a fresh server, database or namespace), or at least one where the
//! cases' keys are unused.
//!
//! The cases are in [`cases`], [`operator`] (an operator's look at a record and its
//! removal) and [`waits`] (waiting for a record to end), each also callable by itself, and the helpers they use,
//! [`all_at_once`] and [`eventually`], are exported for a store's own tests. A store that
//! also implements [`FairStore`](crate::FairStore) runs the cases in [`fair`] with
//! [`fair_store_conformance!`](crate::fair_store_conformance), in the same way.

pub mod cases;
pub mod fair;
pub mod operator;
pub mod waits;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use crate::Store;

/// A store under test and whatever keeps it alive (a server process, a temporary
/// directory), dropped when the case ends.
pub trait Backend: Sized + Send + Sync + 'static {
    /// The store.
    type Store: Store + Clone;

    /// Starts the backend: a store on which no case has run yet.
    fn start() -> impl Future<Output = Self> + Send;

    /// A handle on the store; clones share its data.
    fn store(&self) -> Self::Store;

    /// A store on the same data as another instance of the application would have it:
    /// for a networked store, one with connections of its own. By default
    /// [`store`](Backend::store) (two routers in one process, as with a memory store).
    fn store_of_another_instance(&self) -> Self::Store {
        self.store()
    }
}

/// Declares the cases of a suite — each a doc comment and `pub async fn name() { … }`,
/// made generic as `($generics)` says — and the hidden exported macro `$list!`, which
/// hands their names to a callback: [`store_conformance!`](crate::store_conformance) makes
/// a test of each name it gets from there, so a case written in the suite cannot be left
/// out of it. `$d` is a `$`, for the macro it declares.
macro_rules! suite {
    ($d:tt $list:ident, $generics:tt; $($(#[$attr:meta])* pub async fn $name:ident() $body:block)*) => {
        $($crate::conformance::suite!(@case $generics $(#[$attr])* $name $body);)*

        /// Calls `callback!(args… case, case, …)` with every case of the suite.
        #[doc(hidden)]
        #[macro_export]
        macro_rules! $list {
            ($d callback:path, $d($d args:tt)*) => {
                $d callback!($d($d args)* $($name),*);
            };
        }
    };
    (@case ($($generic:tt)*) $(#[$attr:meta])* $name:ident $body:block) => {
        $(#[$attr])*
        pub async fn $name<$($generic)*>() $body
    };
}
pub(crate) use suite;

/// Generates a `#[tokio::test]` for each case of the conformance suite, run on the
/// [`Backend`](crate::conformance::Backend) given, in the module where it is invoked.
///
/// `store_conformance!(MyBackend)` generates every case, those of
/// [`cases`](crate::conformance::cases), [`operator`](crate::conformance::operator) and
/// [`waits`](crate::conformance::waits);
/// `store_conformance!(MyBackend: case, case, …)` only the cases of
/// [`cases`](crate::conformance::cases) named. Invoke it once per module: the tests are
/// named after the cases.
///
/// See the [module docs](crate::conformance) for an example.
#[macro_export]
macro_rules! store_conformance {
    ($backend:ty) => {
        $crate::__store_conformance_cases!($crate::store_conformance, $backend:);
        $crate::__operator_conformance_cases!($crate::store_conformance, @tests operator, $backend:);
        $crate::__wait_conformance_cases!($crate::store_conformance, @tests waits, $backend:);
    };
    ($backend:ty: $($case:ident),+ $(,)?) => {
        $crate::store_conformance!(@tests cases, $backend: $($case),+);
    };
    // Also the fair suite's: the two differ only in the module their cases are in.
    (@tests $suite:ident, $backend:ty: $($case:ident),+) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::conformance::$suite::$case::<$backend>().await;
            }
        )+
    };
}

/// Generates a `#[tokio::test]` for each case of the [`FairStore`](crate::FairStore)
/// conformance suite ([`fair`](crate::conformance::fair)), run on the
/// [`Backend`](crate::conformance::Backend) given, whose store must be a `FairStore`.
///
/// `fair_store_conformance!(MyBackend)` generates every case;
/// `fair_store_conformance!(MyBackend: case, case, …)` only the cases named. A store that
/// keeps the default, polling [`wait_for_turn`](crate::FairStore::wait_for_turn) leaves
/// out `a_release_wakes_the_head_of_the_queue_only`.
#[macro_export]
macro_rules! fair_store_conformance {
    ($backend:ty) => {
        $crate::__fair_store_conformance_cases!($crate::fair_store_conformance, $backend:);
    };
    ($backend:ty: $($case:ident),+ $(,)?) => {
        $crate::store_conformance!(@tests fair, $backend: $($case),+);
    };
}

/// A started backend, to keep until the case ends, and its store.
async fn started<B: Backend>() -> (B, B::Store) {
    let backend = B::start().await;
    let store = backend.store();
    (backend, store)
}

/// Runs `task(i)` for `count` tasks on the runtime's workers, all released at once by a
/// barrier, and returns their results in order.
///
/// # Panics
///
/// When a task panics.
pub async fn all_at_once<T, F, Fut>(count: usize, task: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let start = Arc::new(Barrier::new(count));
    let handles: Vec<_> = (0..count)
        .map(|i| {
            let start = Arc::clone(&start);
            let work = task(i);
            tokio::spawn(async move {
                start.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(count);
    for handle in handles {
        results.push(handle.await.expect("task completes"));
    }
    results
}

/// Waits for `condition`, checking every 5 ms.
///
/// # Panics
///
/// When `within` passes first, naming `what` was awaited.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
