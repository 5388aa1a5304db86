//! A server binary under test, run as a process of its own and spoken to over TCP:
//! [`ServerProcess`] and [`send_over_tcp`].

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::eventually;
use crate::http::Answer;

/// How long a server may take to print its URL.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A server binary run as a child process on a port of its choosing (`--port 0`, say):
/// started by a command that makes it print its URL, stopped with `SIGKILL`, by its pid,
/// when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    base: String,
}

impl ServerProcess {
    /// Runs `command` and waits for the first line of its stdout that holds an `http://`
    /// URL: the server's. Its stderr is the test's; the rest of its stdout is read and
    /// dropped, so the server never blocks on a full pipe.
    ///
    /// # Panics
    ///
    /// When the process cannot be started, or prints no URL within 30 s (it is then
    /// killed) or before it ends.
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("could not start {command:?}: {error}"));
        let stdout = child.stdout.take().expect("its stdout, piped");
        let (url, printed) = mpsc::channel();
        thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
            if let Some(base) = lines.by_ref().find_map(|line| url_in(&line)) {
                let _ = url.send(base);
            }
            lines.for_each(drop);
        });
        match printed.recv_timeout(START_TIMEOUT) {
            Ok(base) => Self { child, base },
            Err(error) => {
                let _ = child.kill();
                let status = child.wait();
                panic!("{command:?} printed no URL ({error}); it ended with {status:?}")
            }
        }
    }

    /// The process id, for a test that signals the server itself (`kill -STOP`, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The URL of `path` (which starts with `/`) on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Waits up to `within` for the process to end by itself, and returns how it ended.
    ///
    /// # Panics
    ///
    /// When it is still running by then.
    pub async fn ended(&mut self, within: Duration) -> ExitStatus {
        let mut status = None;
        eventually(within, "the server process ends", || {
            status = status.or_else(|| self.child.try_wait().ok().flatten());
            let ended = status.is_some();
            async move { ended }
        })
        .await;
        status.expect("it ended")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Already ended is fine: there is nothing else to stop.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary `bin` of the workspace's package `package` (`example-payments`), in the
/// calling test's target directory, built first if it is missing: a test of one package
/// that runs another's binary (which `cargo test` on the workspace builds, but not on the
/// test's package alone).
///
/// # Panics
///
/// When the test's path is not in a target directory, or the build fails.
pub fn workspace_binary(package: &str, bin: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("this test's path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let binary = profile.join(bin);
    if !binary.exists() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let built = Command::new(cargo)
            .args(["build", "--quiet", "-p", package, "--bin", bin])
            .status()
            .expect("cargo runs");
        assert!(
            built.success(),
            "cargo build -p {package} --bin {bin} failed"
        );
    }
    binary
}

/// The URL in a line a server printed, such as `open http://127.0.0.1:3000/`.
fn url_in(line: &str) -> Option<String> {
    let start = line.find("http://")?;
    let url = line[start..].split_whitespace().next()?;
    Some(url.trim_end_matches('/').to_owned())
}

/// An HTTP/1 client for servers under test, made by [`http_client`].
pub type HttpClient = Client<HttpConnector, Body>;

/// An HTTP/1 client over plain TCP.
pub fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends `request` and reads its response whole; the client's error when the server
/// answered nothing, or broke off (it died).
///
/// # Errors
///
/// The connection failed or closed before a whole response came.
pub async fn send_over_tcp(
    client: &HttpClient,
    request: Request<Body>,
) -> Result<Answer, Box<dyn std::error::Error + Send + Sync>> {
    Ok(Answer::read(client.request(request).await?).await?)
}

#[cfg(test)]
mod tests {
    use super::url_in;

    #[test]
    fn the_url_is_read_from_the_line_the_server_prints() {
        assert_eq!(
            url_in("idem example shop: open http://127.0.0.1:3000/").as_deref(),
            Some("http://127.0.0.1:3000")
        );
        assert_eq!(
            url_in("listening on http://127.0.0.1:41234 (records in the database)").as_deref(),
            Some("http://127.0.0.1:41234")
        );
        assert_eq!(url_in("database sqlite://shop.db"), None);
    }
}
