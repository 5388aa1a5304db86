use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30s", window = "30s")]
async fn handler() {}

fn main() {}
