use idem_axum::avoid_repeat;

#[avoid_repeat(release = "finish")]
async fn handler() {}

fn main() {}
