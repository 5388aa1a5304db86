//! What one-time form tokens add to a form's life: the page that renders the form (a
//! `GET`) and the post that submits it (a `POST` of an urlencoded form), through a
//! `Router` with `oneshot`, on `MemoryStore` and on a real Redis.
//!
//! - `baseline`: the same two routes without tokens — the page answers a fixed string,
//!   the post parses its `Form` — under the same `Idem` layer.
//! - `issue+verify`: the page extracts a `FormToken` (one `SET`), the post goes through
//!   `VerifyFormTokenLayer` (one `DEL`, the form body read and handed on).
//! - `issue+verify+rotate`: the same with rotation, which issues the next token on the
//!   post (one more `SET`) and returns it in a header.
//!
//! Every iteration is one page and one post with the token that page gave, and is checked
//! to be accepted. `cargo bench -p idem-bench --bench form_token`

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::routing::{get, post};
use axum::{Form, Router};
use criterion::Criterion;
use idem_axum::{FormToken, VerifyFormTokenLayer, store::Store};
use idem_bench::{CLIENT, behind_idem};
use tower::ServiceExt;

#[derive(serde::Deserialize)]
struct Order {
    item: String,
}

async fn fixed_page() -> &'static str {
    "AAAAAAAAAAAAAAAAAAAAAA"
}

async fn token_page(token: FormToken) -> String {
    token.value().to_owned()
}

async fn place_order(Form(order): Form<Order>) -> String {
    order.item
}

fn app<S: Store>(store: S) -> Router {
    let routes = Router::new()
        .route("/baseline/form", get(fixed_page))
        .route("/baseline/orders", post(place_order))
        .route("/issue+verify/form", get(token_page))
        .route(
            "/issue+verify/orders",
            post(place_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .route("/issue+verify+rotate/form", get(token_page))
        .route(
            "/issue+verify+rotate/orders",
            post(place_order).route_layer(VerifyFormTokenLayer::new().with_rotation(true)),
        );
    behind_idem(store, routes)
}

/// One page and one post of the form it rendered.
async fn round_trip(app: Router, case: &str) {
    let page = Request::get(format!("/{case}/form"))
        .header(&CLIENT, "alice")
        .body(Body::empty())
        .expect("a valid request");
    let page = app.clone().oneshot(page).await.expect("infallible");
    assert_eq!(page.status(), StatusCode::OK, "{case}");
    let token = axum::body::to_bytes(page.into_body(), usize::MAX)
        .await
        .expect("the page");
    let mut form = b"item=tea+cup&form_token=".to_vec();
    form.extend_from_slice(&token);
    let post = Request::post(format!("/{case}/orders"))
        .header(&CLIENT, "alice")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form))
        .expect("a valid request");
    let response = app.oneshot(post).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK, "{case}");
}

fn run(c: &mut Criterion, backend: &str, app: Router, runtime: &tokio::runtime::Runtime) {
    let mut group = c.benchmark_group(format!("form_token/{backend}"));
    for case in ["baseline", "issue+verify", "issue+verify+rotate"] {
        group.bench_function(case, |b| {
            b.to_async(runtime).iter(|| round_trip(app.clone(), case));
        });
    }
    group.finish();
}

idem_bench::http_bench_main!(form_token, capacity = 1_000_000);
