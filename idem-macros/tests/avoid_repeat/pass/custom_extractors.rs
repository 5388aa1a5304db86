//! Extractors of the application's own, known to the macro by nothing but their traits.

use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::post;
use axum::{Json, Router};
use idem_axum::avoid_repeat;

#[derive(Clone)]
struct Shop;

/// The signed-in user, as an authentication layer would leave it.
struct CurrentUser(u64);

impl<S: Send + Sync> FromRequestParts<S> for CurrentUser {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .headers
            .get("x-user-id")
            .and_then(|id| id.to_str().ok()?.parse().ok())
            .map(CurrentUser)
            .ok_or(StatusCode::UNAUTHORIZED)
    }
}

#[avoid_repeat(timeout = "30s")]
async fn last(State(_shop): State<Shop>, user: CurrentUser) -> String {
    user.0.to_string()
}

#[avoid_repeat(timeout = "30s")]
async fn alone(user: CurrentUser) -> String {
    user.0.to_string()
}

#[avoid_repeat(timeout = "30s", by = "client+body")]
async fn last_with_payload(State(_shop): State<Shop>, user: CurrentUser) -> String {
    user.0.to_string()
}

#[avoid_repeat(timeout = "30s", by = "client+body")]
async fn before_the_body(user: CurrentUser, Json(amount): Json<u64>) -> String {
    format!("{} {amount}", user.0)
}

fn main() {
    let _: Router = Router::new()
        .route("/last", post(last))
        .route("/alone", post(alone))
        .route("/last-with-payload", post(last_with_payload))
        .route("/before-the-body", post(before_the_body))
        .with_state(Shop);
}
