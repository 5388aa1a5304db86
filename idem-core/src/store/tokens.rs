//! [`TokenStore`]: the operations of one-time form tokens.

use std::future::Future;
use std::time::Duration;

use super::StoreError;
use crate::key::Key;

/// One-time tokens, each spent at most once: what form tokens (`FormToken`,
/// `VerifyFormTokenLayer`) are made of.
///
/// One of the capabilities a [`Store`](crate::Store) is the sum of. Each operation is one
/// atomic step in the store.
pub trait TokenStore: std::fmt::Debug + Send + Sync + 'static {
    /// Stores the one-time token `token` in `scope` for `ttl` (replacing one with the same
    /// name), and keeps only the `keep` newest tokens of `scope`: older ones lapse, as if
    /// they had expired. A scope is typically one client, so a client that renders a form
    /// a thousand times holds its last few tokens, not a thousand.
    ///
    /// Tokens have a budget of their own in every store, apart from windows, locks and
    /// records: when it is full the store evicts the unspent tokens that expire soonest (for
    /// one TTL, the oldest) to make room, so a flood of tokens never fails this call and
    /// never takes room a guard needs. An evicted token costs its user a form reload, never
    /// a duplicate.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn put_token(
        &self,
        scope: &Key,
        token: &Key,
        ttl: Duration,
        keep: usize,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the token `token` of `scope`. `true` for exactly one caller per stored token;
    /// the delete itself is the check, so concurrent consumers cannot both succeed. A
    /// token of another scope, an expired, lapsed or evicted one is `false`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn consume_token(
        &self,
        scope: &Key,
        token: &Key,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Whether `scope` holds the token `token`, unspent and unexpired, without spending
    /// it: a look in advance, for a caller that spends the token later in a transaction of
    /// its own (a form submission whose token is spent with its order). It decides
    /// nothing: only [`consume_token`](Self::consume_token) answers `true` to exactly one
    /// caller.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot answer.
    fn has_token(
        &self,
        scope: &Key,
        token: &Key,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}
