use idem_axum::avoid_repeat;

struct Shop;

impl Shop {
    #[avoid_repeat(timeout = "30s")]
    async fn handler(&self) {}
}

fn main() {}
