//! The example web shop: the first thing to run, and the proof that idem works end to
//! end. For now it only serves its front page; the shop's orders, payments and flash
//! sale arrive with the capabilities they show.

use std::net::{Ipv4Addr, SocketAddr};

use axum::Router;
use axum::response::Html;
use axum::routing::get;

/// The port when neither `--port` nor `PORT` gives one.
const DEFAULT_PORT: u16 = 3000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = port_from_args_or_env()?;
    let app = Router::new().route("/", get(front_page));
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?;
    println!("idem example shop: open http://{}/", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            // Without a signal handler there is nothing to wait for: serve until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await?;
    Ok(())
}

/// `--port N` wins over `PORT`, which wins over the default.
fn port_from_args_or_env() -> Result<u16, String> {
    let mut args = std::env::args().skip(1);
    let mut port = std::env::var("PORT").ok();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => port = Some(args.next().ok_or("--port needs a value")?),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: example-webshop [--port N]"
                ));
            }
        }
    }
    port.map_or(Ok(DEFAULT_PORT), |p| {
        p.parse().map_err(|_| format!("invalid port {p:?}"))
    })
}

async fn front_page() -> Html<&'static str> {
    Html(concat!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>idem shop</title></head>",
        "<body><h1>idem example shop</h1>",
        "<p>This is the shop's front page only. Its order form, JSON API, payment callbacks ",
        "and flash sale arrive with the idem guards they show.</p></body></html>",
    ))
}
