//! Fencing tokens: they strictly increase, and a paused holder's late write is refused by
//! its token.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command};
use std::time::Duration;

use idem_core::lock::Lease;
use idem_core::{Key, Lock};
use idem_tests::{Backend, RedisBackend, eventually, spawn_piped};

use crate::{LONG, LockBackend, is_free, key};

lock_suite!(fencing_tokens_strictly_increase_over_1000_acquisitions);

async fn fencing_tokens_strictly_increase_over_1000_acquisitions<B: LockBackend>(backend: B) {
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
        let (child, stdin, stdout) = spawn_piped(
            Command::new(env!("CARGO_BIN_EXE_lock_holder"))
                .arg("--resource")
                .arg(resource)
                .arg(lock.as_str())
                .arg(lease.as_millis().to_string())
                .arg("watchdog")
                .args(urls),
            "lock_holder",
        );
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
