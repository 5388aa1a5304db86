//! `idem`: an operator looks at one idempotency record, by what the user saw of it, and
//! removes it, on the application's Redis, PostgreSQL or SQLite store.
//!
//! ```text
//! idem redis://127.0.0.1:6379 show --route /payments --client user-42 --key pay-7
//! idem postgres://shop@db/shop remove --route /payments --client user-42 --key pay-7
//! idem sqlite://shop.db show --run-once charge --key order-7
//! ```
//!
//! Exit status: 0 a record was found (and removed), 1 there was none, 2 a mistake in the
//! command line, 3 the store could not answer.

mod command;
mod store_url;

use std::process::ExitCode;
use std::time::Duration;

use idem_axum::store::{RecordState, RecordStore};

use self::command::{Action, Command};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let command = match Command::parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(mistake) => {
            eprintln!("{mistake}");
            return ExitCode::from(2);
        }
    };
    match run(&command).await {
        Ok(found) => {
            let status = if found { 0 } else { 1 };
            ExitCode::from(status)
        }
        Err(failure) => {
            eprintln!("idem: {failure}");
            ExitCode::from(3)
        }
    }
}

/// Shows the record, and removes it if asked: whether there was one.
async fn run(command: &Command) -> Result<bool, String> {
    let store = store_url::open(&command.store, command.redis_namespace.as_deref()).await?;
    let key = command.record_key(&store);
    let state = store.record_state(&key).await;
    let state = state.map_err(|error| store_url::describe(&error))?;
    println!("record {key}: {}", summary(state.as_ref()));
    if command.action == Action::Remove && state.is_some() {
        let removed = store.remove_record(&key).await;
        let removed = removed.map_err(|error| store_url::describe(&error))?;
        println!("{}", if removed { "removed" } else { "gone already" });
    }
    Ok(state.is_some())
}

/// A record's state in a line.
fn summary(state: Option<&RecordState>) -> String {
    match state {
        None => "no record".to_owned(),
        Some(RecordState::InProgress {
            fingerprint,
            remaining,
        }) => format!(
            "in progress, lease ends in {}; fingerprint {fingerprint:?}",
            seconds(*remaining)
        ),
        Some(RecordState::Completed {
            fingerprint,
            response,
            remaining,
        }) => format!(
            "completed, {} bytes stored, kept {} more; fingerprint {fingerprint:?}",
            response.len(),
            seconds(*remaining)
        ),
    }
}

/// A duration in seconds, to the tenth.
fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}
