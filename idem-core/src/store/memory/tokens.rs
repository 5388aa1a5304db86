//! The one-time tokens of one shard of a [`MemoryStore`](super::MemoryStore): each scope's
//! newest few, within a budget of their own.
//!
//! Tokens are cheap to mint for anyone who can load a form page, so they never share the
//! budget of windows, locks and records: a flood of them can only push out other tokens,
//! oldest first, which costs their users a form reload and never lets a duplicate through.

use std::collections::VecDeque;

use super::packed::{Moment, Packed};
use super::shard::{Expiring, Map};

/// Stale entries the issue order keeps beyond twice the live tokens before it drops them.
const STALE_KEPT: usize = 64;

#[derive(Debug)]
struct Token {
    scope: Packed,
    expires_at: Moment,
}

impl Expiring for Token {
    fn expires_at(&self) -> Moment {
        self.expires_at
    }
}

#[derive(Debug, Default)]
pub(super) struct Tokens {
    tokens: Map<Token>,
    /// Each scope's live tokens, oldest first.
    scopes: Map<Vec<Packed>>,
    /// Every token put, oldest first; entries of tokens that are gone since are skipped
    /// when they reach the front, and dropped in bulk once they outnumber the live ones.
    issued: VecDeque<Packed>,
}

impl Tokens {
    pub(super) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Puts `token` in `scope` until `expires_at`; then keeps only the scope's newest
    /// `keep` and the shard's newest `budget` tokens.
    pub(super) fn put(
        &mut self,
        scope: &Packed,
        token: &Packed,
        expires_at: Moment,
        keep: usize,
        budget: usize,
    ) {
        self.remove(token);
        self.tokens.insert(
            token.clone(),
            Token {
                scope: scope.clone(),
                expires_at,
            },
        );
        let mine = self.scopes.entry(scope.clone()).or_default();
        mine.push(token.clone());
        let lapsed: Vec<Packed> = if mine.len() > keep {
            mine.drain(..mine.len() - keep).collect()
        } else {
            Vec::new()
        };
        for old in &lapsed {
            self.tokens.remove(old);
        }
        self.issued.push_back(token.clone());
        while self.tokens.len() > budget {
            let Some(oldest) = self.issued.pop_front() else {
                break;
            };
            self.remove(&oldest);
        }
        if self.issued.len() > 2 * self.tokens.len() + STALE_KEPT {
            let tokens = &self.tokens;
            self.issued.retain(|key| tokens.contains_key(key));
        }
    }

    /// Removes `token` if `scope` holds it: `true` if it was there and had not expired.
    pub(super) fn consume(&mut self, scope: &Packed, token: &Packed, now: Moment) -> bool {
        match self.tokens.get(token) {
            Some(held) if held.scope == *scope => {
                let live = held.expires_at > now;
                self.remove(token);
                live
            }
            _ => false,
        }
    }

    /// Whether `scope` holds `token`, unexpired at `now`.
    pub(super) fn holds(&self, scope: &Packed, token: &Packed, now: Moment) -> bool {
        self.tokens
            .get(token)
            .is_some_and(|held| held.scope == *scope && held.expires_at > now)
    }

    /// Removes `token` if it has expired by `now`.
    pub(super) fn remove_expired(&mut self, token: &Packed, now: Moment) {
        if self
            .tokens
            .get(token)
            .is_some_and(|held| held.expires_at <= now)
        {
            self.remove(token);
        }
    }

    /// Whether a reminder that `token` expires at `at` is still the current one.
    pub(super) fn expires_at(&self, token: &Packed, at: Moment) -> bool {
        self.tokens
            .get(token)
            .is_some_and(|held| held.expires_at() == at)
    }

    fn remove(&mut self, token: &Packed) {
        let Some(removed) = self.tokens.remove(token) else {
            return;
        };
        if let Some(mine) = self.scopes.get_mut(&removed.scope) {
            mine.retain(|key| key != token);
            if mine.is_empty() {
                self.scopes.remove(&removed.scope);
            }
        }
    }

    /// Slots held, used or not.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.tokens.capacity() + self.scopes.capacity() + self.issued.capacity()
    }

    /// Drops the stale entries of the issue order and gives back memory a past flood
    /// left.
    pub(super) fn shrink(&mut self) {
        if self.issued.len() > self.tokens.len() + STALE_KEPT {
            let tokens = &self.tokens;
            self.issued.retain(|key| tokens.contains_key(key));
        }
        super::shard::shrink_if_sparse(&mut self.tokens);
        super::shard::shrink_if_sparse(&mut self.scopes);
        if self.issued.capacity() > 64 && self.issued.len() * 4 < self.issued.capacity() {
            self.issued.shrink_to(self.issued.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(name: &str, i: usize) -> Packed {
        Packed::from(&crate::key::Key::hashed([
            name.as_bytes(),
            &i.to_le_bytes(),
        ]))
    }

    #[test]
    fn a_scope_keeps_its_newest_and_the_shard_its_budget() {
        let mut tokens = Tokens::default();
        let start = std::time::Instant::now();
        let now = Moment::at(start, start);
        let later = now.after(Duration::from_secs(60));
        let (alice, bob) = (key("scope", 1), key("scope", 2));
        for i in 0..10 {
            tokens.put(&alice, &key("alice", i), later, 3, 100);
        }
        assert_eq!(tokens.len(), 3);
        assert!(!tokens.consume(&alice, &key("alice", 6), now), "lapsed");
        assert!(
            !tokens.consume(&bob, &key("alice", 9), now),
            "another scope's"
        );
        assert!(tokens.consume(&alice, &key("alice", 9), now));
        assert!(!tokens.consume(&alice, &key("alice", 9), now), "spent");

        // Throwaway scopes push out the oldest tokens, and no more than that.
        for i in 0..1_000 {
            tokens.put(&key("throwaway", i), &key("flood", i), later, 3, 100);
        }
        assert_eq!(tokens.len(), 100);
        assert!(!tokens.consume(&alice, &key("alice", 8), now), "evicted");
        tokens.put(&bob, &key("bob", 0), later, 3, 100);
        assert!(tokens.consume(&bob, &key("bob", 0), now));
        assert!(tokens.scopes.len() <= 100);
        assert!(tokens.issued.len() <= 2 * 100 + STALE_KEPT);
    }
}
