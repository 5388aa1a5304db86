use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30s")]
fn handler() -> &'static str {
    "ok"
}

fn main() {}
