//! Form submissions whose handler spends the token in its own transaction
//! (`VerifyFormTokenLayer::with_spend_in_transaction`, `FormSubmission`), on PostgreSQL
//! and on SQLite: the spent token, the order and the response a repeat replays commit
//! together or not at all. Orders are counted in the database, not from status codes.

use idem_axum::store::TokenStore;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use idem_axum::form_token::FormSubmission;
use idem_axum::identity::ClientCookie;
use idem_axum::store::Store;
use idem_axum::{Idem, VerifyFormTokenLayer};
use idem_sqlx::{CommitError, SqlStore};
use idem_tests::{Counting, Shop, SqlDatabase, Statements, all_at_once};
use sqlx::Pool;
use tokio::sync::Notify;

use crate::{Order, issue, order, order_form, post_form};

/// The lease of a submission's record: how long a repeat waits for a server that died.
const LEASE: Duration = Duration::from_millis(500);

macro_rules! on_both_databases {
    ($($case:ident),+ $(,)?) => {
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                super::$case::<idem_tests::PostgresBackend>().await;
            })+
        }
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                super::$case::<idem_tests::SqliteBackend>().await;
            })+
        }
    };
}

on_both_databases!(
    a_hundred_posts_of_one_token_place_one_order_and_spend_the_token_with_it,
    an_answer_lost_after_the_commit_is_replayed_not_placed_again,
    a_submission_whose_server_died_before_its_commit_is_placed_once_by_the_repeat,
    a_token_that_lapsed_before_the_handler_spent_it_places_nothing_and_keeps_nothing,
    a_handler_that_leaves_the_record_to_the_layer_still_has_its_token_spent,
);

/// One instance of the shop: its database pool, and what its handler does.
struct Instance<D: SqlDatabase> {
    pool: Pool<D::DB>,
    store: SqlStore<D::DB>,
    shop: Shop,
    /// Told when a handler has died before its commit (see [`place`]).
    died: Arc<Notify>,
}

impl<D: SqlDatabase> Clone for Instance<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            store: self.store.clone(),
            shop: self.shop.clone(),
            died: Arc::clone(&self.died),
        }
    }
}

/// `POST /orders`: spends the token, inserts the order and completes the record in one
/// transaction, then redirects to the order's page. The item says what else happens, as a
/// test needs it:
/// - `lapse`: the token is spent elsewhere first, as if it had expired meanwhile;
/// - `die`: the server "dies" before the commit: the transaction is rolled back (as a
///   killed process's is) and the handler never answers;
/// - `lose`: the answer is lost after the commit: the handler answers 500.
async fn place<D: SqlDatabase>(
    State(instance): State<Instance<D>>,
    submission: FormSubmission,
    Form(order): Form<Order>,
) -> Response {
    let run = instance.shop.ran();
    if order.item == "lapse" {
        let spent = instance
            .store
            .consume_token(submission.token_scope(), submission.token());
        assert!(spent.await.expect("the store"), "the token was live");
    }
    let mut tx = instance
        .pool
        .begin_with(D::BEGIN)
        .await
        .expect("a transaction");
    let spent =
        SqlStore::<D::DB>::consume_token_in(&mut tx, submission.token_scope(), submission.token());
    if !spent.await.expect("the token's delete") {
        return submission.refused();
    }
    let insert = format!("INSERT INTO orders (item) VALUES ('{}')", order.item);
    D::DB::execute_on(&mut tx, &insert)
        .await
        .expect("the order");
    if order.item == "die" {
        drop(tx);
        instance.died.notify_one();
        return std::future::pending().await;
    }
    let record = submission.record();
    let redirect = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, format!("/orders/{run}"))],
    );
    let (stored, response) = record
        .stored_response(redirect)
        .await
        .expect("an in-memory body");
    let committed = SqlStore::<D::DB>::commit_with_record(
        tx,
        record.key(),
        record.owner(),
        stored,
        record.retention(),
    );
    match committed.await {
        Ok(()) if order.item == "lose" => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Ok(()) => response,
        Err(CommitError::RecordLost) => StatusCode::CONFLICT.into_response(),
        Err(error) => panic!("the commit failed: {error}"),
    }
}

/// `POST /left-to-layer`: a handler under the same layer that never takes the record over.
async fn leave_it_to_the_layer<D: SqlDatabase>(State(instance): State<Instance<D>>) -> Response {
    let run = instance.shop.ran();
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, format!("/orders/{run}"))],
    )
        .into_response()
}

/// An instance of the shop on `db`, its guards' keys in `store` (tokens and records beside
/// the orders).
async fn instance<D: SqlDatabase, S: Store>(db: &D, store: S) -> (Instance<D>, Router) {
    let pool = db.pool().await;
    D::DB::execute(&pool, "CREATE TABLE IF NOT EXISTS orders (item TEXT)")
        .await
        .expect("the orders table");
    let instance = Instance {
        pool,
        store: db.store(),
        shop: Shop::new(),
        died: Arc::new(Notify::new()),
    };
    let in_transaction = || {
        VerifyFormTokenLayer::new()
            .with_spend_in_transaction(true)
            .with_lease(LEASE)
    };
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientCookie::new("session"))
        .build();
    let app = Router::new()
        .route("/form", get(order_form))
        .route("/orders", post(place::<D>).route_layer(in_transaction()))
        .route(
            "/left-to-layer",
            post(leave_it_to_the_layer::<D>).route_layer(in_transaction()),
        )
        .with_state(instance.clone())
        .layer(idem.layer());
    (instance, app)
}

async fn a_hundred_posts_of_one_token_place_one_order_and_spend_the_token_with_it<
    D: SqlDatabase,
>() {
    let db = D::start().await;
    let (instance, app) = instance(&db, db.store()).await;
    let token = issue(&app, "alice").await;
    let answers = all_at_once(100, |_| {
        let (app, body) = (app.clone(), order(&token));
        async move { post_form(&app, "/orders", "alice", body).await }
    })
    .await;
    assert_eq!(db.count("orders").await, 1, "one order placed");
    assert_eq!(instance.shop.runs(), 1, "the handler ran once");
    let mut replayed = 0;
    for answer in &answers {
        assert_eq!(answer.status(), StatusCode::SEE_OTHER, "{answer:?}");
        assert_eq!(answer.headers()[header::LOCATION], "/orders/1");
        replayed += usize::from(answer.headers().contains_key("idempotent-replayed"));
    }
    assert_eq!(replayed, 99, "all but the first are replays");
    assert_eq!(db.count("idem_tokens").await, 0, "the token was spent");
}

async fn an_answer_lost_after_the_commit_is_replayed_not_placed_again<D: SqlDatabase>() {
    let db = D::start().await;
    let (instance, app) = instance(&db, db.store()).await;
    let token = issue(&app, "alice").await;
    let lost = post_form(
        &app,
        "/orders",
        "alice",
        "item=lose&form_token=".to_owned() + &token,
    );
    assert_eq!(lost.await.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let repeat = post_form(
        &app,
        "/orders",
        "alice",
        "item=lose&form_token=".to_owned() + &token,
    );
    let repeat = repeat.await;
    assert_eq!(
        repeat.status(),
        StatusCode::SEE_OTHER,
        "the committed order's page"
    );
    assert_eq!(repeat.headers()[header::LOCATION], "/orders/1");
    assert!(repeat.headers().contains_key("idempotent-replayed"));
    assert_eq!(db.count("orders").await, 1, "placed once");
    assert_eq!(instance.shop.runs(), 1);
}

async fn a_submission_whose_server_died_before_its_commit_is_placed_once_by_the_repeat<
    D: SqlDatabase,
>() {
    let db = D::start().await;
    // The first instance "dies" mid-submission: its handler never returns, and its
    // record's renewals fail, as they would with no process left to send them.
    let dying_store = Counting::new(db.store());
    dying_store.fail_record_renewals(true);
    let (dying, first) = instance(&db, dying_store).await;
    let (_other, second) = instance(&db, db.store_of_another_instance()).await;
    let token = issue(&second, "alice").await;
    let died = dying.died.notified();
    let doomed = tokio::spawn({
        let body = "item=die&form_token=".to_owned() + &token;
        async move { post_form(&first, "/orders", "alice", body).await }
    });
    died.await;
    assert_eq!(db.count("orders").await, 0, "rolled back with the server");

    // The repeat waits for the dead submission's lease, then places the order.
    let repeat = post_form(&second, "/orders", "alice", order(&token)).await;
    assert_eq!(repeat.status(), StatusCode::SEE_OTHER, "{repeat:?}");
    assert!(!repeat.headers().contains_key("idempotent-replayed"));
    assert_eq!(db.count("orders").await, 1, "placed once");
    let again = post_form(&second, "/orders", "alice", order(&token)).await;
    assert_eq!(
        again.headers()[header::LOCATION],
        repeat.headers()[header::LOCATION]
    );
    assert!(again.headers().contains_key("idempotent-replayed"));
    assert_eq!(db.count("orders").await, 1);
    doomed.abort();
}

async fn a_token_that_lapsed_before_the_handler_spent_it_places_nothing_and_keeps_nothing<
    D: SqlDatabase,
>() {
    let db = D::start().await;
    let (instance, app) = instance(&db, db.store()).await;
    let token = issue(&app, "alice").await;
    let body = "item=lapse&form_token=".to_owned() + &token;
    let lapsed = post_form(&app, "/orders", "alice", body.clone()).await;
    assert_eq!(lapsed.status(), StatusCode::CONFLICT);
    assert_eq!(db.count("orders").await, 0);
    assert_eq!(
        db.count("idem_records").await,
        0,
        "the refusal was not kept"
    );
    // A repeat is refused by the layer, which finds no live token: the handler does not run.
    let repeat = post_form(&app, "/orders", "alice", body).await;
    assert_eq!(repeat.status(), StatusCode::CONFLICT);
    assert!(!repeat.headers().contains_key("idempotent-replayed"));
    assert_eq!(instance.shop.runs(), 1);
}

async fn a_handler_that_leaves_the_record_to_the_layer_still_has_its_token_spent<D: SqlDatabase>() {
    let db = D::start().await;
    let (instance, app) = instance(&db, db.store()).await;
    let token = issue(&app, "alice").await;
    let first = post_form(&app, "/left-to-layer", "alice", order(&token)).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        db.count("idem_tokens").await,
        0,
        "the layer spent the token"
    );
    // Spent, not merely replayed: another route under the token refuses it.
    let elsewhere = post_form(&app, "/orders", "alice", order(&token)).await;
    assert_eq!(elsewhere.status(), StatusCode::CONFLICT);
    assert_eq!(instance.shop.runs(), 1);
}
