use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30s", by = "ip")]
async fn handler() {}

fn main() {}
