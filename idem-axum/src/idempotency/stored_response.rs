//! What a completed record holds: the first response, encoded to be replayed byte for
//! byte, or a note that it was too large to keep.
//!
//! # Encoding
//!
//! One format byte, then [postcard](https://docs.rs/postcard) (its 1.0 wire format is
//! frozen and specified): a [`Record`] with the status, every header value in order
//! (repeated ones kept, hop-by-hop ones left out, and `Set-Cookie` for a shared key) and
//! the body, each length-prefixed with
//! a varint. Replaying borrows the body and the header values from the bytes the store
//! returned, without a copy (`tests::a_replay_borrows_the_stored_bytes`).
//!
//! A response that ended with trailers (a gRPC call's `grpc-status`, `grpc-message` and
//! trailing metadata) has the format byte [`WITH_TRAILERS`]: the same [`Record`], then the
//! trailer fields in order, encoded as the headers are. A response without trailers — any
//! plain HTTP response — is stored as it always was, in the first format, at the same
//! size.
//!
//! Why postcard rather than a hand-laid format: its decoder is bounds-checked, so a
//! corrupted or foreign record is an error, never a panic or an over-read; why not JSON:
//! bodies are arbitrary bytes. A record written by a release with another format byte is
//! reported as unreadable (HTTP 500), never misread; the byte changes whenever
//! [`Record`] does.

use std::fmt;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header::{CONNECTION, HeaderName, SET_COOKIE};
use http::{HeaderMap, HeaderValue, StatusCode, response};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::RecordScope;
use super::capture::Captured;

/// The format byte of a record: a [`Record`] alone.
const FORMAT: u8 = 1;

/// The format byte of a record of a response with trailers: a [`Record`], then the
/// trailer fields.
const WITH_TRAILERS: u8 = 2;

/// Fields in order, each a name and its value's bytes.
type Fields<'a> = Vec<(&'a str, Raw<'a>)>;

/// The header that marks a replayed response (Stripe's).
pub(crate) static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

#[derive(Debug, Serialize, Deserialize)]
enum Record<'a> {
    /// The whole response.
    Response {
        status: u16,
        #[serde(borrow)]
        headers: Vec<(&'a str, Raw<'a>)>,
        #[serde(borrow)]
        body: Raw<'a>,
    },
    /// The handler answered with `status`, but the body was over the storage limit.
    TooLarge { status: u16 },
    /// The handler answered with `status`, but the body failed while it was read.
    Failed { status: u16 },
}

/// Bytes written as one length-prefixed run rather than as a sequence of numbers.
#[derive(Debug)]
struct Raw<'a>(&'a [u8]);

impl Serialize for Raw<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&'a [u8]>::deserialize(deserializer).map(Raw)
    }
}

/// What a record replays as.
#[derive(Debug)]
pub(crate) enum Replay {
    /// The stored response, marked with `Idempotent-Replayed: true`.
    Response(Response),
    /// The first response was not stored because it was too large; it had `status`.
    TooLarge { status: StatusCode },
    /// The first response was not stored because its body failed; it had `status`.
    Failed { status: StatusCode },
}

/// A record that cannot be read back.
#[derive(Debug)]
pub(crate) struct Unreadable(String);

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The record of a response whose body is `body`, followed by `trailers` if it had any,
/// for a key of `scope`.
///
/// A [`RecordScope::Shared`] record is replayed to whoever presents its key, so it keeps no
/// `Set-Cookie`: a cookie (a session, say) was meant for the client that made the first
/// request, and only that client gets it.
pub(crate) fn encode_response(
    parts: &response::Parts,
    body: &[u8],
    trailers: Option<&HeaderMap>,
    scope: RecordScope,
) -> Bytes {
    let shared = scope == RecordScope::Shared;
    let headers: Vec<_> = parts
        .headers
        .iter()
        .filter(|(name, _)| {
            !((shared && *name == SET_COOKIE) || is_hop_by_hop(name, &parts.headers))
        })
        .map(|(name, value)| (name.as_str(), Raw(value.as_bytes())))
        .collect();
    let record = Record::Response {
        status: parts.status.as_u16(),
        headers,
        body: Raw(body),
    };
    let trailers: Fields<'_> = trailers
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.as_str(), Raw(value.as_bytes())))
        .collect();
    if trailers.is_empty() {
        return encode(&record, 0);
    }
    let size = fields_size(&trailers);
    postcard_extend(&(WITH_TRAILERS, record, trailers), size + 16 + body.len())
}

/// An upper bound of the encoding of `fields`: each length is a varint of at most 10 bytes.
fn fields_size(fields: &Fields<'_>) -> usize {
    fields
        .iter()
        .map(|(name, Raw(value))| name.len() + value.len() + 20)
        .sum()
}

/// The record of a response too large to keep.
pub(crate) fn encode_too_large(status: StatusCode) -> Bytes {
    encode(
        &Record::TooLarge {
            status: status.as_u16(),
        },
        8,
    )
}

/// The record of a response whose body failed half-way.
pub(crate) fn encode_failed(status: StatusCode) -> Bytes {
    encode(
        &Record::Failed {
            status: status.as_u16(),
        },
        8,
    )
}

/// `record` in the first format; `size`, an upper bound of the encoding, for a response
/// as much as its headers and body take.
fn encode(record: &Record<'_>, size: usize) -> Bytes {
    let size = match record {
        Record::Response { headers, body, .. } => size + 16 + body.0.len() + fields_size(headers),
        _ => size,
    };
    postcard_extend(&(FORMAT, record), size)
}

fn postcard_extend(value: &impl Serialize, size: usize) -> Bytes {
    // Serialising into a growing Vec fails only if memory does, which aborts anyway.
    postcard::to_extend(value, Vec::with_capacity(size))
        .unwrap_or_default()
        .into()
}

/// What `stored` replays as.
pub(crate) fn decode(stored: &Bytes) -> Result<Replay, Unreadable> {
    let Some((&format, rest)) = stored.split_first() else {
        return Err(Unreadable("the stored record is empty".to_owned()));
    };
    let corrupt =
        |error: postcard::Error| Unreadable(format!("the stored record is corrupt: {error}"));
    let (record, trailers): (Record<'_>, Option<Fields<'_>>) = match format {
        FORMAT => (postcard::from_bytes(rest).map_err(corrupt)?, None),
        WITH_TRAILERS => {
            let (record, trailers) = postcard::from_bytes(rest).map_err(corrupt)?;
            (record, Some(trailers))
        }
        _ => {
            return Err(Unreadable(format!(
                "the stored record has format {format}, this release reads {FORMAT} and \
                 {WITH_TRAILERS}"
            )));
        }
    };
    let status = |code| {
        StatusCode::from_u16(code)
            .map_err(|_| Unreadable(format!("the stored status {code} is not a status")))
    };
    match record {
        Record::TooLarge { status: code } => Ok(Replay::TooLarge {
            status: status(code)?,
        }),
        Record::Failed { status: code } => Ok(Replay::Failed {
            status: status(code)?,
        }),
        Record::Response {
            status: code,
            headers,
            body,
        } => {
            let data = stored.slice_ref(body.0);
            let body = match trailers {
                None => Body::from(data),
                Some(trailers) => {
                    let mut map = HeaderMap::with_capacity(trailers.len());
                    append_fields(stored, trailers, &mut map)?;
                    let trailers = Some(map);
                    Captured::Whole { data, trailers }.into_body()
                }
            };
            let mut response = Response::new(body);
            *response.status_mut() = status(code)?;
            let map = response.headers_mut();
            // The stored fields, the replay marker and the retention the layer advertises.
            map.reserve(headers.len() + 2);
            append_fields(stored, headers, map)?;
            map.insert(
                IDEMPOTENT_REPLAYED.clone(),
                HeaderValue::from_static("true"),
            );
            Ok(Replay::Response(response))
        }
    }
}

/// Appends the stored `fields` to `map`, their values slices of `stored`, not copies
/// (`tests::a_replay_borrows_the_stored_bytes`).
fn append_fields(
    stored: &Bytes,
    fields: Fields<'_>,
    map: &mut HeaderMap,
) -> Result<(), Unreadable> {
    for (name, Raw(value)) in fields {
        let name = HeaderName::from_bytes(name.as_bytes());
        let value = HeaderValue::from_maybe_shared(stored.slice_ref(value));
        let (Ok(name), Ok(value)) = (name, value) else {
            return Err(Unreadable("a stored field is not a field".to_owned()));
        };
        map.append(name, value);
    }
    Ok(())
}

/// The fields that always describe one connection (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether `name` describes one connection, not the response (RFC 9110 §7.6.1): one of
/// the fixed hop-by-hop fields, or one that `Connection` in `headers` names.
fn is_hop_by_hop(name: &HeaderName, headers: &HeaderMap) -> bool {
    // Split as bytes, so that bytes that are not text elsewhere in the field do not hide
    // the names beside them.
    HOP_BY_HOP.contains(&name.as_str())
        || headers
            .get_all(CONNECTION)
            .iter()
            .flat_map(|value| value.as_bytes().split(|byte| *byte == b','))
            .any(|listed| {
                listed
                    .trim_ascii()
                    .eq_ignore_ascii_case(name.as_str().as_bytes())
            })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::CONTENT_TYPE;

    fn parts(status: StatusCode, headers: &[(&str, &str)]) -> response::Parts {
        let mut response = Response::new(());
        *response.status_mut() = status;
        for (name, value) in headers {
            response.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        response.into_parts().0
    }

    #[test]
    fn a_response_round_trips_with_repeated_headers_and_without_hop_by_hop_ones() {
        let original = parts(
            StatusCode::CREATED,
            &[
                ("content-type", "application/json"),
                ("set-cookie", "a=1; Path=/"),
                ("set-cookie", "b=2; HttpOnly"),
                ("connection", "x-per-hop"),
                ("x-per-hop", "dropped"),
                ("keep-alive", "timeout=5"),
            ],
        );
        let body = [0_u8, 159, 146, 150, b'{', b'}'];
        let stored = encode_response(&original, &body, None, RecordScope::Client);
        let Ok(Replay::Response(replayed)) = decode(&stored) else {
            panic!("a fresh record decodes");
        };
        assert_eq!(replayed.status(), StatusCode::CREATED);
        let headers = replayed.headers();
        assert_eq!(headers[CONTENT_TYPE], "application/json");
        let cookies: Vec<_> = headers.get_all(SET_COOKIE).iter().collect();
        assert_eq!(cookies, ["a=1; Path=/", "b=2; HttpOnly"]);
        assert_eq!(headers[&IDEMPOTENT_REPLAYED], "true");
        for dropped in ["connection", "x-per-hop", "keep-alive"] {
            assert!(
                !headers.contains_key(dropped),
                "{dropped} is per connection"
            );
        }
        let bytes = futures_body(replayed);
        assert_eq!(bytes, body[..]);
    }

    #[test]
    fn a_header_connection_names_is_dropped_beside_bytes_that_are_not_text() {
        let mut original = parts(StatusCode::OK, &[("x-per-hop", "dropped")]);
        original.headers.append(
            CONNECTION,
            HeaderValue::from_bytes(b"X-Per-Hop, \x80").unwrap(),
        );
        let stored = encode_response(&original, b"", None, RecordScope::Client);
        let Ok(Replay::Response(replayed)) = decode(&stored) else {
            panic!("a fresh record decodes");
        };
        assert!(!replayed.headers().contains_key("x-per-hop"));
    }

    #[test]
    fn a_shared_record_keeps_no_cookie() {
        let original = parts(
            StatusCode::OK,
            &[
                ("set-cookie", "session=s1; HttpOnly"),
                ("content-type", "text/plain"),
                ("set-cookie", "b=2"),
            ],
        );
        let stored = encode_response(&original, b"ok", None, RecordScope::Shared);
        let Ok(Replay::Response(replayed)) = decode(&stored) else {
            panic!("a fresh record decodes");
        };
        assert!(!replayed.headers().contains_key(SET_COOKIE));
        assert_eq!(replayed.headers()[CONTENT_TYPE], "text/plain");
    }

    #[test]
    fn a_response_without_trailers_is_stored_as_before_trailers_were() {
        let original = parts(StatusCode::OK, &[("content-type", "text/plain")]);
        let stored = encode_response(&original, b"ok", None, RecordScope::Client);
        let empty = HeaderMap::new();
        let with_none = encode_response(&original, b"ok", Some(&empty), RecordScope::Client);
        assert_eq!(stored, with_none);
        let mut first_format = vec![FORMAT];
        let record = Record::Response {
            status: 200,
            headers: vec![("content-type", Raw(b"text/plain"))],
            body: Raw(b"ok"),
        };
        first_format.extend(postcard::to_allocvec(&record).unwrap());
        assert_eq!(
            stored, first_format,
            "one format byte, then the record alone"
        );
    }

    /// A replay's body and header values are slices of the bytes the store returned: a
    /// replay copies neither, whatever their size.
    #[tokio::test]
    async fn a_replay_borrows_the_stored_bytes() {
        let body = vec![b'b'; 4096];
        let original = parts(StatusCode::CREATED, &[("x-order", "order 7")]);
        let stored = encode_response(&original, &body, None, RecordScope::Client);
        let within = |bytes: &[u8]| stored.as_ptr_range().contains(&bytes.as_ptr());
        let Ok(Replay::Response(replayed)) = decode(&stored) else {
            panic!("the record decodes");
        };
        assert!(within(replayed.headers()["x-order"].as_bytes()));
        let replayed = axum::body::to_bytes(replayed.into_body(), usize::MAX)
            .await
            .expect("a whole body");
        assert_eq!(replayed, body);
        assert!(
            within(&replayed),
            "the body is the stored bytes, not a copy"
        );
    }

    #[test]
    fn a_too_large_marker_keeps_the_status() {
        let stored = encode_too_large(StatusCode::OK);
        assert!(matches!(
            decode(&stored),
            Ok(Replay::TooLarge {
                status: StatusCode::OK
            })
        ));
    }

    #[test]
    fn foreign_or_corrupt_records_are_unreadable_not_misread() {
        let stored = encode_response(
            &parts(StatusCode::OK, &[]),
            b"body",
            None,
            RecordScope::Client,
        );
        let mut other_format = stored.to_vec();
        other_format[0] = FORMAT + 1;
        assert!(decode(&Bytes::from(other_format)).is_err());
        assert!(decode(&stored.slice(..stored.len() - 2)).is_err());
        assert!(decode(&Bytes::new()).is_err());
        assert!(
            decode(&Bytes::from_static(&[
                FORMAT, 0, 0xff, 0xff, 0xff, 0xff, 0xff
            ]))
            .is_err()
        );
    }

    fn futures_body(response: Response) -> Bytes {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
            .unwrap()
    }

    mod properties {
        use futures_util::FutureExt;
        use http_body_util::BodyExt;
        use proptest::prelude::*;
        use proptest::sample::Index;

        use super::*;

        /// Names a response may carry: hop-by-hop ones, `Set-Cookie`, the replay mark,
        /// and any others.
        fn header_name() -> impl Strategy<Value = HeaderName> {
            let others = [
                "content-type",
                "set-cookie",
                "idempotent-replayed",
                "x-per-hop",
            ];
            let known = prop::sample::select(
                HOP_BY_HOP
                    .iter()
                    .chain(&others)
                    .copied()
                    .collect::<Vec<_>>(),
            )
            .prop_map(HeaderName::from_static);
            let any = "[a-z0-9!#$%&'*+.^_`|~-]{1,20}"
                .prop_map(|name| HeaderName::from_bytes(name.as_bytes()).expect("a token"));
            prop_oneof![known, any]
        }

        fn field_bytes() -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec(
                prop_oneof![Just(b'\t'), 0x20_u8..=0x7e, 0x80_u8..=0xff],
                0..40,
            )
        }

        /// A header value; for `Connection`, often a list of names.
        fn header_value(name: &HeaderName) -> BoxedStrategy<Vec<u8>> {
            if name != CONNECTION {
                return field_bytes().boxed();
            }
            let listed = prop_oneof![
                header_name().prop_map(|name| name.as_str().to_ascii_uppercase().into_bytes()),
                field_bytes(),
            ];
            prop_oneof![
                field_bytes(),
                prop::collection::vec(listed, 1..4).prop_map(|names| names.join(&b" , "[..])),
            ]
            .boxed()
        }

        /// A response's head: any status, any headers in any order, repeats included.
        fn response_parts() -> impl Strategy<Value = response::Parts> {
            let header = header_name().prop_flat_map(|name| {
                let value = header_value(&name);
                (Just(name), value)
            });
            (100_u16..1000, prop::collection::vec(header, 0..10)).prop_map(|(status, headers)| {
                let mut response = Response::new(());
                *response.status_mut() = StatusCode::from_u16(status).expect("a status");
                for (name, value) in headers {
                    let value = HeaderValue::from_bytes(&value).expect("a field value");
                    response.headers_mut().append(name, value);
                }
                response.into_parts().0
            })
        }

        /// Trailers a response may end with, or none.
        fn trailers() -> impl Strategy<Value = Option<HeaderMap>> {
            let field = (header_name(), field_bytes());
            prop::option::of(prop::collection::vec(field, 0..5).prop_map(|fields| {
                let mut map = HeaderMap::new();
                for (name, value) in fields {
                    map.append(
                        name,
                        HeaderValue::from_bytes(&value).expect("a field value"),
                    );
                }
                map
            }))
        }

        fn scope() -> impl Strategy<Value = RecordScope> {
            prop_oneof![Just(RecordScope::Client), Just(RecordScope::Shared)]
        }

        /// The headers a replay of `parts` carries, in order: all but the ones that
        /// describe one connection (RFC 9110 §7.6.1), `Set-Cookie` for a shared key, and
        /// the replay mark, which the replay sets itself.
        fn replayed_headers(parts: &response::Parts, scope: RecordScope) -> Vec<(String, Vec<u8>)> {
            let listed: Vec<Vec<u8>> = parts
                .headers
                .get_all(CONNECTION)
                .iter()
                .flat_map(|value| value.as_bytes().split(|byte| *byte == b','))
                // A field value holds no whitespace but spaces and tabs.
                .map(|name| name.trim_ascii().to_ascii_lowercase())
                .collect();
            parts
                .headers
                .iter()
                .filter(|(name, _)| {
                    !(HOP_BY_HOP.contains(&name.as_str())
                        || listed.contains(&name.as_str().as_bytes().to_vec())
                        || (scope == RecordScope::Shared && *name == SET_COOKIE)
                        || *name == IDEMPOTENT_REPLAYED)
                })
                .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
                .collect()
        }

        /// Records as the layer writes them, then cut short and with bytes flipped.
        fn damaged_record() -> impl Strategy<Value = Vec<u8>> {
            let record = prop_oneof![
                (
                    response_parts(),
                    prop::collection::vec(any::<u8>(), 0..64),
                    trailers(),
                    scope()
                )
                    .prop_map(|(parts, body, trailers, scope)| {
                        encode_response(&parts, &body, trailers.as_ref(), scope)
                    }),
                (100_u16..1000).prop_map(|status| {
                    encode_too_large(StatusCode::from_u16(status).expect("a status"))
                }),
            ];
            let flips = prop::collection::vec((any::<Index>(), 1_u8..=255), 0..3);
            (record, flips, prop::option::of(any::<Index>())).prop_map(|(record, flips, cut)| {
                let mut bytes = record.to_vec();
                for (at, mask) in flips {
                    let at = at.index(bytes.len());
                    bytes[at] ^= mask;
                }
                if let Some(cut) = cut {
                    bytes.truncate(cut.index(bytes.len() + 1));
                }
                bytes
            })
        }

        proptest! {
            #[test]
            fn no_stored_bytes_make_the_decoder_panic(
                stored in prop_oneof![
                    prop::collection::vec(any::<u8>(), 0..100),
                    (prop::collection::vec(any::<u8>(), 0..100), prop::bool::ANY).prop_map(
                        |(mut bytes, trailed)| {
                            bytes.insert(0, if trailed { WITH_TRAILERS } else { FORMAT });
                            bytes
                        }
                    ),
                    damaged_record(),
                ],
            ) {
                if let Ok(Replay::Response(response)) = decode(&Bytes::from(stored)) {
                    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                        .now_or_never()
                        .expect("a body in memory");
                    prop_assert!(body.is_ok());
                }
            }

            /// Encoding then decoding gives the status, every header kept in order with
            /// its repeats, the body, every trailer in order, and the replay mark. A
            /// response without trailers is stored in the first format.
            #[test]
            fn a_response_round_trips(
                parts in response_parts(),
                body in prop::collection::vec(any::<u8>(), 0..200),
                trailers in trailers(),
                scope in scope(),
            ) {
                let stored = encode_response(&parts, &body, trailers.as_ref(), scope);
                let trailers = trailers.filter(|trailers| !trailers.is_empty());
                let format = if trailers.is_some() { WITH_TRAILERS } else { FORMAT };
                prop_assert_eq!(stored[0], format);
                let Ok(Replay::Response(replayed)) = decode(&stored) else {
                    panic!("a fresh record decodes");
                };
                prop_assert_eq!(replayed.status(), parts.status);
                let headers: Vec<_> = replayed
                    .headers()
                    .iter()
                    .filter(|(name, _)| *name != IDEMPOTENT_REPLAYED)
                    .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
                    .collect();
                prop_assert_eq!(headers, replayed_headers(&parts, scope));
                let marks: Vec<_> = replayed.headers().get_all(&IDEMPOTENT_REPLAYED).iter().collect();
                prop_assert_eq!(marks, ["true"]);
                let collected = replayed
                    .into_body()
                    .collect()
                    .now_or_never()
                    .expect("a body in memory")
                    .expect("the body");
                prop_assert_eq!(collected.trailers(), trailers.as_ref());
                prop_assert_eq!(collected.to_bytes(), body);
            }

            #[test]
            fn a_too_large_marker_round_trips(status in 100_u16..1000) {
                let status = StatusCode::from_u16(status).expect("a status");
                let Ok(Replay::TooLarge { status: decoded }) = decode(&encode_too_large(status)) else {
                    panic!("a fresh marker decodes");
                };
                prop_assert_eq!(decoded, status);
            }
        }
    }
}
