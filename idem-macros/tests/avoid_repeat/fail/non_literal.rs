use idem_axum::avoid_repeat;

const WINDOW: &str = "30s";

#[avoid_repeat(timeout = WINDOW)]
async fn handler() {}

fn main() {}
