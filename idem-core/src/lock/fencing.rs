//! [`FencingMode`]: whether a lock draws fencing tokens, chosen by its type — [`Unfenced`]
//! from [`Lock::new`](crate::Lock::new), [`Fenced`] from
//! [`Lock::fenced`](crate::Lock::fenced).

use std::fmt::Debug;

use crate::store::{Fencing, FencingToken};

mod sealed {
    /// Only this crate's modes: the lock relies on what each promises.
    pub trait Sealed {}
    impl Sealed for super::Unfenced {}
    impl Sealed for super::Fenced {}
}

/// Whether a [`Lock`](crate::Lock) draws a fencing token with each acquisition: the
/// second type parameter of [`Lock`](crate::Lock) and [`LockGuard`](crate::lock::LockGuard),
/// [`Unfenced`] or [`Fenced`]. See [fencing or not](crate::lock#fencing-or-not).
///
/// Sealed: there are exactly these two.
pub trait FencingMode: sealed::Sealed + Debug + Send + Sync + 'static {
    /// What a guard of this mode carries: `()`, or the hold's [`FencingToken`].
    type Token: Debug + Copy + Send + Sync + 'static;

    /// What the store is asked for.
    #[doc(hidden)]
    const FENCING: Fencing;

    /// The guard's token from the store's answer; `None` when a token was asked for and
    /// none came.
    #[doc(hidden)]
    fn token(fence: Option<FencingToken>) -> Option<Self::Token>;
}

/// A lock without fencing tokens: one `SET NX PX` to acquire and one compare-and-delete to
/// release in Redis. The default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Unfenced;

/// A lock whose every acquisition draws a fencing token, larger than every token drawn
/// for the same name before: [`LockGuard::fencing_token`](crate::lock::LockGuard::fencing_token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Fenced;

impl FencingMode for Unfenced {
    type Token = ();
    const FENCING: Fencing = Fencing::Off;

    fn token(_: Option<FencingToken>) -> Option<()> {
        Some(())
    }
}

impl FencingMode for Fenced {
    type Token = FencingToken;
    const FENCING: Fencing = Fencing::On;

    fn token(fence: Option<FencingToken>) -> Option<FencingToken> {
        fence
    }
}
