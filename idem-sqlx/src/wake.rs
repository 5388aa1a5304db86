//! [`Waiters`]: the operations of one store waiting for a lock, a fair lock's turn or a
//! record, by what they wait for, so that a notification from the database wakes the
//! ones it concerns.
//!
//! A waiter [subscribes](Waiters::subscribe) first, then asks the database, then sleeps
//! until it is woken or its fallback period has passed, and asks again
//! ([`Subscription::wait`]). Subscribing before asking is what makes a wake-up impossible
//! to miss: a change the database notifies after the question wakes the subscription, and
//! one before it is in the answer. A wake-up is only a reason to ask again, never an
//! answer, so a spurious one costs a question, and a lost one (the listener's connection
//! was down, the change was made by a version that does not notify, a lease ran out) costs
//! at most the fallback period.
//!
//! The database notifies only the rows a waiter flagged (PostgreSQL's `waited`; see the
//! store's `wait_for`): a question asked when the waiter could not flag its row answers
//! [`Asked::Unannounced`], and is asked again after
//! [`RELEASE_POLL_INTERVAL`] rather than the fallback period.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_core::store::RELEASE_POLL_INTERVAL;
use idem_core::{Key, StoreError};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What a waiter waits for; the first part of a notification's payload, `<topic>:<key>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topic {
    /// A lock, or a fair lock's queue (the same key): released, or a place given up.
    Lock,
    /// An idempotency record: completed or abandoned.
    Record,
}

impl Topic {
    /// The payload a change of `key` is notified with: what the statements build in SQL
    /// (`'l:' || key`, `'r:' || key`).
    fn payload(self, key: &Key) -> String {
        let topic = match self {
            Self::Lock => "l",
            Self::Record => "r",
        };
        format!("{topic}:{key}")
    }
}

/// What a waiter's question answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// What it waits for has come.
    Ready,
    /// Not yet; a change will be notified.
    NotYet,
    /// Not yet, and a change may not be notified (the waiter could not announce itself): ask
    /// again soon.
    Unannounced,
}

/// The waiters of one store (and its clones) by payload, each payload with one [`Notify`]
/// its waiters share while any of them waits.
#[derive(Default)]
pub struct Waiters {
    by_payload: Mutex<HashMap<String, Waiting>>,
}

struct Waiting {
    notify: Arc<Notify>,
    subscriptions: usize,
}

impl fmt::Debug for Waiters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let payloads = self.lock().len();
        f.debug_struct("Waiters")
            .field("payloads", &payloads)
            .finish()
    }
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        // The map is consistent after every statement that holds the lock, so a panic
        // elsewhere while it was held leaves nothing half done.
        self.by_payload
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts the caller as waiting for changes of `key` under `topic` until the
    /// subscription is dropped.
    pub(crate) fn subscribe(self: &Arc<Self>, topic: Topic, key: &Key) -> Subscription {
        let payload = topic.payload(key);
        let notify = match self.lock().entry(payload.clone()) {
            Entry::Occupied(mut waiting) => {
                waiting.get_mut().subscriptions += 1;
                Arc::clone(&waiting.get().notify)
            }
            Entry::Vacant(vacant) => {
                let notify = Arc::new(Notify::new());
                let subscriptions = 1;
                let waiting = Waiting {
                    notify: Arc::clone(&notify),
                    subscriptions,
                };
                vacant.insert(waiting);
                notify
            }
        };
        Subscription {
            waiters: Arc::clone(self),
            payload,
            notify,
        }
    }

    /// Wakes every waiter subscribed to `payload`, a notification's; a payload nobody here
    /// waits for wakes nobody.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn wake(&self, payload: &str) {
        if let Some(waiting) = self.lock().get(payload) {
            waiting.notify.notify_waiters();
        }
    }

    /// Wakes every waiter of this store subscribed to `key` under `topic`: a change this
    /// process made, told to its own waiters without a round trip through the database
    /// (on SQLite, the only wake-up there is). A store nobody waits on takes the map's
    /// lock and finds it empty.
    pub(crate) fn wake_here(&self, topic: Topic, key: &Key) {
        let by_payload = self.lock();
        if by_payload.is_empty() {
            return;
        }
        if let Some(waiting) = by_payload.get(&topic.payload(key)) {
            waiting.notify.notify_waiters();
        }
    }

    /// Wakes every waiter, to ask again: notifications may have been lost.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn wake_all(&self) {
        for waiting in self.lock().values() {
            waiting.notify.notify_waiters();
        }
    }

    /// How many payloads have waiters.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// One waiter's subscription; it stops counting when dropped.
pub(crate) struct Subscription {
    waiters: Arc<Waiters>,
    payload: String,
    notify: Arc<Notify>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut by_payload = self.waiters.lock();
        if let Some(waiting) = by_payload.get_mut(&self.payload) {
            waiting.subscriptions -= 1;
            if waiting.subscriptions == 0 {
                by_payload.remove(&self.payload);
            }
        }
    }
}

impl Subscription {
    /// What the subscription waits for, as the database notifies it: `<topic>:<key>`.
    pub(crate) fn payload(&self) -> &str {
        &self.payload
    }

    /// Asks `ready`, and again each time the subscription is woken or `fallback` has
    /// passed since the last question ([`RELEASE_POLL_INTERVAL`] when it answered
    /// [`Asked::Unannounced`]), and once more when `within` has passed: `true` as soon as
    /// it answers [`Asked::Ready`], `false` if it never did.
    ///
    /// # Errors
    ///
    /// The first error `ready` answers.
    pub(crate) async fn wait<F, Fut>(
        &self,
        fallback: Duration,
        within: Duration,
        mut ready: F,
    ) -> Result<bool, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Asked, StoreError>>,
    {
        let deadline = Instant::now() + within;
        loop {
            // Listening before asking: a wake-up sent while the question runs is kept.
            let woken = self.notify.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable();
            let pause = match ready().await? {
                Asked::Ready => return Ok(true),
                Asked::NotYet => fallback,
                Asked::Unannounced => fallback.min(RELEASE_POLL_INTERVAL),
            };
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            // Woken, or the pause is over: either way, ask again.
            let _ = tokio::time::timeout_at(deadline.min(now + pause), woken).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn key(name: &str) -> Key {
        Key::new(name).unwrap()
    }

    #[test]
    fn payloads_are_what_the_statements_notify() {
        assert_eq!(Topic::Lock.payload(&key("a:b")), "l:a:b");
        assert_eq!(Topic::Record.payload(&key("k")), "r:k");
    }

    #[test]
    fn a_payload_is_forgotten_with_its_last_subscription() {
        let waiters = Arc::new(Waiters::default());
        let first = waiters.subscribe(Topic::Lock, &key("k"));
        let second = waiters.subscribe(Topic::Lock, &key("k"));
        let record = waiters.subscribe(Topic::Record, &key("k"));
        assert_eq!(
            waiters.len(),
            2,
            "a lock and a record of the same key differ"
        );
        drop((first, record));
        assert_eq!(waiters.len(), 1);
        drop(second);
        assert_eq!(waiters.len(), 0);
    }

    /// A wake-up while `ready` runs (between the question and the sleep) is not lost,
    /// however long the fallback.
    #[tokio::test(flavor = "current_thread")]
    async fn a_wake_up_during_the_question_is_kept() {
        let waiters = Arc::new(Waiters::default());
        let subscription = waiters.subscribe(Topic::Lock, &key("k"));
        let asked = AtomicUsize::new(0);
        let started = Instant::now();
        let ready = subscription.wait(Duration::from_secs(3600), Duration::from_secs(7200), || {
            let first = asked.fetch_add(1, Ordering::SeqCst) == 0;
            if first {
                waiters.wake("l:k");
            }
            let asked = if first { Asked::NotYet } else { Asked::Ready };
            async move { Ok(asked) }
        });
        assert!(ready.await.unwrap());
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no fallback period waited"
        );
    }

    /// Without wake-ups it asks every fallback period, and once more at the end.
    #[tokio::test(flavor = "current_thread")]
    async fn without_wake_ups_it_asks_every_fallback_period() {
        let waiters = Arc::new(Waiters::default());
        let subscription = waiters.subscribe(Topic::Record, &key("k"));
        waiters.wake("l:k");
        waiters.wake_all();
        let asked = AtomicUsize::new(0);
        let started = Instant::now();
        let (fallback, within) = (Duration::from_millis(50), Duration::from_millis(500));
        let ready = subscription.wait(fallback, within, || {
            asked.fetch_add(1, Ordering::SeqCst);
            async { Ok(Asked::NotYet) }
        });
        assert!(!ready.await.unwrap());
        let asked = asked.load(Ordering::SeqCst);
        // At 0, 50, …, 450 and 500 ms, fewer when the machine is slow to wake it.
        assert!((3..=11).contains(&asked), "asked {asked} times");
        assert!(started.elapsed() >= within);
    }

    /// Until it has announced itself, a waiter asks every 10 ms, however long the fallback; then
    /// it sleeps until woken.
    #[tokio::test(flavor = "current_thread")]
    async fn an_unannounced_waiter_asks_again_soon() {
        let waiters = Arc::new(Waiters::default());
        let subscription = waiters.subscribe(Topic::Lock, &key("k"));
        let asked = AtomicUsize::new(0);
        let started = Instant::now();
        let ready = subscription.wait(Duration::from_secs(3600), Duration::from_secs(7200), || {
            let n = asked.fetch_add(1, Ordering::SeqCst);
            let answer = match n {
                0..=2 => Asked::Unannounced,
                3 => {
                    waiters.wake("l:k");
                    Asked::NotYet
                }
                _ => Asked::Ready,
            };
            async move { Ok(answer) }
        });
        assert!(ready.await.unwrap());
        assert_eq!(asked.load(Ordering::SeqCst), 5);
        let waited = started.elapsed();
        assert!(waited >= RELEASE_POLL_INTERVAL * 3, "{waited:?}");
        assert!(
            waited < Duration::from_secs(60),
            "no fallback period waited"
        );
    }
}
