//! `example-form-token [--port N]`: serves the example on `http://127.0.0.1:3003/`
//! (`--port` or `PORT` for another port), with its tokens in memory.

use example_cli::{CommandLine, serve};
use example_form_token::FormTokenExample;

const USAGE: &str = "usage: example-form-token [--port N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let command_line = CommandLine::parse(USAGE, &[])?;
    let app = FormTokenExample::new().router();
    serve("form-token example", app, command_line.port(3003)?).await?;
    Ok(())
}
