//! What the shop's test binaries check alike.

use axum::http::StatusCode;

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
