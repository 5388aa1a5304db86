//! Operations per second of each operation of the SQL stores (`idem_sqlx`), on PostgreSQL
//! and on SQLite, beside a bare `INSERT` and a bare single-row `DELETE` on the same
//! database, the same pool and the same concurrency, in the same run.
//!
//! Run with `cargo bench -p idem-tests --bench sql_store`. It starts a PostgreSQL server of
//! its own (the test harness's: `fsync`, `synchronous_commit` and `full_page_writes` off)
//! and a SQLite file in a temporary directory ([`SqliteStore::open`]: one connection, WAL,
//! SQLite's default `synchronous = FULL`), then, round by round and database by database,
//! runs every case with `IDEM_BENCH_TASKS` tasks sharing one store, and prints markdown
//! tables: operations per second, round by round and the median, and each case's ratio to
//! the bare `INSERT`.
//!
//! The cases, in order (each on keys no earlier case or round used, so what is timed is a
//! new request's path): `bare INSERT` of a text primary key into a table of the bench's
//! own, `bare DELETE` of those rows one by one; `acquire` (a free key, no fencing) and
//! `release` of those keys; `acquire fenced` and its `release`; `put_token` (a token in a
//! scope of its own) and `consume_token` of it; `begin_record` (a free key) and
//! `complete_record` of it with a 512-byte response. The purge is off, and nothing
//! expires during a run.
//!
//! Settings, from the environment: `IDEM_BENCH_TASKS` (default 16), `IDEM_BENCH_OPS`
//! (operations per case and round, default 20000), `IDEM_BENCH_ROUNDS` (default 3). Under
//! `cargo test` (no `--bench` argument) it makes one small round, to check that it works.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_core::{Acquire, Begin, Fencing, Fingerprint, Key, Owner, Store};
use idem_sqlx::{SqlBackend, SqlStore, SqliteStore};
use idem_tests::{PostgresServer, benching, env_number};
use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

const TTL: Duration = Duration::from_secs(600);
const RESPONSE_LEN: usize = 512;

#[derive(Debug, Clone, Copy)]
struct Settings {
    tasks: u64,
    ops: u64,
    rounds: usize,
}

impl Settings {
    fn from_env() -> Self {
        let (ops, rounds) = if benching() { (20_000, 3) } else { (200, 1) };
        let settings = Self {
            tasks: env_number("IDEM_BENCH_TASKS", 16),
            ops: env_number("IDEM_BENCH_OPS", ops),
            rounds: env_number("IDEM_BENCH_ROUNDS", rounds),
        };
        assert!(
            settings.tasks > 0 && settings.ops > 0 && settings.rounds > 0,
            "IDEM_BENCH_TASKS, IDEM_BENCH_OPS and IDEM_BENCH_ROUNDS must be positive"
        );
        settings
    }
}

const CASES: [&str; 10] = [
    "bare INSERT",
    "bare DELETE",
    "acquire",
    "release",
    "acquire fenced",
    "release (fenced)",
    "put_token",
    "consume_token",
    "begin_record",
    "complete_record",
];

/// Runs `op(i)` for `i` in `0..ops`, split over `tasks` tasks that each run their share
/// one after the other; operations per second.
async fn rate<F, Fut>(settings: Settings, op: F) -> f64
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let tasks: Vec<_> = (0..settings.tasks)
        .map(|task| {
            let op = Arc::clone(&op);
            tokio::spawn(async move {
                let mut i = task;
                while i < settings.ops {
                    op(i).await;
                    i += settings.tasks;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a bench task");
    }
    settings.ops as f64 / started.elapsed().as_secs_f64()
}

fn key(round: usize, case: &str, i: u64) -> Key {
    Key::new(format!("{case}-{round}-{i}")).expect("a valid key")
}

/// Runs `sql` with `value` bound to `$1`.
async fn statement<DB>(pool: Pool<DB>, sql: &'static str, value: String)
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    let done = pool.execute(sqlx::query(sql).bind(value));
    done.await.expect("a bare statement");
}

/// One round of every case on `store`; operations per second, in the order of [`CASES`].
async fn round<DB>(store: &SqlStore<DB>, settings: Settings, round: usize) -> Vec<f64>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    let mut rates = Vec::new();
    for sql in [
        "INSERT INTO bench_bare (k) VALUES ($1)",
        "DELETE FROM bench_bare WHERE k = $1",
    ] {
        let pool = store.pool().clone();
        let bare = move |i| statement(pool.clone(), sql, format!("{round}-{i}"));
        rates.push(rate(settings, bare).await);
    }
    let owner = Owner::random();
    for (case, fencing) in [("lock", Fencing::Off), ("fenced", Fencing::On)] {
        let (locks, holder) = (store.clone(), owner.clone());
        rates.push(
            rate(settings, move |i| {
                let (store, holder) = (locks.clone(), holder.clone());
                async move {
                    let lock = key(round, case, i);
                    let acquired = store.acquire(&lock, &holder, TTL, fencing).await;
                    assert!(matches!(acquired, Ok(Acquire::Acquired { .. })));
                }
            })
            .await,
        );
        let (locks, holder) = (store.clone(), owner.clone());
        rates.push(
            rate(settings, move |i| {
                let (store, holder) = (locks.clone(), holder.clone());
                async move {
                    let lock = key(round, case, i);
                    assert!(store.release(&lock, &holder).await.expect("release"));
                }
            })
            .await,
        );
    }
    let token = store.clone();
    rates.push(
        rate(settings, move |i| {
            let store = token.clone();
            async move {
                let (scope, token) = (key(round, "scope", i), key(round, "token", i));
                store
                    .put_token(&scope, &token, TTL, 16)
                    .await
                    .expect("put_token");
            }
        })
        .await,
    );
    let token = store.clone();
    rates.push(
        rate(settings, move |i| {
            let store = token.clone();
            async move {
                let (scope, token) = (key(round, "scope", i), key(round, "token", i));
                assert!(store.consume_token(&scope, &token).await.expect("consume"));
            }
        })
        .await,
    );
    let fingerprint = Fingerprint::of(["POST", "/orders", r#"{"item":"book"}"#]);
    let (records, holder) = (store.clone(), owner.clone());
    rates.push(
        rate(settings, move |i| {
            let (store, holder) = (records.clone(), holder.clone());
            async move {
                let record = key(round, "record", i);
                let begun = store
                    .begin_record(&record, &holder, &fingerprint, TTL)
                    .await;
                assert_eq!(begun.expect("begin_record"), Begin::Started);
            }
        })
        .await,
    );
    let (records, holder) = (store.clone(), owner);
    let response = Bytes::from(vec![b'x'; RESPONSE_LEN]);
    rates.push(
        rate(settings, move |i| {
            let (store, holder, response) = (records.clone(), holder.clone(), response.clone());
            async move {
                let record = key(round, "record", i);
                let completed = store.complete_record(&record, &holder, response, TTL).await;
                assert!(completed.expect("complete_record"));
            }
        })
        .await,
    );
    rates
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The markdown table of one database's rounds.
fn report(database: &str, rounds: &[Vec<f64>]) {
    println!("\n### {database}\n");
    let heads: Vec<String> = (1..=rounds.len()).map(|r| format!("round {r}")).collect();
    println!(
        "| case | {} | median ops/s | ÷ bare INSERT |",
        heads.join(" | ")
    );
    println!("|---|{}---:|---:|", "---:|".repeat(rounds.len()));
    let insert = median(&rounds.iter().map(|r| r[0]).collect::<Vec<_>>());
    for (i, case) in CASES.iter().enumerate() {
        let per_round: Vec<f64> = rounds.iter().map(|r| r[i]).collect();
        let cells: Vec<String> = per_round.iter().map(|ops| format!("{ops:.0}")).collect();
        let median = median(&per_round);
        println!(
            "| {case} | {} | {median:.0} | {:.2} |",
            cells.join(" | "),
            median / insert
        );
    }
}

async fn bench<DB>(database: &str, store: SqlStore<DB>, create: &'static str, settings: Settings)
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    store.migrate().await.expect("idem's tables");
    store
        .pool()
        .execute(create)
        .await
        .expect("the bare statements' table");
    let mut rounds = Vec::new();
    for r in 0..settings.rounds {
        rounds.push(round(&store, settings, r).await);
    }
    report(database, &rounds);
}

fn main() {
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "{} tasks, {} operations per case and round, {} rounds",
        settings.tasks, settings.ops, settings.rounds
    );
    let server = PostgresServer::start();
    let dir = tempfile::tempdir().expect("a directory for SQLite");
    runtime.block_on(async {
        let postgres = server
            .store_with(SqlStore::builder().with_purge_interval(None))
            .await;
        bench(
            "PostgreSQL",
            postgres,
            "CREATE TABLE bench_bare (k text COLLATE \"C\" PRIMARY KEY)",
            settings,
        )
        .await;
        let sqlite = SqliteStore::builder()
            .with_purge_interval(None)
            .open(dir.path().join("bench.db"))
            .await
            .expect("a SQLite file");
        bench(
            "SQLite",
            sqlite,
            "CREATE TABLE bench_bare (k TEXT PRIMARY KEY)",
            settings,
        )
        .await;
    });
}
