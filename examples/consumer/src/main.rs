//! `example-consumer`: one consumer of the group `billing` on the stream `orders`.
//!
//! ```text
//! example-consumer [--redis URL] [--db PATH] [--provider URL] [--name NAME] [--mode idem|plain] [--lease-ms N]
//! ```
//!
//! | option | default |
//! |---|---|
//! | `--redis URL` (or `IDEM_REDIS_URL`) | `redis://127.0.0.1:6379/` |
//! | `--db PATH` | `consumer.db`: the rows and idem's records |
//! | `--provider URL` | `http://127.0.0.1:3001`: the payments example |
//! | `--name NAME` | `consumer-<pid>` |
//! | `--mode idem\|plain` | `idem` |
//! | `--lease-ms N` | 10000 |

use std::time::Duration;

use example_cli::CommandLine;
use example_consumer::{Consumer, GROUP, Mode, STREAM, Settings};

const USAGE: &str = "usage: example-consumer [--redis URL] [--db PATH] [--provider URL] [--name NAME] \
     [--mode idem|plain] [--lease-ms N]";

#[tokio::main]
async fn main() -> Result<(), example_consumer::Error> {
    let options = [
        "--redis",
        "--db",
        "--provider",
        "--name",
        "--mode",
        "--lease-ms",
    ];
    let command_line = CommandLine::parse(USAGE, &options)?;
    let value = |option, default: &str| command_line.value(option).unwrap_or(default).to_owned();
    let mode = match command_line.value("--mode").unwrap_or("idem") {
        "idem" => Mode::Idem,
        "plain" => Mode::Plain,
        other => return Err(format!("unknown mode {other:?}; {USAGE}").into()),
    };
    let settings = Settings {
        redis: value("--redis", "redis://127.0.0.1:6379/"),
        db: value("--db", "consumer.db").into(),
        provider: value("--provider", "http://127.0.0.1:3001"),
        name: value("--name", &format!("consumer-{}", std::process::id())),
        mode,
        lease: Duration::from_millis(command_line.number("--lease-ms", 10_000)?.max(1)),
    };
    println!(
        "{}: billing stream `{STREAM}` of {} as group `{GROUP}` ({mode:?}), rows in {}, charges at {}",
        settings.name,
        settings.redis,
        settings.db.display(),
        settings.provider
    );
    Consumer::connect(settings)
        .await?
        .run(example_cli::stop_signal())
        .await
}
