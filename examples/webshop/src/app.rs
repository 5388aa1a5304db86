//! The shop's state and its router.

use std::time::Duration;

use axum::Router;
use axum::http::Method;
use axum::http::header::CONTENT_TYPE;
use axum::middleware;
use axum::routing::get;
use idem_axum::idempotency::RecordScope;
use idem_axum::openapi::GuardedRoutes;
use idem_axum::{
    AvoidRepeatLayer, Idem, IdemStore, IdempotencyLayer, VerifyFormTokenLayer, store::Store,
};
use sqlx::SqlitePool;
use tower_sessions::ExpiredDeletion;
use utoipa::OpenApi;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use crate::provider::PaymentProvider;
use crate::routes::{accounts, orders, pages, payments, tickets, vouchers};
use crate::{client, metrics, records, refusal};

/// One shop instance: its database and its two idem runtimes.
///
/// Instances built on the same database and the same store (a `RedisStore` on one Redis)
/// behave as one shop: a duplicate is refused whichever instance it reaches. The records
/// of API orders and payment callbacks are in the database, so those two act as one shop
/// on any store; so are the browsers' sessions, so every instance knows every browser.
#[derive(Debug, Clone)]
pub struct Shop {
    db: SqlitePool,
    idem: Idem,
    /// For the routes whose records commit with their writes ([`records`]).
    records: Idem,
    /// The test-only crash switch: the process kills itself right after a form order's
    /// transaction commits.
    crash_after_commit: bool,
    /// How long an API order's attempt holds its key should the shop die running it.
    order_lease: Duration,
    /// Where API orders are charged, if anywhere.
    provider: Option<PaymentProvider>,
}

impl Shop {
    /// Installs the Prometheus recorder that `GET /metrics` renders, if no recorder is
    /// installed yet ([`new`](Self::new) does it too). What is registered before it goes
    /// nowhere: a `RedisStore` registers its replay copy's counter when it is made, so a
    /// process that makes one calls this first.
    pub fn install_metrics() {
        metrics::install();
    }

    /// A shop on `db` (opened with [`connect`](crate::connect)) whose guards keep their keys
    /// in `store`, but for the idempotency records of API orders and payment callbacks,
    /// which are rows of `db`.
    pub fn new<S: Store>(db: SqlitePool, store: S) -> Self {
        metrics::install();
        let idem = Idem::builder()
            .with_store(store)
            .with_client_identity(client::client_identity())
            .with_namespace("shop")
            .with_responder(refusal::respond)
            .build();
        let records = records::runtime(&db);
        Self {
            db,
            idem,
            records,
            crash_after_commit: false,
            order_lease: Duration::from_secs(10),
            provider: None,
        }
    }

    /// With the crash switch on (for crash tests only): the process kills itself, as
    /// `kill -9` would, right after a form order's transaction commits and before its
    /// page is sent.
    pub fn with_crash_after_commit(mut self, crash: bool) -> Self {
        self.crash_after_commit = crash;
        self
    }

    /// Ends the process here if the crash switch is on.
    pub(crate) fn crash_point(&self) {
        if self.crash_after_commit {
            example_cli::crash::now();
        }
    }

    /// Charges every API order through `provider` before placing it (default: none).
    pub fn with_payment_provider(mut self, provider: PaymentProvider) -> Self {
        self.provider = Some(provider);
        self
    }

    /// How long an API order's attempt holds its key before a retry may run it again,
    /// should the shop die running it (default 10 s; see
    /// [`IdempotencyLayer::with_lease`]).
    pub fn with_order_lease(mut self, lease: Duration) -> Self {
        self.order_lease = lease;
        self
    }

    /// The payment provider API orders are charged through, if any.
    pub(crate) fn payment_provider(&self) -> Option<&PaymentProvider> {
        self.provider.as_ref()
    }

    /// The shop's idem runtimes — its guards', and its records' in the database — which
    /// `main` drains when the server stops.
    pub fn runtimes(&self) -> [&Idem; 2] {
        [&self.idem, &self.records]
    }

    /// The database.
    pub fn db(&self) -> &SqlitePool {
        &self.db
    }

    /// Deletes the browser sessions that expired, once every `period`, for as long as the
    /// database answers: run it beside the server (one instance is enough for a shared
    /// database; more do no harm).
    ///
    /// # Errors
    ///
    /// A deletion failed; the sessions it would have removed stay, expired and unusable.
    pub async fn delete_expired_sessions(
        &self,
        period: Duration,
    ) -> Result<(), tower_sessions::session_store::Error> {
        client::session_store(&self.db)
            .continuously_delete_expired(period)
            .await
    }

    /// The store the guards and the flash sale's locks use.
    pub(crate) fn store(&self) -> &IdemStore {
        self.idem.store()
    }

    /// Every route of the shop, with its guards, and `GET /openapi.json`: the shop's
    /// OpenAPI document, each guarded operation described by the layer that guards it.
    pub fn router(&self) -> Router {
        let (router, api) = self.routes().split_for_parts();
        let api = api
            .to_pretty_json()
            .expect("an OpenAPI document serialises");
        router
            .route(
                "/openapi.json",
                get(move || async move { ([(CONTENT_TYPE, "application/json")], api) }),
            )
            .layer(self.idem.layer())
            // Outside the runtime, so the session has its id before any guard asks for it.
            .layer(middleware::from_fn(client::ensure_browser_session))
            .layer(client::session_layer(&self.db))
            .with_state(self.clone())
    }

    /// The shop's routes and their document, built from one list: a guard goes on a route
    /// with `guarded_by`, which describes it in the route's operations.
    fn routes(&self) -> OpenApiRouter<Shop> {
        let records = || self.records.layer();
        OpenApiRouter::with_openapi(ShopApi::openapi())
            .routes(routes!(pages::index))
            // The order form's tokens and submissions are rows of the database, beside the
            // orders: each order commits with its spent token and the page a repeat gets.
            .routes(routes!(orders::new_form).map(|route| route.route_layer(records())))
            .routes(
                routes!(orders::place)
                    // A second order from one browser within 5 s (the same form opened
                    // twice) is refused; inside the token's guard, so a post refused for
                    // its token takes no window.
                    .guarded_by(
                        AvoidRepeatLayer::new(Duration::from_secs(5))
                            .with_message("This order was already submitted. 请勿重复提交"),
                    )
                    .guarded_by(
                        VerifyFormTokenLayer::new()
                            .with_message("This form was already submitted. 请勿重复提交")
                            // A double click lands on the order the first click placed,
                            // whatever moment a server died at.
                            .with_spend_in_transaction(true),
                    )
                    .map(|route| route.route_layer(records())),
            )
            .routes(routes!(orders::show))
            .routes(
                // GET passes the layer untouched: only POST is guarded. The inner runtime
                // overrides the outer one: the records are in the database.
                routes!(orders::list, orders::create)
                    .guarded_by(
                        IdempotencyLayer::new()
                            .with_required(true)
                            .with_lease(self.order_lease),
                    )
                    .map(|route| route.route_layer(records())),
            )
            .routes(
                // The shape check outside the guard: a malformed callback leaves no record.
                routes!(payments::callback)
                    .guarded_by(payments::idempotency())
                    .map(|route| {
                        route
                            .route_layer(records())
                            .route_layer(middleware::from_fn(payments::canonical_callback))
                    }),
            )
            .routes(routes!(tickets::create))
            .routes(routes!(accounts::withdraw).guarded_by(withdrawal_idempotency()))
            .routes(routes!(accounts::show))
            .routes(routes!(vouchers::seckill))
            .routes(routes!(vouchers::show))
            .routes(routes!(metrics::scrape))
    }
}

/// The document's opening; its paths come from the routes.
#[derive(OpenApi)]
#[openapi(info(
    title = "The example shop",
    description = "Pages, a JSON API and a payment callback, every duplicate met by an idem guard."
))]
struct ShopApi;

/// The ticket is the idempotency key of a withdrawal: every call with one ticket, from
/// whichever client, gets the first call's outcome. Tickets are random ids the shop
/// issued, unique by construction, so one key space serves every client.
fn withdrawal_idempotency() -> IdempotencyLayer {
    IdempotencyLayer::new()
        .with_methods([Method::PUT])
        .with_idempotency_key_fn(|head, _body| {
            let ticket = head.uri.path().rsplit('/').next()?;
            Some(format!("withdrawal:{ticket}"))
        })
        .with_record_scope(RecordScope::Shared)
        .with_required(true)
}
