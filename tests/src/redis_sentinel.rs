//! A Redis master, one replica and three Sentinels watching them, all on loopback and
//! started by the harness: for the store's Sentinel support and its behaviour through a
//! failover.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use idem_redis::{RedisStore, RedisStoreBuilder};

use crate::redis_server::{
    RedisServer, lazy_store, redis_server_binary, unused_port, wait_until_ready,
};

/// The name the Sentinels know the master by.
pub const MASTER_NAME: &str = "idem-master";

/// How long a Sentinel waits before it counts an unanswering master as down.
const DOWN_AFTER: Duration = Duration::from_millis(500);

/// A master, its replica and three Sentinels (quorum 2); every process is stopped when
/// this is dropped.
#[derive(Debug)]
pub struct RedisSentinels {
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<Sentinel>,
    /// The ports of the members this set killed, held so that no other test's server
    /// starts there while the Sentinels still name them: a Sentinel that finds a server
    /// where its replica was tells it to replicate its master, which wipes its data.
    dead_ports: Vec<TcpListener>,
}

/// One `redis-server --sentinel` process, killed when dropped.
#[derive(Debug)]
struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisSentinels {
    /// Starts the master, a replica of it, and three Sentinels, and waits until the
    /// replica is in sync and every Sentinel names the master.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing (saying how to install it), or a process does not
    /// come up within 10 s.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// As [`start`](Self::start), with extra configuration for the master and the replica
    /// (`&["--appendonly", "yes"]`).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(config: &[&str]) -> Self {
        Self::start_with_link(config, |master| master)
    }

    /// As [`start_with`](Self::start_with), with the replica reaching its master through
    /// the loopback port `link` returns for the master's port: a
    /// [`Forwarder`](crate::Forwarder) that delays the replication stream, say.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with_link(config: &[&str], link: impl FnOnce(u16) -> u16) -> Self {
        // A replica's first sync would otherwise wait 5 s for more replicas to join it.
        let mut master_config = vec!["--repl-diskless-sync-delay", "0"];
        master_config.extend_from_slice(config);
        let master = RedisServer::start_with(&master_config);
        let master_port = link(master.port()).to_string();
        let mut replica_config = config.to_vec();
        replica_config.extend(["--replicaof", "127.0.0.1", &master_port]);
        let replica = RedisServer::start_with(&replica_config);
        wait_for(
            Duration::from_secs(10),
            "the replica syncs with the master",
            || {
                replica
                    .query::<String>(&["INFO", "replication"])
                    .contains("master_link_status:up")
            },
        );
        let sentinels = (0..3).map(|_| Sentinel::start(master.port())).collect();
        let set = Self {
            master,
            replica,
            sentinels,
            dead_ports: Vec::new(),
        };
        wait_for(
            Duration::from_secs(10),
            "every Sentinel names the master",
            || {
                set.sentinels
                    .iter()
                    .all(|sentinel| sentinel.master_port() == Some(set.master.port()))
            },
        );
        set
    }

    /// The Sentinels' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|sentinel| format!("redis://127.0.0.1:{}", sentinel.port))
            .collect()
    }

    /// A store through the Sentinels, with the default settings.
    ///
    /// # Panics
    ///
    /// Never: the URLs are well formed.
    pub fn store(&self) -> RedisStore {
        self.store_with(RedisStore::builder())
    }

    /// A store through the Sentinels, with `builder`'s settings.
    ///
    /// # Panics
    ///
    /// Never: the URLs are well formed.
    pub fn store_with(&self, builder: RedisStoreBuilder) -> RedisStore {
        lazy_store(
            builder,
            idem_redis::RedisServer::sentinel(self.urls(), MASTER_NAME),
        )
    }

    /// The master the set started with.
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// The master the set started with, to stop it.
    pub fn master_mut(&mut self) -> &mut RedisServer {
        &mut self.master
    }

    /// The replica the set started with.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// Kills the replica (`SIGKILL`): the master goes on without it.
    pub fn stop_replica(&mut self) {
        self.replica.stop();
        self.hold_port(self.replica.port());
    }

    fn hold_port(&mut self, port: u16) {
        if let Ok(held) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            self.dead_ports.push(held);
        }
    }

    /// After [`fail_over`](Self::fail_over): starts the killed master again (its data
    /// directory, its configuration) as a replica of the promoted one, reached through
    /// the port `link` returns for the promoted one's, and swaps the two, so that
    /// [`master`](Self::master) names the promoted server and [`replica`](Self::replica)
    /// the one started again; waits until it is in sync and every Sentinel lists it as a
    /// healthy replica, so that the set can fail over once more.
    ///
    /// # Panics
    ///
    /// When it does not come up, sync, or reach every Sentinel within 30 s.
    pub fn rejoin(&mut self, link: impl FnOnce(u16) -> u16) {
        let port = self.master.port();
        self.dead_ports.retain(|held| {
            held.local_addr()
                .map_or(true, |address| address.port() != port)
        });
        let master_port = link(self.replica.port()).to_string();
        self.master
            .start_again_with(&["--replicaof", "127.0.0.1", &master_port]);
        std::mem::swap(&mut self.master, &mut self.replica);
        let (master, replica) = (self.master.port(), self.replica.port());
        wait_for(
            Duration::from_secs(30),
            "the old master rejoins as a replica every Sentinel counts on",
            || {
                self.replica
                    .query::<String>(&["INFO", "replication"])
                    .contains("master_link_status:up")
                    && self.sentinels.iter().all(|sentinel| {
                        sentinel.master_port() == Some(master)
                            && sentinel.has_healthy_replica(replica)
                    })
            },
        );
    }

    /// The master's port as the first Sentinel answers it now.
    pub fn current_master_port(&self) -> Option<u16> {
        self.sentinels.first().and_then(Sentinel::master_port)
    }

    /// Kills the master (`SIGKILL`) and waits until every Sentinel names the replica as
    /// the master; how long that took.
    ///
    /// # Panics
    ///
    /// When the Sentinels have not promoted the replica within 30 s.
    pub fn fail_over(&mut self) -> Duration {
        let killed_at = Instant::now();
        self.master.stop();
        self.hold_port(self.master.port());
        let replica = self.replica.port();
        wait_for(
            Duration::from_secs(30),
            "the Sentinels promote the replica",
            || {
                self.sentinels
                    .iter()
                    .all(|sentinel| sentinel.master_port() == Some(replica))
                    && self
                        .replica
                        .query::<String>(&["INFO", "replication"])
                        .contains("role:master")
            },
        );
        killed_at.elapsed()
    }
}

impl Sentinel {
    fn start(master_port: u16) -> Self {
        for _ in 0..10 {
            let dir = tempfile::tempdir().expect("a temporary directory for a Sentinel");
            let port = unused_port();
            let config = dir.path().join("sentinel.conf");
            write_config(&config, port, dir.path(), master_port);
            let binary = redis_server_binary();
            let child = Command::new(&binary)
                .arg(&config)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|error| panic!("could not run {}: {error}", binary.display()));
            let mut sentinel = Self {
                child,
                port,
                _dir: dir,
            };
            if wait_until_ready(&mut sentinel.child, sentinel.port, "a Sentinel") {
                return sentinel;
            }
        }
        panic!("a Sentinel did not start on any of 10 ports");
    }

    fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
        let mut command = redis::cmd(args[0]);
        for arg in &args[1..] {
            command.arg(*arg);
        }
        command.query(&mut conn)
    }

    /// Whether this Sentinel lists the server on `port` as a replica it could promote:
    /// not down, and linked to its master.
    fn has_healthy_replica(&self, port: u16) -> bool {
        let Ok(replicas) = self.query::<Vec<Vec<String>>>(&["SENTINEL", "replicas", MASTER_NAME])
        else {
            return false;
        };
        let port = port.to_string();
        replicas.iter().any(|fields| {
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0] == name)
                    .and_then(|pair| pair.get(1))
                    .map(String::as_str)
            };
            field("port") == Some(port.as_str())
                && field("flags") == Some("slave")
                && field("master-link-status") == Some("ok")
        })
    }

    /// The master's port as this Sentinel knows it.
    fn master_port(&self) -> Option<u16> {
        let address: Vec<String> = self
            .query(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
            .ok()?;
        address.get(1)?.parse().ok()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        // Already gone is fine; there is nothing else to do about it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(path: &Path, port: u16, dir: &Path, master_port: u16) {
    let config = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         dir {dir}\n\
         logfile {log}\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
         sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
         sentinel failover-timeout {MASTER_NAME} 5000\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n",
        dir = dir.display(),
        log = dir.join("sentinel.log").display(),
        down = DOWN_AFTER.as_millis(),
    );
    std::fs::write(path, config).expect("a Sentinel's configuration file");
}

/// Waits for `condition`, checking every 20 ms.
///
/// # Panics
///
/// When `within` passes first, naming `what` was awaited.
fn wait_for(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}
