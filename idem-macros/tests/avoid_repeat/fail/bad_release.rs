use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30s", release = "later")]
async fn handler() {}

fn main() {}
