use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30s", timeout = "1m")]
async fn handler() {}

fn main() {}
