use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "99999999999999999999999h")]
async fn handler() {}

fn main() {}
