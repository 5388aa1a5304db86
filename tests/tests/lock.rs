//! The distributed lock suite: every case runs against `MemoryStore`, `MemoryStore` behind
//! `AnyStore`, `RedisStore` on a standalone server, and `RedisStore` on a three-master
//! Redis Cluster. A holder process killed with `SIGKILL` is a Redis-only case: an
//! in-memory lock dies with its process.

use std::collections::BTreeMap;
use std::future::{Future, poll_fn};
use std::io::{BufRead, BufReader};
use std::pin::pin;
use std::process::{Child, Command, Stdio};
use std::task::Poll;
use std::time::{Duration, Instant};

use idem_core::lock::{Fenced, FencingMode, Lease, LockError, LockLost, Unfenced};
use idem_core::store::Fencing;
use idem_core::{Acquire, Key, Lock, MemoryStore, Owner, Store};
use idem_tests::{
    AnyMemoryBackend, Backend, ClusterBackend, Counting, MemoryBackend, RedisBackend,
    a_hundred_contenders_never_overlap, eventually, percentile,
};

const LONG: Duration = Duration::from_secs(60);

/// Each case, generated once per backend in a module named after it: `async` cases as
/// `#[tokio::test]` on a multi-threaded runtime, `sync` cases as plain tests that build
/// the runtime they need.
macro_rules! lock_suite {
    (async: [$($case:ident),+ $(,)?], sync: [$($sync_case:ident),+ $(,)?] $(,)?) => {
        lock_suite!(@backend memory, MemoryBackend, [$($case),+], [$($sync_case),+]);
        lock_suite!(@backend any_store, AnyMemoryBackend, [$($case),+], [$($sync_case),+]);
        lock_suite!(@backend redis, RedisBackend, [$($case),+], [$($sync_case),+]);
        lock_suite!(@backend redis_cluster, ClusterBackend, [$($case),+], [$($sync_case),+]);
    };
    (@backend $module:ident, $backend:ident, [$($case:ident),+], [$($sync_case:ident),+]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case::<super::$backend>().await;
                }
            )+
            $(
                #[test]
                fn $sync_case() {
                    super::$sync_case::<super::$backend>();
                }
            )+
        }
    };
}

lock_suite!(
    async: [
        try_acquire_refuses_while_held_and_a_wait_times_out,
        a_stalled_holder_cannot_release_the_next_holders_lock,
        the_same_owner_reenters_and_shares_one_hold,
        the_watchdog_holds_through_three_leases_and_stops_when_released,
        the_watchdog_stops_when_the_guard_is_dropped,
        a_lock_deleted_behind_its_holder_is_signalled,
        a_fixed_lease_reports_its_end,
        a_hundred_waiting_tasks_never_overlap,
        a_hundred_waiting_tasks_never_overlap_on_a_plain_lock,
        fencing_tokens_strictly_increase_over_1000_acquisitions,
        a_fenced_reentry_shares_the_token,
        waiters_wake_on_release,
        one_release_wakes_one_waiter,
        a_release_just_before_the_wait_is_not_missed,
        an_uncontended_release_sends_no_signal,
    ],
    sync: [
        dropping_a_guard_on_a_current_thread_runtime_releases_it,
        a_guard_dropped_outside_a_runtime_is_left_to_its_lease,
    ],
);

/// What the lock cases need beyond a store: the Redis servers behind it, to look at what
/// they did and to tamper with the lock behind its holder's back.
trait LockBackend: Backend {
    /// The URLs of the Redis nodes; none for memory.
    fn urls(&self) -> Vec<String>;
}

impl LockBackend for MemoryBackend {
    fn urls(&self) -> Vec<String> {
        Vec::new()
    }
}

impl LockBackend for AnyMemoryBackend {
    fn urls(&self) -> Vec<String> {
        Vec::new()
    }
}

impl LockBackend for RedisBackend {
    fn urls(&self) -> Vec<String> {
        vec![self.server.url()]
    }
}

impl LockBackend for ClusterBackend {
    fn urls(&self) -> Vec<String> {
        self.cluster.urls()
    }
}

fn redis_connection(url: &str) -> ::redis::Connection {
    ::redis::Client::open(url)
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .unwrap_or_else(|error| panic!("a connection to {url}: {error}"))
}

/// One `INFO` section of every node, as `name → summed number`.
fn info_numbers(backend: &impl LockBackend, section: &str) -> BTreeMap<String, u64> {
    let mut numbers = BTreeMap::new();
    for url in backend.urls() {
        let info: String = ::redis::cmd("INFO")
            .arg(section)
            .query(&mut redis_connection(&url))
            .expect("INFO");
        for line in info.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            // `cmdstat_set:calls=3,usec=…` counts calls; other sections are `name:number`.
            let value = value
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))
                .unwrap_or(value);
            if let Ok(value) = value.trim().parse::<u64>() {
                *numbers.entry(name.to_owned()).or_default() += value;
            }
        }
    }
    numbers
}

/// Calls of every command the servers ran (scripts' own commands included), without the
/// `INFO` that read them.
fn command_calls(backend: &impl LockBackend) -> BTreeMap<String, u64> {
    info_numbers(backend, "commandstats")
        .into_iter()
        .filter_map(|(name, calls)| Some((name.strip_prefix("cmdstat_")?.to_owned(), calls)))
        .filter(|(name, _)| name != "info")
        .collect()
}

/// Clients blocked in `BLPOP` across the servers; `None` for memory.
fn blocked_clients(backend: &impl LockBackend) -> Option<u64> {
    (!backend.urls().is_empty())
        .then(|| {
            info_numbers(backend, "clients")
                .get("blocked_clients")
                .copied()
        })
        .map(Option::unwrap_or_default)
}

/// Deletes the lock behind its holder's back: `DEL` in Redis (sent to every node; those
/// that do not own the slot refuse it), the owner's own release in memory.
async fn delete_behind_its_back<B: LockBackend>(backend: &B, key: &Key, owner: &Owner) {
    let urls = backend.urls();
    if urls.is_empty() {
        assert!(backend.store().release(key, owner).await.unwrap());
        return;
    }
    let redis_key = format!("idem:{{{key}}}:lock");
    let deleted: i64 = urls
        .iter()
        .filter_map(|url| {
            ::redis::cmd("DEL")
                .arg(&redis_key)
                .query::<i64>(&mut redis_connection(url))
                .ok()
        })
        .sum();
    assert_eq!(deleted, 1, "the lock's key was there to delete");
}

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid test key")
}

async fn is_free(store: &impl Store, key: &Key) -> bool {
    store.remaining(key).await.expect("remaining").is_none()
}

/// How a case makes its locks: the plain lock [`Lock::new`] gives, or a fenced one. Cases
/// that hold in both modes run once with each, on lock names of their own.
trait Mode: FencingMode + Sized {
    fn make<S: Store>(lock: Lock<S>) -> Lock<S, Self>;
}

impl Mode for Unfenced {
    fn make<S: Store>(lock: Lock<S>) -> Lock<S> {
        lock
    }
}

impl Mode for Fenced {
    fn make<S: Store>(lock: Lock<S>) -> Lock<S, Fenced> {
        lock.fenced()
    }
}

async fn try_acquire_refuses_while_held_and_a_wait_times_out<B: LockBackend>() {
    let backend = B::start().await;
    let lease = Lease::Fixed(LONG);
    let mine = Lock::new(backend.store(), key("busy"), lease);
    let theirs = Lock::new(backend.store(), key("busy"), lease);
    let guard = mine.try_acquire().await.unwrap();
    assert!(!guard.is_reentered());
    match theirs.try_acquire().await {
        Err(LockError::Held { remaining }) => assert!(remaining > LONG / 2, "{remaining:?}"),
        other => panic!("expected Held, got {other:?}"),
    }
    let started = Instant::now();
    match theirs.acquire_within(Duration::from_millis(150)).await {
        Err(LockError::TimedOut { waited }) => {
            assert!(waited >= Duration::from_millis(150), "{waited:?}");
        }
        other => panic!("expected TimedOut, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(guard.release().await.unwrap());
    let next = theirs
        .acquire_within(Duration::from_secs(5))
        .await
        .expect("free after the release");
    assert!(next.release().await.unwrap());
}

/// A mis-release: holder 1 stalls past its lease, holder 2 acquires, and
/// holder 1's release must neither free holder 2's lock nor pretend it still owned it.
async fn a_stalled_holder_cannot_release_the_next_holders_lock<B: LockBackend>() {
    let backend = B::start().await;
    stalled_holder::<B, Unfenced>(&backend, "stall-plain").await;
    stalled_holder::<B, Fenced>(&backend, "stall-fenced").await;
}

async fn stalled_holder<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let lock = key(name);
    let lease = Lease::Fixed(Duration::from_millis(200));
    let first = F::make(Lock::new(backend.store(), lock.clone(), lease))
        .try_acquire()
        .await
        .unwrap();
    // The stall: past the lease, as in a long GC pause.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(Instant::now() > first.valid_until());

    let second = F::make(Lock::new(backend.store(), lock.clone(), Lease::Fixed(LONG)))
        .try_acquire()
        .await
        .expect("the stalled holder's lease ran out");

    assert!(
        !first.release().await.unwrap(),
        "holder 1 is told it no longer owned the lock"
    );
    let remaining = backend.store().remaining(&lock).await.unwrap();
    assert!(
        remaining.is_some_and(|r| r > LONG / 2),
        "holder 2's lock is intact: {remaining:?}"
    );
    assert!(matches!(
        F::make(Lock::new(backend.store(), lock, Lease::Fixed(LONG)))
            .try_acquire()
            .await,
        Err(LockError::Held { .. })
    ));
    assert!(second.release().await.unwrap());
}

/// Reentry is not counted: both guards share one hold, and the first release ends it.
async fn the_same_owner_reenters_and_shares_one_hold<B: LockBackend>() {
    let backend = B::start().await;
    reentry::<B, Unfenced>(&backend, "reentry-plain").await;
    reentry::<B, Fenced>(&backend, "reentry-fenced").await;
}

async fn reentry<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let owner = Owner::new("worker-7:job-42").unwrap();
    let lock = F::make(Lock::new(backend.store(), key(name), Lease::Fixed(LONG)))
        .with_owner(owner.clone());
    let first = lock.try_acquire().await.unwrap();
    // The same owner from elsewhere, as a retry after a network timeout would be.
    let again = F::make(Lock::new(backend.store(), key(name), Lease::Fixed(LONG)))
        .with_owner(owner)
        .acquire_within(LONG)
        .await
        .expect("the same owner re-enters, also while waiting");
    assert!(again.is_reentered() && !first.is_reentered());
    assert!(again.valid_until() <= first.valid_until() + Duration::from_millis(50));
    assert!(matches!(
        F::make(Lock::new(backend.store(), key(name), Lease::Fixed(LONG)))
            .try_acquire()
            .await,
        Err(LockError::Held { .. })
    ));

    assert!(
        again.release().await.unwrap(),
        "either guard frees the hold"
    );
    assert!(is_free(&backend.store(), lock.key()).await);
    assert!(
        !first.release().await.unwrap(),
        "the other guard's hold ended with it"
    );
}

/// A fenced lock's guards of one hold share its token, and the next hold's is greater.
async fn a_fenced_reentry_shares_the_token<B: LockBackend>() {
    let backend = B::start().await;
    let owner = Owner::random();
    let lock = Lock::new(backend.store(), key("fenced-reentry"), Lease::Fixed(LONG))
        .fenced()
        .with_owner(owner);
    let first = lock.try_acquire().await.unwrap();
    let again = lock.try_acquire().await.unwrap();
    let waited = lock.acquire_within(LONG).await.unwrap();
    assert_eq!(again.fencing_token(), first.fencing_token(), "one hold");
    assert_eq!(waited.fencing_token(), first.fencing_token(), "one hold");
    let token = first.fencing_token();
    assert!(first.release().await.unwrap());
    let next = lock.try_acquire().await.unwrap();
    assert!(next.fencing_token() > token);
    assert!(next.release().await.unwrap());
}

async fn the_watchdog_holds_through_three_leases_and_stops_when_released<B: LockBackend>() {
    let backend = B::start().await;
    watchdog_holds::<B, Unfenced>(&backend, "watched-plain").await;
    watchdog_holds::<B, Fenced>(&backend, "watched-fenced").await;
}

async fn watchdog_holds<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let lease = Duration::from_millis(300);
    let store = Counting::new(backend.store());
    let lock = F::make(Lock::new(store.clone(), key(name), Lease::Watchdog(lease)));
    let contender = F::make(Lock::new(backend.store(), key(name), Lease::Fixed(LONG)));
    let guard = lock.try_acquire().await.unwrap();

    // Work three times the lease, checking all along that nobody else gets the lock.
    let work_ends = Instant::now() + lease * 3;
    while Instant::now() < work_ends {
        tokio::time::sleep(lease / 6).await;
        assert!(
            matches!(contender.try_acquire().await, Err(LockError::Held { .. })),
            "held at {:?} into the work",
            work_ends.elapsed()
        );
        assert!(guard.valid_until() > Instant::now());
    }
    let renewals = store.renewals();
    // Every third of a lease over three leases: about nine.
    assert!((6..=12).contains(&renewals), "{renewals} renewals");

    assert!(guard.release().await.unwrap());
    let (renewed, commands) = (store.renewals(), command_calls(backend));
    // Two leases of silence: a watchdog still running would renew six times.
    tokio::time::sleep(lease * 2).await;
    assert_eq!(store.renewals(), renewed, "no renewal after release");
    let scripts = |calls: &BTreeMap<String, u64>| calls.get("evalsha").copied().unwrap_or(0);
    assert_eq!(
        scripts(&command_calls(backend)),
        scripts(&commands),
        "no renew traffic reaches Redis after release"
    );
}

async fn the_watchdog_stops_when_the_guard_is_dropped<B: LockBackend>() {
    let backend = B::start().await;
    watchdog_stops_on_drop::<B, Unfenced>(&backend, "dropped-plain").await;
    watchdog_stops_on_drop::<B, Fenced>(&backend, "dropped-fenced").await;
}

async fn watchdog_stops_on_drop<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let lease = Duration::from_millis(300);
    let store = Counting::new(backend.store());
    let lock = F::make(Lock::new(store.clone(), key(name), Lease::Watchdog(lease)));
    let guard = lock.try_acquire().await.unwrap();
    eventually(lease, "a first renewal", || async { store.renewals() > 0 }).await;
    drop(guard);
    eventually(
        Duration::from_secs(5),
        "the dropped guard's release",
        || is_free(&store, lock.key()),
    )
    .await;
    let renewed = store.renewals();
    tokio::time::sleep(lease * 2).await;
    assert_eq!(store.renewals(), renewed, "no renewal after drop");
}

/// Renewal failure is signalled to the holder, not just logged.
async fn a_lock_deleted_behind_its_holder_is_signalled<B: LockBackend>() {
    let backend = B::start().await;
    deleted_behind_its_holder::<B, Unfenced>(&backend, "deleted-plain").await;
    deleted_behind_its_holder::<B, Fenced>(&backend, "deleted-fenced").await;
}

async fn deleted_behind_its_holder<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let lease = Duration::from_millis(300);
    let lock = F::make(Lock::new(
        backend.store(),
        key(name),
        Lease::Watchdog(lease),
    ));
    let guard = lock.try_acquire().await.unwrap();
    delete_behind_its_back(backend, lock.key(), lock.owner()).await;
    let lost = tokio::time::timeout(lease * 3, guard.lost())
        .await
        .expect("the holder learns within a lease");
    assert_eq!(lost, LockLost::NotHeld);
    assert!(!guard.release().await.unwrap());
}

async fn a_fixed_lease_reports_its_end<B: LockBackend>() {
    let backend = B::start().await;
    let lock = Lock::new(
        backend.store(),
        key("short"),
        Lease::Fixed(Duration::from_millis(100)),
    );
    let guard = lock.try_acquire().await.unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lease ends");
    assert_eq!(lost, LockLost::Expired);
    assert!(Instant::now() >= guard.valid_until(), "not before its end");
}

/// 100 tasks, each its own owner, wait for one fenced lock: no entry finds another task
/// inside, fencing tokens grow from one holder to the next, and every task gets its turn.
async fn a_hundred_waiting_tasks_never_overlap<B: LockBackend>() {
    let backend = B::start().await;
    a_hundred_contenders_never_overlap(
        || {
            let lock = Lock::new(
                backend.store(),
                key("contended"),
                Lease::Watchdog(Duration::from_secs(5)),
            )
            .fenced();
            async move { lock.acquire_within(LONG).await }
        },
        |guard| Some(guard.fencing_token().get()),
    )
    .await;
}

/// The same with plain locks: 100 tasks, each its own owner, wait for one lock; no entry
/// may find another task inside, and every task gets its turn.
async fn a_hundred_waiting_tasks_never_overlap_on_a_plain_lock<B: LockBackend>() {
    let backend = B::start().await;
    a_hundred_contenders_never_overlap(
        || {
            let lock = Lock::new(
                backend.store(),
                key("contended-plain"),
                Lease::Watchdog(Duration::from_secs(5)),
            );
            async move { lock.acquire_within(LONG).await }
        },
        |_| None,
    )
    .await;
}

async fn fencing_tokens_strictly_increase_over_1000_acquisitions<B: LockBackend>() {
    let backend = B::start().await;
    let lock = key("fenced");
    let mut last = None;
    for round in 0..1000 {
        // Every hundredth hold is left to expire instead of being released.
        let expires = round % 100 == 99;
        let lease = if expires {
            Lease::Fixed(Duration::from_millis(20))
        } else {
            Lease::Fixed(LONG)
        };
        let guard = Lock::new(backend.store(), lock.clone(), lease)
            .fenced()
            .try_acquire()
            .await
            .unwrap_or_else(|error| panic!("round {round}: {error}"));
        let fence = guard.fencing_token();
        assert!(
            last < Some(fence),
            "round {round}: {fence:?} after {last:?}"
        );
        last = Some(fence);
        if expires {
            tokio::time::sleep(Duration::from_millis(30)).await;
            assert!(!guard.release().await.unwrap(), "round {round}: expired");
        } else {
            assert!(guard.release().await.unwrap());
        }
    }
}

/// A waiter blocked in the store wakes when the holder releases: one attempt that found
/// the lock held, one wait that ended woken (not timed out), one attempt that acquired.
async fn waiters_wake_on_release<B: LockBackend>() {
    let backend = B::start().await;
    let mut hand_offs = Vec::new();
    for round in 0..20 {
        let lock = key(&format!("hand-off-{round}"));
        let holder = Lock::new(backend.store(), lock.clone(), Lease::Fixed(LONG))
            .try_acquire()
            .await
            .unwrap();
        let store = Counting::new(backend.store());
        let waiter = Lock::new(store.clone(), lock, Lease::Fixed(LONG));
        let waiting = tokio::spawn(async move {
            let guard = waiter.acquire_within(LONG).await.expect("woken");
            (Instant::now(), guard)
        });
        eventually(Duration::from_secs(5), "the waiter waits", || async {
            store.waits() == 1 && blocked_clients(&backend).is_none_or(|blocked| blocked == 1)
        })
        .await;
        let released_at = Instant::now();
        assert!(holder.release().await.unwrap());
        let (acquired_at, guard) = waiting.await.unwrap();
        hand_offs.push(acquired_at - released_at);
        assert_eq!(
            (store.acquires(), store.waits(), store.wakes()),
            (2, 1, 1),
            "round {round}: held, then woken (not timed out) and acquired"
        );
        assert!(guard.release().await.unwrap());
    }
    hand_offs.sort();
    println!(
        "hand-off after release on {}: median {:?}, p90 {:?}, max {:?} ({} rounds)",
        std::any::type_name::<B>(),
        percentile(&hand_offs, 50),
        percentile(&hand_offs, 90),
        hand_offs[hand_offs.len() - 1],
        hand_offs.len()
    );
}

/// A release wakes one waiter, not all of them (no herd), at the store level.
async fn one_release_wakes_one_waiter<B: LockBackend>() {
    let backend = B::start().await;
    let (lock, holder) = (key("herd"), Owner::random());
    let store = backend.store();
    store
        .acquire(&lock, &holder, LONG, Fencing::On)
        .await
        .unwrap();
    let (registered, mut registrations) = tokio::sync::mpsc::unbounded_channel();
    let (woken, mut wakes) = tokio::sync::mpsc::unbounded_channel();
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let (store, lock) = (backend.store(), lock.clone());
            let (registered, woken) = (registered.clone(), woken.clone());
            tokio::spawn(async move {
                let held = store
                    .acquire_or_register_waiter(&lock, &Owner::random(), LONG, Fencing::On, LONG)
                    .await
                    .expect("acquire");
                assert!(matches!(held, Acquire::Held { .. }));
                let mut wait = pin!(store.wait_for_release(&lock, LONG));
                // One poll registers a waiter in memory (and starts a Redis one on its way).
                let first = poll_fn(|cx| Poll::Ready(wait.as_mut().poll(cx))).await;
                registered.send(()).unwrap();
                let signalled = match first {
                    Poll::Ready(signalled) => signalled,
                    Poll::Pending => wait.await,
                };
                woken.send(signalled.expect("wait")).unwrap();
            })
        })
        .collect();
    for _ in 0..5 {
        registrations.recv().await.unwrap();
    }
    eventually(
        Duration::from_secs(5),
        "five clients block in BLPOP",
        || async { blocked_clients(&backend).is_none_or(|blocked| blocked == 5) },
    )
    .await;

    assert!(store.release_and_signal(&lock, &holder).await.unwrap());
    assert_eq!(wakes.recv().await, Some(true), "one waiter woke");
    // A herd would have the other four awake well within this.
    let more = tokio::time::timeout(Duration::from_millis(300), wakes.recv()).await;
    assert!(more.is_err(), "a second waiter woke: {more:?}");
    if let Some(blocked) = blocked_clients(&backend) {
        assert_eq!(blocked, 4);
    }
    for waiter in waiters {
        waiter.abort();
    }
}

/// A waiter that saw the lock held (and registered in that step) but reaches the store
/// only after the release is woken all the same, and a wait with no release returns
/// `false` when its time is up.
async fn a_release_just_before_the_wait_is_not_missed<B: LockBackend>() {
    let backend = B::start().await;
    let store = backend.store();
    let (lock, holder) = (key("early"), Owner::random());
    store
        .acquire(&lock, &holder, LONG, Fencing::On)
        .await
        .unwrap();
    assert!(
        !store
            .wait_for_release(&lock, Duration::from_millis(50))
            .await
            .unwrap(),
        "nothing released"
    );
    let held = store
        .acquire_or_register_waiter(&lock, &Owner::random(), LONG, Fencing::Off, LONG)
        .await
        .unwrap();
    assert!(matches!(held, Acquire::Held { .. }));
    assert!(store.release_and_signal(&lock, &holder).await.unwrap());
    let woken = tokio::time::timeout(Duration::from_secs(5), store.wait_for_release(&lock, LONG))
        .await
        .expect("woken at once, not after the wait's minute");
    assert!(woken.unwrap());
}

/// Locks nobody waits for, taken and released with `try_acquire` and with
/// `acquire_within`, plain and fenced, leave no wake-up: a waiter that comes along once
/// the lock is held again is not woken. On Redis, the releases ran no `RPUSH` and left no
/// waiter count or signal list behind.
async fn an_uncontended_release_sends_no_signal<B: LockBackend>() {
    let backend = B::start().await;
    let store = backend.store();
    let lock = key("uncontended");
    let before = command_calls(&backend);
    for _ in 0..10 {
        let plain = Lock::new(store.clone(), lock.clone(), Lease::Fixed(LONG));
        assert!(plain.try_acquire().await.unwrap().release().await.unwrap());
        assert!(
            plain
                .acquire_within(LONG)
                .await
                .unwrap()
                .release()
                .await
                .unwrap()
        );
        let fenced = plain.fenced();
        assert!(fenced.try_acquire().await.unwrap().release().await.unwrap());
        assert!(
            fenced
                .acquire_within(LONG)
                .await
                .unwrap()
                .release()
                .await
                .unwrap()
        );
    }
    let after = command_calls(&backend);
    let calls =
        |calls: &BTreeMap<String, u64>, command: &str| calls.get(command).copied().unwrap_or(0);
    for command in ["rpush", "lpush", "publish", "pexpire", "incr"] {
        let sent = calls(&after, command) - calls(&before, command);
        // Fenced acquisitions `INCR` the fencing counter, 20 of them; nothing else counts.
        let expected = if command == "incr" { 20 } else { 0 };
        assert!(
            backend.urls().is_empty() || sent == expected,
            "{sent} `{command}` for 40 uncontended lock pairs"
        );
    }
    for url in backend.urls() {
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg("*uncontended*")
            .query(&mut redis_connection(&url))
            .unwrap();
        assert!(
            keys.iter().all(|key| key.ends_with(":fence")),
            "only the fencing counter stays: {keys:?}"
        );
    }

    let holder = Owner::random();
    store
        .acquire(&lock, &holder, LONG, Fencing::Off)
        .await
        .unwrap();
    assert!(
        !store
            .wait_for_release(&lock, Duration::from_millis(50))
            .await
            .unwrap(),
        "a wake-up was left by a release nobody waited for"
    );
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A drop on a current-thread runtime cannot wait for the store (that would block the
/// only thread); the release runs in a spawned task as soon as the thread is free.
fn dropping_a_guard_on_a_current_thread_runtime_releases_it<B: LockBackend>() {
    let backend = current_thread_runtime().block_on(B::start());
    let store = backend.store();
    current_thread_runtime().block_on(async {
        let lock = Lock::new(
            store.clone(),
            key("dropped-here"),
            Lease::Watchdog(Duration::from_secs(30)),
        );
        drop(lock.try_acquire().await.unwrap());
        eventually(Duration::from_secs(5), "released in the background", || {
            is_free(&store, lock.key())
        })
        .await;
        let next = Lock::new(store.clone(), key("dropped-here"), Lease::Fixed(LONG))
            .try_acquire()
            .await
            .expect("free for the next holder");
        assert!(next.release().await.unwrap());
    });
}

/// Dropped on a thread with no runtime, a guard stops its watchdog and leaves the lock to
/// its lease: still held right after the drop, free within a lease.
fn a_guard_dropped_outside_a_runtime_is_left_to_its_lease<B: LockBackend>() {
    let backend = current_thread_runtime().block_on(B::start());
    // Worker threads of its own, so the watchdog runs while the guard is dropped elsewhere.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let lease = Duration::from_millis(300);
    let store = Counting::new(backend.store());
    let lock = Lock::new(store.clone(), key("orphan"), Lease::Watchdog(lease));
    let guard = runtime.block_on(lock.try_acquire()).unwrap();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    runtime.block_on(async {
        assert!(!is_free(&store, lock.key()).await, "not released");
        eventually(lease * 3, "freed by the lease", || {
            is_free(&store, lock.key())
        })
        .await;
        let renewed = store.renewals();
        tokio::time::sleep(lease).await;
        assert_eq!(store.renewals(), renewed, "the watchdog stopped");
    });
}

#[test]
fn acquiring_outside_a_runtime_is_an_error_not_a_panic() {
    let lock = Lock::new(MemoryStore::new(), key("no-runtime"), Lease::Fixed(LONG));
    let mut acquiring = pin!(lock.try_acquire());
    let polled = acquiring
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    assert!(matches!(polled, Poll::Ready(Err(LockError::NoRuntime))));
}

/// A `lock_holder` process, killed (with `SIGKILL`) when dropped.
struct Holder(Child);

impl Holder {
    /// Starts one holding `lock` and waits for it to say it holds it.
    async fn start(lock: &Key, lease: Duration, kind: &str, urls: Vec<String>) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lock_holder"))
            .arg(lock.as_str())
            .arg(lease.as_millis().to_string())
            .arg(kind)
            .args(urls)
            .stdout(Stdio::piped())
            .spawn()
            .expect("lock_holder starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let holder = Self(child);
        let line = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                BufReader::new(stdout).read_line(&mut line).map(|_| line)
            }),
        )
        .await
        .expect("lock_holder says it holds the lock within 10 s")
        .unwrap()
        .unwrap();
        assert!(line.starts_with("acquired "), "lock_holder said {line:?}");
        holder
    }

    fn kill(&mut self) {
        self.0.kill().expect("SIGKILL");
        self.0.wait().expect("reaped");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // Killed already, in a passing test.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Kills the holder and returns how long after the kill the lock became free; checks it
/// was still held at the kill: death alone frees nothing.
async fn free_after_kill(
    holder: &mut Holder,
    store: &impl Store,
    lock: &Key,
    within: Duration,
) -> Duration {
    holder.kill();
    let killed_at = Instant::now();
    assert!(
        !is_free(store, lock).await,
        "still held right after the kill"
    );
    eventually(within, "the dead holder's lock frees", || {
        is_free(store, lock)
    })
    .await;
    killed_at.elapsed()
}

async fn a_killed_holder_process_frees_its_lock_after_a_fixed_lease(
    store: impl Store,
    urls: Vec<String>,
) {
    let (lock, lease) = (key("killed-fixed"), Duration::from_millis(1500));
    let spawned_at = Instant::now();
    let mut holder = Holder::start(&lock, lease, "fixed", urls).await;
    let free_after =
        free_after_kill(&mut holder, &store, &lock, lease + Duration::from_secs(2)).await;
    // The holder acquired after it was spawned, so its lease cannot end before this.
    let freed_at = spawned_at.elapsed();
    assert!(
        freed_at + Duration::from_millis(5) >= lease,
        "free {freed_at:?} after spawning the holder, before its lease of {lease:?}"
    );
    println!("fixed lease {lease:?}: free {free_after:?} after SIGKILL");
}

async fn a_killed_holder_process_frees_its_lock_after_a_watchdog_lease(
    store: impl Store,
    urls: Vec<String>,
) {
    let (lock, lease) = (key("killed-watchdog"), Duration::from_millis(600));
    let mut holder = Holder::start(&lock, lease, "watchdog", urls).await;
    // Three leases: only the holder's watchdog can keep the lock this long.
    tokio::time::sleep(lease * 3).await;
    assert!(!is_free(&store, &lock).await, "the watchdog keeps the lock");
    let free_after =
        free_after_kill(&mut holder, &store, &lock, lease + Duration::from_secs(2)).await;
    // The last renewal came at most a third of a lease before the kill.
    assert!(
        free_after >= lease / 3,
        "free {free_after:?} after the kill, before the renewed lease could end"
    );
    println!("watchdog lease {lease:?}: free {free_after:?} after SIGKILL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_its_lock_after_its_lease_redis() {
    let backend = RedisBackend::start().await;
    a_killed_holder_process_frees_its_lock_after_a_fixed_lease(backend.store(), backend.urls())
        .await;
    a_killed_holder_process_frees_its_lock_after_a_watchdog_lease(backend.store(), backend.urls())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_its_lock_after_its_lease_redis_cluster() {
    let backend = ClusterBackend::start().await;
    a_killed_holder_process_frees_its_lock_after_a_fixed_lease(backend.store(), backend.urls())
        .await;
    a_killed_holder_process_frees_its_lock_after_a_watchdog_lease(backend.store(), backend.urls())
        .await;
}

/// A `lock_holder` process holding a lock over a resource: a SQLite database whose
/// `fenced` table takes a write only with a greater fencing token than the last, and whose
/// `unfenced` table takes any.
struct ResourceHolder {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: Option<BufReader<std::process::ChildStdout>>,
    fence: u64,
}

impl ResourceHolder {
    async fn start(
        lock: &Key,
        lease: Duration,
        urls: Vec<String>,
        resource: &std::path::Path,
    ) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lock_holder"))
            .arg("--resource")
            .arg(resource)
            .arg(lock.as_str())
            .arg(lease.as_millis().to_string())
            .arg("watchdog")
            .args(urls)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("lock_holder starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut holder = Self {
            child,
            stdin,
            stdout: Some(stdout),
            fence: 0,
        };
        let line = holder.read_line().await;
        holder.fence = line
            .trim()
            .strip_prefix("acquired ")
            .and_then(|fence| fence.parse().ok())
            .unwrap_or_else(|| panic!("lock_holder said {line:?}"));
        holder
    }

    /// The next line it prints, within 10 s.
    async fn read_line(&mut self) -> String {
        let mut stdout = self.stdout.take().expect("one reader at a time");
        let (stdout, line) = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                stdout.read_line(&mut line).expect("lock_holder's output");
                (stdout, line)
            }),
        )
        .await
        .expect("lock_holder answers within 10 s")
        .expect("the reader does not panic");
        self.stdout = Some(stdout);
        line
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(signal)
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal}");
    }

    /// Asks it to write `value` to the resource; what it reports of the fenced and the
    /// unfenced write.
    async fn write(&mut self, value: &str) -> (String, String) {
        use std::io::Write;
        writeln!(self.stdin, "write {value}").expect("lock_holder reads its input");
        let fenced = self.read_line().await;
        let unfenced = self.read_line().await;
        (fenced.trim().to_owned(), unfenced.trim().to_owned())
    }
}

impl Drop for ResourceHolder {
    fn drop(&mut self) {
        // A stopped process must be let go on before it can die of the kill.
        self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A holder paused past its lease (`SIGSTOP`, as a long garbage-collection pause or a
/// frozen VM would) comes back believing it still holds the lock. Its late write to the
/// resource is refused by its fencing token; without the token, the same write overwrites
/// what the next holder wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused_by_its_fencing_token() {
    let backend = RedisBackend::start().await;
    let store = backend.store();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("resource.db");
    let resource = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .expect("the resource's database");
    for statement in [
        "CREATE TABLE fenced (value TEXT NOT NULL, fence INTEGER NOT NULL)",
        "INSERT INTO fenced VALUES ('initial', 0)",
        "CREATE TABLE unfenced (value TEXT NOT NULL)",
        "INSERT INTO unfenced VALUES ('initial')",
    ] {
        sqlx::query(statement).execute(&resource).await.unwrap();
    }
    let (lock, lease) = (key("paused-holder"), Duration::from_millis(500));
    let mut paused = ResourceHolder::start(&lock, lease, backend.urls(), &path).await;
    paused.signal("-STOP");

    // Its watchdog stopped with it: the lock ends with its lease and the next holder takes
    // it, with a greater fencing token, and writes.
    eventually(lease * 4, "the paused holder's lock expires", || {
        is_free(&store, &lock)
    })
    .await;
    let next = Lock::new(store.clone(), lock.clone(), Lease::Fixed(LONG))
        .fenced()
        .try_acquire()
        .await
        .expect("the lock is free");
    let next_fence = next.fencing_token().get();
    assert!(next_fence > paused.fence);
    let fence = i64::try_from(next_fence).unwrap();
    let wrote = sqlx::query("UPDATE fenced SET value = 'next holder', fence = ?1 WHERE fence < ?1")
        .bind(fence)
        .execute(&resource)
        .await
        .unwrap();
    assert_eq!(wrote.rows_affected(), 1);
    sqlx::query("UPDATE unfenced SET value = 'next holder'")
        .execute(&resource)
        .await
        .unwrap();

    // The paused holder resumes and writes as if nothing happened.
    paused.signal("-CONT");
    let (fenced, unfenced) = paused.write("paused holder").await;
    assert_eq!(fenced, "fenced: refused");
    assert_eq!(unfenced, "unfenced: wrote");
    let (value, kept): (String, i64) = sqlx::query_as("SELECT value, fence FROM fenced")
        .fetch_one(&resource)
        .await
        .unwrap();
    assert_eq!(
        (value.as_str(), kept),
        ("next holder", fence),
        "the fence kept the next holder's write"
    );
    let (overwritten,): (String,) = sqlx::query_as("SELECT value FROM unfenced")
        .fetch_one(&resource)
        .await
        .unwrap();
    assert_eq!(
        overwritten, "paused holder",
        "without the fence, the late write lands"
    );
    assert!(
        next.release().await.unwrap(),
        "the next holder still holds the lock"
    );
}
