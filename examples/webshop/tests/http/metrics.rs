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

/// The value of `series` (a metric and its labels, as exported) in a scrape; 0 when it has
/// not been recorded yet.
fn sample(scrape: &str, series: &str) -> u64 {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// The buckets of `idem_store_seconds` for `guard` in a scrape: each upper bound (`le`) and
/// its cumulative count, in the order exported.
fn store_seconds_buckets(scrape: &str, guard: &str) -> Vec<(String, u64)> {
    let prefix = format!(r#"idem_store_seconds_bucket{{guard="{guard}",le=""#);
    scrape
        .lines()
        .filter_map(|line| {
            let (le, count) = line.strip_prefix(&prefix)?.split_once(r#""} "#)?;
            Some((le.to_owned(), count.parse().ok()?))
        })
        .collect()
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
    assert_store_latency_is_a_histogram(&before, &after);
}

/// `idem_store_seconds` is exported as a Prometheus histogram, whose buckets add up across
/// instances, not as a summary, whose quantiles do not: each guard that asked the store has
/// the shop's buckets, cumulative, the last one counting every operation, and these
/// include the storm's (one record begun per API request, the form's token checked).
fn assert_store_latency_is_a_histogram(before: &str, after: &str) {
    let bounds = [
        "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
        "0.25", "0.5", "1", "2.5", "+Inf",
    ];
    assert!(
        !after
            .lines()
            .any(|line| line.starts_with("idem_store_seconds{")),
        "no summary quantiles: {after}"
    );
    for (guard, at_least) in [("idempotency", 5), ("form_token", 1)] {
        let buckets = store_seconds_buckets(after, guard);
        let exported: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
        assert_eq!(exported, bounds, "{guard}: {after}");
        assert!(
            buckets.windows(2).all(|pair| pair[0].1 <= pair[1].1),
            "{guard}: cumulative buckets: {buckets:?}"
        );
        let count = format!(r#"idem_store_seconds_count{{guard="{guard}"}}"#);
        let all = buckets.last().map_or(0, |(_, all)| *all);
        assert_eq!(
            all,
            sample(after, &count),
            "{guard}: +Inf counts every operation"
        );
        let increase = sample(after, &count) - sample(before, &count);
        assert!(
            increase >= at_least,
            "{guard}: {increase} operations timed: {after}"
        );
    }
}
