//! The ledger: what the chaos server's handlers did, one line per event, in one
//! append-only file per server process. Written before the handler answers and never
//! deduplicated, so the run counts executions, not rows; a line written is in the
//! kernel's page cache, so it survives the process' `SIGKILL`.
//!
//! On PostgreSQL the routes whose records commit with their side effect note their
//! `commit` not in the file but as a row of [`COMMITS_TABLE`], in the transaction that
//! completes the record ([`note_commit_in`]): the commit and its record are one. The run
//! reads the rows back into the ledgers of the processes that wrote them
//! ([`add_commits`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::str::FromStr;
use std::sync::Mutex;

use sqlx::PgConnection;

use super::Route;

/// The PostgreSQL set-up's table of commits made in a record's transaction: one row per
/// commit, never deduplicated.
pub const COMMITS_TABLE: &str = "chaos_commits";

/// Creates [`COMMITS_TABLE`] if it is missing.
///
/// # Errors
///
/// The statement failed.
pub(super) async fn create_commits_table(db: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS chaos_commits (
            at    BIGINT NOT NULL,
            route TEXT   NOT NULL,
            key   TEXT   NOT NULL,
            pid   BIGINT NOT NULL)",
    )
    .execute(db)
    .await
    .map(drop)
}

/// Notes a `commit` of `key` on `route` by this process, in the transaction `tx` is in.
///
/// # Errors
///
/// The statement failed.
pub async fn note_commit_in(tx: &mut PgConnection, route: Route, key: &str) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO chaos_commits (at, route, key, pid) VALUES ($1, $2, $3, $4)")
        .bind(i64::try_from(monotonic_ns()).unwrap_or(i64::MAX))
        .bind(route.name())
        .bind(key)
        .bind(i64::from(std::process::id()))
        .execute(tx)
        .await
        .map(drop)
}

/// Adds the commits of [`COMMITS_TABLE`] to the ledgers of the processes that made them
/// (a ledger of its own for a process that has none, which no server is), each ledger
/// in time order again.
///
/// # Errors
///
/// The table cannot be read.
pub(super) async fn add_commits(
    db: &mut PgConnection,
    ledgers: &mut Vec<LedgerFile>,
) -> sqlx::Result<()> {
    let rows: Vec<(i64, String, String, i64)> =
        sqlx::query_as("SELECT at, route, key, pid FROM chaos_commits")
            .fetch_all(db)
            .await?;
    for (at, route, key, pid) in rows {
        let pid = u32::try_from(pid).unwrap_or(0);
        let index = match ledgers.iter().position(|ledger| ledger.pid == pid) {
            Some(index) => index,
            None => {
                ledgers.push(LedgerFile {
                    instance: "unknown".to_owned(),
                    pid,
                    entries: Vec::new(),
                    unreadable: 0,
                });
                ledgers.len() - 1
            }
        };
        let ledger = &mut ledgers[index];
        match route.parse() {
            Ok(route) => ledger.entries.push(Entry {
                at: u64::try_from(at).unwrap_or(0),
                event: Event::Commit,
                route,
                key,
            }),
            Err(_) => ledger.unreadable += 1,
        }
    }
    for ledger in ledgers {
        ledger.entries.sort_by_key(|entry| entry.at);
    }
    Ok(())
}

/// Nanoseconds on the machine's monotonic clock, which every process on it shares: the
/// time of ledger lines and of faults, comparable across processes.
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let seconds = u64::try_from(now.tv_sec).expect("the monotonic clock is positive");
    let nanos = u64::try_from(now.tv_nsec).expect("the monotonic clock is positive");
    seconds * 1_000_000_000 + nanos
}

/// What a handler noted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A handler started its work for a key (the lock route: once it held the lock).
    Run,
    /// The work committed: the side effect that must happen once per key.
    Commit,
    /// The lock route is about to release its lock: the end of its critical section.
    Free,
    /// The lock route found, after its critical section and before its lease ended,
    /// that the lock was no longer its own: the store forgot it.
    LostLock,
    /// A response the handler produced left the server (after the guards stored it).
    Answer,
}

impl Event {
    const ALL: [Self; 5] = [
        Self::Run,
        Self::Commit,
        Self::Free,
        Self::LostLock,
        Self::Answer,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Commit => "commit",
            Self::Free => "free",
            Self::LostLock => "lost-lock",
            Self::Answer => "answer",
        }
    }
}

by_name!(Event: "event");

/// One server process' ledger file, `<instance>-<pid>.log`, for appending.
#[derive(Debug)]
pub struct Ledger {
    file: Mutex<File>,
}

impl Ledger {
    /// Creates this process' ledger in `dir`.
    ///
    /// # Errors
    ///
    /// The file cannot be created (or exists: a pid is never reused within a run).
    pub fn create(dir: &Path, instance: &str) -> io::Result<Self> {
        let path = dir.join(format!("{instance}-{}.log", std::process::id()));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }

    /// Appends `event` for `key` of `route`, in one `write`, before returning.
    ///
    /// # Errors
    ///
    /// The write failed.
    pub fn note(&self, event: Event, route: Route, key: &str) -> io::Result<()> {
        let line = format!("{} {event} {route} {key}\n", monotonic_ns());
        // A poisoned lock only means another writer panicked; the file is still whole.
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        file.write_all(line.as_bytes())
    }
}

/// One line of a ledger.
#[derive(Debug, Clone)]
pub struct Entry {
    /// When ([`monotonic_ns`]).
    pub at: u64,
    /// What.
    pub event: Event,
    /// On which route.
    pub route: Route,
    /// For which key: the operation's.
    pub key: String,
}

impl FromStr for Entry {
    type Err = ();

    fn from_str(line: &str) -> Result<Self, ()> {
        let mut fields = line.split(' ');
        let entry = Self {
            at: fields.next().ok_or(())?.parse().map_err(drop)?,
            event: fields.next().ok_or(())?.parse().map_err(drop)?,
            route: fields.next().ok_or(())?.parse().map_err(drop)?,
            key: fields.next().ok_or(())?.to_owned(),
        };
        match fields.next() {
            None => Ok(entry),
            Some(_) => Err(()),
        }
    }
}

/// The ledger of one server process, read back.
#[derive(Debug)]
pub struct LedgerFile {
    /// The instance the process ran as.
    pub instance: String,
    /// Its process id.
    pub pid: u32,
    /// Its lines, in the order written.
    pub entries: Vec<Entry>,
    /// Lines that could not be read (none, unless a write was cut).
    pub unreadable: usize,
}

/// Reads every ledger in `dir`.
///
/// # Errors
///
/// A file cannot be read, or is named otherwise than a ledger.
pub fn read_ledgers(dir: &Path) -> io::Result<Vec<LedgerFile>> {
    let mut ledgers = Vec::new();
    for file in std::fs::read_dir(dir)? {
        let path = file?.path();
        let not_a_ledger = || io::Error::other(format!("not a ledger: {}", path.display()));
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_suffix(".log"))
            .ok_or_else(not_a_ledger)?;
        let (instance, pid) = name.rsplit_once('-').ok_or_else(not_a_ledger)?;
        let pid = pid.parse().map_err(|_| not_a_ledger())?;
        let text = std::fs::read_to_string(&path)?;
        let (mut entries, mut unreadable) = (Vec::new(), 0);
        for line in text.lines() {
            match line.parse() {
                Ok(entry) => entries.push(entry),
                Err(()) => unreadable += 1,
            }
        }
        ledgers.push(LedgerFile {
            instance: instance.to_owned(),
            pid,
            entries,
            unreadable,
        });
    }
    Ok(ledgers)
}

#[cfg(test)]
mod tests {
    use super::{Entry, Event, Ledger, read_ledgers};
    use crate::chaos::Route;

    #[test]
    fn a_ledger_reads_back_what_was_noted() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::create(dir.path(), "app-1").unwrap();
        ledger.note(Event::Run, Route::Pay, "pay-7").unwrap();
        ledger.note(Event::Commit, Route::Pay, "pay-7").unwrap();
        let ledgers = read_ledgers(dir.path()).unwrap();
        assert_eq!(ledgers.len(), 1);
        assert_eq!(ledgers[0].instance, "app-1");
        assert_eq!(ledgers[0].pid, std::process::id());
        let events: Vec<_> = ledgers[0]
            .entries
            .iter()
            .map(|entry| (entry.event, entry.route, entry.key.as_str()))
            .collect();
        assert_eq!(
            events,
            [
                (Event::Run, Route::Pay, "pay-7"),
                (Event::Commit, Route::Pay, "pay-7")
            ]
        );
        assert!(ledgers[0].entries[0].at <= ledgers[0].entries[1].at);
    }

    #[test]
    fn a_line_cut_short_is_not_an_entry() {
        assert!("12 commit pay".parse::<Entry>().is_err());
        assert!("12 commit pay k extra".parse::<Entry>().is_err());
        assert!("x commit pay k".parse::<Entry>().is_err());
        assert!("12 commit nowhere k".parse::<Entry>().is_err());
    }
}
