//! A holder process killed with `SIGKILL` frees its lock when its lease ends (Redis only:
//! an in-memory lock dies with its process).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem_core::{Key, Store};
use idem_tests::{ClusterBackend, RedisBackend, eventually};

use crate::{LockBackend, is_free, key};

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

/// Both leases on `B`'s Redis: a holder process killed with `SIGKILL` frees its lock once
/// its lease ends.
async fn a_killed_holder_process_frees_its_lock_after_its_lease<B: LockBackend>() {
    let backend = B::start().await;
    a_killed_holder_process_frees_its_lock_after_a_fixed_lease(backend.store(), backend.urls())
        .await;
    a_killed_holder_process_frees_its_lock_after_a_watchdog_lease(backend.store(), backend.urls())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_its_lock_after_its_lease_redis() {
    a_killed_holder_process_frees_its_lock_after_its_lease::<RedisBackend>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_its_lock_after_its_lease_redis_cluster() {
    a_killed_holder_process_frees_its_lock_after_its_lease::<ClusterBackend>().await;
}
