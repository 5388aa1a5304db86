use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30s", key = "ip")]
async fn handler() {}

fn main() {}
