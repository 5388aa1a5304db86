//! Orders: the browser's order form (form token + anti-repeat window) and the JSON API
//! (`Idempotency-Key`).

use askama::Template;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::{Form, Json};
use idem_axum::FormToken;
use idem_axum::form_token::FormSubmission;
use idem_axum::idempotency::IdempotencyRecord;
use idem_sqlx::{CommitError, SqliteStore};
use serde::Deserialize;
use tower_sessions::Session;

use crate::app::Shop;
use crate::client::Client;
use crate::db::{Order, Product};
use crate::error::{ApiError, PageError};
use crate::{provider, records};

/// The most of one product one order may hold.
const MAX_QUANTITY: i64 = 99;

/// The order form of one product.
#[derive(Template)]
#[template(path = "order_form.html")]
struct OrderFormPage {
    product: Product,
    /// The one-time token's hidden input, already HTML.
    token_input: String,
}

/// An order's page.
#[derive(Template)]
#[template(path = "order.html")]
struct OrderPage {
    order: Order,
    product: Product,
}

/// `?product_id=N`.
#[derive(Debug, Deserialize)]
pub(crate) struct ProductQuery {
    product_id: i64,
}

/// What the order form and the API post.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct NewOrder {
    product_id: i64,
    quantity: i64,
}

impl NewOrder {
    fn quantity_is_valid(&self) -> bool {
        (1..=MAX_QUANTITY).contains(&self.quantity)
    }
}

/// `GET /orders/new?product_id=N`: the form, with a fresh one-time token.
///
/// The token is extracted only once the product is found: every token issued is kept in
/// the store for its whole TTL, so a form that cannot be shown must not cost one (nor let
/// anyone fill the store by asking for forms of products that do not exist).
#[utoipa::path(get, path = "/orders/new", tag = "pages",
    params(("product_id" = i64, Query, description = "The product to order")),
    responses(
        (status = 200, description = "The order form, carrying a one-time form token", content_type = "text/html", body = String),
        (status = 404, description = "No such product; no token issued"),
    ),
)]
pub(crate) async fn new_form(
    State(shop): State<Shop>,
    Query(query): Query<ProductQuery>,
    mut parts: Parts,
) -> Result<Html<String>, Response> {
    let product = Product::find(shop.db(), query.product_id)
        .await
        .map_err(PageError::from)
        .and_then(|product| {
            product.ok_or(PageError::new(
                StatusCode::NOT_FOUND,
                "There is no such product.",
            ))
        })
        .map_err(IntoResponse::into_response)?;
    let token = FormToken::from_request_parts(&mut parts, &shop)
        .await
        .map_err(IntoResponse::into_response)?;
    let page = OrderFormPage {
        product,
        token_input: token.hidden_input(),
    };
    page.render()
        .map(Html)
        .map_err(|error| PageError::from(error).into_response())
}

/// `POST /orders`: places the order once, then sends the browser to its page
/// (post/redirect/get, so a reload of the result repeats a `GET`, not the order).
///
/// The form token makes each rendered form good for one order: the route's layer has
/// begun the submission's record and seen the token live, and the order, the spent token
/// and the page a repeat gets commit in one transaction. A double click's second post
/// waits for the first and lands on its order; a server killed after the commit leaves a
/// repeat that lands there too, and one killed before it leaves the form good for the
/// repeat, which places the order. The route's window refuses a second order from the same
/// browser for a few seconds, such as one from the same form opened twice.
///
/// A browser abandons its first post for its second on a double click, closing the first
/// one's connection: the layer runs the handler to its end all the same.
#[utoipa::path(post, path = "/orders", tag = "pages",
    request_body(content = NewOrder, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Placed: to the order's page", headers(("location" = String, description = "The order's page"))),
        (status = 404, description = "No such product"),
        (status = 422, description = "A quantity outside 1 to 99"),
    ),
)]
pub(crate) async fn place(
    State(shop): State<Shop>,
    submission: FormSubmission,
    headers: HeaderMap,
    session: Session,
    Form(form): Form<NewOrder>,
) -> Result<Response, PageError> {
    // Every page request gets a session with an id before it gets here, so this only
    // fails for a request whose client the guards would have refused first.
    let client = Client::of(&headers, &session).ok_or(PageError::new(
        StatusCode::BAD_REQUEST,
        "Your browser sent no session cookie.",
    ))?;
    if !form.quantity_is_valid() {
        return Err(PageError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "The quantity must be between 1 and 99.",
        ));
    }
    if Product::find(shop.db(), form.product_id).await?.is_none() {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            "There is no such product.",
        ));
    }
    let record = submission.record();
    record.take_over();
    let mut tx = shop.db().begin_with("BEGIN IMMEDIATE").await?;
    let token = (submission.token_scope(), submission.token());
    if !SqliteStore::consume_token_in(&mut tx, token.0, token.1)
        .await
        .map_err(PageError::from_store)?
    {
        // The token lapsed since the layer saw it (its TTL ran out, or newer forms of
        // this browser pushed it out): no order.
        return Ok(submission.refused());
    }
    let order = Order::insert(&mut *tx, form.product_id, form.quantity, &client.label()).await?;
    let (stored, page) = record
        .stored_response(Redirect::to(&format!("/orders/{}", order.id)))
        .await
        .map_err(|_| PageError::new(StatusCode::INTERNAL_SERVER_ERROR, "The answer failed."))?;
    let committed = SqliteStore::commit_with_record(
        tx,
        record.key(),
        record.owner(),
        stored,
        record.retention(),
    );
    match committed.await {
        Ok(()) => {}
        // A repeat took the submission over after this one's lease ran out: its outcome
        // is the order's, and this transaction placed nothing.
        Err(CommitError::RecordLost) => return Ok(submission.refused()),
        Err(error) => return Err(PageError::from_store(error)),
    }
    shop.crash_point();
    Ok(page)
}

/// `GET /orders/{id}`: the order's page.
#[utoipa::path(get, path = "/orders/{id}", tag = "pages",
    params(("id" = i64, Path, description = "The order")),
    responses(
        (status = 200, description = "The order's page", content_type = "text/html", body = String),
        (status = 404, description = "No such order"),
    ),
)]
pub(crate) async fn show(
    State(shop): State<Shop>,
    Path(id): Path<i64>,
) -> Result<Html<String>, PageError> {
    let not_found = || PageError::new(StatusCode::NOT_FOUND, "There is no such order.");
    let order = Order::find(shop.db(), id).await?.ok_or_else(not_found)?;
    let product = Product::find(shop.db(), order.product_id)
        .await?
        .ok_or_else(not_found)?;
    Ok(Html(OrderPage { order, product }.render()?))
}

/// `GET /api/orders`: every order.
#[utoipa::path(get, path = "/api/orders", tag = "orders", responses(
    (status = 200, description = "Every order: `id`, `product_id`, `quantity`, `client`", body = serde_json::Value),
))]
pub(crate) async fn list(State(shop): State<Shop>) -> Result<Json<Vec<Order>>, ApiError> {
    let orders = sqlx::query_as("SELECT id, product_id, quantity, client FROM orders ORDER BY id")
        .fetch_all(shop.db())
        .await?;
    Ok(Json(orders))
}

/// `POST /api/orders`: places an order; the route's `IdempotencyLayer` makes a retry with
/// the same `Idempotency-Key` get this response again instead of a second order.
///
/// The order and its idempotency record commit in one transaction ([`records`]): a retry
/// after a crash at any point finds both (and gets this response) or neither (and places
/// the order). With a payment provider the order is charged first, with a key derived
/// from the record, so a rerun after a crash is not charged twice
/// ([`provider`](crate::provider)).
#[utoipa::path(post, path = "/api/orders", tag = "orders",
    params(("x-user-id" = String, Header, description = "Who orders")),
    request_body = NewOrder,
    responses(
        (status = 201, description = "The order, placed", body = serde_json::Value),
        (status = 404, description = "No such product", body = serde_json::Value),
        (status = 422, description = "A quantity outside 1 to 99", body = serde_json::Value),
    ),
)]
pub(crate) async fn create(
    State(shop): State<Shop>,
    headers: HeaderMap,
    session: Session,
    record: IdempotencyRecord,
    Json(order): Json<NewOrder>,
) -> Result<Response, ApiError> {
    // The runtime's client identity already required one of the two.
    let client = Client::of(&headers, &session).ok_or(ApiError::new(
        StatusCode::BAD_REQUEST,
        "send an X-User-Id header",
    ))?;
    if !order.quantity_is_valid() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "quantity must be between 1 and 99",
        ));
    }
    provider::charge(
        &shop,
        &record,
        &client.label(),
        order.product_id,
        order.quantity,
    )
    .await?;
    let mut tx = records::begin(shop.db()).await?;
    if Product::find(&mut *tx, order.product_id).await?.is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such product"));
    }
    let order = Order::insert(&mut *tx, order.product_id, order.quantity, &client.label()).await?;
    records::commit_with_response(tx, &record, (StatusCode::CREATED, Json(order))).await
}
