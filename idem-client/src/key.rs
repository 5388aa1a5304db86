//! Which `Idempotency-Key` a keyed request goes out with.

use http::header::HeaderName;
use http::{Extensions, HeaderMap, HeaderValue, Method};
use idem_core::outbound::{OutboundKey, OutboundKeys};

/// The header.
pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Gives the request its key, once, before its first attempt: the key it already carries
/// if it has one; else the [`OutboundKey`] in its extensions; else the next key of the
/// [`OutboundKeys`] in its extensions, for its method and URI; else a random one (a
/// version 4 UUID, 32 hex digits).
pub(crate) fn ensure_key(
    method: &Method,
    uri: &str,
    headers: &mut HeaderMap,
    extensions: &Extensions,
) {
    if headers.contains_key(IDEMPOTENCY_KEY) {
        return;
    }
    let key = if let Some(key) = extensions.get::<OutboundKey>() {
        key.as_str().to_owned()
    } else if let Some(keys) = extensions.get::<OutboundKeys>() {
        keys.next_key(method.as_str(), uri).as_str().to_owned()
    } else {
        uuid::Uuid::new_v4().simple().to_string()
    };
    // Hex digits only: always a valid header value.
    if let Ok(value) = HeaderValue::from_str(&key) {
        headers.insert(IDEMPOTENCY_KEY, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::Key;

    fn key_of(headers: &mut HeaderMap, extensions: &Extensions) -> String {
        ensure_key(
            &Method::POST,
            "http://pay.test/charges",
            headers,
            extensions,
        );
        headers[IDEMPOTENCY_KEY].to_str().unwrap().to_owned()
    }

    #[test]
    fn the_caller_s_key_wins_then_a_derived_one_then_a_random_one() {
        let keys = OutboundKeys::new(&Key::hashed(["record"]));
        let mut extensions = Extensions::new();
        extensions.insert(keys.key("charge"));
        extensions.insert(keys.clone());

        let mut own = HeaderMap::new();
        own.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("mine"));
        assert_eq!(key_of(&mut own, &extensions), "mine");

        assert_eq!(
            key_of(&mut HeaderMap::new(), &extensions),
            keys.key("charge").as_str()
        );

        let mut handle_only = Extensions::new();
        handle_only.insert(keys);
        let rerun = OutboundKeys::new(&Key::hashed(["record"]));
        assert_eq!(
            key_of(&mut HeaderMap::new(), &handle_only),
            rerun.next_key("POST", "http://pay.test/charges").as_str()
        );

        let a = key_of(&mut HeaderMap::new(), &Extensions::new());
        let b = key_of(&mut HeaderMap::new(), &Extensions::new());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
    }
}
