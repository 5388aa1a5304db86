//! The guards' metrics under a storm of duplicates.

use idem_tests::{all_at_once, answer};
use serde_json::json;

use crate::{TestShop, api_order, form_post, form_token, get, new_browser, order_form, status};

/// The value of the `idem_outcomes_total` counter of `guard` and `outcome` in a scrape of
/// `GET /metrics`; 0 when it has not been counted yet.
fn outcomes(scrape: &str, guard: &str, outcome: &str) -> u64 {
    scrape
        .lines()
        .filter(|line| line.starts_with("idem_outcomes_total{"))
        .filter(|line| {
            line.contains(&format!(r#"guard="{guard}""#))
                && line.contains(&format!(r#"outcome="{outcome}""#))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// After a duplicate storm, `GET /metrics` counts what the guards decided. Other tests in
/// this process count into the same recorder, so the figures are compared as increases.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_what_the_guards_decided_in_a_duplicate_storm() {
    let shop = TestShop::<idem_tests::MemoryBackend>::start().await;
    let scrape = || async { answer(&shop.router, get("/metrics", None)).await.text() };
    let before = scrape().await;
    let storm = new_browser(&shop.router).await;

    let token = form_token(&shop.router, &storm).await;
    let router = shop.router.clone();
    all_at_once(20, |_| {
        let (router, form, storm) = (router.clone(), order_form(&token), storm.clone());
        async move { status(&router, form_post(&storm, &form)).await }
    })
    .await;
    let body = json!({ "product_id": 1, "quantity": 1 });
    for _ in 0..5 {
        status(&shop.router, api_order("storm-key", "storm-user", &body)).await;
    }

    let after = scrape().await;
    let increase =
        |guard, outcome| outcomes(&after, guard, outcome) - outcomes(&before, guard, outcome);
    assert!(increase("form_token", "issued") >= 1, "{after}");
    assert!(increase("form_token", "accepted") >= 1, "{after}");
    assert!(increase("form_token", "replayed") >= 19, "{after}");
    assert!(increase("idempotency", "accepted") >= 1, "{after}");
    assert!(increase("idempotency", "replayed") >= 4, "{after}");
    assert!(
        after.contains("idem_store_seconds"),
        "the store's latency: {after}"
    );
}
