//! What a completed record holds: the first response, encoded to be replayed byte for
//! byte, or a note that it was too large to keep.
//!
//! # Encoding
//!
//! One format byte, then [postcard](https://docs.rs/postcard) (its 1.0 wire format is
//! frozen and specified). A response is written in the [`COMPACT`] format: a
//! [`Compact`] record with the status, every header kept (repeated ones kept in order,
//! hop-by-hop ones left out, and `Set-Cookie` for a shared key), the body and the
//! trailers, if the response ended with any (a gRPC call's `grpc-status`, `grpc-message`
//! and trailing metadata). Each part is as small as it can be told apart:
//!
//! - a header or trailer name of [`KNOWN_NAMES`] (`content-type`, `location`, …) is its
//!   index there, one byte, where it would take its length and its letters;
//! - with [compression](crate::IdempotencyLayer::with_compression) on (it is off by
//!   default), a body of at least its threshold (256 bytes suggested) that has
//!   no `Content-Encoding` is compressed with [zstd](https://docs.rs/zstd) (level 1, no
//!   checksum: the store keeps it whole or not at all), and kept compressed when that is
//!   smaller. A typical
//!   512-byte JSON body keeps about 350 bytes. A smaller body, or one already coded, is
//!   stored as it is, at no cost: compressing a short body saves little and costs more
//!   than the rest of the request.
//!
//! Replaying borrows a body stored as it is, and the header values, from the bytes the
//! store returned, without a copy (`tests::a_replay_borrows_the_stored_bytes`); a
//! compressed body is decompressed into a buffer of its own. Either way the replay has
//! the first response's status, header values and body bytes.
//!
//! Records written by earlier releases keep replaying: the format byte says how to read
//! them. [`FORMAT`] is a [`Record`] alone and [`WITH_TRAILERS`] a [`Record`] followed by
//! the trailer fields, every name written out and the body as it was
//! (`tests::records_of_earlier_releases_replay`, on bytes an earlier release wrote). A
//! too-large or failed response is still written as a [`Record`], in the first format:
//! four bytes.
//!
//! Why postcard rather than a hand-laid format: its decoder is bounds-checked, so a
//! corrupted or foreign record is an error, never a panic or an over-read; why not JSON:
//! bodies are arbitrary bytes. A record written by a release with another format byte is
//! reported as unreadable (HTTP 500), never misread; the byte changes whenever a record's
//! layout does.

use std::cell::RefCell;
use std::fmt;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header::{CONNECTION, HeaderName, SET_COOKIE};
use http::{HeaderMap, HeaderValue, StatusCode, response};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::RecordScope;
use super::capture::Captured;

/// The format byte of a record: a [`Record`] alone. Responses were written so before
/// [`COMPACT`]; too-large and failed ones still are.
const FORMAT: u8 = 1;

/// The format byte of a record of a response with trailers before [`COMPACT`]: a
/// [`Record`], then the trailer fields.
const WITH_TRAILERS: u8 = 2;

/// The format byte of a response's record: a [`Compact`].
const COMPACT: u8 = 3;

/// The fewest body bytes worth compressing, the threshold the tests take. Below it zstd
/// saves a few dozen bytes at best, for more instructions than the rest of a first
/// request takes.
#[cfg(test)]
const COMPRESS_FROM: usize = 256;

/// zstd's level: its fastest regular one. Higher levels gain a byte or two on a body
/// of a few hundred bytes, for a fifth more instructions.
const LEVEL: i32 = 1;

/// Fields in order, each a name and its value's bytes.
type Fields<'a> = Vec<(&'a str, Raw<'a>)>;

/// The header that marks a replayed response (Stripe's).
pub(crate) static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A record of the first two formats.
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

/// A response's record in the [`COMPACT`] format.
#[derive(Debug, Serialize, Deserialize)]
struct Compact<'a> {
    status: u16,
    #[serde(borrow)]
    headers: Vec<(Name<'a>, Raw<'a>)>,
    #[serde(borrow)]
    body: StoredBody<'a>,
    /// The trailer fields, in order; `None` for a response without trailers.
    #[serde(borrow)]
    trailers: Option<Vec<(Name<'a>, Raw<'a>)>>,
}

/// A field's name: its index in [`KNOWN_NAMES`], or its text.
#[derive(Debug, Serialize, Deserialize)]
enum Name<'a> {
    Known(u8),
    Other(&'a str),
}

/// Field names most responses carry, each stored as its index. Append only: a stored
/// index must keep naming the same field.
const KNOWN_NAMES: [&str; 24] = [
    "content-type",
    "location",
    "cache-control",
    "etag",
    "last-modified",
    "set-cookie",
    "vary",
    "content-encoding",
    "content-language",
    "content-disposition",
    "content-location",
    "content-range",
    "expires",
    "retry-after",
    "link",
    "x-request-id",
    "access-control-allow-origin",
    "access-control-expose-headers",
    "strict-transport-security",
    "x-content-type-options",
    "grpc-status",
    "grpc-message",
    "grpc-status-details-bin",
    "date",
];

impl<'a> Name<'a> {
    /// A field of a response, as the compact record keeps it.
    fn field((name, value): (&'a HeaderName, &'a HeaderValue)) -> (Self, Raw<'a>) {
        (Self::of(name), Raw(value.as_bytes()))
    }

    fn of(name: &'a HeaderName) -> Self {
        let text = name.as_str();
        match KNOWN_NAMES.iter().position(|known| *known == text) {
            // The table has fewer than 256 names.
            Some(index) => Self::Known(index as u8),
            None => Self::Other(text),
        }
    }

    fn header_name(&self) -> Result<HeaderName, Unreadable> {
        let unknown = || Unreadable("a stored field name is not a field name".to_owned());
        match self {
            Self::Known(index) => KNOWN_NAMES
                .get(usize::from(*index))
                .map(|known| HeaderName::from_static(known))
                .ok_or_else(unknown),
            Self::Other(text) => HeaderName::from_bytes(text.as_bytes()).map_err(|_| unknown()),
        }
    }
}

/// A body as stored: its bytes, or a zstd frame of `len` bytes.
#[derive(Debug, Serialize, Deserialize)]
enum StoredBody<'a> {
    Plain(#[serde(borrow)] Raw<'a>),
    Zstd {
        len: u32,
        #[serde(borrow)]
        frame: Raw<'a>,
    },
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

thread_local! {
    /// Each thread's zstd compressor and the buffer it writes to, kept from one response
    /// to the next: a compressor's tables take one allocation of their own.
    static COMPRESSOR: RefCell<Option<(zstd::bulk::Compressor<'static>, Vec<u8>)>> =
        const { RefCell::new(None) };
    /// Each thread's zstd decompressor.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// The record of a response whose body is `body`, followed by `trailers` if it had any,
/// for a key of `scope`; a body of `compress_from` bytes or more compressed if that makes
/// it smaller.
///
/// A [`RecordScope::Shared`] record is replayed to whoever presents its key, so it keeps no
/// `Set-Cookie`: a cookie (a session, say) was meant for the client that made the first
/// request, and only that client gets it.
pub(crate) fn encode_response(
    parts: &response::Parts,
    body: &[u8],
    trailers: Option<&HeaderMap>,
    scope: RecordScope,
    compress_from: Option<usize>,
) -> Bytes {
    let shared = scope == RecordScope::Shared;
    let headers: Vec<_> = parts
        .headers
        .iter()
        .filter(|(name, _)| {
            !((shared && *name == SET_COOKIE) || is_hop_by_hop(name, &parts.headers))
        })
        .map(Name::field)
        .collect();
    let trailers: Option<Vec<_>> = trailers
        .filter(|trailers| !trailers.is_empty())
        .map(|trailers| trailers.iter().map(Name::field).collect());
    let fields = |fields: &[(Name<'_>, Raw<'_>)]| -> usize {
        fields
            .iter()
            .map(|(name, Raw(value))| {
                value.len()
                    + 20
                    + if let Name::Other(text) = name {
                        text.len()
                    } else {
                        0
                    }
            })
            .sum()
    };
    // An upper bound of the encoding: each length is a varint of at most 10 bytes.
    let size = 32 + fields(&headers) + trailers.as_deref().map_or(0, fields);
    let compressible = compress_from.is_some_and(|from| body.len() >= from)
        && !parts.headers.contains_key(http::header::CONTENT_ENCODING);
    let record = Compact {
        status: parts.status.as_u16(),
        headers,
        body: StoredBody::Plain(Raw(body)),
        trailers,
    };
    let Some(len) = u32::try_from(body.len()).ok().filter(|_| compressible) else {
        return postcard_extend(&(COMPACT, record), size + body.len());
    };
    COMPRESSOR.with_borrow_mut(|slot| {
        // The same record, its lifetime shortened to the buffer's.
        let mut record: Compact<'_> = record;
        if let Some(frame) = compress(slot, body) {
            record.body = StoredBody::Zstd {
                len,
                frame: Raw(frame),
            };
        }
        postcard_extend(&(COMPACT, record), size + body.len())
    })
}

/// A compressor as [`COMPRESSOR`] keeps it: [`LEVEL`], without a checksum (a store keeps
/// a record whole or not at all) or the body's length (the record holds it).
fn compressor() -> Option<zstd::bulk::Compressor<'static>> {
    use zstd::zstd_safe::CParameter;
    let mut compressor = zstd::bulk::Compressor::new(LEVEL).ok()?;
    compressor
        .set_parameter(CParameter::ChecksumFlag(false))
        .ok()?;
    compressor
        .set_parameter(CParameter::ContentSizeFlag(false))
        .ok()?;
    Some(compressor)
}

/// `body` compressed with the thread's compressor (made on first use), in its buffer;
/// `None` when that is no smaller, or zstd fails, and the body is stored as it is.
fn compress<'s>(
    slot: &'s mut Option<(zstd::bulk::Compressor<'static>, Vec<u8>)>,
    body: &[u8],
) -> Option<&'s [u8]> {
    if slot.is_none() {
        *slot = Some((compressor()?, Vec::new()));
    }
    let (compressor, frame) = slot.as_mut()?;
    frame.clear();
    frame.reserve(zstd::zstd_safe::compress_bound(body.len()));
    compressor.compress_to_buffer(body, frame).ok()?;
    (frame.len() < body.len()).then_some(frame.as_slice())
}

/// `frame` decompressed: `len` bytes, or unreadable.
fn decompress(frame: &[u8], len: u32) -> Result<Bytes, Unreadable> {
    let corrupt = || Unreadable("the stored body does not decompress".to_owned());
    let len = usize::try_from(len).map_err(|_| corrupt())?;
    let mut body = Vec::with_capacity(len);
    DECOMPRESSOR.with_borrow_mut(|slot| {
        if slot.is_none() {
            *slot = zstd::bulk::Decompressor::new().ok();
        }
        let decompressor = slot.as_mut().ok_or_else(corrupt)?;
        // Writes at most the capacity: a frame that holds more is an error.
        decompressor
            .decompress_to_buffer(frame, &mut body)
            .map_err(|_| corrupt())
    })?;
    if body.len() != len {
        return Err(corrupt());
    }
    Ok(body.into())
}

/// The record of a response too large to keep.
pub(crate) fn encode_too_large(status: StatusCode) -> Bytes {
    postcard_extend(
        &(
            FORMAT,
            Record::TooLarge {
                status: status.as_u16(),
            },
        ),
        8,
    )
}

/// The record of a response whose body failed half-way.
pub(crate) fn encode_failed(status: StatusCode) -> Bytes {
    postcard_extend(
        &(
            FORMAT,
            Record::Failed {
                status: status.as_u16(),
            },
        ),
        8,
    )
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
        COMPACT => return decode_compact(stored, postcard::from_bytes(rest).map_err(corrupt)?),
        FORMAT => (postcard::from_bytes(rest).map_err(corrupt)?, None),
        WITH_TRAILERS => {
            let (record, trailers) = postcard::from_bytes(rest).map_err(corrupt)?;
            (record, Some(trailers))
        }
        _ => {
            return Err(Unreadable(format!(
                "the stored record has format {format}, this release reads {FORMAT}, \
                 {WITH_TRAILERS} and {COMPACT}"
            )));
        }
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
            fn text<'a>((name, value): (&'a str, Raw<'a>)) -> (Name<'a>, Raw<'a>) {
                (Name::Other(name), value)
            }
            let headers = headers.into_iter().map(text).collect();
            let trailers = trailers.map(|fields| fields.into_iter().map(text).collect());
            let data = stored.slice_ref(body.0);
            response(stored, status(code)?, headers, data, trailers)
        }
    }
}

/// `code` as a status.
fn status(code: u16) -> Result<StatusCode, Unreadable> {
    StatusCode::from_u16(code)
        .map_err(|_| Unreadable(format!("the stored status {code} is not a status")))
}

/// What a [`COMPACT`] record, read from `stored`, replays as.
fn decode_compact(stored: &Bytes, record: Compact<'_>) -> Result<Replay, Unreadable> {
    let data = match record.body {
        StoredBody::Plain(Raw(body)) => stored.slice_ref(body),
        StoredBody::Zstd { len, frame } => decompress(frame.0, len)?,
    };
    let status = status(record.status)?;
    response(stored, status, record.headers, data, record.trailers)
}

/// The replay of a response with `status`, the `headers`, the body `data` and the
/// `trailers`, if it had any; the fields' values are slices of `stored`.
fn response(
    stored: &Bytes,
    status: StatusCode,
    headers: Vec<(Name<'_>, Raw<'_>)>,
    data: Bytes,
    trailers: Option<Vec<(Name<'_>, Raw<'_>)>>,
) -> Result<Replay, Unreadable> {
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
    *response.status_mut() = status;
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

/// Appends the stored `fields` to `map`, their values slices of `stored`, not copies
/// (`tests::a_replay_borrows_the_stored_bytes`).
fn append_fields(
    stored: &Bytes,
    fields: Vec<(Name<'_>, Raw<'_>)>,
    map: &mut HeaderMap,
) -> Result<(), Unreadable> {
    for (name, Raw(value)) in fields {
        let name = name.header_name()?;
        let Ok(value) = HeaderValue::from_maybe_shared(stored.slice_ref(value)) else {
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
        let stored = encode_response(&original, &body, None, RecordScope::Client, COMPRESSED);
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
        let stored = encode_response(&original, b"", None, RecordScope::Client, COMPRESSED);
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
        let stored = encode_response(&original, b"ok", None, RecordScope::Shared, COMPRESSED);
        let Ok(Replay::Response(replayed)) = decode(&stored) else {
            panic!("a fresh record decodes");
        };
        assert!(!replayed.headers().contains_key(SET_COOKIE));
        assert_eq!(replayed.headers()[CONTENT_TYPE], "text/plain");
    }

    /// Bytes an earlier release wrote (`fixtures/`, captured from the release before the
    /// compact format, not made by this code) replay as they did: the status, every
    /// header in order, the body and the trailers.
    #[test]
    fn records_of_earlier_releases_replay() {
        let body = br#"{"id":7,"item":"book","note":"written by the first format"}"#;
        let expected_headers = [
            ("content-type", "application/json"),
            ("set-cookie", "a=1; Path=/"),
            ("set-cookie", "b=2"),
            ("location", "/orders/7"),
            ("idempotent-replayed", "true"),
        ];
        let fields = |map: &HeaderMap| -> Vec<(String, String)> {
            map.iter()
                .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
                .collect()
        };
        let order = include_bytes!("fixtures/order.json");
        for (stored, body, trailers) in [
            (&include_bytes!("fixtures/plain.bin")[..], &body[..], None),
            (&include_bytes!("fixtures/order.bin")[..], &order[..], None),
            (
                &include_bytes!("fixtures/trailers.bin")[..],
                &body[..],
                Some(vec![("grpc-status", "0"), ("x-trailing", "meta")]),
            ),
        ] {
            assert_eq!(
                stored[0],
                if trailers.is_some() {
                    WITH_TRAILERS
                } else {
                    FORMAT
                }
            );
            let Ok(Replay::Response(replayed)) = decode(&Bytes::copy_from_slice(stored)) else {
                panic!("an earlier release's record decodes");
            };
            assert_eq!(replayed.status(), StatusCode::CREATED);
            let expected: Vec<_> = expected_headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect();
            assert_eq!(fields(replayed.headers()), expected);
            let collected = futures_collect(replayed);
            let expected_trailers = trailers.map(|trailers| {
                trailers
                    .iter()
                    .map(|(name, value)| (name.to_string(), value.to_string()))
                    .collect::<Vec<_>>()
            });
            assert_eq!(collected.trailers().map(fields), expected_trailers);
            assert_eq!(collected.to_bytes(), body);
        }
        let too_large = Bytes::from_static(include_bytes!("fixtures/toolarge.bin"));
        assert!(matches!(
            decode(&too_large),
            Ok(Replay::TooLarge {
                status: StatusCode::OK
            })
        ));
        let failed = Bytes::from_static(include_bytes!("fixtures/failed.bin"));
        assert!(matches!(
            decode(&failed),
            Ok(Replay::Failed {
                status: StatusCode::BAD_GATEWAY
            })
        ));
        // Too-large and failed markers are still written in the first format.
        assert_eq!(encode_too_large(StatusCode::OK), too_large);
        assert_eq!(encode_failed(StatusCode::BAD_GATEWAY), failed);
    }

    /// Compression on, from the suggested threshold.
    const COMPRESSED: Option<usize> = Some(COMPRESS_FROM);

    /// Compression off, the default: the body as it came, whatever its size.
    #[test]
    fn without_compression_a_body_is_stored_as_it_came() {
        let order = include_bytes!("fixtures/order.json");
        let original = parts(StatusCode::CREATED, &[("content-type", "application/json")]);
        let stored = encode_response(&original, order, None, RecordScope::Client, None);
        assert_eq!(stored[0], COMPACT);
        assert!(stored.len() > order.len(), "{} bytes", stored.len());
        let Ok(Replay::Response(replayed)) = decode(&stored) else {
            panic!("a fresh record decodes");
        };
        assert_eq!(futures_body(replayed), order[..]);
    }

    /// A typical 512-byte JSON body is stored compressed, and the record of it holds
    /// its name `content-type` as one byte; the replay has the same bytes.
    #[test]
    fn a_json_body_is_stored_compressed_and_replays_byte_for_byte() {
        let order = include_bytes!("fixtures/order.json");
        assert_eq!(order.len(), 512);
        let original = parts(StatusCode::CREATED, &[("content-type", "application/json")]);
        let stored = encode_response(&original, order, None, RecordScope::Client, COMPRESSED);
        assert_eq!(stored[0], COMPACT);
        assert!(stored.len() < 400, "{} bytes", stored.len());
        let earlier = include_bytes!("fixtures/order.bin");
        assert!(
            stored.len() * 10 < earlier.len() * 7,
            "{} bytes",
            stored.len()
        );
        let Ok(Replay::Response(replayed)) = decode(&stored) else {
            panic!("a fresh record decodes");
        };
        assert_eq!(replayed.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(futures_body(replayed), order[..]);
        // Already coded, or below the threshold: stored as it is, borrowed on replay.
        let gzipped = parts(StatusCode::OK, &[("content-encoding", "gzip")]);
        let coded = encode_response(&gzipped, order, None, RecordScope::Client, COMPRESSED);
        assert!(coded.len() > order.len());
        let short = &order[..COMPRESS_FROM - 1];
        let stored = encode_response(&original, short, None, RecordScope::Client, COMPRESSED);
        // The format, the status, one header (its name's tag and index, its value's
        // length and bytes), the body's tag, length and bytes, and no trailers.
        let head = 1 + 2 + 1 + (2 + 1 + 16) + (1 + 2);
        assert_eq!(stored.len(), head + short.len() + 1);
    }

    /// A replay's body and header values are slices of the bytes the store returned: a
    /// replay copies neither, whatever their size.
    #[tokio::test]
    async fn a_replay_borrows_the_stored_bytes() {
        // Bytes zstd cannot make smaller, so they are stored as they are.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let body: Vec<u8> = (0..4096)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let original = parts(StatusCode::CREATED, &[("x-order", "order 7")]);
        let stored = encode_response(&original, &body, None, RecordScope::Client, COMPRESSED);
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
            None,
        );
        let mut other_format = stored.to_vec();
        other_format[0] = COMPACT + 1;
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

    fn futures_collect(response: Response) -> http_body_util::Collected<Bytes> {
        use http_body_util::BodyExt;
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(response.into_body().collect())
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

        /// A body: any bytes, or text that repeats (compressed when long enough).
        fn body() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..200),
                prop::collection::vec(any::<u8>(), 200..700),
                ("[a-z\"{}:,]{1,12}", 1_usize..120)
                    .prop_map(|(part, times)| part.repeat(times).into_bytes()),
            ]
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
                        encode_response(
                            &parts,
                            &body,
                            trailers.as_ref(),
                            scope,
                            Some(COMPRESS_FROM),
                        )
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
                            let formats = [FORMAT, WITH_TRAILERS, COMPACT];
                            bytes.insert(0, formats[usize::from(trailed) + bytes.len() % 2]);
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
                body in body(),
                trailers in trailers(),
                scope in scope(),
            ) {
                let stored = encode_response(&parts, &body, trailers.as_ref(), scope, Some(COMPRESS_FROM));
                let trailers = trailers.filter(|trailers| !trailers.is_empty());
                prop_assert_eq!(stored[0], COMPACT);
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
