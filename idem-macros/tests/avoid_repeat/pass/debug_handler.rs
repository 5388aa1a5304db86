use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use idem_axum::avoid_repeat;

#[derive(Clone)]
struct Shop;

#[axum::debug_handler]
#[avoid_repeat(timeout = "30s")]
async fn outer_debug(State(_shop): State<Shop>, Json(n): Json<u32>) -> String {
    n.to_string()
}

#[avoid_repeat(timeout = "30s", by = "client+body")]
#[axum::debug_handler]
async fn inner_debug(State(_shop): State<Shop>, Json(n): Json<u32>) -> String {
    n.to_string()
}

fn main() {
    let _: Router = Router::new()
        .route("/a", post(outer_debug))
        .route("/b", post(inner_debug))
        .with_state(Shop);
}
