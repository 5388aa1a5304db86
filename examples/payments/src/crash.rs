//! The test-only crash switch: the process ends right after a payment committed, before
//! its response is sent.

/// The environment variable that turns the crash switch on (`1`), for tests only: the
/// server then kills itself right after the first payment's transaction commits.
pub const CRASH_AFTER_COMMIT: &str = "IDEM_EXAMPLE_CRASH_AFTER_COMMIT";

/// Ends the process at once, as `kill -9` would: nothing after this line runs, no
/// destructor, no response.
#[cfg(unix)]
pub(crate) fn now() -> ! {
    use rustix::process::{Signal, getpid, kill_process};
    // Cannot fail for the process itself; if it did, the abort below is a crash too.
    let _ = kill_process(getpid(), Signal::KILL);
    std::process::abort()
}

/// Ends the process at once: nothing after this line runs, no destructor, no response.
#[cfg(not(unix))]
pub(crate) fn now() -> ! {
    std::process::abort()
}
