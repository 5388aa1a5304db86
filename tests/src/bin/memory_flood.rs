//! The memory flood of `bench/http.sh` (BENCHMARKS.md section 7) without the HTTP server
//! around it: a million fresh windows through `MemoryStore::acquire`, each with an owner of
//! its own as a guard takes them, on a one-worker runtime as the bench server runs; the
//! process's `VmRSS` before, with them live, once the reaper has reclaimed them, and the
//! same again.
//!
//! `cargo run --release -p idem-tests --bin memory_flood [-- <keys> <ttl-ms>]`
//! (default 1,000,000 keys, 10 s, the bench server's figures). With `IDEM_FLOOD_SMAPS`
//! set it also prints, at each moment, the mappings holding 1 MiB or more (where freed
//! memory stays resident).

use std::time::{Duration, Instant};

use idem_core::store::Fencing;
use idem_core::{Acquire, Key, LockStore, MemoryStore, Owner};

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN);
    kib / 1024.0
}

/// Diagnostic (IDEM_FLOOD_SMAPS set): the mappings holding 1 MiB or more resident.
fn smaps(moment: &str) {
    if std::env::var_os("IDEM_FLOOD_SMAPS").is_none() {
        return;
    }
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut head = String::new();
    for line in smaps.lines() {
        if let Some(rest) = line.strip_prefix("Rss:") {
            let kib: u64 = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
            if kib >= 1024 {
                println!("  smaps {moment}: {kib:>7} kB resident in {head}");
            }
        } else if line
            .split_whitespace()
            .next()
            .is_some_and(|w| w.contains('-') && !w.ends_with(':'))
        {
            head = line.to_string();
        }
    }
}

async fn fill(store: &MemoryStore, keys: u64, ttl: Duration) -> Duration {
    let salt = Owner::random();
    let started = Instant::now();
    for i in 0..keys {
        let key = Key::hashed([salt.as_str().as_bytes(), &i.to_le_bytes()[..]]);
        let taken = store
            .acquire(&key, &Owner::random(), ttl, Fencing::Off)
            .await;
        assert!(
            matches!(taken, Ok(Acquire::Acquired { .. })),
            "key {i}: {taken:?}"
        );
    }
    started.elapsed()
}

async fn wait_until_empty(store: &MemoryStore) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.entry_count() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // As http.sh does: the reaper's last pass (and its shrinking) after the count hits 0.
    tokio::time::sleep(Duration::from_secs(2)).await;
}

async fn flood(keys: u64, ttl: Duration) {
    let store = MemoryStore::new();
    println!("started: VmRSS {:.1} MiB", rss_mib());
    smaps("started");
    for round in ["", " again"] {
        let took = fill(&store, keys, ttl).await;
        println!(
            "{keys} live{round} (filled in {:.2} s): VmRSS {:.1} MiB, entries {}",
            took.as_secs_f64(),
            rss_mib(),
            store.entry_count()
        );
        smaps("live");
        wait_until_empty(&store).await;
        println!(
            "expired{round}: VmRSS {:.1} MiB, entries {}",
            rss_mib(),
            store.entry_count()
        );
        smaps("expired");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let keys = args
        .next()
        .map_or(1_000_000, |n| n.parse().expect("a key count"));
    let ttl_ms = args
        .next()
        .map_or(10_000, |n| n.parse().expect("a TTL in ms"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    // On the worker, as the bench server's handler runs, so allocations come from the same
    // malloc arena as there.
    runtime
        .block_on(runtime.spawn(flood(keys, Duration::from_millis(ttl_ms))))
        .expect("the flood ran");
}
