//! `example-form-token [--port N]`: serves the example on `http://127.0.0.1:3003/`
//! (`--port` or `PORT` for another port), with its tokens in memory.

use example_cli::serve_with_port_only;
use example_form_token::FormTokenExample;

const USAGE: &str = "usage: example-form-token [--port N]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let it = FormTokenExample::new();
    serve_with_port_only("form-token example", USAGE, 3003, it.router(), it.idem()).await
}
