use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30 parsecs")]
async fn handler() {}

fn main() {}
