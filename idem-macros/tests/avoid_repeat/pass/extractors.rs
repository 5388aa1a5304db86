use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use idem_axum::avoid_repeat;

#[derive(Clone)]
struct Shop;

#[derive(serde::Deserialize)]
struct Order {
    product_id: u64,
}

#[avoid_repeat(timeout = "30s")]
async fn no_arguments() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "500ms")]
async fn with_state_and_form(State(_shop): State<Shop>, Form(order): Form<Order>) -> String {
    order.product_id.to_string()
}

#[avoid_repeat(timeout = "5m")]
async fn with_path_query_json(
    Path(id): Path<u64>,
    Query(params): Query<HashMap<String, String>>,
    Json(order): Json<Order>,
) -> String {
    format!("{id} {} {}", params.len(), order.product_id)
}

#[avoid_repeat(timeout = "1h", release = "finish", by = "client", message = "请勿重复提交")]
pub async fn all_arguments(mut body: String) -> String {
    body.push('!');
    body
}

fn main() {
    let _: Router = Router::new()
        .route("/", get(no_arguments))
        .route("/orders", post(with_state_and_form))
        .route("/orders/{id}", post(with_path_query_json))
        .route("/echo", post(all_arguments))
        .with_state(Shop);
}
