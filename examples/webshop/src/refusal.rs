//! How the shop shows a refusal of idem's guards to a browser: a page in the shop's own
//! look, with the guard's message and a way back. API clients keep the problem JSON.

use askama::Template;
use axum::http::HeaderValue;
use axum::http::header::RETRY_AFTER;
use axum::response::{Html, IntoResponse, Response};
use idem_axum::Rejection;

/// The refusal page.
#[derive(Template)]
#[template(path = "refused.html")]
struct RefusedPage<'a> {
    title: &'a str,
    detail: &'a str,
    retry_after: Option<u64>,
}

/// The runtime's responder: the shop's page for a browser, the default rendering (problem
/// JSON) for everyone else.
pub(crate) fn respond(rejection: Rejection) -> Response {
    if !rejection.prefers_html() {
        return rejection.into_response();
    }
    let page = RefusedPage {
        title: rejection.kind().title(),
        detail: rejection.detail(),
        retry_after: rejection.retry_after_secs(),
    };
    let Ok(page) = page.render() else {
        return rejection.into_response();
    };
    let mut response = (rejection.status(), Html(page)).into_response();
    if let Some(seconds) = rejection.retry_after_secs() {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}
