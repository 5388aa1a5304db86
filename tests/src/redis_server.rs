//! Real `redis-server` processes for tests and benchmarks: each on a free loopback port,
//! with its own temporary data directory, no persistence, stopped when dropped.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use idem_redis::{RedisStore, RedisStoreBuilder};

const INSTALL_HINT: &str = "\
redis-server was not found: the tests start a real Redis of their own.
  Looked for: $IDEM_REDIS_SERVER, then `redis-server` on PATH.
  Install it: `apt-get install redis-server` (Debian/Ubuntu), `brew install redis` (macOS),
  or run `bash scripts/test.sh`, which installs it where it can and then runs every test.";

/// The `redis-server` binary: `$IDEM_REDIS_SERVER`, or the one on `PATH`.
///
/// # Panics
///
/// When there is none, with a message that says how to install it.
pub fn redis_server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("IDEM_REDIS_SERVER") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain(["/usr/bin", "/usr/sbin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join("redis-server"))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{INSTALL_HINT}"))
}

/// A loopback port nothing listens on (at the moment of asking).
pub fn unused_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("the OS hands out a free loopback port")
}

/// A `RedisStore` for a port on this machine where nothing listens, answering within
/// `timeout`: Redis down, for the cases about outages. Built lazily, it fails on first use.
///
/// # Panics
///
/// When the store cannot be built.
pub fn unreachable_redis_store(timeout: Duration) -> RedisStore {
    lazy_store(
        RedisStore::builder().with_timeout(timeout),
        idem_redis::RedisServer::url(format!("redis://127.0.0.1:{}/", unused_port())),
    )
}

/// A port that is free, and whose cluster bus port (`port + 10000`) is free as well.
fn unused_cluster_port() -> u16 {
    loop {
        let port = unused_port();
        if let Some(bus) = port.checked_add(10_000)
            && TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok()
        {
            return port;
        }
    }
}

/// One `redis-server` process, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    extra: Vec<String>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a standalone server.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing (saying how to install it) or does not come up.
    pub fn start() -> Self {
        Self::spawn(&[], unused_port)
    }

    /// Starts a standalone server with extra configuration, as command-line options:
    /// `&["--maxmemory-policy", "allkeys-lru"]`.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing (saying how to install it) or does not come up.
    pub fn start_with(config: &[&str]) -> Self {
        Self::spawn(config, unused_port)
    }

    fn spawn(extra: &[&str], pick_port: fn() -> u16) -> Self {
        // Another process may take the port between asking and binding: then try anew.
        for _ in 0..10 {
            let (port, dir) = (
                pick_port(),
                tempfile::tempdir().expect("a temporary directory for Redis"),
            );
            let mut server = Self {
                child: launch(port, dir.path(), extra),
                port,
                extra: extra.iter().map(|arg| (*arg).to_owned()).collect(),
                dir,
            };
            if wait_until_ready(&mut server.child, server.port, "redis-server") {
                return server;
            }
        }
        panic!("redis-server did not start on any of 10 ports");
    }

    /// Kills the server and starts a new one on the same port: the data and the script
    /// cache are gone, and every client connection is cut, as in a real restart.
    ///
    /// # Panics
    ///
    /// When the new server does not come up.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Kills the server (`SIGKILL`, as a crash): clients meet refused connections until
    /// [`start_again`](Self::start_again). With `--appendonly yes` the data written so far
    /// is in its append-only file, in its data directory.
    pub fn stop(&mut self) {
        // Already gone is fine; there is nothing else to do about it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on its port and data directory, after
    /// [`stop`](Self::stop): with `--appendonly yes`, from its append-only file.
    ///
    /// # Panics
    ///
    /// When the new server does not come up.
    pub fn start_again(&mut self) {
        self.start_again_with(&[]);
    }

    /// As [`start_again`](Self::start_again), with `more` configuration for this run
    /// only (`&["--replicaof", "127.0.0.1", "6380"]`).
    ///
    /// # Panics
    ///
    /// When the new server does not come up.
    pub fn start_again_with(&mut self, more: &[&str]) {
        let mut extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        extra.extend_from_slice(more);
        self.child = launch(self.port, self.dir.path(), &extra);
        assert!(
            wait_until_ready(&mut self.child, self.port, "redis-server"),
            "redis-server did not start again on port {}",
            self.port
        );
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A [`RedisStore`] on this server with the default settings.
    pub fn store(&self) -> RedisStore {
        self.store_with(RedisStore::builder())
    }

    /// A [`RedisStore`] on this server with the given settings.
    pub fn store_with(&self, builder: RedisStoreBuilder) -> RedisStore {
        lazy_store(builder, idem_redis::RedisServer::url(self.url()))
    }

    /// Runs one command on a connection of its own.
    ///
    /// # Panics
    ///
    /// When the command fails.
    pub fn command(&self, args: &[&str]) -> redis::Value {
        self.query(args)
    }

    /// Runs one command on a connection of its own and reads its answer as `T`.
    ///
    /// # Panics
    ///
    /// When the command fails or its answer is not a `T`.
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        query(self.port, args)
            .unwrap_or_else(|error| panic!("redis command {args:?} failed: {error}"))
    }

    /// How many times each command ran since the server started, from
    /// `INFO commandstats`: `{"set": 100, "evalsha": 3, …}`. Commands that scripts call
    /// count under their own names too.
    pub fn command_calls(&self) -> BTreeMap<String, u64> {
        let info: String = self.query(&["INFO", "commandstats"]);
        info.lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats
                    .split(',')
                    .find_map(|field| field.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.parse().ok()?))
            })
            .collect()
    }

    /// Calls per command since `before` (an earlier [`command_calls`](Self::command_calls)),
    /// leaving out the `INFO` that read them: `{"set": 100}`.
    pub fn command_calls_since(&self, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
        self.command_calls()
            .into_iter()
            .filter(|(name, _)| name != "info")
            .map(|(name, calls)| {
                let since = calls - before.get(&name).copied().unwrap_or(0);
                (name, since)
            })
            .filter(|(_, calls)| *calls > 0)
            .collect()
    }

    /// One number of an `INFO` section, such as `("clients", "blocked_clients")`.
    ///
    /// # Panics
    ///
    /// When the section has no such field, or it is not a number.
    pub fn info_number(&self, section: &str, field: &str) -> u64 {
        let info: String = self.query(&["INFO", section]);
        info_field(&info, field)
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("INFO {section} has no number {field}: {info}"))
    }

    /// Every key on the server (test servers hold a handful).
    pub fn keys(&self) -> Vec<String> {
        let client = redis::Client::open(self.url()).expect("the test server's URL");
        let mut conn = client
            .get_connection()
            .expect("a connection to the test server");
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
        keys.sort();
        keys
    }
}

/// The value of `field` in an `INFO` answer (`field:value` lines).
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Waits for the server `child` runs on `port` to answer `PING`; `false` if it exited first
/// (its port was taken).
///
/// # Panics
///
/// When it does not answer within 10 s; `what` names it in the message.
pub(crate) fn wait_until_ready(child: &mut Child, port: u16, what: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        if answers_ping(port) {
            return true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    panic!("{what} on port {port} did not answer PING within 10 s");
}

fn answers_ping(port: u16) -> bool {
    query(port, &["PING"]).is_ok_and(|pong: String| pong == "PONG")
}

/// `args` sent to the server on `port`, without the client's `CLIENT SETINFO` on
/// connecting, which servers from 7.2 on (and Valkey) count in `INFO commandstats` next to
/// the commands being counted.
fn query<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> redis::RedisResult<T> {
    let info =
        redis::IntoConnectionInfo::into_connection_info(format!("redis://127.0.0.1:{port}/"))?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
    let mut cmd = redis::Cmd::new();
    for arg in args {
        cmd.arg(*arg);
    }
    cmd.query(&mut conn)
}

fn launch(port: u16, dir: &Path, extra: &[&str]) -> Child {
    let binary = redis_server_binary();
    Command::new(&binary)
        .args(server_args(port, dir))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "could not run {}: {error}\n{INSTALL_HINT}",
                binary.display()
            )
        })
}

fn server_args(port: u16, dir: &Path) -> Vec<String> {
    let port = port.to_string();
    let log = dir.join("redis.log").display().to_string();
    let dir = dir.display().to_string();
    [
        "--port",
        &port,
        "--bind",
        "127.0.0.1",
        "--dir",
        &dir,
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--loglevel",
        "warning",
        "--logfile",
        &log,
    ]
    .map(str::to_owned)
    .to_vec()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Redis Cluster of three masters (no replicas) on loopback, slots split evenly.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, assigns the 16384 slots and joins them.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing or the cluster does not become healthy in 20 s.
    pub fn start() -> Self {
        let cluster_args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ];
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::spawn(&cluster_args, unused_cluster_port))
            .collect();
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (node, (first, last)) in nodes.iter().zip(ranges) {
            node.command(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ]);
        }
        for node in &nodes[1..] {
            nodes[0].command(&["CLUSTER", "MEET", "127.0.0.1", &node.port().to_string()]);
        }
        let cluster = Self { nodes };
        cluster.wait_until_healthy();
        cluster
    }

    fn wait_until_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let healthy = self.nodes.iter().all(|node| {
                query::<String>(node.port, &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
                })
            });
            if healthy {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the test cluster did not become healthy in 20 s"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// A [`RedisStore`] on the cluster with the default settings.
    pub fn store(&self) -> RedisStore {
        self.store_with(RedisStore::builder())
    }

    /// A [`RedisStore`] on the cluster with the settings of `builder`.
    pub fn store_with(&self, builder: RedisStoreBuilder) -> RedisStore {
        let pool = deadpool_redis::cluster::Config::from_urls(self.urls())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .expect("a cluster pool for the test cluster");
        lazy_store(builder, idem_redis::RedisServer::cluster(pool))
    }

    /// Every key on every node, each with the port of the node that holds it.
    pub fn keys_by_node(&self) -> Vec<(u16, String)> {
        self.nodes
            .iter()
            .flat_map(|node| node.keys().into_iter().map(|key| (node.port(), key)))
            .collect()
    }
}

/// A [lazy](RedisStoreBuilder::with_lazy_connect) store on `server`, which connects on its
/// first operation, as the suites' stores always have: tests that start or stop servers
/// under a store, or count its connections, rely on it.
///
/// A lazy `connect` only reads the settings and opens nothing, so it is ready when first
/// polled, and the harness hands out stores without an `.await`.
///
/// # Panics
///
/// When the settings or the server's address cannot be read.
pub fn lazy_store(builder: RedisStoreBuilder, server: idem_redis::RedisServer) -> RedisStore {
    let connect = std::pin::pin!(builder.with_lazy_connect(true).connect(server));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match connect.poll(&mut context) {
        std::task::Poll::Ready(store) => store.expect("a store on the test server"),
        std::task::Poll::Pending => unreachable!("a lazy connect opens nothing"),
    }
}
