//! The chaos run's driver (`idem_tests::chaos`): starts a store set-up (Redis, or
//! PostgreSQL) and four chaos servers (`chaos_server`, found beside this binary), sends
//! them duplicates of every guarded kind while it injects faults, and prints the report
//! as Markdown.
//!
//! ```text
//! chaos [--setup durable|volatile|sentinel|postgres] [--replica-acks N --acks-within-ms MS]
//!       [--replication-delay-ms MS] [--faults F,F,...] [--rounds N] [--requests N]
//!       [--concurrency N] [--timeout-ms MS] [--lease-ms MS] [--seed N] [--server PATH]
//!       [--assert]
//! ```
//!
//! Faults: `redis-restart`, `instance-kill`, `client-pause`, `link-stall`, `link-reset`
//! (standalone Redis set-ups), `failover` (Sentinel), `postgres-restart`,
//! `postgres-terminate`, `instance-kill`, `link-stall`, `link-reset` (PostgreSQL). By
//! default the durable set-up gets the first five, the volatile one `redis-restart`,
//! Sentinel `failover`, PostgreSQL its five; the list is repeated `--rounds` times. With
//! `--assert` the exit status is 1 when a guarantee of the durable set-ups (Redis,
//! PostgreSQL) did not hold, or on another set-up when an answer broke its bound (each
//! is printed): a failover may lose what a Sentinel set-up acknowledged, but even there
//! every request is answered within the bound `with_replica_acks` states.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use idem_tests::chaos::{Chaos, Fault, StoreSetup};

const USAGE: &str = "usage: chaos [--setup durable|volatile|sentinel|postgres] \
[--replica-acks N --acks-within-ms MS] [--replication-delay-ms MS] [--faults F,F,...] \
[--rounds N] [--requests N] [--concurrency N] [--timeout-ms MS] [--lease-ms MS] [--seed N] \
[--server PATH] [--assert]";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let (chaos, assert) = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("chaos: {error}");
            return ExitCode::from(2);
        }
    };
    let report = chaos.run().await;
    println!("{}", report.markdown());
    let violations = if report.asserted {
        report.violations()
    } else {
        report.timing_violations()
    };
    if assert && !violations.is_empty() {
        for violation in violations {
            eprintln!("chaos: {violation}");
        }
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn options() -> Result<(Chaos, bool), String> {
    let beside_me = std::env::current_exe()
        .map_err(|error| format!("where is this binary? {error}"))?
        .with_file_name("chaos_server");
    let mut chaos = Chaos::new(beside_me, StoreSetup::Durable);
    let (mut setup, mut acks, mut acks_within, mut delay) = ("durable".to_owned(), None, None, 0);
    let (mut faults, mut rounds, mut assert) = (None, 1, false);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--assert" {
            assert = true;
            continue;
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} takes a number, not {value:?}"))
        };
        match flag.as_str() {
            "--setup" => setup = value.clone(),
            "--replica-acks" => {
                acks = Some(u32::try_from(number()?).map_err(|_| "--replica-acks")?)
            }
            "--acks-within-ms" => acks_within = Some(Duration::from_millis(number()?)),
            "--replication-delay-ms" => delay = number()?,
            "--faults" => {
                faults = Some(
                    value
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<Vec<Fault>, _>>()?,
                );
            }
            "--rounds" => rounds = number()?,
            "--requests" => chaos.requests = number()?,
            "--concurrency" => {
                chaos.concurrency = usize::try_from(number()?).map_err(|_| "--concurrency")?
            }
            "--timeout-ms" => chaos.store_timeout = Duration::from_millis(number()?),
            "--lease-ms" => chaos.lease = Duration::from_millis(number()?),
            "--seed" => chaos.seed = number()?,
            "--server" => chaos.server = PathBuf::from(&value),
            _ => return Err(format!("unknown argument {flag:?}; {USAGE}")),
        }
    }
    chaos.setup = match setup.as_str() {
        "durable" => StoreSetup::Durable,
        "volatile" => StoreSetup::Volatile,
        "postgres" => StoreSetup::Postgres,
        "sentinel" => StoreSetup::Sentinel {
            replica_acks: match (acks, acks_within) {
                (Some(replicas), Some(within)) => Some((replicas, within)),
                (None, None) => None,
                _ => return Err("--replica-acks and --acks-within-ms go together".to_owned()),
            },
            replication_delay: Duration::from_millis(delay),
        },
        other => return Err(format!("unknown set-up {other:?}; {USAGE}")),
    };
    let faults = faults.unwrap_or_else(|| match chaos.setup {
        StoreSetup::Durable => vec![
            Fault::RedisRestart,
            Fault::InstanceKill,
            Fault::ClientPause,
            Fault::LinkStall,
            Fault::LinkReset,
        ],
        StoreSetup::Volatile => vec![Fault::RedisRestart],
        StoreSetup::Sentinel { .. } => vec![Fault::Failover],
        StoreSetup::Postgres => vec![
            Fault::PostgresRestart,
            Fault::InstanceKill,
            Fault::PostgresTerminate,
            Fault::LinkStall,
            Fault::LinkReset,
        ],
    });
    chaos.faults = (0..rounds).flat_map(|_| faults.iter().copied()).collect();
    Ok((chaos, assert))
}
