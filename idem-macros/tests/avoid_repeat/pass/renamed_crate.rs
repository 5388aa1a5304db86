//! `idem-axum` under another name, as a renamed dependency would make it.

use axum::Router;
use axum::routing::post;
use idem_axum as my_idem;
use my_idem::avoid_repeat;

#[avoid_repeat(timeout = "30s", crate = "my_idem")]
async fn place_order() -> &'static str {
    "ordered"
}

fn main() {
    let _: Router = Router::new().route("/orders", post(place_order));
}
