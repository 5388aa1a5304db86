//! A queue consumer that bills each order once, however often the broker delivers it.
//!
//! Orders arrive on the Redis stream `orders`, read by the consumer group `billing`: each
//! consumer takes new messages with `XREADGROUP`, takes over the pending messages of a
//! consumer that died with `XAUTOCLAIM`, and acknowledges a message with `XACK` once it
//! is billed. That is at-least-once delivery: a consumer killed after billing an order
//! and before its `XACK` leaves the message pending, and another consumer bills it again.
//!
//! Billing an order has two effects: a charge through a payment provider (the payments
//! example, which deduplicates by `Idempotency-Key`) and a row in the consumer's SQLite
//! database. [`Mode::Idem`] bills each message inside [`RunOnce`], keyed by the order's id:
//!
//! - the charge goes out with a key derived from the run's record
//!   (`attempt.outbound_key("charge")`): a rerun after a crash sends the same key, and the
//!   provider answers it with the first charge;
//! - the row and the record commit in one transaction (`commit_with_record`): a message
//!   delivered again after that commit is answered from the record, and nothing is
//!   written or charged again.
//!
//! [`Mode::Plain`] does the same work without idem, for comparison: each charge gets a
//! fresh key (idem-client draws one when none is given) and the row commits alone.
//! `scripts/consumer-crash.sh` kills consumers of both modes and counts the effects.

use std::error::Error as StdError;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem_client::{IdempotentRetryMiddleware, OutboundKey, RetryPolicy};
use idem_core::run_once::{Attempt, RunError, RunOnce};
use idem_sqlx::SqliteStore;
use idem_sqlx::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use idem_sqlx::sqlx::{self, SqlitePool};
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimOptions, StreamId, StreamReadOptions};
use redis::{AsyncConnectionConfig, AsyncTypedCommands};
use reqwest_middleware::ClientWithMiddleware;
use serde::{Deserialize, Serialize};

/// The stream the orders arrive on.
pub const STREAM: &str = "orders";

/// The consumer group that bills them.
pub const GROUP: &str = "billing";

/// The field of a stream entry that holds its order, as JSON.
pub const FIELD: &str = "order";

/// The most messages taken at a time.
const BATCH: usize = 10;

/// The consumer's effect on its database: a row per billing. No unique index on the
/// order: one would refuse a second row but not a second charge, and here every billing
/// is a row the crash test can count.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS paid_orders (
    order_id   TEXT    NOT NULL,
    payment_id INTEGER NOT NULL
)";

/// Errors of the consumer and of its work.
pub type Error = Box<dyn StdError + Send + Sync>;

/// An order to bill: the message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    /// The order's own id: the key it is billed once under.
    pub id: String,
    /// The account the provider charges.
    pub customer: String,
    /// In cents.
    pub amount: i64,
}

/// What billing an order came to: what [`RunOnce`] keeps and replays.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Paid {
    /// The provider's payment.
    pub payment_id: i64,
}

/// How the consumer guards its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each message billed inside [`RunOnce`].
    Idem,
    /// Work, then `XACK`: what a consumer without idem does.
    Plain,
}

/// Where the consumer reads, writes and charges.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `redis://host:port/`.
    pub redis: String,
    /// The SQLite file of the rows and of idem's records (created if missing).
    pub db: PathBuf,
    /// The payment provider's base URL (`http://127.0.0.1:3001`).
    pub provider: String,
    /// The consumer's name in the group: one per process.
    pub name: String,
    /// How the work is guarded.
    pub mode: Mode,
    /// How long a billing's record is held without a renewal. A message is taken over
    /// from a consumer once it has been pending for twice this, by when a dead
    /// consumer's record is free.
    pub lease: Duration,
}

/// A consumer of the group: see the [crate docs](crate).
#[derive(Debug)]
pub struct Consumer {
    settings: Settings,
    redis: MultiplexedConnection,
    db: SqlitePool,
    once: RunOnce<SqliteStore>,
    http: ClientWithMiddleware,
    crash: Option<CrashAt>,
    billed: AtomicU64,
}

impl Consumer {
    /// Connects to Redis (creating the stream and the group if missing), the database
    /// (creating its table and idem's) and the provider's client.
    ///
    /// # Errors
    ///
    /// Redis or the database cannot be reached, or a table cannot be created.
    pub async fn connect(settings: Settings) -> Result<Self, Error> {
        // `XREADGROUP` blocks for up to 200 ms: leave it room on a loaded machine.
        let config =
            AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(5)));
        let mut redis = redis::Client::open(settings.redis.as_str())?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        match redis.xgroup_create_mkstream(STREAM, GROUP, "0").await {
            Ok(()) => {}
            Err(error) if error.code() == Some("BUSYGROUP") => {} // another consumer made it
            Err(error) => return Err(error.into()),
        }
        let options = SqliteConnectOptions::new()
            .filename(&settings.db)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let db = SqlitePool::connect_with(options).await?;
        // Immediate: consumers starting at once on a new file wait for each other's table.
        let mut tx = db.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query(SCHEMA).execute(&mut *tx).await?;
        tx.commit().await?;
        let store = SqliteStore::open(&settings.db).await?;
        store.migrate().await?;
        let once = RunOnce::new(store, "billing").with_lease(settings.lease);
        let http = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(IdempotentRetryMiddleware::new(RetryPolicy::new()))
            .build();
        Ok(Self {
            settings,
            redis,
            db,
            once,
            http,
            crash: CrashAt::from_env()?,
            billed: AtomicU64::new(0),
        })
    }

    /// Bills the group's messages until `stop` ends, then waits (up to 5 s) for the
    /// records still being stored.
    ///
    /// # Errors
    ///
    /// Redis fails. What the consumer read and did not acknowledge stays pending, for
    /// another consumer (or this one, started again) to take over.
    pub async fn run(mut self, stop: impl Future<Output = ()>) -> Result<(), Error> {
        let mut stop = std::pin::pin!(stop);
        let mut cursor = "0-0".to_owned();
        loop {
            let messages = tokio::select! {
                () = &mut stop => break,
                messages = self.next_messages(&mut cursor) => messages?,
            };
            let billed = self.bill(messages).await;
            if !billed.is_empty() {
                self.redis.xack(STREAM, GROUP, &billed).await?;
            }
        }
        self.once.drain(Duration::from_secs(5)).await;
        Ok(())
    }

    /// The pending messages of consumers that died, then new ones: up to [`BATCH`] of each.
    async fn next_messages(&mut self, cursor: &mut String) -> Result<Vec<StreamId>, Error> {
        let Settings { name, lease, .. } = &self.settings;
        let idle = u64::try_from((*lease * 2).as_millis())?;
        let claim = StreamAutoClaimOptions::default().count(BATCH);
        let claimed = (self.redis)
            .xautoclaim_options(STREAM, GROUP, name, idle, &*cursor, claim)
            .await?;
        *cursor = claimed.next_stream_id; // "0-0" once the scan is through: it starts again
        let mut messages = claimed.claimed;
        let block = if messages.is_empty() { 200 } else { 1 };
        let read = StreamReadOptions::default()
            .group(GROUP, name)
            .count(BATCH)
            .block(block);
        let new = self.redis.xread_options(&[STREAM], &[">"], &read).await?;
        messages.extend(
            new.into_iter()
                .flat_map(|reply| reply.keys)
                .flat_map(|key| key.ids),
        );
        Ok(messages)
    }

    /// Bills `messages`; returns the entry ids to acknowledge: those billed now or before,
    /// and those that are not orders or reuse another order's id. The others stay
    /// pending, to be delivered again.
    async fn bill(&self, messages: Vec<StreamId>) -> Vec<String> {
        let mut done = Vec::new();
        let mut orders = Vec::new();
        for message in messages {
            let order = message
                .get::<String>(FIELD)
                .map(|json| serde_json::from_str(&json));
            match order {
                Some(Ok(order)) => orders.push((message.id, order)),
                // A real consumer would move it to a dead-letter stream.
                _ => {
                    eprintln!("entry {} is not an order: dropped", message.id);
                    done.push(message.id);
                }
            }
        }
        let (ids, orders): (Vec<String>, Vec<Order>) = orders.into_iter().unzip();
        let outcomes: Vec<Result<Paid, RunError<Error>>> = match self.settings.mode {
            Mode::Idem => {
                let batch = self.once.batch(|order: &Order| order.id.clone());
                let report = batch.run(orders, |order, attempt| self.bill_once(order, attempt));
                let items = report.await.items.into_iter();
                items
                    .map(|item| item.outcome.unwrap_or(Err(RunError::NotKept)))
                    .collect()
            }
            Mode::Plain => {
                let mut outcomes = Vec::new();
                for order in orders {
                    outcomes.push(self.bill_plain(order).await.map_err(RunError::Failed));
                }
                outcomes
            }
        };
        for (id, outcome) in ids.into_iter().zip(outcomes) {
            match outcome {
                Ok(_) => done.push(id),
                // Another consumer bills it now: it acknowledges it.
                Err(RunError::InProgress { .. }) => {}
                // Another order under a billed order's id: a producer's bug, not a retry.
                Err(RunError::Mismatch) => {
                    eprintln!("entry {id} reuses the id of another order: dropped");
                    done.push(id);
                }
                Err(error) => eprintln!("entry {id} not billed, left pending: {error}"),
            }
        }
        done
    }

    /// Bills `order` inside its run: the charge under the run's derived key, then the row
    /// and the record in one transaction.
    async fn bill_once(&self, order: Order, attempt: Attempt) -> Result<Paid, Error> {
        let number = self.billed.fetch_add(1, Ordering::Relaxed) + 1;
        let paid = self
            .charge(&order, Some(attempt.outbound_key("charge")))
            .await?;
        self.crash_at(Point::AfterCharge, number);
        let stored = attempt.stored(&paid)?; // the record is this transaction's to complete
        let mut tx = self.db.begin_with("BEGIN IMMEDIATE").await?;
        insert(&mut tx, &order, &paid).await?;
        let (key, owner, retention) = (attempt.key(), attempt.owner(), attempt.retention());
        SqliteStore::commit_with_record(tx, key, owner, stored, retention).await?;
        self.crash_at(Point::AfterCommit, number);
        Ok(paid)
    }

    /// Bills `order` without idem: the charge under a fresh key, then the row.
    async fn bill_plain(&self, order: Order) -> Result<Paid, Error> {
        let number = self.billed.fetch_add(1, Ordering::Relaxed) + 1;
        let paid = self.charge(&order, None).await?;
        self.crash_at(Point::AfterCharge, number);
        let mut tx = self.db.begin_with("BEGIN IMMEDIATE").await?;
        insert(&mut tx, &order, &paid).await?;
        tx.commit().await?;
        self.crash_at(Point::AfterCommit, number);
        Ok(paid)
    }

    /// `POST /payments` to the provider, under `key` (or a fresh one), retried by
    /// idem-client while the provider has not answered it.
    async fn charge(&self, order: &Order, key: Option<OutboundKey>) -> Result<Paid, Error> {
        let url = format!("{}/payments", self.settings.provider);
        let body = serde_json::json!({ "account": order.customer, "amount": order.amount });
        let mut request = self.http.post(url).json(&body);
        if let Some(key) = key {
            request = request.with_extension(key);
        }
        let answer = request.send().await?;
        if !answer.status().is_success() {
            let status = answer.status();
            return Err(format!("the provider answered {status}: {}", answer.text().await?).into());
        }
        Ok(answer.json().await?)
    }

    /// Ends the process at `point` of the `number`th billing, if the crash switch says so.
    fn crash_at(&self, point: Point, number: u64) {
        if self.crash == Some(CrashAt { point, number }) {
            example_cli::crash::now();
        }
    }
}

/// The row that says `order` is paid.
async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    order: &Order,
    paid: &Paid,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO paid_orders (order_id, payment_id) VALUES (?, ?)")
        .bind(&order.id)
        .bind(paid.payment_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The crash test's switch, for tests only: `IDEM_EXAMPLE_CRASH_AT=after-charge:3` (or
/// `after-commit:3`) ends the consumer with `SIGKILL` right after the provider answered
/// the charge of the 3rd order it bills (or right after its transaction committed, before
/// its `XACK`).
pub const CRASH_AT: &str = "IDEM_EXAMPLE_CRASH_AT";

/// Where in a billing the crash switch ends the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    AfterCharge,
    AfterCommit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CrashAt {
    point: Point,
    number: u64,
}

impl CrashAt {
    fn from_env() -> Result<Option<Self>, Error> {
        let Ok(value) = std::env::var(CRASH_AT) else {
            return Ok(None);
        };
        let (point, number) = value.split_once(':').ok_or("POINT:N")?;
        let point = match point {
            "after-charge" => Point::AfterCharge,
            "after-commit" => Point::AfterCommit,
            other => return Err(format!("{CRASH_AT}: unknown point {other:?}").into()),
        };
        let number = number.parse()?;
        Ok(Some(Self { point, number }))
    }
}
