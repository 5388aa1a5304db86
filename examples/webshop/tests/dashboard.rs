//! The Grafana dashboard (`ops/grafana/idem.json`) and the Prometheus alerting rules
//! (`ops/prometheus/idem-rules.yml`) name only metrics idem exports, and the dashboard
//! shows every one: the names are read from the `/metrics` of the shop's binary, run on a
//! real Redis, after a few requests through each guard.

use std::collections::BTreeSet;
use std::process::Command;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{
    HttpClient, RedisServer, ServerProcess, form_token_in, http_client, send_over_tcp,
};
use serde_json::Value;

mod support;

const DASHBOARD: &str = include_str!("../../../ops/grafana/idem.json");
const RULES: &str = include_str!("../../../ops/prometheus/idem-rules.yml");

/// Sends `request` to the shop: its status and its body as text.
async fn send(http: &HttpClient, request: Request<Body>) -> (StatusCode, String) {
    let answer = send_over_tcp(http, request)
        .await
        .expect("the shop answers");
    (answer.status, answer.text())
}

fn get(url: String, cookie: &str) -> Request<Body> {
    Request::get(url)
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .unwrap()
}

/// The metric names in a Prometheus text exposition: every sample's (a histogram's
/// `_bucket`, `_sum` and `_count` as they are) and every `# TYPE` line's (a histogram's own
/// name).
fn exported_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(typed) => typed.split(' ').next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        })
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The `idem_…` metric names in PromQL `expression`.
fn idem_names(expression: &str) -> impl Iterator<Item = String> + '_ {
    expression.match_indices("idem_").filter_map(|(at, _)| {
        let before = expression[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let name = &expression[at..];
        let end = name
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(name.len());
        Some(name[..end].to_owned())
    })
}

/// The PromQL the dashboard runs: its panels' `expr`s and its variables' queries.
fn dashboard_queries(value: &Value, queries: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                match (name.as_str(), field) {
                    ("expr" | "definition", Value::String(query)) => queries.push(query.clone()),
                    _ => dashboard_queries(field, queries),
                }
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| dashboard_queries(item, queries)),
        _ => {}
    }
}

/// The alerting rules' expressions: each `expr:` block of the YAML, its lines indented
/// under the key.
fn rule_expressions(rules: &str) -> Vec<String> {
    let mut expressions = Vec::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(first) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let mut expression = first.trim_start_matches([' ', '|', '>']).to_owned();
        while let Some(next) = lines
            .next_if(|next| next.trim().is_empty() || next.len() - next.trim_start().len() > indent)
        {
            expression.push('\n');
            expression.push_str(next.trim());
        }
        expressions.push(expression);
    }
    expressions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_name_only_metrics_the_shop_exports() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = format!("sqlite://{}", dir.path().join("shop.db").display());
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-webshop"));
    command.args(["--port", "0", "--db", &db, "--redis", &redis.url()]);
    let shop = ServerProcess::start(command);
    let base = shop.base().to_owned();
    let http = http_client();

    // A browser: its form token issued, the order posted (the form token's guard and
    // #[avoid_repeat]), then posted again (a replay of the first post's answer).
    let front = send_over_tcp(&http, get(format!("{base}/"), ""))
        .await
        .expect("the shop answers");
    let session = support::session_cookie(&front);
    let (status, form) = send(
        &http,
        get(format!("{base}/orders/new?product_id=1"), &session),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{form}");
    let order = format!(
        "product_id=1&quantity=1&form_token={}",
        form_token_in(&form)
    );
    for _ in 0..2 {
        let post = Request::post(format!("{base}/orders"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::COOKIE, &session)
            .body(Body::from(order.clone()))
            .unwrap();
        assert_eq!(send(&http, post).await.0, StatusCode::SEE_OTHER);
    }
    // An API client's order and its retry (the idempotency guard), and a flash-sale
    // purchase (the lock).
    for expected in [StatusCode::CREATED, StatusCode::CREATED] {
        let post = Request::post(format!("{base}/api/orders"))
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-user-id", "7")
            .header("idempotency-key", "order-1")
            .body(Body::from(r#"{"product_id": 1, "quantity": 1}"#))
            .unwrap();
        assert_eq!(send(&http, post).await.0, expected);
    }
    let seckill = Request::post(format!("{base}/api/vouchers/1/seckill"))
        .header("x-user-id", "7")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&http, seckill).await.0, StatusCode::CREATED);

    let (status, scrape) = send(&http, get(format!("{base}/metrics"), "")).await;
    assert_eq!(status, StatusCode::OK);
    let exported = exported_names(&scrape);
    let exported_idem: BTreeSet<&String> = exported
        .iter()
        .filter(|name| name.starts_with("idem_"))
        .collect();

    let mut queries = Vec::new();
    dashboard_queries(
        &serde_json::from_str(DASHBOARD).expect("the dashboard is JSON"),
        &mut queries,
    );
    let on_dashboard: BTreeSet<String> = queries.iter().flat_map(|q| idem_names(q)).collect();
    let expressions = rule_expressions(RULES);
    assert_eq!(
        expressions.len(),
        6,
        "one expression per alert: {expressions:#?}"
    );
    let in_rules: BTreeSet<String> = expressions.iter().flat_map(|e| idem_names(e)).collect();

    let unknown: Vec<&String> = on_dashboard
        .iter()
        .chain(&in_rules)
        .filter(|name| !exported.contains(*name))
        .collect();
    assert!(
        unknown.is_empty(),
        "named by the dashboard or the rules but not exported: {unknown:?}\nexported: {exported_idem:?}"
    );
    // Every metric idem exports has its panel: a histogram through its buckets.
    let unshown: Vec<&&String> = exported_idem
        .iter()
        .filter(|name| {
            let histogram = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            !on_dashboard.contains(name.as_str())
                && !on_dashboard.contains(&format!("{histogram}_bucket"))
        })
        .collect();
    assert!(unshown.is_empty(), "exported but on no panel: {unshown:?}");
    assert!(
        exported_idem.len() >= 11,
        "the shop exports idem's metrics: {exported_idem:?}"
    );
}
