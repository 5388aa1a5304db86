//! The shop's OpenAPI document (`GET /openapi.json`) against the router that serves it:
//! every operation the document marks as guarded (`x-idem-guards`) is driven through the
//! real router and does what its entry says — the key header refused when missing or
//! malformed, a retry replayed with the replay marker, another payload under the same key
//! refused with 422, a form token refused when missing or forged, a repeat inside the
//! window refused with 409 — each refusal's `type` one the entry lists for its status and
//! the one the refusal module gives. Every operation it does not mark is sent twice, with
//! an `Idempotency-Key`, and neither answer is a guard's. A layer put on a route without
//! its description, or a description without its layer, fails here.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use idem_axum::RejectionKind;
use idem_tests::{Answer, MemoryBackend, answer};
use serde_json::{Value, json};

use crate::{TestShop, get, new_browser, token_in};

/// Every operation of the shop, as `METHOD path` in the document: the list the document
/// is held to, so that a route left out of it (or a new one without a request here) fails.
const OPERATIONS: [&str; 13] = [
    "GET /",
    "GET /orders/new",
    "POST /orders",
    "GET /orders/{id}",
    "GET /api/orders",
    "POST /api/orders",
    "POST /api/payments/callback",
    "POST /api/tickets",
    "PUT /api/accounts/{id}/withdrawals/{ticket_id}",
    "GET /api/accounts/{id}",
    "POST /api/vouchers/{id}/seckill",
    "GET /api/vouchers/{id}",
    "GET /metrics",
];

/// A request that can be sent again, unchanged.
#[derive(Debug, Clone)]
struct Call {
    method: Method,
    uri: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Call {
    fn new(method: Method, uri: &str) -> Self {
        Self {
            method,
            uri: uri.to_owned(),
            headers: Vec::new(),
            body: String::new(),
        }
    }

    fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    fn json(self, body: &Value) -> Self {
        let mut call = self.header("content-type", "application/json");
        call.body = body.to_string();
        call
    }

    fn form(self, body: String) -> Self {
        let mut call = self.header("content-type", "application/x-www-form-urlencoded");
        call.body = body;
        call
    }

    fn request(&self) -> Request<Body> {
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(&self.uri);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request.body(Body::from(self.body.clone())).unwrap()
    }
}

/// The shop, its document, and how each of its operations is called.
struct Shop {
    shop: TestShop<MemoryBackend>,
    document: Value,
}

impl Shop {
    async fn start() -> Self {
        let shop = TestShop::<MemoryBackend>::start().await;
        let served = answer(&shop.router, get("/openapi.json", None)).await;
        assert_eq!(served.status, StatusCode::OK);
        assert_eq!(served.headers[header::CONTENT_TYPE], "application/json");
        let document = served.json();
        Self { shop, document }
    }

    fn router(&self) -> &Router {
        &self.shop.router
    }

    async fn send(&self, call: &Call) -> Answer {
        answer(self.router(), call.request()).await
    }

    /// A value of its own, to name a client, a delivery or a withdrawal: a ticket the
    /// shop issued.
    async fn unique(&self) -> String {
        let ticket = self.send(&Call::new(Method::POST, "/api/tickets")).await;
        assert_eq!(ticket.status, StatusCode::CREATED);
        ticket.json()["ticket_id"].as_str().unwrap().to_owned()
    }

    /// A call of `operation` as the client `client` (a browser's cookie), with the
    /// payload `payload` (0 or 1: the same request, or another one) and `unique` where
    /// the request names something of its own.
    fn call(&self, operation: &str, client: &str, payload: i64, unique: &str) -> Call {
        let browser = |call: Call| call.header("cookie", client);
        let user = |call: Call| call.header("x-user-id", unique);
        match operation {
            "GET /" => browser(Call::new(Method::GET, "/")),
            "GET /orders/new" => browser(Call::new(Method::GET, "/orders/new?product_id=1")),
            "POST /orders" => browser(Call::new(Method::POST, "/orders"))
                .form(format!("product_id=1&quantity={}", 1 + payload)),
            "GET /orders/{id}" => browser(Call::new(Method::GET, "/orders/1")),
            "GET /api/orders" => Call::new(Method::GET, "/api/orders"),
            "POST /api/orders" => user(Call::new(Method::POST, "/api/orders"))
                .json(&json!({ "product_id": 1, "quantity": 1 + payload })),
            "POST /api/payments/callback" => Call::new(Method::POST, "/api/payments/callback")
                .json(&json!({ "source": "openapi", "seq": unique, "order_id": 1, "amount": 100 + payload })),
            "POST /api/tickets" => Call::new(Method::POST, "/api/tickets"),
            "PUT /api/accounts/{id}/withdrawals/{ticket_id}" => Call::new(
                Method::PUT,
                &format!("/api/accounts/1/withdrawals/{unique}"),
            )
            .json(&json!({ "amount": 1 + payload })),
            "GET /api/accounts/{id}" => Call::new(Method::GET, "/api/accounts/1"),
            "POST /api/vouchers/{id}/seckill" => {
                user(Call::new(Method::POST, "/api/vouchers/1/seckill"))
            }
            "GET /api/vouchers/{id}" => Call::new(Method::GET, "/api/vouchers/1"),
            "GET /metrics" => Call::new(Method::GET, "/metrics"),
            other => panic!("no call for `{other}`: add one here"),
        }
    }

    /// Every operation of the document: `METHOD path` and its entry.
    fn operations(&self) -> Vec<(String, Value)> {
        let mut operations = Vec::new();
        for (path, item) in self.document["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("a path item") {
                if operation.get("responses").is_some() {
                    let name = format!("{} {path}", method.to_uppercase());
                    operations.push((name, operation.clone()));
                }
            }
        }
        operations
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_describes_the_guards_the_router_carries() {
    let shop = Shop::start().await;
    let operations = shop.operations();
    let mut names: Vec<&str> = operations.iter().map(|(name, _)| name.as_str()).collect();
    names.sort_unstable();
    let mut expected = OPERATIONS.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected, "the document's operations");

    let mut guarded = Vec::new();
    for (name, operation) in &operations {
        let guards = operation["x-idem-guards"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for guard in &guards {
            let kind = guard["guard"].as_str().expect("a guard's name");
            match kind {
                "idempotency-key" => check_idempotency(&shop, name, operation, guard).await,
                "form-token" => check_form_token(&shop, name, operation, guard).await,
                "avoid-repeat" => check_avoid_repeat(&shop, name, operation, guard).await,
                other => panic!("{name}: a guard this test does not know: {other}"),
            }
            guarded.push(format!("{name}: {kind}"));
        }
        if guards.is_empty() {
            check_unguarded(&shop, name).await;
        }
    }
    guarded.sort_unstable();
    // What the shop guards, as its contract (the crate's docs) says: the document must
    // say so too, or the checks above would have nothing to drive.
    assert_eq!(
        guarded,
        [
            "POST /api/orders: idempotency-key",
            "POST /api/payments/callback: idempotency-key",
            "POST /orders: avoid-repeat",
            "POST /orders: form-token",
            "PUT /api/accounts/{id}/withdrawals/{ticket_id}: idempotency-key",
        ]
    );
}

/// The key header as documented; a missing or malformed key, a retry and another payload
/// answered as documented.
async fn check_idempotency(shop: &Shop, name: &str, operation: &Value, guard: &Value) {
    let unique = shop.unique().await;
    let client = new_browser(shop.router()).await;
    let call = |payload| shop.call(name, &client, payload, &unique);
    let key_header = guard["keyHeader"].as_str();
    let keyed = |payload| match key_header {
        Some(header) => call(payload).header(header, &format!("\"{unique}\"")),
        None => call(payload),
    };
    if let Some(header) = key_header {
        let required = guard["keyRequired"].as_bool().unwrap();
        let parameter = parameter(operation, header).expect("the key header's parameter");
        assert_eq!(parameter["required"], required, "{name}");
        if required {
            let missing = shop.send(&call(0)).await;
            assert_refusal(
                name,
                operation,
                &missing,
                RejectionKind::MissingIdempotencyKey,
            );
        }
        let malformed = shop.send(&call(0).header(header, "\"unterminated")).await;
        assert_refusal(
            name,
            operation,
            &malformed,
            RejectionKind::InvalidIdempotencyKey,
        );
    } else {
        assert!(parameter(operation, "idempotency-key").is_none(), "{name}");
    }

    let first = shop.send(&keyed(0)).await;
    let status = first.status.as_str().to_owned();
    let documented = &operation["responses"][&status];
    assert!(documented.is_object(), "{name}: {status} is not documented");
    let replayed_header = guard["replayedHeader"].as_str().unwrap();
    assert!(!first.headers.contains_key(replayed_header), "{name}");
    if let Some(retention) = guard["retentionHeader"].as_str() {
        let seconds = guard["retentionSeconds"].as_u64().unwrap().to_string();
        assert_eq!(first.headers[retention], seconds.as_str(), "{name}");
        assert!(documented["headers"][retention].is_object(), "{name}");
    }
    let retry = shop.send(&keyed(0)).await;
    assert_eq!(
        (retry.status, &retry.body),
        (first.status, &first.body),
        "{name}"
    );
    assert_eq!(retry.headers[replayed_header], "true", "{name}");
    assert!(documented["headers"][replayed_header].is_object(), "{name}");

    let other = shop.send(&keyed(1)).await;
    assert_refusal(name, operation, &other, RejectionKind::IdempotencyKeyReused);
}

/// The token field as documented; a missing or forged token refused, and a repeat of a
/// spent one replayed (or refused) as documented.
async fn check_form_token(shop: &Shop, name: &str, operation: &Value, guard: &Value) {
    let field = guard["field"].as_str().unwrap();
    let form = &operation["requestBody"]["content"]["application/x-www-form-urlencoded"];
    assert!(
        form.to_string().contains(&format!("\"{field}\"")),
        "{name}: the form body names no `{field}`: {form}"
    );
    assert!(parameter(operation, guard["header"].as_str().unwrap()).is_some());

    let client = new_browser(shop.router()).await;
    let without = shop.call(name, &client, 0, "");
    let missing = shop.send(&without).await;
    assert_refusal(name, operation, &missing, RejectionKind::MissingFormToken);
    let forged = with_field(&without, field, "forged");
    let refused = shop.send(&forged).await;
    assert_refusal(name, operation, &refused, RejectionKind::InvalidFormToken);

    let posted = with_field(&without, field, &fresh_token(shop, &client).await);
    let first = shop.send(&posted).await;
    let documented = &operation["responses"][first.status.as_str()];
    assert!(
        documented.is_object(),
        "{name}: {} undocumented",
        first.status
    );
    let repeat = shop.send(&posted).await;
    if guard["replay"] == true {
        assert_eq!(repeat.status, first.status, "{name}");
        assert_eq!(repeat.headers["idempotent-replayed"], "true", "{name}");
        assert!(
            documented["headers"]["idempotent-replayed"].is_object(),
            "{name}"
        );
    } else {
        assert_refusal(name, operation, &repeat, RejectionKind::InvalidFormToken);
    }
    if guard["payloadChecked"] == true {
        let token = posted.body.rsplit('=').next().unwrap();
        let otherwise = with_field(&shop.call(name, &client, 1, ""), field, token);
        let reused = shop.send(&otherwise).await;
        assert_refusal(
            name,
            operation,
            &reused,
            RejectionKind::IdempotencyKeyReused,
        );
    }
}

/// A second request from the same client, inside the window, refused with 409.
async fn check_avoid_repeat(shop: &Shop, name: &str, operation: &Value, guard: &Value) {
    assert!(guard["windowSeconds"].as_u64().unwrap() > 0);
    let client = new_browser(shop.router()).await;
    let unique = shop.unique().await;
    let mut answers = Vec::new();
    for _ in 0..2 {
        let mut call = shop.call(name, &client, 0, &unique);
        if let Some(form) = guards_of(operation).find(|guard| guard["guard"] == "form-token") {
            let token = fresh_token(shop, &client).await;
            call = with_field(&call, form["field"].as_str().unwrap(), &token);
        }
        answers.push(shop.send(&call).await);
    }
    assert!(answers[0].status.is_success() || answers[0].status.is_redirection());
    assert_refusal(name, operation, &answers[1], RejectionKind::Duplicate);
    assert!(
        answers[1].headers.contains_key(header::RETRY_AFTER),
        "{name}"
    );
    assert!(operation["responses"]["409"]["headers"]["retry-after"].is_object());
}

/// Sent twice, with an `Idempotency-Key`: no answer is a guard's refusal or replay.
async fn check_unguarded(shop: &Shop, name: &str) {
    let client = new_browser(shop.router()).await;
    let unique = shop.unique().await;
    let call = shop
        .call(name, &client, 0, &unique)
        .header("idempotency-key", &unique);
    for attempt in 0..2 {
        let answer = shop.send(&call).await;
        assert!(
            !answer.headers.contains_key("idempotent-replayed"),
            "{name}: undocumented replay"
        );
        if let Some(kind) = refusal_of(&answer) {
            panic!("{name}, attempt {attempt}: refused by an undocumented guard: {kind}");
        }
    }
}

/// `answer` is the refusal `kind`, and the document lists it for its status.
fn assert_refusal(name: &str, operation: &Value, answer: &Answer, kind: RejectionKind) {
    assert_eq!(answer.status, kind.status(), "{name}: {:?}", answer.text());
    assert_eq!(
        refusal_of(answer).as_deref(),
        Some(kind.type_uri()),
        "{name}"
    );
    let response = &operation["responses"][kind.status().as_str()];
    let types =
        &response["content"]["application/problem+json"]["schema"]["properties"]["type"]["enum"];
    let types = types
        .as_array()
        .unwrap_or_else(|| panic!("{name}: no problem types: {response}"));
    assert!(
        types.contains(&Value::from(kind.type_uri())),
        "{name}: {kind:?} is not documented under {}",
        kind.status()
    );
}

/// The problem `type` of a refusal in problem JSON.
fn refusal_of(answer: &Answer) -> Option<String> {
    let problem = answer.headers.get(header::CONTENT_TYPE)
        == Some(&HeaderValue::from_static("application/problem+json"));
    problem.then(|| answer.json()["type"].as_str().unwrap().to_owned())
}

fn guards_of(operation: &Value) -> impl Iterator<Item = &Value> {
    operation["x-idem-guards"].as_array().into_iter().flatten()
}

/// The header parameter `name` of `operation`.
fn parameter<'a>(operation: &'a Value, name: &str) -> Option<&'a Value> {
    operation["parameters"].as_array()?.iter().find(|p| {
        p["in"] == "header"
            && p["name"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
    })
}

/// `call`'s form with `field` set to `value`.
fn with_field(call: &Call, field: &str, value: &str) -> Call {
    let mut call = call.clone();
    call.body = format!("{}&{field}={value}", call.body);
    call
}

/// A new token from the order form, issued to `client`.
async fn fresh_token(shop: &Shop, client: &str) -> String {
    let page = answer(shop.router(), get("/orders/new?product_id=1", Some(client))).await;
    assert_eq!(page.status, StatusCode::OK);
    token_in(&page.text())
}
