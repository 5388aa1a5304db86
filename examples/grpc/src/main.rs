//! `example-grpc [--port N] [--redis URL]`: serves the payments gRPC service on
//! `http://127.0.0.1:50051/` (`--port` or `PORT` for another port), with its records in
//! memory, or in the Redis `--redis` (or `IDEM_REDIS_URL`) names, which several
//! processes can share.

use std::net::Ipv4Addr;
use std::time::Duration;

use example_cli::{CommandLine, stop_signal};
use example_grpc::PaymentsExample;

const USAGE: &str = "usage: example-grpc [--port N] [--redis URL]";

/// How long a charge takes: long enough to send a retry while it runs.
const PROCESSING_TIME: Duration = Duration::from_millis(500);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let command_line = CommandLine::parse(USAGE, &["--redis"])?;
    let example = PaymentsExample::new(command_line.store().await?, PROCESSING_TIME);
    let port = command_line.port(50051)?;
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
    println!(
        "gRPC payments example, records {}: listening on http://{}/",
        command_line.store_name(),
        listener.local_addr()?
    );
    example.serve(listener, stop_signal()).await?;
    Ok(())
}
