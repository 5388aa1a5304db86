//! When a shard's entries may expire: the queue its reclaiming pass reads.
//!
//! A shard reads the clock under its mutex, so the instants it stamps never go back; two
//! entries given the same TTL therefore come due in the order they were written. The
//! queue keeps one FIFO per map and TTL (an application uses a handful: one per guard setting,
//! lock lease, token lifetime, record retention), so adding a reminder is a push at the
//! back and taking the next one due a pop at the front of the earliest queue: O(1) and
//! sequential in memory, where a binary heap over every live entry walks ~log2(n) cache
//! lines on each pop. TTLs beyond the first [`QUEUES`] share a heap
//! (`tests::a_handful_of_ttls_never_reach_the_heap`; `Reminders::push` is about 120 of
//! a first idempotent request's instructions, `bench/results/counts-symbols.md`).

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use super::packed::{Moment, Packed};

/// TTLs that get a FIFO of their own; more are rare, and share [`Reminders::other`].
const QUEUES: usize = 16;

/// Which map of a shard an entry lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Space {
    Lock,
    Token,
    Record,
}

/// "The entry `key` may expire at `at`." Entries renewed or removed since are recognised
/// when the reminder comes due, so reminders are never updated in place. Which map the
/// entry is in is the queue's, so each reminder does not carry it.
#[derive(Debug)]
pub(super) struct Due {
    pub(super) at: Moment,
    pub(super) key: Packed,
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

/// The reminders of one map's entries written with one TTL, ordered by `at` because they
/// are written in clock order.
#[derive(Debug)]
struct Queue {
    space: Space,
    ttl: Duration,
    due: VecDeque<Due>,
}

#[derive(Debug, Default)]
pub(super) struct Reminders {
    /// One FIFO per map and TTL.
    queues: Vec<Queue>,
    /// Reminders of TTLs without a queue of their own.
    other: BinaryHeap<Reverse<(Due, Space)>>,
}

impl Reminders {
    /// Adds a reminder for an entry written at `at - ttl`. `at` must not be earlier than
    /// that of the last reminder added with the same `ttl` (the shard's clock is read
    /// under its lock); were it ever, the reminder would only come due late, when the
    /// entry counts as absent anyway.
    pub(super) fn push(&mut self, space: Space, ttl: Duration, due: Due) {
        let fresh = || Queue {
            space,
            ttl,
            due: VecDeque::new(),
        };
        let queue = self
            .queues
            .iter()
            .position(|q| q.space == space && q.ttl == ttl)
            .or_else(|| {
                let free = self.queues.iter().position(|q| q.due.is_empty())?;
                self.queues[free] = fresh();
                Some(free)
            })
            .or_else(|| {
                (self.queues.len() < QUEUES).then(|| {
                    self.queues.push(fresh());
                    self.queues.len() - 1
                })
            });
        match queue {
            Some(i) => self.queues[i].due.push_back(due),
            None => self.other.push(Reverse((due, space))),
        }
    }

    fn earliest(&self) -> Option<(Source, Moment)> {
        let queued = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(i, queue)| Some((Source::Queue(i), queue.due.front()?.at)));
        let other = self
            .other
            .peek()
            .map(|Reverse((due, _))| (Source::Other, due.at));
        queued.chain(other).min_by_key(|&(_, at)| at)
    }

    /// Whether a reminder is due by `now`.
    pub(super) fn any_due(&self, now: Moment) -> bool {
        self.earliest().is_some_and(|(_, at)| at <= now)
    }

    /// Takes the earliest reminder, and the map it is for, if it is due by `now`.
    pub(super) fn pop_due(&mut self, now: Moment) -> Option<(Space, Due)> {
        match self.earliest()? {
            (_, at) if at > now => None,
            (Source::Queue(i), _) => {
                let queue = &mut self.queues[i];
                queue.due.pop_front().map(|due| (queue.space, due))
            }
            (Source::Other, _) => self.other.pop().map(|Reverse((due, space))| (space, due)),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.queues.iter().map(|q| q.due.len()).sum::<usize>() + self.other.len()
    }

    /// Drops the reminders `current` says are stale; the rest keep their order.
    pub(super) fn retain(&mut self, mut current: impl FnMut(Space, &Due) -> bool) {
        for queue in &mut self.queues {
            let space = queue.space;
            queue.due.retain(|due| current(space, due));
        }
        self.other
            .retain(|Reverse((due, space))| current(*space, due));
    }

    /// Slots held, used or not.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.queues.iter().map(|q| q.due.capacity()).sum::<usize>() + self.other.capacity()
    }

    /// Gives back memory a past flood left.
    pub(super) fn shrink(&mut self) {
        for queue in &mut self.queues {
            let due = &mut queue.due;
            if due.capacity() > 64 && due.len() * 4 < due.capacity() {
                due.shrink_to(due.len() * 2);
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

    fn due(at: Moment, i: u32) -> Due {
        Due {
            at,
            key: Packed::Hashed([i as u8; 16]),
        }
    }

    fn start() -> Moment {
        let now = std::time::Instant::now();
        Moment::at(now, now)
    }

    #[test]
    fn reminders_come_due_in_time_order_across_ttls_and_the_shared_heap() {
        let start = start();
        let mut reminders = Reminders::default();
        let mut expected = Vec::new();
        // More TTLs than queues, written in clock order as a shard writes them.
        for i in 0..400_u32 {
            let written = start.after(Duration::from_millis(u64::from(i)));
            let ttl = Duration::from_millis(u64::from(i % 40) * 7 + 1);
            reminders.push(Space::Token, ttl, due(written.after(ttl), i));
            expected.push((written.after(ttl), i));
        }
        assert_eq!(reminders.len(), 400);
        assert!(!reminders.other.is_empty(), "some TTLs went to the heap");
        expected.sort();
        let until = expected[299].0;
        let mut popped = Vec::new();
        while let Some((_, due)) = reminders.pop_due(until) {
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

    /// A guard's entries, of a handful of TTLs, are pushed at the back of a queue and
    /// popped from its front: none goes through the heap.
    #[test]
    fn a_handful_of_ttls_never_reach_the_heap() {
        let start = start();
        let mut reminders = Reminders::default();
        for i in 0..10_000_u32 {
            let written = start.after(Duration::from_micros(u64::from(i)));
            let (space, ttl) = match i % 3 {
                0 => (Space::Lock, Duration::from_secs(2)),
                1 => (Space::Token, Duration::from_secs(3600)),
                _ => (Space::Record, Duration::from_secs(5)),
            };
            reminders.push(space, ttl, due(written.after(ttl), i));
        }
        assert!(reminders.other.is_empty(), "every reminder went to a queue");
        assert_eq!(reminders.queues.len(), 3, "one queue per map and TTL");
        let mut popped = 0;
        while reminders
            .pop_due(start.after(Duration::from_secs(6)))
            .is_some()
        {
            popped += 1;
        }
        assert_eq!(
            popped, 6_667,
            "the locks' and records' reminders, none of the tokens'"
        );
    }

    #[test]
    fn an_emptied_queue_serves_a_new_ttl() {
        let now = start();
        let mut reminders = Reminders::default();
        for i in 0..QUEUES as u32 {
            let ttl = Duration::from_millis(u64::from(i) + 1);
            reminders.push(Space::Lock, ttl, due(now.after(ttl), i));
        }
        while reminders
            .pop_due(now.after(Duration::from_secs(1)))
            .is_some()
        {}
        reminders.push(Space::Record, Duration::from_secs(9), due(now, 99));
        assert!(reminders.other.is_empty(), "a free queue took the new TTL");
    }
}
