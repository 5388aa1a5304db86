//! `example-idempotency-key [--port N] [--redis URL]`: serves the example on
//! `http://127.0.0.1:3004/` (`--port` or `PORT` for another port), with its records in
//! memory, or in the Redis `--redis` (or `IDEM_REDIS_URL`) names, which several
//! processes can share.

use example_cli::{CommandLine, serve_guarded};
use example_idempotency_key::IdempotencyKeyExample;

const USAGE: &str = "usage: example-idempotency-key [--port N] [--redis URL]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let command_line = CommandLine::parse(USAGE, &["--redis"])?;
    let example = IdempotencyKeyExample::new(command_line.store().await?);
    let what = format!(
        "idempotency-key example, records {}",
        command_line.store_name()
    );
    let port = command_line.port(3004)?;
    serve_guarded(&what, example.router(), &[example.idem()], port).await?;
    Ok(())
}
