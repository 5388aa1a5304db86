//! How the shop answers when it cannot do what was asked.

use std::borrow::Cow;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

/// A JSON API failure: `{"error": "..."}` with a status.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: Cow<'static, str>,
}

impl ApiError {
    /// A failure with `status`, explained by `message`.
    pub(crate) fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        // The client learns nothing of the database; the operator reads the log.
        eprintln!("database error: {error}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "the database failed")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        (self.status, Json(body)).into_response()
    }
}

/// A page that could not be shown: a small HTML page with a status.
#[derive(Debug)]
pub(crate) struct PageError {
    status: StatusCode,
    /// Our own text, never the client's, so it needs no escaping.
    message: &'static str,
}

impl PageError {
    /// A page for `status` saying `message`.
    pub(crate) fn new(status: StatusCode, message: &'static str) -> Self {
        Self { status, message }
    }
}

impl PageError {
    /// The page for a store or a commit that failed: logged, and 500.
    pub(crate) fn from_store(error: impl std::error::Error) -> Self {
        let cause = error.source().map(ToString::to_string);
        eprintln!("database error: {error}: {}", cause.unwrap_or_default());
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "The database failed.")
    }
}

impl From<sqlx::Error> for PageError {
    fn from(error: sqlx::Error) -> Self {
        eprintln!("database error: {error}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "The database failed.")
    }
}

impl From<askama::Error> for PageError {
    fn from(error: askama::Error) -> Self {
        eprintln!("template error: {error}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "The page could not be drawn.",
        )
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let page = format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{status}</title></head>\
             <body><h1>{status}</h1><p>{message}</p><p><a href=\"/\">Back to the shop</a></p></body></html>",
            status = self.status,
            message = self.message,
        );
        (self.status, Html(page)).into_response()
    }
}
