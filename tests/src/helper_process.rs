//! The suites' helper processes (`src/bin/`): how a suite starts one, and how one ends.

use std::error::Error;
use std::io::BufReader;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};

/// Starts `command`, a helper process (`what` in failures), with its standard input and
/// output piped to the test: the process, its input, and its output to read by lines.
///
/// # Panics
///
/// When the process cannot be started.
pub fn spawn_piped(
    command: &mut Command,
    what: &str,
) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{what} starts: {error}"));
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    (child, stdin, stdout)
}

/// Runs a helper process's `body` on its command-line arguments: success, or the error on
/// standard error after the process's `name`, and failure.
pub async fn run_helper_process<F>(name: &str, body: impl FnOnce(Vec<String>) -> F) -> ExitCode
where
    F: Future<Output = Result<(), Box<dyn Error>>>,
{
    match body(std::env::args().skip(1).collect()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{name}: {error}");
            ExitCode::FAILURE
        }
    }
}
