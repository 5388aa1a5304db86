//! The test-only crash switch of the examples' crash tests: the process ends at a point
//! the test names, as `kill -9` would end it there.

/// The environment variable that turns an example's crash switch on (`1`), for tests only:
/// the server then kills itself right after the first transaction the example names
/// commits (a payment's, a form order's), before its response is sent.
pub const CRASH_AFTER_COMMIT: &str = "IDEM_EXAMPLE_CRASH_AFTER_COMMIT";

/// Whether the crash switch is on in this process's environment.
pub fn switched_on() -> bool {
    std::env::var(CRASH_AFTER_COMMIT).is_ok_and(|value| value == "1")
}

/// Ends the process at once, as `kill -9` would: nothing after this line runs, no
/// destructor, no response.
#[cfg(unix)]
pub fn now() -> ! {
    use rustix::process::{Signal, getpid, kill_process};
    // Cannot fail for the process itself; if it did, the abort below is a crash too.
    let _ = kill_process(getpid(), Signal::KILL);
    std::process::abort()
}

/// Ends the process at once: nothing after this line runs, no destructor, no response.
#[cfg(not(unix))]
pub fn now() -> ! {
    std::process::abort()
}
