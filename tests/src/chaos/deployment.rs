//! What a chaos run starts — the store set-up (Redis, or PostgreSQL), the link to it,
//! the server instances — and how it breaks them.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::task::block_in_place;

use super::ledger::{add_commits, create_commits_table};
use super::workload::Driver;
use super::{Chaos, Fault, LedgerFile, StoreSetup, monotonic_ns};
use crate::{
    Forwarder, MASTER_NAME, PostgresServer, RedisSentinels, RedisServer, ServerProcess,
    postgres_url,
};

/// Redis' durability settings for every set-up that keeps data: nothing acknowledged
/// that is not on disk.
const DURABLE: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

/// How many requests an instance must have in flight for its kill to land in the middle
/// of handlers, and how long to wait for that at most.
const IN_FLIGHT_AT_KILL: usize = 4;
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(5);

/// One fault as it was injected.
#[derive(Debug, Clone)]
pub struct FaultEvent {
    /// Which.
    pub fault: Fault,
    /// When it began ([`monotonic_ns`]).
    pub started: u64,
    /// When what it broke was back: the store or the instance started again and
    /// answering, the pause or stall over, the failover done, the backends ended.
    pub ended: u64,
    /// The instance killed and its pid, for [`Fault::InstanceKill`].
    pub killed: Option<(usize, u32)>,
    /// What happened, in words.
    pub note: String,
}

/// The server instances, shared with the driver, which reads their addresses and counts
/// the requests in flight to each.
#[derive(Debug)]
pub(super) struct Instances {
    slots: Vec<Slot>,
}

#[derive(Debug)]
struct Slot {
    name: String,
    base: RwLock<String>,
    process: Mutex<Option<ServerProcess>>,
    in_flight: AtomicUsize,
}

impl Instances {
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// `http://127.0.0.1:PORT` of instance `index` (its last address while it is down).
    pub(super) fn base(&self, index: usize) -> String {
        let base = self.slots[index].base.read();
        base.unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Counts a request to instance `index` in flight until the guard is dropped.
    pub(super) fn enter(&self, index: usize) -> InFlight<'_> {
        let counter = &self.slots[index].in_flight;
        counter.fetch_add(1, Ordering::SeqCst);
        InFlight(counter)
    }

    fn start(&self, index: usize, process: ServerProcess) {
        let slot = &self.slots[index];
        *slot
            .base
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = process.base().to_owned();
        *lock(&slot.process) = Some(process);
    }

    /// Kills instance `index` with `SIGKILL`, by its pid; its pid.
    fn kill(&self, index: usize) -> Option<u32> {
        let process = lock(&self.slots[index].process).take()?;
        let pid = process.pid();
        drop(process);
        Some(pid)
    }
}

/// A request in flight to one instance.
#[derive(Debug)]
pub(super) struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panicking thread held it; the process handle is whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The store set-up.
#[derive(Debug)]
enum Store {
    /// One Redis, reached through a forwarder.
    Standalone {
        server: RedisServer,
        link: Forwarder,
    },
    /// Master, replica and Sentinels; the replica may replicate through a forwarder.
    Sentinel {
        set: RedisSentinels,
        replication: Option<Forwarder>,
    },
    /// One PostgreSQL, reached through a forwarder.
    Postgres {
        server: PostgresServer,
        link: Forwarder,
    },
}

/// How an instance is started.
#[derive(Debug)]
struct Launch {
    server: std::path::PathBuf,
    args: Vec<String>,
}

impl Launch {
    /// Starts the instance `name` and waits until it prints its address.
    fn start(&self, name: &str) -> ServerProcess {
        let mut command = Command::new(&self.server);
        command.args(&self.args).args(["--name", name]);
        block_in_place(|| ServerProcess::start(command))
    }
}

/// Everything a run started; dropping it stops every process, each by its pid.
#[derive(Debug)]
pub(super) struct Deployment {
    store: Store,
    instances: Arc<Instances>,
    launch: Launch,
    ledger: tempfile::TempDir,
    _state: tempfile::TempDir,
    kills: usize,
    down: Duration,
    pause: Duration,
}

impl Deployment {
    /// Starts the store set-up of `chaos` and its instances.
    pub(super) async fn start(chaos: &Chaos) -> Self {
        let ledger = tempfile::tempdir().expect("a directory for the ledgers");
        let state = tempfile::tempdir().expect("a directory for the servers' state");
        let mut args: Vec<String> = vec![
            "--ledger".into(),
            ledger.path().display().to_string(),
            "--state".into(),
            state.path().display().to_string(),
            "--timeout-ms".into(),
            chaos.store_timeout.as_millis().to_string(),
            "--lease-ms".into(),
            chaos.lease.as_millis().to_string(),
            "--lock-lease-ms".into(),
            chaos.lease.as_millis().to_string(),
        ];
        let store = match &chaos.setup {
            StoreSetup::Durable | StoreSetup::Volatile => {
                let config: &[&str] = if chaos.setup == StoreSetup::Durable {
                    &DURABLE
                } else {
                    &[]
                };
                let server = block_in_place(|| RedisServer::start_with(config));
                let link = Forwarder::start(server.port()).await;
                args.extend(["--redis".into(), link.url()]);
                Store::Standalone { server, link }
            }
            StoreSetup::Sentinel {
                replica_acks,
                replication_delay,
            } => {
                let replication = if replication_delay.is_zero() {
                    None
                } else {
                    let link = Forwarder::start(0).await;
                    link.delay(*replication_delay);
                    Some(link)
                };
                let set = block_in_place(|| {
                    RedisSentinels::start_with_link(&DURABLE, |master| {
                        through(replication.as_ref(), master)
                    })
                });
                args.extend([
                    "--sentinels".into(),
                    set.urls().join(","),
                    "--master".into(),
                    MASTER_NAME.into(),
                ]);
                if let Some((replicas, within)) = replica_acks {
                    args.extend([
                        "--replica-acks".into(),
                        replicas.to_string(),
                        "--acks-within-ms".into(),
                        within.as_millis().to_string(),
                    ]);
                }
                Store::Sentinel { set, replication }
            }
            StoreSetup::Postgres => {
                let server = block_in_place(PostgresServer::start_durable);
                // idem's tables and the commits' table, before the instances use them.
                server.store().await;
                let mut db = server.connection().await;
                create_commits_table(&mut db)
                    .await
                    .expect("the commits' table");
                let link = Forwarder::start(server.port()).await;
                args.extend(["--postgres".into(), postgres_url(link.port())]);
                Store::Postgres { server, link }
            }
        };
        let launch = Launch {
            server: chaos.server.clone(),
            args,
        };
        let slots = (1..=chaos.instances)
            .map(|number| Slot {
                name: format!("app{number}"),
                base: RwLock::new(String::new()),
                process: Mutex::new(None),
                in_flight: AtomicUsize::new(0),
            })
            .collect();
        let instances = Arc::new(Instances { slots });
        for (index, slot) in instances.slots.iter().enumerate() {
            instances.start(index, launch.start(&slot.name));
        }
        Self {
            store,
            instances,
            launch,
            ledger,
            _state: state,
            kills: 0,
            down: chaos.down,
            pause: chaos.pause,
        }
    }

    pub(super) fn instances(&self) -> Arc<Instances> {
        Arc::clone(&self.instances)
    }

    pub(super) fn ledger_dir(&self) -> &Path {
        self.ledger.path()
    }

    /// Adds to `ledgers` the commits noted in PostgreSQL, on that set-up.
    ///
    /// # Panics
    ///
    /// When they cannot be read.
    pub(super) async fn add_database_commits(&self, ledgers: &mut Vec<LedgerFile>) {
        if let Store::Postgres { server, .. } = &self.store {
            let mut db = server.connection().await;
            add_commits(&mut db, ledgers)
                .await
                .expect("the commits can be read");
        }
    }

    /// Injects `fault` and waits until what it broke is back; after a fault that could
    /// lose data, has `driver` check the records of operations completed just before.
    ///
    /// # Panics
    ///
    /// When the fault does not fit the set-up, or a server does not come back.
    pub(super) async fn inject(&mut self, fault: Fault, driver: &Arc<Driver>) -> FaultEvent {
        let mut started = monotonic_ns();
        let (mut killed, mut note) = (None, String::new());
        match (fault, &mut self.store) {
            (Fault::RedisRestart, Store::Standalone { server, .. }) => {
                block_in_place(|| server.stop());
                tokio::time::sleep(self.down).await;
                block_in_place(|| server.start_again());
            }
            (Fault::ClientPause, Store::Standalone { server, .. }) => {
                let millis = self.pause.as_millis().to_string();
                block_in_place(|| server.command(&["CLIENT", "PAUSE", &millis, "ALL"]));
                tokio::time::sleep(self.pause).await;
            }
            (Fault::LinkStall, Store::Standalone { link, .. } | Store::Postgres { link, .. }) => {
                link.stall();
                tokio::time::sleep(self.pause).await;
                link.resume();
            }
            (Fault::LinkReset, Store::Standalone { link, .. } | Store::Postgres { link, .. }) => {
                for _ in 0..3 {
                    link.reset();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            (Fault::InstanceKill, _) => {
                let index = self.kills % self.instances.len();
                self.kills += 1;
                let in_flight = self.in_flight_at_kill(index).await;
                started = monotonic_ns();
                let pid = self.instances.kill(index).expect("the instance runs");
                tokio::time::sleep(self.down).await;
                let name = &self.instances.slots[index].name;
                self.instances.start(index, self.launch.start(name));
                killed = Some((index, pid));
                note = format!("{name} (pid {pid}) killed with {in_flight} requests in flight");
            }
            (Fault::PostgresRestart, Store::Postgres { server, .. }) => {
                block_in_place(|| server.stop());
                tokio::time::sleep(self.down).await;
                let recovering = Instant::now();
                block_in_place(|| server.start_again());
                note = format!(
                    "recovered from its log in {:.1} s",
                    recovering.elapsed().as_secs_f64()
                );
            }
            (Fault::PostgresTerminate, Store::Postgres { server, .. }) => {
                let ended = server.terminate_backends().await;
                note = format!("{ended} backends terminated");
            }
            (Fault::Failover, Store::Sentinel { set, replication }) => {
                // A killed process' socket still sends what it had written; the bytes a
                // slow link holds are lost when the master's machine goes, as here.
                if let Some(link) = replication {
                    link.reset();
                }
                let took = block_in_place(|| set.fail_over());
                started = monotonic_ns() - u64::try_from(took.as_nanos()).unwrap_or(0);
                let rejoining = Instant::now();
                block_in_place(|| set.rejoin(|master| through(replication.as_ref(), master)));
                note = format!(
                    "promoted in {:.1} s; the old master rejoined as a replica in {:.1} s",
                    took.as_secs_f64(),
                    rejoining.elapsed().as_secs_f64()
                );
            }
            (fault, store) => panic!("{fault} does not fit {store:?}"),
        }
        let ended = monotonic_ns();
        if fault.could_lose_data() {
            driver.verify(started).await;
        }
        FaultEvent {
            fault,
            started,
            ended,
            killed,
            note,
        }
    }

    /// Waits until instance `index` is in the middle of handlers (bounded); how many
    /// requests it had in flight.
    async fn in_flight_at_kill(&self, index: usize) -> usize {
        let counter = &self.instances.slots[index].in_flight;
        let until = Instant::now() + IN_FLIGHT_WAIT;
        loop {
            let in_flight = counter.load(Ordering::SeqCst);
            if in_flight >= IN_FLIGHT_AT_KILL || Instant::now() >= until {
                return in_flight;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The port a replica reaches the master on `master` through: `link`'s, pointed at it,
/// or the master's own.
fn through(link: Option<&Forwarder>, master: u16) -> u16 {
    match link {
        Some(link) => {
            link.redirect(master);
            link.port()
        }
        None => master,
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        // The driver may still hold the instances; their processes stop here regardless.
        for index in 0..self.instances.len() {
            self.instances.kill(index);
        }
    }
}
