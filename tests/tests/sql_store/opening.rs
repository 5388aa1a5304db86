//! SQLite only: several processes opening one new database file at once — instances of
//! an application started together — each get their store. The switch to WAL that every
//! one of them asks for contends on the new file, and SQLite answers it `SQLITE_BUSY`
//! without waiting out the busy timeout; `SqliteStore::open` tries again.

use std::process::Command;

/// 100 rounds of 8 processes on a new file each: every process opens the store and
/// creates the tables. Without `open` trying again, 3 runs of this test in 4 failed here.
#[test]
fn processes_opening_one_new_file_at_once_all_get_their_store() {
    for round in 0..100 {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("idem.db");
        let openers: Vec<_> = (0..8)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_sqlite_opener"))
                    .arg(&file)
                    .spawn()
                    .expect("the opener starts")
            })
            .collect();
        for mut opener in openers {
            let status = opener.wait().expect("the opener ends");
            assert!(
                status.success(),
                "round {round}: an opener failed ({status})"
            );
        }
    }
}
