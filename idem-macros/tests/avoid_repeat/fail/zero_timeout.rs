use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "0s")]
async fn handler() {}

fn main() {}
