//! The retention, advertised: how long a key's answer is kept, sent to the client so that
//! it stops retrying before the key is forgotten.
//!
//! The Idempotency-Key draft leaves the retention to the server and does not yet name a
//! header for it; its working group's tracker proposes `Idempotency-TTL` in delta-seconds.
//! idem sends that, with the layer's whole retention: the same value on every answer, a
//! property of the route a client may know before its first attempt, never a countdown.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

/// The header that advertises the retention, in whole seconds.
pub(crate) static IDEMPOTENCY_TTL: HeaderName = HeaderName::from_static("idempotency-ttl");

/// The retention header of a layer: its name (none: not sent) and its value, made once
/// when the layer is built, so that an answer clones it rather than formats it.
#[derive(Debug, Clone)]
pub(crate) struct AdvertisedRetention {
    name: Option<HeaderName>,
    value: HeaderValue,
}

impl AdvertisedRetention {
    /// `retention` under [`IDEMPOTENCY_TTL`].
    pub(crate) fn new(retention: Duration) -> Self {
        Self {
            name: Some(IDEMPOTENCY_TTL.clone()),
            value: seconds(retention),
        }
    }

    /// Sent under `name`, or not at all.
    pub(crate) fn named(self, name: Option<HeaderName>) -> Self {
        Self { name, ..self }
    }

    /// Advertising `retention` instead.
    pub(crate) fn of(self, retention: Duration) -> Self {
        Self {
            value: seconds(retention),
            ..self
        }
    }

    /// The header's name, if it is sent.
    #[cfg(feature = "openapi")]
    pub(crate) fn name(&self) -> Option<&HeaderName> {
        self.name.as_ref()
    }

    /// Adds the header to an answer's `headers`, replacing any of that name the handler
    /// set: the layer's retention is the one that holds.
    pub(crate) fn advertise(&self, headers: &mut HeaderMap) {
        if let Some(name) = &self.name {
            headers.insert(name.clone(), self.value.clone());
        }
    }
}

/// `retention` in whole seconds, rounded down: a client bounded by it stops no later
/// than the key is forgotten.
fn seconds(retention: Duration) -> HeaderValue {
    HeaderValue::from(retention.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retention_is_whole_seconds_rounded_down_under_its_name() {
        let mut headers = HeaderMap::new();
        AdvertisedRetention::new(Duration::from_millis(86_400_999)).advertise(&mut headers);
        assert_eq!(headers[&IDEMPOTENCY_TTL], "86400");

        let renamed = HeaderName::from_static("x-key-ttl");
        let mut headers = HeaderMap::new();
        AdvertisedRetention::new(Duration::from_secs(60))
            .named(Some(renamed.clone()))
            .of(Duration::from_millis(900))
            .advertise(&mut headers);
        assert_eq!(headers[&renamed], "0");
        assert!(!headers.contains_key(&IDEMPOTENCY_TTL));

        let mut headers = HeaderMap::new();
        AdvertisedRetention::new(Duration::from_secs(60))
            .named(None)
            .advertise(&mut headers);
        assert!(headers.is_empty());
    }
}
