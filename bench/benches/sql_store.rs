//! Operations per second of each operation of the SQL stores (`idem_sqlx`), on PostgreSQL
//! and on SQLite, beside a bare `INSERT` and a bare single-row `DELETE` on the same
//! database, the same pool and the same concurrency, in the same run.
//!
//! Run with `cargo bench -p idem-bench --bench sql_store`. It starts a PostgreSQL server of
//! its own (the test harness's: `fsync`, `synchronous_commit` and `full_page_writes` off)
//! and SQLite files in a temporary directory (one as [`SqliteStore::open`] makes it: one
//! connection, WAL, SQLite's default `synchronous = FULL`, which syncs the log at every
//! commit; one the same but for `synchronous = NORMAL`, which syncs it at checkpoints),
//! then, round by round and database by database,
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
use idem_bench::BenchRounds;
use idem_core::store::Fencing;
use idem_core::{Acquire, Begin, Fingerprint, Key, LockStore, Owner, RecordStore, TokenStore};
use idem_sqlx::{SqlBackend, SqlStore, SqliteStore};
use idem_tests::{PostgresServer, median};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

const TTL: Duration = Duration::from_secs(600);
const RESPONSE_LEN: usize = 512;

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

/// What every case of one round works with.
struct Round<DB: sqlx::Database> {
    store: SqlStore<DB>,
    number: usize,
    owner: Owner,
    fingerprint: Fingerprint,
    response: Bytes,
}

impl<DB: sqlx::Database> Round<DB> {
    /// The `i`th key of `case` in this round.
    fn key(&self, case: &str, i: u64) -> Key {
        Key::new(format!("{case}-{}-{i}", self.number)).expect("a valid key")
    }
}

/// Runs `op(round, i)` for `i` in `0..ops`, split over `tasks` tasks that each run their
/// share one after the other; operations per second.
async fn rate<DB, F, Fut>(settings: BenchRounds, round: &Arc<Round<DB>>, op: F) -> f64
where
    DB: SqlBackend,
    F: Fn(Arc<Round<DB>>, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let tasks: Vec<_> = (0..settings.tasks)
        .map(|task| {
            let (op, round) = (Arc::clone(&op), Arc::clone(round));
            tokio::spawn(async move {
                let mut i = task;
                while i < settings.ops {
                    op(Arc::clone(&round), i).await;
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
async fn round<DB>(store: &SqlStore<DB>, settings: BenchRounds, number: usize) -> Vec<f64>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    let round = &Arc::new(Round {
        store: store.clone(),
        number,
        owner: Owner::random(),
        fingerprint: Fingerprint::of(["POST", "/orders", r#"{"item":"book"}"#]),
        response: Bytes::from(vec![b'x'; RESPONSE_LEN]),
    });
    let mut rates = Vec::new();
    for sql in [
        "INSERT INTO bench_bare (k) VALUES ($1)",
        "DELETE FROM bench_bare WHERE k = $1",
    ] {
        let bare = move |r: Arc<Round<DB>>, i| {
            statement(r.store.pool().clone(), sql, r.key("bare", i).to_string())
        };
        rates.push(rate(settings, round, bare).await);
    }
    for (case, fencing) in [("lock", Fencing::Off), ("fenced", Fencing::On)] {
        let acquire = move |r: Arc<Round<DB>>, i| async move {
            let acquired = r
                .store
                .acquire(&r.key(case, i), &r.owner, TTL, fencing)
                .await;
            assert!(matches!(acquired, Ok(Acquire::Acquired { .. })));
        };
        rates.push(rate(settings, round, acquire).await);
        let release = move |r: Arc<Round<DB>>, i| async move {
            let released = r.store.release(&r.key(case, i), &r.owner).await;
            assert!(released.expect("release"));
        };
        rates.push(rate(settings, round, release).await);
    }
    let put = |r: Arc<Round<DB>>, i| async move {
        let (scope, token) = (r.key("scope", i), r.key("token", i));
        let put = r.store.put_token(&scope, &token, TTL, 16).await;
        put.expect("put_token");
    };
    rates.push(rate(settings, round, put).await);
    let consume = |r: Arc<Round<DB>>, i| async move {
        let (scope, token) = (r.key("scope", i), r.key("token", i));
        assert!(
            r.store
                .consume_token(&scope, &token)
                .await
                .expect("consume")
        );
    };
    rates.push(rate(settings, round, consume).await);
    let begin = |r: Arc<Round<DB>>, i| async move {
        let record = r.key("record", i);
        let begun = r
            .store
            .begin_record(&record, &r.owner, &r.fingerprint, TTL)
            .await;
        assert_eq!(begun.expect("begin_record"), Begin::Started);
    };
    rates.push(rate(settings, round, begin).await);
    let complete = |r: Arc<Round<DB>>, i| async move {
        let (record, response) = (r.key("record", i), r.response.clone());
        let completed = r
            .store
            .complete_record(&record, &r.owner, response, TTL)
            .await;
        assert!(completed.expect("complete_record"));
    };
    rates.push(rate(settings, round, complete).await);
    rates
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

async fn bench<DB>(database: &str, store: SqlStore<DB>, create: &'static str, settings: BenchRounds)
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
    let settings = BenchRounds::from_env(16, 20_000, 200);
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
            .open(dir.path().join("full.db"))
            .await
            .expect("a SQLite file");
        let create = "CREATE TABLE bench_bare (k TEXT PRIMARY KEY)";
        bench("SQLite, synchronous = FULL", sqlite, create, settings).await;
        // The same pool as `open` makes, but syncing the WAL at checkpoints only: what a
        // commit costs besides the disk's flush.
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("normal.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .expect("a SQLite file");
        let sqlite = SqliteStore::builder().with_purge_interval(None).build(pool);
        bench("SQLite, synchronous = NORMAL", sqlite, create, settings).await;
    });
}
