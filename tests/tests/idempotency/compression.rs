//! Compression and the layer order that keeps stored responses uncompressed.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use idem_tests::{Backend, send, shop_on};

use crate::{Seen, app, receipt_text, request};

idem_tests::on_every_store!(
    compression_outside_the_layer_compresses_each_replay_for_its_own_request,
    a_response_compressed_inside_the_layer_is_replayed_only_to_requests_that_accept_it,
);

/// `POST path` from alice with `key`, accepting `accept` encodings (none when `None`).
async fn post_accepting(app: &Router, path: &str, key: &str, accept: Option<&str>) -> Seen {
    let mut request = request(path, "alice", Some(key), r#"{"amount":100}"#);
    if let Some(accept) = accept {
        let accept = HeaderValue::from_str(accept).unwrap();
        request
            .headers_mut()
            .insert(header::ACCEPT_ENCODING, accept);
    }
    Seen::of(send(app, request).await).await
}

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(bytes), &mut text)
        .expect("a gzip body");
    text
}

/// Checks that `seen` is the first receipt, gzipped.
fn assert_gzipped_first_receipt(seen: &Seen) {
    assert_eq!(seen.header("content-encoding"), Some(b"gzip".as_slice()));
    assert_eq!(gunzip(&seen.body), receipt_text(1));
}

async fn compression_outside_the_layer_compresses_each_replay_for_its_own_request<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let path = "/compressed-outside";
    let first = post_accepting(&app, path, "r1", Some("gzip")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_gzipped_first_receipt(&first);

    // The stored response is the handler's own: a retry that accepts no coding reads it.
    let plain = post_accepting(&app, path, "r1", None).await;
    assert!(plain.replayed(), "{plain:?}");
    assert_eq!(plain.status, StatusCode::CREATED);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.body, receipt_text(1).as_bytes(), "byte for byte");

    let gzip = post_accepting(&app, path, "r1", Some("gzip")).await;
    assert!(gzip.replayed(), "{gzip:?}");
    assert_gzipped_first_receipt(&gzip);
    assert_eq!(shop.runs(), 1);
}

async fn a_response_compressed_inside_the_layer_is_replayed_only_to_requests_that_accept_it<
    B: Backend,
>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let path = "/compressed-inside";
    let first = post_accepting(&app, path, "r1", Some("gzip")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_gzipped_first_receipt(&first);

    for accept in [Some("gzip"), Some("br, GZIP;q=0.5"), Some("*")] {
        let replay = post_accepting(&app, path, "r1", accept).await;
        assert!(replay.replayed(), "{accept:?}: {replay:?}");
        assert_eq!(replay.unmarked(), first, "{accept:?}");
    }
    // A retry that could not read gzip gets no gzip bytes, and the handler does not run
    // again: the request was processed.
    for accept in [None, Some("br"), Some("identity"), Some("gzip;q=0, *")] {
        let refused = post_accepting(&app, path, "r1", accept).await;
        assert_eq!(
            refused.status,
            StatusCode::CONFLICT,
            "{accept:?}: {refused:?}"
        );
        assert_eq!(refused.problem(), "response-not-replayable", "{accept:?}");
        assert_eq!(refused.header("retry-after"), None, "{accept:?}");
        assert!(
            refused.detail().contains("`Accept-Encoding: gzip`"),
            "{accept:?}: {}",
            refused.detail()
        );
    }
    assert_eq!(shop.runs(), 1);
}
