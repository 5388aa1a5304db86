//! The fair lock suite (`Lock::fair`): each in-process case runs against `MemoryStore`,
//! `RedisStore` on a standalone server and `RedisStore` on a three-master Redis Cluster.
//! The cases across processes run `fair_waiter` processes on one Redis: fifty waiters in
//! two processes, and a waiter killed with `SIGKILL` in the middle of the queue.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idem_core::lock::{Fenced, Lease, LockError, LockGuard};
use idem_core::{FairLock, FairStore, Key, Lock};
use idem_redis::RedisStore;
use idem_tests::{
    Backend, ClusterBackend, Counting, MemoryBackend, RedisBackend, RedisServer,
    a_hundred_contenders_never_overlap, eventually, micros_since_epoch, spawn_piped,
};
use tokio::sync::{Barrier, mpsc};

const LONG: Duration = Duration::from_secs(60);

macro_rules! fair_suite {
    ($($case:ident),+ $(,)?) => {
        fair_suite!(@backend memory, MemoryBackend, $($case),+);
        fair_suite!(@backend redis, RedisBackend, $($case),+);
        fair_suite!(@backend redis_cluster, ClusterBackend, $($case),+);
    };
    (@backend $module:ident, $backend:ident, $($case:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case::<super::$backend>().await;
                }
            )+
        }
    };
}

fair_suite!(
    a_hundred_contending_tasks_never_overlap,
    each_release_wakes_exactly_one_waiter,
    a_cancelled_waiter_leaves_the_queue_at_once,
    a_waiter_that_times_out_leaves_the_queue,
);

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

/// A fair lock named `name` on `store`, with a fresh owner.
fn fair<S: FairStore>(store: S, name: &str, lease: Lease) -> FairLock<S> {
    Lock::new(store, key(name), lease).fair()
}

/// 100 tasks, each its own owner, contend for one fenced fair lock with a watchdog: no
/// entry finds another task inside, fencing tokens grow from one holder to the next, and
/// every task gets its turn.
async fn a_hundred_contending_tasks_never_overlap<B: Backend>()
where
    B::Store: FairStore,
{
    let backend = B::start().await;
    a_hundred_contenders_never_overlap(
        || {
            let lock: FairLock<B::Store, Fenced> = Lock::new(
                backend.store(),
                key("fair-contended"),
                Lease::Watchdog(Duration::from_secs(5)),
            )
            .fenced()
            .fair();
            async move { lock.acquire_within(LONG).await }
        },
        |guard| Some(guard.fencing_token().get()),
    )
    .await;
}

/// A holder, fifty waiters queued behind it, and then each releases in turn: every release
/// but the last (which has nobody behind it) wakes exactly one waiter, the one that takes
/// the lock next. Counted at the store: waits for a turn, and how many ended woken.
async fn each_release_wakes_exactly_one_waiter<B: Backend>()
where
    B::Store: FairStore,
{
    let backend = B::start().await;
    let store = Counting::new(backend.store());
    let lock = || fair(store.clone(), "fair-wakes", Lease::Fixed(LONG)).with_place_timeout(LONG);
    let holder = lock().try_acquire().await.unwrap();
    let start = Arc::new(Barrier::new(50));
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let (lock, start) = (lock(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let guard = lock.acquire_within(LONG).await.expect("a turn");
                tokio::time::sleep(Duration::from_millis(1)).await;
                assert!(guard.release().await.unwrap());
            })
        })
        .collect();
    eventually(Duration::from_secs(10), "fifty waiters queue", || async {
        store.queued() >= 50
    })
    .await;
    assert!(holder.release().await.unwrap());
    for waiter in waiters {
        waiter.await.expect("no error");
    }
    assert_eq!(store.releases(), 51, "the holder's and each waiter's");
    assert_eq!(
        (store.turns(), store.turn_waits()),
        (50, 50),
        "one wake-up per release that had a waiter, and no wait that ended otherwise"
    );
}

/// A waiter whose task is cancelled leaves the queue at once: the waiter behind it gets
/// the lock on the next release, not after the cancelled one's place lapses (a minute).
async fn a_cancelled_waiter_leaves_the_queue_at_once<B: Backend>()
where
    B::Store: FairStore,
{
    a_waiter_that_gives_up_leaves_the_queue::<B>(GivesUp::Cancelled).await;
}

/// A waiter that times out leaves the queue, and the waiter behind it is not held up.
async fn a_waiter_that_times_out_leaves_the_queue<B: Backend>()
where
    B::Store: FairStore,
{
    a_waiter_that_gives_up_leaves_the_queue::<B>(GivesUp::TimesOut).await;
}

/// How the first of two waiters stops waiting.
#[derive(Debug, Clone, Copy)]
enum GivesUp {
    /// Its task is aborted.
    Cancelled,
    /// Its `acquire_within` runs out.
    TimesOut,
}

/// A holder, a waiter that gives up, and a waiter behind it, each place good for a minute:
/// released, the lock goes to the waiter behind within seconds.
async fn a_waiter_that_gives_up_leaves_the_queue<B: Backend>(gives_up: GivesUp)
where
    B::Store: FairStore,
{
    let backend = B::start().await;
    let store = Counting::new(backend.store());
    let name = format!("fair-{gives_up:?}");
    let lock = || fair(store.clone(), &name, Lease::Fixed(LONG)).with_place_timeout(LONG);
    let holder = lock().try_acquire().await.unwrap();
    let patience = match gives_up {
        GivesUp::Cancelled => LONG,
        GivesUp::TimesOut => Duration::from_millis(300),
    };
    let first = tokio::spawn({
        let lock = lock();
        async move { lock.acquire_within(patience).await.map(drop) }
    });
    eventually(
        Duration::from_secs(5),
        "the first waiter queues",
        || async { store.queued() >= 1 },
    )
    .await;
    let behind = tokio::spawn({
        let lock = lock();
        async move { lock.acquire_within(LONG).await }
    });
    eventually(
        Duration::from_secs(5),
        "the second waiter queues",
        || async { store.queued() >= 2 },
    )
    .await;
    match gives_up {
        GivesUp::Cancelled => {
            first.abort();
            assert!(first.await.unwrap_err().is_cancelled());
        }
        GivesUp::TimesOut => {
            let answer = first.await.unwrap();
            assert!(
                matches!(answer, Err(LockError::TimedOut { .. })),
                "{answer:?}"
            );
        }
    }
    assert!(holder.release().await.unwrap());
    let guard = tokio::time::timeout(Duration::from_secs(10), behind)
        .await
        .expect("the waiter behind is not held up by the place of the one that gave up")
        .unwrap()
        .expect("a turn");
    assert!(guard.release().await.unwrap());
}

/// A `fair_waiter` process: waiters on request, and what they say, line by line. Killed
/// (with `SIGKILL`) when dropped.
struct WaiterProcess {
    child: Child,
    stdin: ChildStdin,
}

/// What a waiter process said of one acquisition.
#[derive(Debug, Clone)]
struct Acquisition {
    owner: String,
    /// The order in which Redis saw the holders (a counter each increments while holding).
    order: u64,
    asked_at_us: u128,
    acquired_at_us: u128,
}

impl WaiterProcess {
    /// Starts one, sending every line it prints to `lines`.
    fn start(
        lock: &Key,
        place_timeout: Duration,
        url: &str,
        lines: mpsc::UnboundedSender<String>,
    ) -> Self {
        let (child, stdin, stdout) = spawn_piped(
            Command::new(env!("CARGO_BIN_EXE_fair_waiter"))
                .arg(lock.as_str())
                .arg(place_timeout.as_millis().to_string())
                .arg(url),
            "fair_waiter",
        );
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, stdin }
    }

    /// Starts a waiter named `owner`.
    fn wait(&mut self, owner: &str) {
        writeln!(self.stdin, "wait {owner}").expect("fair_waiter reads its input");
        self.stdin.flush().expect("fair_waiter reads its input");
    }

    fn kill(&mut self) {
        let status = Command::new("kill")
            .arg("-KILL")
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success());
        self.child.wait().expect("the killed process is reaped");
    }
}

impl Drop for WaiterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The places in the lock's queue in Redis, in order.
fn queue_in_redis(server: &RedisServer, lock: &Key) -> Vec<String> {
    let mut conn = ::redis::Client::open(server.url())
        .and_then(|client| client.get_connection())
        .expect("a connection to the test Redis");
    ::redis::cmd("LRANGE")
        .arg(format!("idem:{{{lock}}}:queue"))
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .expect("LRANGE")
}

/// Waits until the lock's queue in Redis is `expected`.
async fn queue_becomes(server: &RedisServer, lock: &Key, expected: &[String]) {
    eventually(Duration::from_secs(10), "the waiter queues", || async {
        queue_in_redis(server, lock) == expected
    })
    .await;
}

/// Takes `lock` on `server` for a minute, for waiters to queue behind.
async fn hold(server: &RedisServer, lock: &Key) -> LockGuard<RedisStore> {
    let store = server.store();
    fair(store, lock.as_str(), Lease::Fixed(LONG))
        .try_acquire()
        .await
        .expect("a free lock")
}

/// Reads `count` acquisitions from the waiters' lines.
async fn acquisitions(
    lines: &mut mpsc::UnboundedReceiver<String>,
    count: usize,
) -> Vec<Acquisition> {
    let mut seen = Vec::new();
    while seen.len() < count {
        let line = tokio::time::timeout(LONG, lines.recv())
            .await
            .expect("every waiter acquires within a minute")
            .expect("the waiter processes run");
        let fields: Vec<&str> = line.split(' ').collect();
        let ["acquired", owner, order, asked_at, acquired_at] = fields.as_slice() else {
            panic!("fair_waiter said {line:?}");
        };
        seen.push(Acquisition {
            owner: (*owner).to_owned(),
            order: order.parse().expect("an order"),
            asked_at_us: asked_at.parse().expect("a time"),
            acquired_at_us: acquired_at.parse().expect("a time"),
        });
    }
    seen.sort_by_key(|acquisition| acquisition.order);
    seen
}

/// Fifty waiters, alternating between two processes, queue one after the other behind a
/// holder (each queued, as Redis shows, before the next is started). Released, the lock
/// goes to them in exactly that order: by the order Redis saw them hold it, and by the
/// wall-clock times each recorded; a newcomer trying all along gets it only once the
/// queue is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_waiters_in_two_processes_acquire_in_arrival_order() {
    let server = RedisServer::start();
    let lock = key("fair-order");
    let holder = hold(&server, &lock).await;
    let (sender, mut lines) = mpsc::unbounded_channel();
    let mut processes = [
        WaiterProcess::start(&lock, LONG, &server.url(), sender.clone()),
        WaiterProcess::start(&lock, LONG, &server.url(), sender),
    ];
    let mut arrived = Vec::new();
    for i in 0..50 {
        let owner = format!("waiter-{i:02}");
        processes[i % 2].wait(&owner);
        arrived.push(owner);
        queue_becomes(&server, &lock, &arrived).await;
    }
    // A newcomer in this process tries to take the lock all along, without queueing.
    let barging = Arc::new(AtomicBool::new(true));
    let barger = tokio::spawn({
        let (store, lock, barging) = (server.store(), lock.clone(), barging.clone());
        async move {
            let mut taken_at_us = Vec::new();
            while barging.load(Ordering::SeqCst) {
                let newcomer = Lock::new(store.clone(), lock.clone(), Lease::Fixed(LONG)).fair();
                if let Ok(guard) = newcomer.try_acquire().await {
                    taken_at_us.push(micros_since_epoch());
                    assert!(guard.release().await.unwrap());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            taken_at_us
        }
    });
    assert!(holder.release().await.unwrap());
    let acquisitions = acquisitions(&mut lines, 50).await;
    barging.store(false, Ordering::SeqCst);
    let barged_at_us = barger.await.unwrap();
    let served: Vec<&str> = acquisitions.iter().map(|a| a.owner.as_str()).collect();
    assert_eq!(served, arrived, "served in arrival order");
    let last_served_at_us = acquisitions[49].acquired_at_us;
    assert!(
        barged_at_us.iter().all(|&at| at > last_served_at_us),
        "a newcomer took the lock past the queue, at {barged_at_us:?} (the last waiter at {last_served_at_us})"
    );
    for pair in acquisitions.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        assert!(
            earlier.asked_at_us < later.asked_at_us,
            "{earlier:?} asked before {later:?}"
        );
        assert!(
            earlier.acquired_at_us < later.acquired_at_us,
            "{earlier:?} acquired before {later:?}"
        );
    }
    assert!(
        queue_in_redis(&server, &lock).is_empty(),
        "the queue is empty at the end"
    );
}

/// Three waiters queue behind a holder, the middle one in a process of its own, which is
/// then killed with `SIGKILL`: it can neither take its turn nor leave the queue. The
/// first waiter gets the lock; the third gets it once the dead one's place has lapsed,
/// no later than a few place timeouts after the kill, and the dead one's place is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_waiter_in_the_middle_of_the_queue_is_skipped_after_its_place_timeout() {
    let server = RedisServer::start();
    let lock = key("fair-killed");
    let place_timeout = Duration::from_secs(1);
    let holder = hold(&server, &lock).await;
    let (sender, mut lines) = mpsc::unbounded_channel();
    let mut living = WaiterProcess::start(&lock, place_timeout, &server.url(), sender.clone());
    let mut dying = WaiterProcess::start(&lock, place_timeout, &server.url(), sender);
    let names = ["first", "killed", "third"].map(str::to_owned);
    living.wait(&names[0]);
    queue_becomes(&server, &lock, &names[..1]).await;
    dying.wait(&names[1]);
    queue_becomes(&server, &lock, &names[..2]).await;
    living.wait(&names[2]);
    queue_becomes(&server, &lock, &names).await;

    dying.kill();
    let killed_at = Instant::now();
    assert!(holder.release().await.unwrap());
    let served = acquisitions(&mut lines, 2).await;
    let skipped_after = killed_at.elapsed();
    let owners: Vec<&str> = served.iter().map(|a| a.owner.as_str()).collect();
    assert_eq!(owners, ["first", "third"]);
    // The dead waiter renewed its place at most a third of the timeout before it died, so
    // its place held until at least two thirds of the timeout after the kill.
    assert!(
        skipped_after >= place_timeout / 2,
        "the dead waiter's place was skipped before it lapsed, after {skipped_after:?}"
    );
    assert!(
        skipped_after < 3 * place_timeout,
        "the dead waiter held the queue up for {skipped_after:?}, place timeout {place_timeout:?}"
    );
    assert!(
        queue_in_redis(&server, &lock).is_empty(),
        "the dead waiter's place is gone"
    );
    println!(
        "a dead waiter held the queue up for {skipped_after:?} (place timeout {place_timeout:?})"
    );
}
