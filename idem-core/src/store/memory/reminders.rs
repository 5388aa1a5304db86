//! When a shard's entries may expire: the queue its reclaiming pass reads.
//!
//! A shard reads the clock under its mutex, so the instants it stamps never go back; two
//! entries given the same TTL therefore come due in the order they were written. The
//! queue keeps one FIFO per TTL (an application uses a handful: one per guard setting,
//! lock lease, token lifetime, record retention), so adding a reminder is a push at the
//! back and taking the next one due a pop at the front of the earliest queue: O(1) and
//! sequential in memory, where a binary heap over every live entry walks ~log2(n) cache
//! lines on each pop. TTLs beyond the first [`QUEUES`] share a heap.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use crate::key::Key;

/// TTLs that get a FIFO of their own; more are rare, and share [`Reminders::other`].
const QUEUES: usize = 16;

/// Which map of a shard an entry lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Space {
    Lock,
    Token,
    Record,
}

/// "The entry `key` in `space` may expire at `at`." Entries renewed or removed since are
/// recognised when the reminder comes due, so reminders are never updated in place.
#[derive(Debug)]
pub(super) struct Due {
    pub(super) at: Instant,
    pub(super) space: Space,
    pub(super) key: Key,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.cmp(&other.at)
    }
}

/// Where the next reminder due is.
#[derive(Clone, Copy)]
enum Source {
    Queue(usize),
    Other,
}

#[derive(Debug, Default)]
pub(super) struct Reminders {
    /// One FIFO per TTL, each ordered by `at` because it is filled in clock order.
    queues: Vec<(Duration, VecDeque<Due>)>,
    /// Reminders of TTLs without a queue of their own.
    other: BinaryHeap<Reverse<Due>>,
}

impl Reminders {
    /// Adds a reminder for an entry written at `at - ttl`. `at` must not be earlier than
    /// that of the last reminder added with the same `ttl` (the shard's clock is read
    /// under its lock); were it ever, the reminder would only come due late, when the
    /// entry counts as absent anyway.
    pub(super) fn push(&mut self, ttl: Duration, due: Due) {
        if let Some((_, queue)) = self.queues.iter_mut().find(|(t, _)| *t == ttl) {
            queue.push_back(due);
        } else if let Some(free) = self.queues.iter_mut().find(|(_, q)| q.is_empty()) {
            *free = (ttl, VecDeque::from([due]));
        } else if self.queues.len() < QUEUES {
            self.queues.push((ttl, VecDeque::from([due])));
        } else {
            self.other.push(Reverse(due));
        }
    }

    fn earliest(&self) -> Option<(Source, Instant)> {
        let queued = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(i, (_, queue))| Some((Source::Queue(i), queue.front()?.at)));
        let other = self
            .other
            .peek()
            .map(|Reverse(due)| (Source::Other, due.at));
        queued.chain(other).min_by_key(|&(_, at)| at)
    }

    /// Whether a reminder is due by `now`.
    pub(super) fn any_due(&self, now: Instant) -> bool {
        self.earliest().is_some_and(|(_, at)| at <= now)
    }

    /// Takes the earliest reminder, if it is due by `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Due> {
        match self.earliest()? {
            (_, at) if at > now => None,
            (Source::Queue(i), _) => self.queues[i].1.pop_front(),
            (Source::Other, _) => self.other.pop().map(|Reverse(due)| due),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.queues.iter().map(|(_, q)| q.len()).sum::<usize>() + self.other.len()
    }

    /// Drops the reminders `current` says are stale; the rest keep their order.
    pub(super) fn retain(&mut self, mut current: impl FnMut(&Due) -> bool) {
        for (_, queue) in &mut self.queues {
            queue.retain(&mut current);
        }
        self.other.retain(|Reverse(due)| current(due));
    }

    /// Slots held, used or not.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.queues.iter().map(|(_, q)| q.capacity()).sum::<usize>() + self.other.capacity()
    }

    /// Gives back memory a past flood left.
    pub(super) fn shrink(&mut self) {
        for (_, queue) in &mut self.queues {
            if queue.capacity() > 64 && queue.len() * 4 < queue.capacity() {
                queue.shrink_to(queue.len() * 2);
            }
        }
        if self.other.capacity() > 64 && self.other.len() * 4 < self.other.capacity() {
            self.other.shrink_to(self.other.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(at: Instant, i: u32) -> Due {
        Due {
            at,
            space: Space::Token,
            key: Key::hashed([i.to_le_bytes()]),
        }
    }

    #[test]
    fn reminders_come_due_in_time_order_across_ttls_and_the_shared_heap() {
        let start = Instant::now();
        let mut reminders = Reminders::default();
        let mut expected = Vec::new();
        // More TTLs than queues, written in clock order as a shard writes them.
        for i in 0..400_u32 {
            let written = start + Duration::from_millis(u64::from(i));
            let ttl = Duration::from_millis(u64::from(i % 40) * 7 + 1);
            reminders.push(ttl, due(written + ttl, i));
            expected.push((written + ttl, i));
        }
        assert_eq!(reminders.len(), 400);
        assert!(!reminders.other.is_empty(), "some TTLs went to the heap");
        expected.sort();
        let until = expected[299].0;
        let mut popped = Vec::new();
        while let Some(due) = reminders.pop_due(until) {
            popped.push(due.at);
        }
        let due_by_then: Vec<_> = expected
            .iter()
            .map(|&(at, _)| at)
            .filter(|&at| at <= until)
            .collect();
        assert_eq!(popped, due_by_then, "every reminder due, in time order");
        assert!(!reminders.any_due(until));
        assert_eq!(reminders.len(), 400 - popped.len());
    }

    #[test]
    fn an_emptied_queue_serves_a_new_ttl() {
        let now = Instant::now();
        let mut reminders = Reminders::default();
        for i in 0..QUEUES as u32 {
            let ttl = Duration::from_millis(u64::from(i) + 1);
            reminders.push(ttl, due(now + ttl, i));
        }
        while reminders.pop_due(now + Duration::from_secs(1)).is_some() {}
        reminders.push(Duration::from_secs(9), due(now, 99));
        assert!(reminders.other.is_empty(), "a free queue took the new TTL");
    }
}
