use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30s", by = "client+body", payload = "json")]
async fn unknown_choice() {}

#[avoid_repeat(timeout = "30s", by = "client+body", payload = ["amount"])]
async fn not_a_pointer() {}

#[avoid_repeat(timeout = "30s", by = "client+body", payload = [])]
async fn no_field() {}

#[avoid_repeat(timeout = "30s", payload = "canonical_json")]
async fn body_not_in_the_key() {}

fn main() {}
