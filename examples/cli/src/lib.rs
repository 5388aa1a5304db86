//! What the examples (`example-webshop`, `example-payments`, and the small ones:
//! `example-avoid-repeat`, `example-form-token`, `example-idempotency-key`, `example-lock`,
//! `example-grpc`)
//! share, so that each one's `main` is only its
//! own: the command line ([`CommandLine`]), the store `--redis` picks, and serving a
//! router on 127.0.0.1 ([`serve`]) until it is told to stop ([`stop_signal`]), and the
//! crash switch of the crash tests ([`crash`]).

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

pub mod crash;

use axum::Router;
use idem_axum::store::AnyStore;
use idem_axum::{Idem, MemoryStore, RedisServer, RedisStore};

/// The environment variables that stand for an option the command line leaves out.
const FROM_ENV: [(&str, &str); 2] = [("--port", "PORT"), ("--redis", "IDEM_REDIS_URL")];

/// An example's command line: `--name value` pairs, each option at most once.
#[derive(Debug)]
pub struct CommandLine {
    values: Vec<(&'static str, String)>,
}

impl CommandLine {
    /// Reads the process's arguments, which may be `--port N` and the `options` an
    /// example names (`"--redis"`, …). `PORT` and `IDEM_REDIS_URL` stand for `--port`
    /// and `--redis` when those are not given.
    ///
    /// # Errors
    ///
    /// An unknown option, one without a value, `--help`: the message, with `usage`.
    pub fn parse(usage: &str, options: &[&'static str]) -> Result<Self, String> {
        let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        Self::read(usage, options, std::env::args().skip(1), env)
    }

    fn read(
        usage: &str,
        options: &[&'static str],
        mut args: impl Iterator<Item = String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut values = Vec::new();
        while let Some(arg) = args.next() {
            let Some(option) = options
                .iter()
                .chain(&["--port"])
                .find(|option| **option == arg)
            else {
                return Err(match arg.as_str() {
                    "-h" | "--help" => usage.to_owned(),
                    _ => format!("unknown argument {arg:?}; {usage}"),
                });
            };
            let value = args
                .next()
                .ok_or_else(|| format!("{arg} needs a value; {usage}"))?;
            values.retain(|(given, _)| given != option);
            values.push((*option, value));
        }
        for (option, variable) in FROM_ENV {
            let wanted = option == "--port" || options.contains(&option);
            if wanted && !values.iter().any(|(given, _)| *given == option) {
                values.extend(env(variable).map(|value| (option, value)));
            }
        }
        Ok(Self { values })
    }

    /// The value of `option`, if given.
    pub fn value(&self, option: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(given, _)| *given == option)
            .map(|(_, value)| value.as_str())
    }

    /// The whole number `option` gives, or `default`.
    ///
    /// # Errors
    ///
    /// The value is not a whole number.
    pub fn number(&self, option: &str, default: u64) -> Result<u64, String> {
        self.value(option).map_or(Ok(default), |value| {
            value
                .parse()
                .map_err(|_| format!("{option} takes a whole number, not {value:?}"))
        })
    }

    /// The port to listen on: `--port`, `PORT`, or `default` (`0`: one the system picks).
    ///
    /// # Errors
    ///
    /// The value is not a port number.
    pub fn port(&self, default: u16) -> Result<u16, String> {
        let port = self.number("--port", default.into())?;
        u16::try_from(port).map_err(|_| format!("--port {port} is not below 65536"))
    }

    /// The store: a [`RedisStore`] on the server `--redis` names, which several processes
    /// share, or else a [`MemoryStore`] of this process's own.
    ///
    /// # Errors
    ///
    /// The Redis URL cannot be read, or Redis cannot be reached and checked.
    pub async fn store(&self) -> Result<AnyStore, idem_axum::store::RedisSetupError> {
        Ok(match self.value("--redis") {
            Some(url) => AnyStore::new(RedisStore::builder().connect(RedisServer::url(url)).await?),
            None => AnyStore::new(MemoryStore::new()),
        })
    }

    /// What [`store`](Self::store) picks, in words.
    pub fn store_name(&self) -> String {
        self.value("--redis").map_or_else(
            || "in memory".to_owned(),
            |url| format!("in Redis at {url}"),
        )
    }
}

/// How long a stopping example waits for the guarded handlers still running.
pub const DRAIN_GRACE: Duration = Duration::from_secs(30);

/// The whole `main` of an example whose only option is `--port`: serves `router` as
/// [`serve_guarded`] does, on the port the command line gives, or `default_port`.
///
/// # Errors
///
/// The command line is not `usage`, or the port cannot be bound.
pub async fn serve_with_port_only(
    what: &str,
    usage: &str,
    default_port: u16,
    router: Router,
    idem: &Idem,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let command_line = CommandLine::parse(usage, &[])?;
    serve_guarded(what, router, &[idem], command_line.port(default_port)?).await?;
    Ok(())
}

/// [`serve`], then the drain of `runtimes`, the idem runtimes of `router`'s guards: a
/// guarded handler whose client went away still runs when the server stops taking
/// requests, and it is waited for (for up to [`DRAIN_GRACE`]) before the process exits,
/// so that its record completes and the client's retry is replayed rather than run
/// again.
///
/// # Errors
///
/// The port cannot be bound.
pub async fn serve_guarded(
    what: &str,
    router: Router,
    runtimes: &[&Idem],
    port: u16,
) -> io::Result<()> {
    serve(what, router, port).await?;
    for idem in runtimes {
        let drained = idem.shutdown(DRAIN_GRACE).await;
        println!("{what}: stopped; {drained}");
    }
    Ok(())
}

/// Serves `router` on `127.0.0.1:port` with each request's peer address in it (what the
/// default client identity, `PeerIp`, reads), after printing `what` and the URL; until
/// Ctrl-C or `SIGTERM`, then until the requests in flight are answered.
///
/// # Errors
///
/// The port cannot be bound.
pub async fn serve(what: &str, router: Router, port: u16) -> io::Result<()> {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
    println!("{what}: listening on http://{}/", listener.local_addr()?);
    let app = router.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(stop_signal())
        .await
}

/// Ctrl-C, or `SIGTERM` (what a deploy sends); without a handler for either, never.
pub async fn stop_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::CommandLine;

    const USAGE: &str = "usage: example [--port N] [--redis URL]";

    fn read(args: &[&str], env: &[(&str, &str)]) -> Result<CommandLine, String> {
        let args = args.iter().map(|arg| (*arg).to_owned());
        let env = |name: &str| {
            env.iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, value)| (*value).to_owned())
        };
        CommandLine::read(USAGE, &["--redis"], args, env)
    }

    #[test]
    fn options_win_over_variables_which_win_over_defaults() {
        let none = read(&[], &[]).unwrap();
        assert_eq!((none.port(3002), none.value("--redis")), (Ok(3002), None));
        assert_eq!(none.store_name(), "in memory");

        let env = [("PORT", "4000"), ("IDEM_REDIS_URL", "redis://a")];
        let from_env = read(&[], &env).unwrap();
        assert_eq!(from_env.port(3002), Ok(4000));
        assert_eq!(from_env.value("--redis"), Some("redis://a"));

        let given = read(&["--port", "0", "--redis", "redis://b"], &env).unwrap();
        assert_eq!(given.port(3002), Ok(0));
        assert_eq!(given.store_name(), "in Redis at redis://b");
    }

    #[test]
    fn what_is_not_an_option_is_refused_with_the_usage() {
        assert!(read(&["--db", "x"], &[]).unwrap_err().contains(USAGE));
        assert!(
            read(&["--port"], &[])
                .unwrap_err()
                .contains("needs a value")
        );
        assert_eq!(read(&["--help"], &[]).unwrap_err(), USAGE);
        assert!(read(&["--port", "70000"], &[]).unwrap().port(1).is_err());
        assert!(read(&["--port", "x"], &[]).unwrap().port(1).is_err());
    }

    #[test]
    fn a_variable_stands_only_for_an_option_the_example_takes() {
        let line = CommandLine::read(USAGE, &[], std::iter::empty(), |_| Some("x".into()));
        assert_eq!(line.unwrap().value("--redis"), None);
    }
}
