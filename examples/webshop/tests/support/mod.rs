//! What the shop's test binaries check alike.
#![allow(dead_code, reason = "each test binary uses part of what they share")]

use axum::http::{StatusCode, header};
use idem_tests::Answer;

/// The name of the shop's session cookie.
pub(crate) const SESSION_COOKIE: &str = "shop_session";

/// The session a shop's answer hands out, as the `Cookie` header that sends it back
/// (`shop_session=…`): the browser's identity from then on. Fails when the answer sets no
/// session cookie, or more than one.
pub(crate) fn session_cookie(answer: &Answer) -> String {
    let prefix = format!("{SESSION_COOKIE}=");
    let mut cookies = answer
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .filter(|value| value.starts_with(&prefix));
    let set_cookie = cookies.next().expect("a session cookie");
    assert!(cookies.next().is_none(), "one session cookie");
    let pair = set_cookie.split(';').next().expect("a name and a value");
    assert!(pair.len() > prefix.len(), "a session id: {set_cookie}");
    pair.to_owned()
}

/// The flash sale's answers to many buyers at once: exactly `stock` bought, and every
/// other answer a refusal the contract names (409 already bought or in progress, 410 sold
/// out), never an error.
pub(crate) fn assert_sold_exactly(statuses: &[StatusCode], stock: usize) {
    let bought = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    assert_eq!(bought, stock, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| [StatusCode::CREATED, StatusCode::CONFLICT, StatusCode::GONE].contains(s)),
        "{statuses:?}"
    );
}
