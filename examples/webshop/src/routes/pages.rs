//! The front page.

use askama::Template;
use axum::extract::State;
use axum::response::Html;

use crate::app::Shop;
use crate::db::Product;
use crate::error::PageError;

/// The product list.
#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    products: Vec<Product>,
}

/// `GET /`: every product, each with a link to its order form.
#[utoipa::path(get, path = "/", tag = "pages", responses(
    (status = 200, description = "The products, each with a link to its order form", content_type = "text/html", body = String),
))]
pub(crate) async fn index(State(shop): State<Shop>) -> Result<Html<String>, PageError> {
    let products = sqlx::query_as("SELECT id, name, price FROM products ORDER BY id")
        .fetch_all(shop.db())
        .await?;
    Ok(Html(IndexPage { products }.render()?))
}
