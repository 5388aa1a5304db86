//! `idem_outcomes_total` by guard, route and outcome, as an operator's dashboard breaks
//! the guards' decisions down: the route a label of bounded cardinality, the pattern a
//! request matched and never the path it requested.

use axum::Router;
use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_axum::identity::ClientHeader;
use idem_axum::{
    AvoidRepeatLayer, FormToken, Idem, IdempotencyLayer, VerifyFormTokenLayer, avoid_repeat,
};
use idem_tests::{CLIENT, answer, post_as, send};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use tower::Layer;

#[avoid_repeat(timeout = "30s")]
async fn place_order() -> StatusCode {
    StatusCode::CREATED
}

/// A Prometheus recorder of the test's own (to be its thread's, so that the tests of this
/// file count apart), and a runtime that tells clients apart by [`CLIENT`].
fn recorder_and_runtime() -> (PrometheusRecorder, Idem) {
    let recorder = PrometheusBuilder::new().build_recorder();
    let idem = Idem::builder()
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    (recorder, idem)
}

/// The samples of `idem_outcomes_total` for `guard` and `outcome` in a Prometheus scrape:
/// each series' `route` label and its value, by route.
fn outcomes_by_route(scrape: &str, guard: &str, outcome: &str) -> Vec<(String, u64)> {
    let labels = format!(r#"idem_outcomes_total{{guard="{guard}",route=""#);
    let outcome = format!(r#"",outcome="{outcome}"}} "#);
    scrape
        .lines()
        .filter_map(|line| {
            let (route, value) = line.strip_prefix(&labels)?.split_once(&outcome)?;
            Some((route.to_owned(), value.parse().ok()?))
        })
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect()
}

/// Each guard counts its outcomes under the route pattern its request matched — never the
/// path requested: `/orders/1` and `/orders/2` are one series — in full under `nest`; under
/// `unmatched` when its layer wraps a router as a service, which runs before routing; and
/// `#[avoid_repeat]` under its handler's name.
#[tokio::test]
async fn outcomes_are_counted_by_route_pattern_never_by_path() {
    let (recorder, idem) = recorder_and_runtime();
    let scrape = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let created = || async { StatusCode::CREATED };
    let api = Router::new().route(
        "/refunds/{id}",
        post(created).route_layer(IdempotencyLayer::new()),
    );
    // Around the router as a service (here its fallback), the layer runs before routing.
    let around =
        IdempotencyLayer::new().layer(Router::new().route("/transfers/{id}", post(created)));
    let app = Router::new()
        .route(
            "/orders/{id}",
            post(created).route_layer(IdempotencyLayer::new()),
        )
        .route(
            "/carts/{id}",
            post(created).route_layer(AvoidRepeatLayer::new(std::time::Duration::from_secs(30))),
        )
        .route("/checkout", post(place_order))
        .route(
            "/forms/{id}",
            post(created)
                .route_layer(VerifyFormTokenLayer::new())
                .get(|token: FormToken| async move { token.value().to_owned() }),
        )
        .nest("/api", api)
        .fallback_service(around)
        .layer(idem.layer());

    for id in 1..=2 {
        for path in ["orders", "api/refunds", "transfers"] {
            let key = format!("\"{path}-{id}\"");
            send(&app, post_as(&format!("/{path}/{id}"), "alice", Some(&key))).await;
        }
        let client = format!("client-{id}");
        send(&app, post_as(&format!("/carts/{id}"), &client, None)).await;
        send(&app, post_as("/checkout", &client, None)).await;
        let page = Request::get(format!("/forms/{id}")).header(CLIENT, "alice");
        let token = answer(&app, page.body(Body::empty()).unwrap()).await.text();
        let form = Request::post(format!("/forms/{id}"))
            .header(CLIENT, "alice")
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("form_token={token}")))
            .unwrap();
        let posted = answer(&app, form).await;
        assert_eq!(posted.status, StatusCode::CREATED, "{}", posted.text());
    }

    let scrape = scrape.render();
    let series = |route: &str, count| vec![(route.to_owned(), count)];
    let idempotency = outcomes_by_route(&scrape, "idempotency", "accepted");
    let mut routes: Vec<_> = idempotency
        .iter()
        .map(|(route, _)| route.as_str())
        .collect();
    routes.sort_unstable();
    assert_eq!(
        routes,
        ["/api/refunds/{id}", "/orders/{id}", "unmatched"],
        "{scrape}"
    );
    assert!(idempotency.iter().all(|(_, count)| *count == 2), "{scrape}");
    assert_eq!(
        outcomes_by_route(&scrape, "avoid_repeat", "accepted"),
        [
            series("/carts/{id}", 2),
            series("outcome_metrics::place_order", 2)
        ]
        .concat(),
        "{scrape}"
    );
    assert_eq!(
        outcomes_by_route(&scrape, "form_token", "issued"),
        series("/forms/{id}", 2),
        "{scrape}"
    );
    assert_eq!(
        outcomes_by_route(&scrape, "form_token", "accepted"),
        series("/forms/{id}", 2),
        "{scrape}"
    );
    assert!(
        !scrape.contains("/orders/1") && !scrape.contains("/transfers/1"),
        "no path requested in a label: {scrape}"
    );
}

/// A gRPC call counts under its method's path, whose methods a service declares, even where
/// its guard runs before routing.
#[tokio::test]
async fn a_grpc_call_counts_under_its_method_path() {
    const PAY: &str = "/bank.Bank/Pay";
    let (recorder, idem) = recorder_and_runtime();
    let scrape = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let bank = Router::new().route(PAY, post(|| async { StatusCode::OK }));
    let around = IdempotencyLayer::new().with_grpc_methods([PAY]).layer(bank);
    let app = Router::new().fallback_service(around).layer(idem.layer());
    for key in ["k-1", "k-2"] {
        let call = Request::post(PAY)
            .header(CLIENT, "alice")
            .header(CONTENT_TYPE, "application/grpc")
            .header("idempotency-key", key)
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(&app, call).await.status(), StatusCode::OK);
    }

    let scrape = scrape.render();
    assert_eq!(
        outcomes_by_route(&scrape, "idempotency", "accepted"),
        [(PAY.to_owned(), 2)],
        "{scrape}"
    );
}
