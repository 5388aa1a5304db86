//! The waiters' queues of a shard's fair locks: per lock, the owners waiting for it in
//! arrival order, each with when its place lapses and where its turn is signalled.

use std::collections::VecDeque;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::packed::{Moment, Packed};
use super::shard::Map;

#[derive(Debug)]
struct Place {
    owner: Packed,
    lapses_at: Moment,
    /// Where a release hands this waiter its turn. `notify_one` keeps a permit for a
    /// waiter not parked yet, so a turn handed before the wait began is not lost.
    turn: Arc<Notify>,
}

/// The queues of one shard. A queue exists only while it has places.
#[derive(Debug, Default)]
pub(super) struct Queues {
    queues: Map<VecDeque<Place>>,
}

impl Queues {
    /// The owner at the head of `key`'s queue, once the lapsed places before it are
    /// dropped.
    pub(super) fn head(&mut self, key: &Packed, now: Moment) -> Option<&Packed> {
        let Entry::Occupied(mut queue) = self.queues.entry(key.clone()) else {
            return None;
        };
        while queue
            .get()
            .front()
            .is_some_and(|place| place.lapses_at <= now)
        {
            queue.get_mut().pop_front();
        }
        if queue.get().is_empty() {
            queue.remove();
            return None;
        }
        self.queues
            .get(key)
            .and_then(|queue| queue.front())
            .map(|place| &place.owner)
    }

    /// Gives `owner`, if it is at the head of `key`'s queue, its place up (it took the
    /// lock).
    pub(super) fn pop_head(&mut self, key: &Packed, owner: &Packed) {
        if let Entry::Occupied(mut queue) = self.queues.entry(key.clone()) {
            if queue
                .get()
                .front()
                .is_some_and(|place| place.owner == *owner)
            {
                queue.get_mut().pop_front();
            }
            if queue.get().is_empty() {
                queue.remove();
            }
        }
    }

    /// Queues `owner` at the back of `key`'s queue, or keeps its place; either way its
    /// place now lapses `lapse` after `now`. `true` if it is at the head.
    pub(super) fn queue(
        &mut self,
        key: &Packed,
        owner: &Packed,
        lapse: Duration,
        now: Moment,
    ) -> bool {
        let queue = self.queues.entry(key.clone()).or_default();
        let lapses_at = now.after(lapse);
        match queue.iter_mut().position(|place| place.owner == *owner) {
            Some(at) => {
                queue[at].lapses_at = lapses_at;
                at == 0
            }
            None => {
                queue.push_back(Place {
                    owner: owner.clone(),
                    lapses_at,
                    turn: Arc::default(),
                });
                queue.len() == 1
            }
        }
    }

    /// Whether `owner` is at the head of `key`'s queue (lapsed places before it dropped).
    pub(super) fn is_head(&mut self, key: &Packed, owner: &Packed, now: Moment) -> bool {
        self.head(key, now).is_some_and(|head| head == owner)
    }

    /// Hands the turn to the head of `key`'s queue, if it has a live one.
    pub(super) fn hand_turn(&mut self, key: &Packed, now: Moment) {
        if self.head(key, now).is_some()
            && let Some(place) = self.queues.get(key).and_then(|queue| queue.front())
        {
            place.turn.notify_one();
        }
    }

    /// Removes `owner`'s place in `key`'s queue; `true` if it was at the head.
    pub(super) fn leave(&mut self, key: &Packed, owner: &Packed) -> bool {
        let Entry::Occupied(mut queue) = self.queues.entry(key.clone()) else {
            return false;
        };
        let at = queue.get().iter().position(|place| place.owner == *owner);
        if let Some(at) = at {
            queue.get_mut().remove(at);
        }
        if queue.get().is_empty() {
            queue.remove();
        }
        at == Some(0)
    }

    /// Where `owner`'s turn on `key` is signalled; `None` if it holds no place.
    pub(super) fn turn(&self, key: &Packed, owner: &Packed) -> Option<Arc<Notify>> {
        self.queues
            .get(key)?
            .iter()
            .find(|place| place.owner == *owner)
            .map(|place| Arc::clone(&place.turn))
    }

    /// Drops every lapsed place, and the queues left empty (the reaper's sweep: a queue
    /// nobody looks at again would otherwise keep its dead places).
    pub(super) fn drop_lapsed(&mut self, now: Moment) {
        self.queues.retain(|_, queue| {
            queue.retain(|place| place.lapses_at > now);
            !queue.is_empty()
        });
        if self.queues.capacity() > 4 * self.queues.len().max(16) {
            self.queues.shrink_to_fit();
        }
    }

    /// Places in `key`'s queue, lapsed or not.
    #[cfg(test)]
    pub(super) fn len(&self, key: &Packed) -> usize {
        self.queues.get(key).map_or(0, VecDeque::len)
    }
}
