//! The payments API through its router (no sockets), counted in its database: with the
//! records in that database (SQLite, or a real PostgreSQL the harness starts), and with
//! them in a real Redis the harness starts. Each case runs in every set-up.

use std::net::SocketAddr;

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode, header};
use example_payments::{Database, Payments, Records};
use idem_tests::{
    Answer, PostgresServer, RedisServer, all_at_once, answer, assert_created_or_in_progress,
};
use serde_json::json;
use tempfile::TempDir;
use tower::ServiceExt;

macro_rules! in_every_setup {
    (@setup $module:ident $setup:ident $($case:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case(super::Setup::$setup).await;
                }
            )+
        }
    };
    ($($case:ident),+ $(,)?) => {
        in_every_setup!(@setup sqlite Sqlite $($case),+);
        in_every_setup!(@setup postgres Postgres $($case),+);
        in_every_setup!(@setup redis Redis $($case),+);
    };
}

in_every_setup!(
    a_payment_is_made_once_per_key_and_replayed,
    concurrent_retries_pay_once,
    the_key_with_another_payment_is_422_and_pays_nothing,
    bad_input_gets_a_4xx_and_leaves_nothing_behind,
);

/// Where the payments and the records are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// Both in SQLite.
    Sqlite,
    /// Both in PostgreSQL.
    Postgres,
    /// The payments in SQLite, the records in Redis.
    Redis,
}

/// The service on a database of its own, and its records' Redis if any.
struct TestApp {
    router: Router,
    payments: Payments,
    redis: Option<RedisServer>,
    _dir: TempDir,
    _postgres: Option<PostgresServer>,
}

impl TestApp {
    async fn start(setup: Setup) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let redis = (setup == Setup::Redis).then(RedisServer::start);
        let records = match &redis {
            Some(server) => Records::InRedis(server.store()),
            None => Records::InDatabase,
        };
        let postgres = (setup == Setup::Postgres).then(PostgresServer::start);
        let payments = match &postgres {
            Some(server) => Payments::open_postgres(&server.url(), records).await,
            None => Payments::open(dir.path().join("payments.db"), records).await,
        };
        let payments = payments.expect("the database");
        // What serving with `into_make_service_with_connect_info` gives each request.
        let client = SocketAddr::from(([127, 0, 0, 1], 40_000));
        let router = payments.router().layer(Extension(ConnectInfo(client)));
        Self {
            router,
            payments,
            redis,
            _dir: dir,
            _postgres: postgres,
        }
    }

    async fn count(&self, sql: &str) -> i64 {
        use idem_sqlx::sqlx::query_scalar;
        let count = match self.payments.db() {
            Database::Sqlite(pool) => query_scalar(sql).fetch_one(pool).await,
            Database::Postgres(pool) => query_scalar(sql).fetch_one(pool).await,
        };
        count.expect("a count")
    }

    async fn payments(&self) -> i64 {
        self.count("SELECT COUNT(*) FROM payments").await
    }

    /// The idempotency records kept: rows of the database, or keys in Redis.
    async fn records(&self) -> usize {
        match &self.redis {
            Some(server) => server.keys().len(),
            None => {
                let rows = self.count("SELECT COUNT(*) FROM idem_records").await;
                usize::try_from(rows).expect("a count")
            }
        }
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        answer(&self.router, request).await
    }
}

/// `POST /payments` with `key` (if any) and `body` as sent.
fn pay(key: Option<&str>, body: &str) -> Request<Body> {
    let mut request = Request::post("/payments").header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
        .body(Body::from(body.to_owned()))
        .expect("a request")
}

fn alice(amount: i64) -> String {
    json!({ "account": "alice", "amount": amount }).to_string()
}

async fn a_payment_is_made_once_per_key_and_replayed(setup: Setup) {
    let app = TestApp::start(setup).await;
    let first = app.send(pay(Some("k1"), &alice(1200))).await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    assert!(!first.replayed());
    assert_eq!(
        first.json(),
        json!({ "payment_id": 1, "account": "alice", "amount": 1200 })
    );
    for _ in 0..3 {
        let retry = app.send(pay(Some("k1"), &alice(1200))).await;
        assert_eq!(retry.status, StatusCode::CREATED);
        assert!(retry.replayed());
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(app.payments().await, 1);
    assert_eq!(app.records().await, 1);
    if setup != Setup::Redis {
        let completed = app
            .count("SELECT COUNT(*) FROM idem_records WHERE response IS NOT NULL")
            .await;
        assert_eq!(completed, 1, "the record was completed with the payment");
    }

    let other = app.send(pay(Some("k2"), &alice(1200))).await;
    assert_eq!(
        other.json()["payment_id"],
        2,
        "another key, another payment"
    );
    let list = app
        .send(Request::get("/payments").body(Body::empty()).unwrap())
        .await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.json().as_array().map(Vec::len), Some(2));
}

async fn concurrent_retries_pay_once(setup: Setup) {
    let app = TestApp::start(setup).await;
    let router = app.router.clone();
    let statuses = all_at_once(20, |_| {
        let router = router.clone();
        async move {
            let response = router.oneshot(pay(Some("k"), &alice(500))).await;
            response.expect("infallible").status()
        }
    })
    .await;
    assert_created_or_in_progress(&statuses);
    assert_eq!(app.payments().await, 1);
}

async fn the_key_with_another_payment_is_422_and_pays_nothing(setup: Setup) {
    let app = TestApp::start(setup).await;
    assert_eq!(
        app.send(pay(Some("k"), &alice(100))).await.status,
        StatusCode::CREATED
    );
    let other = app.send(pay(Some("k"), &alice(200))).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.payments().await, 1);
}

async fn bad_input_gets_a_4xx_and_leaves_nothing_behind(setup: Setup) {
    let app = TestApp::start(setup).await;
    let missing_key = app.send(pay(None, &alice(100))).await;
    assert_eq!(missing_key.status, StatusCode::BAD_REQUEST);
    let long_account = json!({ "account": "a".repeat(65), "amount": 100 }).to_string();
    let bad = [
        "{not json".to_owned(),
        String::new(),
        r#"{"account": "alice"}"#.to_owned(),
        r#"{"account": "alice", "amount": "12"}"#.to_owned(),
        r#"{"account": "alice", "amount": 1e30}"#.to_owned(),
        r#"{"account": "alice", "amount": 12.5}"#.to_owned(),
        r#"{"account": 7, "amount": 100}"#.to_owned(),
        alice(0),
        alice(-5),
        alice(100_000_001),
        json!({ "account": "  ", "amount": 100 }).to_string(),
        long_account,
    ];
    for body in &bad {
        let refused = app.send(pay(Some("k"), body)).await;
        assert!(refused.status.is_client_error(), "{body}: {refused:?}");
    }
    let untyped = Request::post("/payments")
        .header("idempotency-key", "k")
        .body(Body::from(alice(100)))
        .unwrap();
    assert_eq!(
        app.send(untyped).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(app.payments().await, 0);
    assert_eq!(app.records().await, 0, "no record was kept");

    // The corrected request, with the same key, is the first.
    let paid = app.send(pay(Some("k"), &alice(100))).await;
    assert_eq!(paid.status, StatusCode::CREATED);
    assert!(!paid.replayed());
    assert_eq!(app.payments().await, 1);
}
