//! What the suites' helper processes (`src/bin/`) share.

use std::error::Error;
use std::process::ExitCode;

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
