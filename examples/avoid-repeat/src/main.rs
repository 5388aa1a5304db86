//! `example-avoid-repeat [--port N]`: serves the example on `http://127.0.0.1:3002/`
//! (`--port` or `PORT` for another port), with its windows in memory.

use example_avoid_repeat::AvoidRepeatExample;
use example_cli::{CommandLine, serve};

const USAGE: &str = "usage: example-avoid-repeat [--port N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let command_line = CommandLine::parse(USAGE, &[])?;
    let app = AvoidRepeatExample::new().router();
    serve("avoid-repeat example", app, command_line.port(3002)?).await?;
    Ok(())
}
