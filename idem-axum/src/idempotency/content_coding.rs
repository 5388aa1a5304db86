//! Whether a retry can read a stored response whose body is already content-coded.
//!
//! A response is stored as the handler's service produced it. When a compression layer
//! sits inside [`IdempotencyLayer`](super::IdempotencyLayer), that is the encoding the
//! *first* client asked for, and a retry may not accept it: its client would get bytes it
//! cannot read. The handler must not run again for the key either, so such a retry is
//! refused, saying which encoding to accept.
//!
//! Acceptance follows `Accept-Encoding` (RFC 9110 §12.5.3): a coding listed with a
//! non-zero weight, or `*` with one when the coding is not listed; `x-gzip` is `gzip`.
//! A request without the field is taken to accept no coding. RFC 9110 lets a server read
//! that as "anything", but a client that sends none (a plain HTTP library, `curl` without
//! `--compressed`) usually cannot decode one, and compression layers read it as this one
//! does.

use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING};
use http::{HeaderMap, HeaderValue};

/// The first content coding of `stored` (a stored response's headers) that `request`
/// does not accept, if any. A coding that is not text is reported as the raw field.
pub(super) fn unaccepted(stored: &HeaderMap, request: &HeaderMap) -> Option<String> {
    for value in stored.get_all(CONTENT_ENCODING) {
        let Ok(value) = value.to_str() else {
            return Some(String::from_utf8_lossy(value.as_bytes()).into_owned());
        };
        let mut codings = value.split(',').map(str::trim).filter(|c| !c.is_empty());
        if let Some(coding) = codings.find(|coding| !accepts(request, coding)) {
            return Some(coding.to_owned());
        }
    }
    None
}

/// `request`'s `Accept-Encoding`, kept for an answer given after the request itself went
/// on to the handler: its one field value, shared rather than copied, or its several
/// joined into one, as a list field may be.
pub(super) fn accepted(request: &HeaderMap) -> Option<HeaderValue> {
    let mut values = request.get_all(ACCEPT_ENCODING).iter();
    let first = values.next()?;
    let Some(second) = values.next() else {
        return Some(first.clone());
    };
    let mut joined = first.as_bytes().to_vec();
    for value in std::iter::once(second).chain(values) {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(value.as_bytes());
    }
    HeaderValue::from_bytes(&joined).ok()
}

/// A request whose only field is the `Accept-Encoding` [`accepted`] kept.
pub(super) fn accepting(accepted: Option<&HeaderValue>) -> HeaderMap {
    let mut request = HeaderMap::new();
    if let Some(accepted) = accepted {
        request.insert(ACCEPT_ENCODING, accepted.clone());
    }
    request
}

/// Whether `request`'s `Accept-Encoding` accepts `coding`.
fn accepts(request: &HeaderMap, coding: &str) -> bool {
    let coding = canonical(coding);
    if coding.eq_ignore_ascii_case("identity") {
        return true;
    }
    let mut wildcard = None;
    let elements = request
        .get_all(ACCEPT_ENCODING)
        .iter()
        // A field that is not text names nothing this layer can match.
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','));
    for element in elements {
        let mut parts = element.split(';');
        let name = canonical(parts.next().unwrap_or("").trim());
        let weighted = weight_is_nonzero(parts);
        if name.eq_ignore_ascii_case(coding) {
            return weighted;
        }
        if name == "*" && wildcard.is_none() {
            wildcard = Some(weighted);
        }
    }
    wildcard.unwrap_or(false)
}

/// `x-gzip` and `x-compress` are the old names of `gzip` and `compress` (RFC 9110
/// §8.4.1), which a recipient should treat as the same codings.
fn canonical(coding: &str) -> &str {
    if coding.eq_ignore_ascii_case("x-gzip") {
        "gzip"
    } else if coding.eq_ignore_ascii_case("x-compress") {
        "compress"
    } else {
        coding
    }
}

/// Whether an element's parameters give it a weight above zero: no `q` is weight 1; a
/// `q` that is not a valid qvalue counts as zero, so a garbled field never accepts.
fn weight_is_nonzero<'a>(parameters: impl Iterator<Item = &'a str>) -> bool {
    for parameter in parameters {
        let Some((name, value)) = parameter.split_once('=') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("q") {
            continue;
        }
        let value = value.trim();
        // qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
        let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
        let digits = fraction.len() <= 3 && fraction.bytes().all(|b| b.is_ascii_digit());
        return match whole {
            "0" => digits && fraction.bytes().any(|b| b != b'0'),
            "1" => digits && fraction.bytes().all(|b| b == b'0'),
            _ => false,
        };
    }
    true
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(name: http::HeaderName, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(&name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn unaccepted_by(content: &[&str], accept: &[&str]) -> Option<String> {
        unaccepted(
            &headers(CONTENT_ENCODING, content),
            &headers(ACCEPT_ENCODING, accept),
        )
    }

    #[test]
    fn an_unencoded_response_suits_every_request() {
        assert_eq!(unaccepted_by(&[], &[]), None);
        assert_eq!(unaccepted_by(&["identity"], &[]), None);
        assert_eq!(unaccepted_by(&[], &["br"]), None);
    }

    #[test]
    fn a_listed_coding_with_a_weight_is_accepted() {
        for accept in [
            "gzip",
            "br, gzip",
            "GZIP;q=0.5",
            "gzip ; Q=1.000",
            "x-gzip",
            "*",
            "br;q=1, *;q=0.1",
        ] {
            assert_eq!(unaccepted_by(&["gzip"], &[accept]), None, "{accept}");
        }
        assert_eq!(unaccepted_by(&["x-gzip"], &["gzip"]), None);
        assert_eq!(
            unaccepted_by(&["gzip"], &["br", "gzip"]),
            None,
            "two fields"
        );
    }

    #[test]
    fn anything_else_is_not() {
        for accept in [
            &[][..],
            &[""],
            &["br"],
            &["identity"],
            &["gzip;q=0"],
            &["gzip;q=0.000"],
            &["gzip;q=0, *"],
            &["*;q=0"],
            &["gzip;q=2"],
            &["gzip;q=0.5x"],
            &["gzip;q=1.5"],
            &["gzipped"],
        ] {
            assert_eq!(
                unaccepted_by(&["gzip"], accept),
                Some("gzip".to_owned()),
                "{accept:?}"
            );
        }
    }

    #[test]
    fn every_coding_applied_must_be_accepted() {
        assert_eq!(
            unaccepted_by(&["gzip, br"], &["gzip"]),
            Some("br".to_owned())
        );
        assert_eq!(
            unaccepted_by(&["gzip", "br"], &["gzip"]),
            Some("br".to_owned())
        );
        assert_eq!(unaccepted_by(&["gzip, br"], &["br, gzip"]), None);
    }

    mod properties {
        use proptest::prelude::*;
        use proptest::sample::Index;

        use super::*;
        use crate::field_lines::field_lines;

        const CODINGS: [&str; 5] = ["gzip", "br", "deflate", "zstd", "compress"];

        /// `coding` as a field may spell it: any case, `x-` for the old names.
        fn spelled(coding: &str, upper: bool, old_name: bool) -> String {
            let coding = match coding {
                "gzip" | "compress" if old_name => format!("x-{coding}"),
                _ => coding.to_owned(),
            };
            if upper {
                coding.to_ascii_uppercase()
            } else {
                coding
            }
        }

        /// A weight as a field may write it, and whether it is above zero.
        fn weight() -> impl Strategy<Value = (String, bool)> {
            prop_oneof![
                Just((String::new(), true)),
                prop::sample::select(&["0", "0.000", "0.5", "0.001", "1", "1.000", "1.0"][..])
                    .prop_map(|q| (format!(";q={q}"), q.bytes().any(|b| b != b'0' && b != b'.'))),
                prop::sample::select(&["2", "0.5x", "1.5", "0.0001", "", "-1"][..])
                    .prop_map(|q| (format!("; Q = {q}"), false)),
            ]
        }

        fn header_map(name: http::HeaderName, lines: &[Vec<u8>]) -> HeaderMap {
            let mut map = HeaderMap::new();
            for line in lines {
                map.append(&name, HeaderValue::from_bytes(line).expect("a field value"));
            }
            map
        }

        proptest! {
            #[test]
            fn no_fields_make_it_panic(stored in field_lines(39, 3), accept in field_lines(39, 3)) {
                let stored = header_map(CONTENT_ENCODING, &stored);
                let unaccepted = unaccepted(&stored, &header_map(ACCEPT_ENCODING, &accept));
                prop_assert!(!unaccepted.is_some_and(|c| c.eq_ignore_ascii_case("identity")));
            }

            /// The first coding applied that the request does not accept is reported: one
            /// it lists with a weight of zero (or one that is not a qvalue), or one it does
            /// not list when `*` is not listed with a weight above zero.
            #[test]
            fn the_first_coding_not_accepted_is_reported(
                applied in prop::collection::vec(
                    (0_usize..6, any::<bool>(), any::<bool>(), any::<bool>()),
                    0..4,
                ),
                listed in prop::collection::vec(
                    prop::option::of((weight(), any::<bool>(), any::<bool>())),
                    6,
                ),
                order in prop::collection::vec(any::<Index>(), 6),
            ) {
                let coding = |index: usize| CODINGS.get(index).copied().unwrap_or("identity");
                // `*` is the last of the six.
                let mut elements: Vec<String> = Vec::new();
                for (index, listing) in listed.iter().enumerate() {
                    if let Some(((weight, _), upper, old_name)) = listing {
                        let name = match CODINGS.get(index) {
                            Some(coding) => spelled(coding, *upper, *old_name),
                            None => "*".to_owned(),
                        };
                        let at = order[index].index(elements.len() + 1);
                        elements.insert(at, format!("{name}{weight}"));
                    }
                }
                let accepts = |index: usize| {
                    let weighted = |listing: &Option<((String, bool), bool, bool)>| {
                        listing.as_ref().map(|((_, above_zero), _, _)| *above_zero)
                    };
                    index == CODINGS.len()
                        || weighted(&listed[index]).or(weighted(&listed[5])).unwrap_or(false)
                };
                let mut lines: Vec<String> = vec![String::new()];
                let mut expected = None;
                for (index, upper, old_name, new_line) in applied {
                    let index = index.min(CODINGS.len());
                    let written = spelled(coding(index), upper, old_name);
                    if expected.is_none() && !accepts(index) {
                        expected = Some(written.clone());
                    }
                    if new_line {
                        lines.push(written);
                    } else {
                        let line = lines.last_mut().expect("a line");
                        *line = format!("{line} ,{written}");
                    }
                }
                let lines: Vec<Vec<u8>> = lines.into_iter().map(String::into_bytes).collect();
                let accept = vec![elements.join(", ").into_bytes()];
                let found = unaccepted(
                    &header_map(CONTENT_ENCODING, &lines),
                    &header_map(ACCEPT_ENCODING, &accept),
                );
                prop_assert_eq!(found, expected);
            }
        }
    }
}
