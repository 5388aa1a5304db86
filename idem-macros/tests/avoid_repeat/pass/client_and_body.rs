use axum::extract::Path;
use axum::routing::post;
use axum::{Form, Json, Router};
use idem_axum::avoid_repeat;

#[derive(serde::Deserialize)]
struct Transfer {
    amount: u64,
}

#[avoid_repeat(timeout = "30s", by = "client+body")]
async fn json_last(Path(id): Path<u64>, Json(t): Json<Transfer>) -> String {
    format!("{id}: {}", t.amount)
}

#[avoid_repeat(timeout = "30s", by = "client+body")]
async fn form_last(Form(t): Form<Transfer>) -> String {
    t.amount.to_string()
}

#[avoid_repeat(timeout = "30s", by = "client+body")]
async fn parts_last(Path(id): Path<u64>) -> String {
    id.to_string()
}

#[avoid_repeat(timeout = "30s", by = "client+body")]
async fn nothing() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "30s", by = "client+body", payload = "canonical_json")]
async fn canonical(Json(t): Json<Transfer>) -> String {
    t.amount.to_string()
}

#[avoid_repeat(timeout = "30s", by = "client+body", payload = ["/amount", "/to/iban"])]
async fn fields(Path(id): Path<u64>, Json(t): Json<Transfer>) -> String {
    format!("{id}: {}", t.amount)
}

#[avoid_repeat(timeout = "30s", by = "client+body", payload = "raw")]
async fn raw_without_arguments() -> &'static str {
    "ok"
}

fn main() {
    let _: Router = Router::new()
        .route("/a/{id}", post(json_last))
        .route("/b", post(form_last))
        .route("/c/{id}", post(parts_last))
        .route("/d", post(nothing))
        .route("/e", post(canonical))
        .route("/f/{id}", post(fields))
        .route("/g", post(raw_without_arguments));
}
