//! The chaos run: "never twice, never lost", measured through real faults on one machine.
//!
//! [`Chaos::run`] starts a store set-up ([`StoreSetup`]: Redis, or PostgreSQL) and several
//! instances of the chaos server (`src/bin/chaos_server.rs`, each a process of its own),
//! sends them operations of every guarded kind — most of them duplicates: a form submitted
//! twice with one token, an `Idempotency-Key` retried on another instance, a callback
//! delivered again, a click repeated, concurrent clicks for one lock — and injects
//! [`Fault`]s while they run. Every answer's status and latency is recorded; what a
//! client would retry (a `409` saying the first attempt is still running, a `503`, a
//! connection that failed) is retried, within bounds, on any instance.
//!
//! The servers' handlers note every run they start and every commit they make in a
//! [`Ledger`], one append-only file per process that survives its `SIGKILL`. At the end
//! the run reads the ledgers and counts executions per operation: an operation committed
//! more than once is a double execution, put down to the fault that explains it, or to
//! none. After each fault that could lose data (a store restart, a failover, PostgreSQL's
//! connections terminated) the run sends again operations completed shortly before it
//! and checks that their records are still there: a stored response replayed, a spent
//! token or a window still refusing. The [`Report`] has the figures.
//!
//! On PostgreSQL ([`StoreSetup::Postgres`]) the idempotency routes (`pay`, `callback`)
//! note their commit as a row of [`COMMITS_TABLE`] written in the transaction that
//! completes their record, so the commit and the record are one: an instance killed
//! after that commit leaves a record a retry replays, and a double execution there is
//! unexplained, never put down to the kill. The other routes note their commit in the
//! file as on Redis: the form route counts each token's submission (its token spent
//! before the handler runs, no response kept), the anti-repeat route each window, the
//! lock route each withdrawal (its marker written after its commit, so a kill between
//! the two is the one window it keeps open, on every store).
//!
//! Every process is started by the run and stopped by its pid when the run ends (when
//! it panics too); all traffic stays on 127.0.0.1.

/// `Display` for each enum listed, as its `name()`, and `FromStr` back from that name among
/// its `ALL` variants; for a name none has, an error that says so (`kind` names the enum).
macro_rules! by_name {
    ($($enum:ty: $kind:literal),+ $(,)?) => {$(
        impl std::str::FromStr for $enum {
            type Err = String;

            fn from_str(name: &str) -> Result<Self, String> {
                Self::ALL
                    .into_iter()
                    .find(|variant| variant.name() == name)
                    .ok_or_else(|| format!("no {} named {name:?}", $kind))
            }
        }

        impl std::fmt::Display for $enum {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    )+};
}

mod deployment;
mod ledger;
mod report;
mod workload;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use self::deployment::FaultEvent;
pub use self::ledger::{
    COMMITS_TABLE, Entry, Event, Ledger, LedgerFile, monotonic_ns, note_commit_in, read_ledgers,
};
pub use self::report::{Cause, Latency, Report};

use self::deployment::Deployment;
use self::workload::Driver;

/// The request header that names the operation a request belongs to.
pub const OP_HEADER: &str = "x-op";

/// The request header that names the client (the servers' client identity).
pub const CLIENT_HEADER: &str = "x-client";

/// The guarded routes of the chaos server, one per kind of guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Route {
    /// A one-time form token: `GET /form` issues it, `POST /form` spends it.
    Form,
    /// `#[avoid_repeat]`: one run per client inside the window.
    Repeat,
    /// `Idempotency-Key`: one run per key, its response replayed.
    Pay,
    /// A callback keyed by its content, in one key space for every caller.
    Callback,
    /// A `Lock` around a check-then-act: one withdrawal per ticket.
    Withdraw,
}

impl Route {
    /// Every route.
    pub const ALL: [Self; 5] = [
        Self::Form,
        Self::Repeat,
        Self::Pay,
        Self::Callback,
        Self::Withdraw,
    ];

    /// Its name in ledgers and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Form => "form",
            Self::Repeat => "repeat",
            Self::Pay => "pay",
            Self::Callback => "callback",
            Self::Withdraw => "withdraw",
        }
    }

    /// Its path on the server (the lock route's is `/withdraw/{ticket}`).
    pub fn path(self) -> &'static str {
        match self {
            Self::Form => "/form",
            Self::Repeat => "/repeat",
            Self::Pay => "/pay",
            Self::Callback => "/callback",
            Self::Withdraw => "/withdraw",
        }
    }
}

by_name!(Route: "route", Fault: "fault");

/// Which store the instances share, and how they reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSetup {
    /// One Redis writing its append-only file with `appendfsync always`, so that it
    /// acknowledges nothing it has not written to disk; the instances reach it through a
    /// [`Forwarder`](crate::Forwarder) that the link faults act on.
    Durable,
    /// The same without persistence: a restart comes back empty.
    Volatile,
    /// A master and one replica (both as [`Durable`](Self::Durable)) watched by three
    /// Sentinels, through which the instances find the master.
    Sentinel {
        /// `RedisStoreBuilder::with_replica_acks`: how many replicas must acknowledge each
        /// write that decides something, and within how long; `None` for none.
        replica_acks: Option<(u32, Duration)>,
        /// How long the replication link holds every byte (in each direction), to make
        /// the replica lag behind; zero for a direct link.
        replication_delay: Duration,
    },
    /// One PostgreSQL with its default durability (a commit acknowledged once its log is
    /// on disk), every guard on `PostgresStore`, reached through a
    /// [`Forwarder`](crate::Forwarder) that the link faults act on. The idempotency
    /// routes (`pay`, `callback`) complete their records in the transaction that writes
    /// their commit (a row of the table [`COMMITS_TABLE`] names): their commit window is
    /// closed.
    Postgres,
}

impl StoreSetup {
    /// Whether `route`'s record commits with its side effect, so that no instance kill
    /// can make it run twice.
    pub fn commits_with_record(&self, route: Route) -> bool {
        *self == Self::Postgres && matches!(route, Route::Pay | Route::Callback)
    }

    /// How long an answer on `route` may take (`page`: the form page, `GET /form`) with
    /// the store's `timeout`: the timeout + 100 ms; with replica acks, the bound
    /// `RedisStoreBuilder::with_replica_acks` states — the timeout + `within` per store
    /// call that waits for the replicas and the timeout per other call, one after the
    /// other — + 100 ms. The calls, as the chaos server's guards make them: the form page
    /// puts a token; the form spends one; `repeat` and `withdraw` take a key (`withdraw`
    /// releases it in the background); `pay` and `callback` begin and complete a record.
    pub fn answer_bound(&self, route: Route, page: bool, timeout: Duration) -> Duration {
        let slack = Duration::from_millis(100);
        let Self::Sentinel {
            replica_acks: Some((_, within)),
            ..
        } = self
        else {
            return timeout + slack;
        };
        let (waiting, other) = match (route, page) {
            (Route::Form, true) => (0, 1),
            (Route::Pay | Route::Callback, _) => (2, 0),
            _ => (1, 0),
        };
        (timeout + *within) * waiting + timeout * other + slack
    }

    /// Whether the run's guarantees are asserted on it: the set-ups that lose nothing
    /// they acknowledged.
    pub fn asserted(&self) -> bool {
        matches!(self, Self::Durable | Self::Postgres)
    }
}

impl fmt::Display for StoreSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Durable => f.write_str("Redis, append-only file, appendfsync always"),
            Self::Volatile => f.write_str("Redis without persistence"),
            Self::Sentinel {
                replica_acks,
                replication_delay,
            } => {
                f.write_str("Sentinel, master + 1 replica")?;
                if !replication_delay.is_zero() {
                    write!(
                        f,
                        ", replication link delayed {replication_delay:?} each way"
                    )?;
                }
                match replica_acks {
                    Some((replicas, within)) => {
                        write!(f, ", with_replica_acks({replicas}, {within:?})")
                    }
                    None => f.write_str(", no replica acks"),
                }
            }
            Self::Postgres => f.write_str(
                "PostgreSQL (fsync, synchronous_commit on), records completed in the transaction",
            ),
        }
    }
}

/// A fault the run injects while operations run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// `SIGKILL` Redis, and start it again on its data directory after a pause (from its
    /// append-only file when it has one).
    RedisRestart,
    /// `SIGKILL` an instance while it has requests in flight, and start it again after a
    /// pause. Instances are killed in turn.
    InstanceKill,
    /// `CLIENT PAUSE … ALL` on Redis.
    ClientPause,
    /// The link between the instances and the store (Redis, PostgreSQL) holds every byte
    /// for a while.
    LinkStall,
    /// The link between the instances and the store (Redis, PostgreSQL) resets every
    /// connection, three times 200 ms apart.
    LinkReset,
    /// `SIGKILL` the Sentinel set's master; the Sentinels promote the replica. The
    /// killed master then rejoins as the new master's replica. A delayed replication
    /// link is reset at the same moment, losing what it held, as when the master's
    /// machine fails.
    Failover,
    /// `pg_ctl stop -m immediate` on PostgreSQL (every process quits at once, as in a
    /// crash), and start it again on its data directory after a pause: it recovers from
    /// its log.
    PostgresRestart,
    /// `pg_terminate_backend` of every connection to the test database but the
    /// harness's own: the store's pool, its listener, the handlers' transactions.
    PostgresTerminate,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Self; 8] = [
        Self::RedisRestart,
        Self::InstanceKill,
        Self::ClientPause,
        Self::LinkStall,
        Self::LinkReset,
        Self::Failover,
        Self::PostgresRestart,
        Self::PostgresTerminate,
    ];

    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::RedisRestart => "redis-restart",
            Self::InstanceKill => "instance-kill",
            Self::ClientPause => "client-pause",
            Self::LinkStall => "link-stall",
            Self::LinkReset => "link-reset",
            Self::Failover => "failover",
            Self::PostgresRestart => "postgres-restart",
            Self::PostgresTerminate => "postgres-terminate",
        }
    }

    /// Whether it can be injected into `setup`.
    pub fn fits(self, setup: &StoreSetup) -> bool {
        let redis = matches!(setup, StoreSetup::Durable | StoreSetup::Volatile);
        match self {
            Self::InstanceKill => true,
            Self::Failover => matches!(setup, StoreSetup::Sentinel { .. }),
            Self::RedisRestart | Self::ClientPause => redis,
            Self::LinkStall | Self::LinkReset => redis || *setup == StoreSetup::Postgres,
            Self::PostgresRestart | Self::PostgresTerminate => *setup == StoreSetup::Postgres,
        }
    }

    /// The faults after which completed records are sent again, to see them kept.
    pub fn could_lose_data(self) -> bool {
        matches!(
            self,
            Self::RedisRestart | Self::Failover | Self::PostgresRestart | Self::PostgresTerminate
        )
    }
}

/// One chaos run: what it starts, what it sends, what it breaks. Built with
/// [`Chaos::new`], which sets every field to the full run's value; set fields to change
/// them.
#[derive(Debug, Clone)]
pub struct Chaos {
    /// The chaos server binary.
    pub server: PathBuf,
    /// The store set-up.
    pub setup: StoreSetup,
    /// The faults, injected in this order at even intervals of the requests sent.
    pub faults: Vec<Fault>,
    /// How many requests to send at least (every retry counts); the run goes on until
    /// every fault has been injected too.
    pub requests: u64,
    /// How many server instances (4).
    pub instances: usize,
    /// How many operations run at once (24).
    pub concurrency: usize,
    /// The store's timeout (1 s): no request should wait longer for the store.
    pub store_timeout: Duration,
    /// The idempotency records' lease (10 s).
    pub lease: Duration,
    /// How long a killed store or instance stays down before it is started again (1 s).
    pub down: Duration,
    /// How long `CLIENT PAUSE` and a link stall last (2 s).
    pub pause: Duration,
    /// The quiet time after each fault (3 s), so that one fault's retries settle before
    /// the next.
    pub settle: Duration,
    /// How many operations of each route completed shortly before a fault that could
    /// lose data are sent again after it, to see their records kept (200).
    pub verify: usize,
    /// The seed of every random choice (which instance, which route, how long a pause).
    pub seed: u64,
    /// The run stops sending once this has passed (1 h), whatever is left to send.
    pub deadline: Duration,
}

impl Chaos {
    /// The full run's settings on `setup`, with no faults, for the server binary at
    /// `server`.
    pub fn new(server: impl Into<PathBuf>, setup: StoreSetup) -> Self {
        Self {
            server: server.into(),
            setup,
            faults: Vec::new(),
            requests: 100_000,
            instances: 4,
            concurrency: 24,
            store_timeout: Duration::from_secs(1),
            lease: Duration::from_secs(10),
            down: Duration::from_secs(1),
            pause: Duration::from_secs(2),
            settle: Duration::from_secs(3),
            verify: 200,
            seed: 1,
            deadline: Duration::from_secs(3600),
        }
    }

    /// Runs it: starts the set-up and the instances, sends the requests while injecting
    /// the faults, waits for every operation to settle, reads the ledgers, stops every
    /// process, and reports.
    ///
    /// Blocking harness steps (starting servers, a failover) run in place on the
    /// runtime's thread, so it must be a multi-threaded runtime.
    ///
    /// # Panics
    ///
    /// When a fault does not fit the set-up, a process cannot be started, or the ledgers
    /// cannot be read.
    pub async fn run(self) -> Report {
        if let Some(fault) = self.faults.iter().find(|fault| !fault.fits(&self.setup)) {
            panic!("{fault} cannot be injected into {}", self.setup);
        }
        let started = Instant::now();
        let deadline = started + self.deadline;
        let mut deployment = Deployment::start(&self).await;
        let driver = Arc::new(Driver::new(&self, deployment.instances()));
        driver.until_serving().await;

        let faults_done = Arc::new(AtomicBool::new(self.faults.is_empty()));
        let injecting = {
            let (driver, faults_done) = (Arc::clone(&driver), Arc::clone(&faults_done));
            let (faults, requests, settle) = (self.faults.clone(), self.requests, self.settle);
            tokio::spawn(async move {
                let mut log = Vec::new();
                let every = requests / (faults.len() as u64 + 1);
                for (index, fault) in faults.into_iter().enumerate() {
                    let due = every * (index as u64 + 1);
                    while driver.sent() < due && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    log.push(deployment.inject(fault, &driver).await);
                    tokio::time::sleep(settle).await;
                }
                faults_done.store(true, Ordering::SeqCst);
                (deployment, log)
            })
        };
        // An injector that panicked (a server that did not come back) ends the sending too.
        let faults_over = || faults_done.load(Ordering::SeqCst) || injecting.is_finished();
        driver.send(self.requests, faults_over, deadline).await;
        let (deployment, faults) = injecting.await.expect("the fault injector does not panic");
        let mut ledgers = read_ledgers(deployment.ledger_dir()).expect("the ledgers can be read");
        deployment.add_database_commits(&mut ledgers).await;
        let report = Report::new(&self, &driver, &faults, &ledgers, started.elapsed());
        drop(deployment);
        report
    }
}
