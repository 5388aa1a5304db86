//! Real PostgreSQL servers for tests and benchmarks: each on a free loopback port, with
//! its own temporary data directory, stopped by its own pid when dropped.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root (as CI does) the
//! server and `initdb` run as the `postgres` user (the one Debian's package creates),
//! through `runuser`. `initdb` runs once per machine and server version into a template
//! directory under the system's temporary directory; each server starts on a copy.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use idem_sqlx::{PostgresStore, SqlStoreBuilder};
use sqlx::Postgres;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::redis_server::unused_port;

const INSTALL_HINT: &str = "\
PostgreSQL was not found: the tests start a real PostgreSQL server of their own.
  Looked for `postgres` and `initdb` in: $IDEM_POSTGRES_BIN, then PATH, then
  /usr/lib/postgresql/<version>/bin (the highest version).
  Install it: `apt-get install postgresql` (Debian/Ubuntu; the tests never start its
  system service), `brew install postgresql` (macOS), or run `bash scripts/test.sh`,
  which installs it where it can and then runs every test.";

/// The user PostgreSQL runs as when the tests run as root.
const SERVER_USER: &str = "postgres";

/// Changes whenever the template's `initdb` options do, so an old template is not reused.
const TEMPLATE_LAYOUT: &str = "1";

/// The directory holding `postgres` and `initdb`: `$IDEM_POSTGRES_BIN`, else the first
/// directory on `PATH` that has both, else the highest version under
/// `/usr/lib/postgresql/*/bin` (where Debian puts them, off `PATH`).
///
/// # Panics
///
/// When there is none, with a message that says how to install PostgreSQL.
pub fn postgres_bin_dir() -> PathBuf {
    let has_both = |dir: &Path| dir.join("postgres").is_file() && dir.join("initdb").is_file();
    if let Some(dir) = std::env::var_os("IDEM_POSTGRES_BIN") {
        let dir = PathBuf::from(dir);
        assert!(
            has_both(&dir),
            "$IDEM_POSTGRES_BIN ({}) holds no `postgres` and `initdb`\n{INSTALL_HINT}",
            dir.display()
        );
        return dir;
    }
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|dir| has_both(dir));
    on_path
        .or_else(|| highest_debian_version(Path::new("/usr/lib/postgresql")))
        .filter(|dir| has_both(dir))
        .unwrap_or_else(|| panic!("{INSTALL_HINT}"))
}

/// `<root>/<version>/bin` for the highest numeric version under `root`.
fn highest_debian_version(root: &Path) -> Option<PathBuf> {
    let version = |name: &str| -> Option<Vec<u32>> {
        name.split('.').map(|part| part.parse().ok()).collect()
    };
    fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            Some((version(&name)?, entry.path().join("bin")))
        })
        .max()
        .map(|(_, bin)| bin)
}

/// The user id this process runs as (`id -u`).
fn user_id() -> &'static str {
    static UID: OnceLock<String> = OnceLock::new();
    UID.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_default()
    })
}

/// Whether this process runs as root, and so must hand PostgreSQL to another user.
fn running_as_root() -> bool {
    user_id() == "0"
}

/// A command for one of PostgreSQL's programs, run as `postgres` when we are root.
fn pg_command(program: &str) -> Command {
    let binary = postgres_bin_dir().join(program);
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", SERVER_USER, "--"]).arg(binary);
        command
    } else {
        Command::new(binary)
    }
}

/// Gives `path` to the server's user, when we are root.
fn hand_over(path: &Path) {
    if running_as_root() {
        let status = Command::new("chown")
            .args(["-R", &format!("{SERVER_USER}:")])
            .arg(path)
            .status()
            .expect("chown runs");
        assert!(
            status.success(),
            "could not give {} to the `{SERVER_USER}` user (does it exist? Debian's \
             postgresql package creates it)",
            path.display()
        );
    }
}

/// A data directory made by `initdb`, shared by every server of this machine and
/// PostgreSQL version: made once, into a temporary name, then renamed into place.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let version = server_version();
        // Whose data directory it is: each user of the machine has a template of their own.
        let owner = if running_as_root() {
            SERVER_USER
        } else {
            user_id()
        };
        let name = format!("idem-tests-postgres-{version}-{owner}-{TEMPLATE_LAYOUT}");
        let path = std::env::temp_dir().join(name);
        if path.join("PG_VERSION").is_file() {
            return path;
        }
        let building = tempfile::Builder::new()
            .prefix("idem-tests-postgres-initdb-")
            .tempdir()
            .expect("a temporary directory for initdb");
        hand_over(building.path());
        let data = building.path().join("data");
        let out = pg_command("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "-N",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| panic!("could not run initdb: {error}\n{INSTALL_HINT}"));
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Another process may have made it meanwhile: then use theirs.
        if fs::rename(&data, &path).is_err() {
            assert!(
                path.join("PG_VERSION").is_file(),
                "could not put the template at {}",
                path.display()
            );
        }
        path
    })
}

/// `postgres --version`, as a file name part: `15.18`.
fn server_version() -> String {
    let out = Command::new(postgres_bin_dir().join("postgres"))
        .arg("--version")
        .output()
        .unwrap_or_else(|error| panic!("could not run postgres: {error}\n{INSTALL_HINT}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .find(|word| word.starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or("unknown");
    version
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '.')
        .collect()
}

/// Durability off: a test's data dies with it.
const NOT_DURABLE: [&str; 3] = [
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
];

/// PostgreSQL's own durability: a commit is acknowledged once its log is on disk.
const DURABLE: [&str; 3] = ["fsync=on", "synchronous_commit=on", "full_page_writes=on"];

/// One PostgreSQL server, stopped when dropped.
#[derive(Debug)]
pub struct PostgresServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    durability: &'static [&'static str],
}

impl PostgresServer {
    /// Starts a server with durability off (`fsync`, `synchronous_commit` and
    /// `full_page_writes`: a test's data dies with it), on a copy of the template.
    ///
    /// # Panics
    ///
    /// When PostgreSQL is missing (saying how to install it) or does not come up.
    pub fn start() -> Self {
        Self::start_with(&NOT_DURABLE)
    }

    /// Starts a server with PostgreSQL's default durability (`fsync`, `synchronous_commit`
    /// and `full_page_writes` on), so that it acknowledges no commit it could lose: for
    /// tests that kill it ([`stop`](Self::stop)) and count what survived.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_durable() -> Self {
        Self::start_with(&DURABLE)
    }

    fn start_with(durability: &'static [&'static str]) -> Self {
        let template = template();
        // Another process may take the port between asking and binding: then try anew.
        for _ in 0..10 {
            let dir = tempfile::Builder::new()
                .prefix("idem-tests-postgres-")
                .tempdir()
                .expect("a temporary directory for PostgreSQL");
            let data = dir.path().join("data");
            let copied = Command::new("cp")
                .arg("-a")
                .arg(template)
                .arg(&data)
                .status()
                .expect("cp runs");
            assert!(
                copied.success(),
                "could not copy the template data directory"
            );
            hand_over(dir.path());
            let port = unused_port();
            let mut server = Self {
                child: launch(&data, port, dir.path(), durability),
                port,
                dir,
                durability,
            };
            if server.wait_until_ready() {
                return server;
            }
        }
        panic!("PostgreSQL did not start on any of 10 ports");
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Waits for `postmaster.pid` to say the server accepts connections; `false` if the
    /// process exited first (port taken).
    fn wait_until_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            let status = fs::read_to_string(self.data().join("postmaster.pid")).unwrap_or_default();
            if status
                .lines()
                .nth(7)
                .is_some_and(|line| line.trim() == "ready")
            {
                return true;
            }
            thread::sleep(Duration::from_millis(5));
        }
        panic!(
            "PostgreSQL on port {} was not ready within 30 s; its log: {}",
            self.port,
            fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
        );
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`: the superuser, no password.
    pub fn url(&self) -> String {
        postgres_url(self.port)
    }

    /// Stops the server at once, as a crash would: `pg_ctl stop -m immediate` (every
    /// process quits without a checkpoint; the next start recovers from the log).
    ///
    /// # Panics
    ///
    /// When `pg_ctl` fails.
    pub fn stop(&mut self) {
        let out = pg_command("pg_ctl")
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(self.data())
            .stdin(Stdio::null())
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = self.child.wait();
    }

    /// Starts the server again after [`stop`](Self::stop), on its data directory and
    /// port, and waits until it accepts connections (its crash recovery done).
    ///
    /// # Panics
    ///
    /// When it does not come up within 30 s.
    pub fn start_again(&mut self) {
        self.child = launch(&self.data(), self.port, self.dir.path(), self.durability);
        assert!(
            self.wait_until_ready(),
            "PostgreSQL did not start again on port {}",
            self.port
        );
    }

    /// Ends every connection to its database but the caller's own, with
    /// `pg_terminate_backend`, as an administrator (or a failing pooler) would; how many.
    ///
    /// # Panics
    ///
    /// When it cannot be reached.
    pub async fn terminate_backends(&self) -> i64 {
        let mut admin = self.connection().await;
        let ended = sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut admin)
        .await
        .expect("pg_terminate_backend");
        let _ = sqlx::Connection::close(admin).await;
        ended
    }

    /// A pool of the test's own on the server (for statements of its own).
    ///
    /// # Panics
    ///
    /// When no connection can be opened.
    pub async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .connect(&self.url())
            .await
            .expect("a pool on the test server")
    }

    /// A connection of the test's own to the server, outside any pool.
    ///
    /// # Panics
    ///
    /// When it cannot be opened.
    pub async fn connection(&self) -> sqlx::PgConnection {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&self.url())
            .await
            .expect("a connection to the test server")
    }

    /// A [`PostgresStore`] with the default settings on a pool of its own, with idem's
    /// tables created.
    pub async fn store(&self) -> PostgresStore {
        self.store_with(PostgresStore::builder()).await
    }

    /// A [`PostgresStore`] with the settings of `builder` on a pool of its own, with idem's
    /// tables created.
    ///
    /// # Panics
    ///
    /// When the store cannot connect or migrate.
    pub async fn store_with(&self, builder: SqlStoreBuilder<Postgres>) -> PostgresStore {
        let store = builder
            .connect(&self.url())
            .await
            .expect("a store on the test server");
        store.migrate().await.expect("idem's tables");
        store
    }

    /// The postmaster's pid, from its `postmaster.pid`: under `runuser` the child is
    /// `runuser`, not the server.
    fn server_pid(&self) -> Option<u32> {
        fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

/// `postgres://postgres@127.0.0.1:PORT/postgres`: the test server's superuser on `port`
/// (its own, or a forwarder's in front of it).
pub fn postgres_url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

fn launch(data: &Path, port: u16, dir: &Path, durability: &[&str]) -> Child {
    // Appended to: a server started again keeps the log of its earlier life.
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("postgres.log"))
        .expect("a log file for PostgreSQL");
    let settings = [
        "listen_addresses=127.0.0.1",
        "unix_socket_directories=",
        "shared_buffers=32MB",
        "max_connections=300",
    ];
    let mut command = pg_command("postgres");
    command.arg("-D").arg(data).args(["-p", &port.to_string()]);
    for setting in settings.iter().chain(durability) {
        command.args(["-c", setting]);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|error| panic!("could not start PostgreSQL: {error}\n{INSTALL_HINT}"))
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let pid = self.server_pid();
        let signal = |signal: &str| {
            if let Some(pid) = pid {
                // Already gone is fine; there is nothing else to do about it.
                let _ = Command::new("kill")
                    .args([signal, &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        };
        // Immediate shutdown: the postmaster stops every backend and exits at once.
        signal("-QUIT");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
        signal("-KILL");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
