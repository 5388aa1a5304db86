//! `example-avoid-repeat [--port N]`: serves the example on `http://127.0.0.1:3002/`
//! (`--port` or `PORT` for another port), with its windows in memory.

use example_avoid_repeat::AvoidRepeatExample;
use example_cli::serve_with_port_only;

const USAGE: &str = "usage: example-avoid-repeat [--port N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let it = AvoidRepeatExample::new();
    serve_with_port_only("avoid-repeat example", USAGE, 3002, it.router(), it.idem()).await
}
