//! Finding the token's field in a form body: `application/x-www-form-urlencoded` or
//! `multipart/form-data`.
//!
//! Only the token's value is kept; the body is left for the handler's own `Form` or
//! `Multipart` extractor. But the whole body is checked first — every name and value
//! UTF-8 once decoded for a urlencoded one, every part up to the closing boundary for a
//! multipart one — so that a malformed body is refused here, before its token is spent.

use std::borrow::Cow;
use std::convert::Infallible;

use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_TYPE;

use crate::rejection::{Rejection, RejectionKind};

/// A form body, by its content type.
#[derive(Debug)]
pub(super) enum Form {
    /// `application/x-www-form-urlencoded`.
    UrlEncoded,
    /// `multipart/form-data` with its boundary.
    Multipart {
        /// The boundary between parts.
        boundary: String,
    },
}

impl Form {
    /// The form a request's `Content-Type` announces; `None` without a `Content-Type`.
    ///
    /// # Errors
    ///
    /// 415 for a content type that is not a form; 400 for a multipart one without a
    /// boundary.
    pub(super) fn of(headers: &HeaderMap) -> Result<Option<Self>, Rejection> {
        let Some(content_type) = headers.get(CONTENT_TYPE) else {
            return Ok(None);
        };
        let content_type = String::from_utf8_lossy(content_type.as_bytes());
        let essence = content_type.split(';').next().unwrap_or("").trim();
        if essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
            Ok(Some(Self::UrlEncoded))
        } else if essence.eq_ignore_ascii_case("multipart/form-data") {
            let boundary = multer::parse_boundary(&content_type).map_err(|_| {
                Rejection::new(
                    RejectionKind::InvalidBody,
                    "the multipart/form-data content type has no boundary",
                )
            })?;
            Ok(Some(Self::Multipart { boundary }))
        } else {
            Err(Rejection::new(
                RejectionKind::UnsupportedMediaType,
                format!(
                    "a form token is read from a header or from an \
                     application/x-www-form-urlencoded or multipart/form-data body, \
                     not from {essence}"
                ),
            ))
        }
    }

    /// The value of the first field named `name` in `body`; `None` when there is none or
    /// it is empty.
    ///
    /// # Errors
    ///
    /// 400 for a urlencoded body that is not UTF-8 (also once percent-decoded, in the
    /// field's name or value), and for a multipart body that is malformed or cut short.
    pub(super) async fn field(&self, body: Bytes, name: &str) -> Result<Option<String>, Rejection> {
        let value = match self {
            Self::UrlEncoded => urlencoded_field(&body, name).map_err(|_| {
                Rejection::new(
                    RejectionKind::InvalidBody,
                    "the form body is not valid UTF-8",
                )
            })?,
            // Boxed: multer's parser is 2 KB of state, which inline would size every form
            // post's future, urlencoded ones included (the rarer multipart post pays an
            // allocation instead; `layer::tests::the_per_request_futures_stay_small`).
            Self::Multipart { boundary } => Box::pin(multipart_field(body, boundary, name))
                .await
                .map_err(|error| {
                    Rejection::new(
                        RejectionKind::InvalidBody,
                        format!("the multipart/form-data body is malformed: {error}"),
                    )
                })?
                .map(|value| String::from_utf8(value.to_vec()))
                .transpose()
                .map_err(|_| {
                    Rejection::new(
                        RejectionKind::InvalidBody,
                        format!("the `{name}` field is not valid UTF-8"),
                    )
                })?,
        };
        Ok(value.filter(|value| !value.is_empty()))
    }
}

/// Not UTF-8, before or after percent-decoding.
#[derive(Debug)]
struct NotUtf8;

fn urlencoded_field(body: &[u8], name: &str) -> Result<Option<String>, NotUtf8> {
    let body = std::str::from_utf8(body).map_err(|_| NotUtf8)?;
    let mut found = None;
    // Every pair is decoded, not just up to the token's, so that a body with bytes that
    // are not UTF-8 anywhere is refused as a whole.
    for pair in body.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (key, value) = (decode(key)?, decode(value)?);
        if found.is_none() && key == name {
            found = Some(value.into_owned());
        }
    }
    Ok(found)
}

/// One urlencoded name or value: `+` is a space, `%XX` a byte.
fn decode(component: &str) -> Result<Cow<'_, str>, NotUtf8> {
    if !component.contains(['+', '%']) {
        return Ok(Cow::Borrowed(component));
    }
    let spaced = component.replace('+', " ");
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(&spaced).collect();
    String::from_utf8(bytes)
        .map(Cow::Owned)
        .map_err(|_| NotUtf8)
}

async fn multipart_field(
    body: Bytes,
    boundary: &str,
    name: &str,
) -> Result<Option<Bytes>, multer::Error> {
    let stream = futures_util::stream::once(std::future::ready(Ok::<_, Infallible>(body)));
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut found = None;
    // Every part is read, not just up to the token's: a body cut short after it must be
    // refused before the token is spent.
    while let Some(mut field) = multipart.next_field().await? {
        if found.is_none() && field.name() == Some(name) {
            found = Some(field.bytes().await?);
        } else {
            while field.chunk().await?.is_some() {}
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn form(content_type: &str) -> Result<Option<Form>, Rejection> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
        Form::of(&headers)
    }

    async fn urlencoded(body: &[u8]) -> Result<Option<String>, Rejection> {
        Form::UrlEncoded
            .field(Bytes::copy_from_slice(body), "form_token")
            .await
    }

    const MULTIPART: &str = "--XyZ\r\n\
        Content-Disposition: form-data; name=\"item\"\r\n\r\n\
        book\r\n\
        --XyZ\r\n\
        Content-Disposition: form-data; name=\"form_token\"\r\n\r\n\
        tok\r\n\
        --XyZ\r\n\
        Content-Disposition: form-data; name=\"upload\"; filename=\"a.txt\"\r\n\
        Content-Type: text/plain\r\n\r\n\
        some file\r\n\
        --XyZ--\r\n";

    async fn multipart(body: &str) -> Result<Option<String>, Rejection> {
        let boundary = "XyZ".to_owned();
        Form::Multipart { boundary }
            .field(Bytes::copy_from_slice(body.as_bytes()), "form_token")
            .await
    }

    #[test]
    fn the_content_type_says_which_form() {
        assert!(matches!(
            form("application/x-www-form-urlencoded; charset=utf-8"),
            Ok(Some(Form::UrlEncoded))
        ));
        assert!(matches!(
            form("Multipart/Form-Data; boundary=\"a b\""),
            Ok(Some(Form::Multipart { boundary })) if boundary == "a b"
        ));
        let no_boundary = form("multipart/form-data").unwrap_err();
        assert_eq!(no_boundary.kind(), RejectionKind::InvalidBody);
        let json = form("application/json").unwrap_err();
        assert_eq!(json.kind(), RejectionKind::UnsupportedMediaType);
        assert!(Form::of(&HeaderMap::new()).unwrap().is_none());
    }

    #[tokio::test]
    async fn urlencoded_fields_are_decoded() {
        assert_eq!(
            urlencoded(b"item=a+b&form_token=x%2Dy&form_token=second")
                .await
                .unwrap()
                .as_deref(),
            Some("x-y"),
            "the first field of the name"
        );
        assert_eq!(
            urlencoded(b"&form%5Ftoken=t&").await.unwrap().as_deref(),
            Some("t")
        );
        assert_eq!(urlencoded(b"form_token").await.unwrap(), None, "empty");
        assert_eq!(urlencoded(b"form_token=").await.unwrap(), None, "empty");
        assert_eq!(urlencoded(b"item=1").await.unwrap(), None);
        assert_eq!(urlencoded(b"").await.unwrap(), None);
    }

    #[tokio::test]
    async fn urlencoded_bodies_must_be_utf8() {
        for body in [
            b"form_token=t&item=\xff".as_slice(),
            b"item=%ff&form_token=t",
            b"form_token=%C3",
        ] {
            let error = urlencoded(body).await.unwrap_err();
            assert_eq!(error.kind(), RejectionKind::InvalidBody, "{body:?}");
        }
        assert_eq!(
            urlencoded(b"item=%E4%B8%AD&form_token=t")
                .await
                .unwrap()
                .as_deref(),
            Some("t")
        );
    }

    #[tokio::test]
    async fn multipart_fields_are_found_among_others() {
        assert_eq!(multipart(MULTIPART).await.unwrap().as_deref(), Some("tok"));
        assert_eq!(multipart("--XyZ--\r\n").await.unwrap(), None);
    }

    #[tokio::test]
    async fn multipart_bodies_cut_short_or_malformed_are_refused() {
        let cut = MULTIPART.find("some file").unwrap();
        for body in [
            &MULTIPART[..cut],
            &MULTIPART[..MULTIPART.len() - 9],
            "not multipart at all",
            "",
        ] {
            let error = multipart(body).await.unwrap_err();
            assert_eq!(error.kind(), RejectionKind::InvalidBody, "{body:?}");
        }
    }

    mod properties {
        use futures_util::FutureExt;
        use proptest::prelude::*;
        use proptest::sample::Index;

        use super::*;

        /// The token field's value in `body`, as `content_type` announces it.
        fn token_in(
            content_type: &[u8],
            body: Vec<u8>,
            name: &str,
        ) -> Result<Option<String>, Rejection> {
            let mut headers = HeaderMap::new();
            let content_type = HeaderValue::from_bytes(content_type).expect("a field value");
            headers.insert(CONTENT_TYPE, content_type);
            let Some(form) = Form::of(&headers)? else {
                unreachable!("a content type was sent");
            };
            // The body is all there, so reading it never waits.
            form.field(Bytes::from(body), name)
                .now_or_never()
                .expect("a body read at once")
        }

        fn field_bytes(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec(
                prop_oneof![Just(b'\t'), 0x20_u8..=0x7e, 0x80_u8..=0xff],
                len,
            )
        }

        /// `name`, or another name if it is `token`.
        fn other_than(token: &str, name: String) -> String {
            if name == token { name + "x" } else { name }
        }

        /// A urlencoded name or value, in one of the ways clients write one: `+` or
        /// `%20` for a space, upper- or lowercase hex, or every byte as `%XX`.
        fn urlencode(text: &str, style: u8) -> String {
            text.bytes()
                .map(|byte| match (byte, style) {
                    (b' ', 0) => "+".to_owned(),
                    (
                        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~',
                        0..=2,
                    ) => char::from(byte).to_string(),
                    (_, 2) => format!("%{byte:02x}"),
                    _ => format!("%{byte:02X}"),
                })
                .collect()
        }

        /// A multipart part as a browser writes it.
        #[derive(Debug, Clone)]
        struct Part {
            name: String,
            filename: Option<String>,
            content_type: Option<String>,
            data: Vec<u8>,
        }

        /// A multipart body of `parts` between `boundary`s.
        fn multipart_body(boundary: &str, parts: &[Part]) -> Vec<u8> {
            let mut body = Vec::new();
            for part in parts {
                let name = &part.name;
                body.extend_from_slice(
                    format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"")
                        .as_bytes(),
                );
                if let Some(filename) = &part.filename {
                    body.extend_from_slice(format!("; filename=\"{filename}\"").as_bytes());
                }
                body.extend_from_slice(b"\r\n");
                if let Some(content_type) = &part.content_type {
                    body.extend_from_slice(format!("Content-Type: {content_type}\r\n").as_bytes());
                }
                body.extend_from_slice(b"\r\n");
                body.extend_from_slice(&part.data);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            body
        }

        /// A field name or filename as a browser writes it in `Content-Disposition`.
        fn disposition_text() -> impl Strategy<Value = String> {
            "[^\\x00-\\x1f\\x7f]{0,20}".prop_map(|text| text.replace('"', "%22"))
        }

        /// A multipart part other than the token's: any name, maybe a file, any data.
        fn other_part() -> impl Strategy<Value = Part> {
            (
                disposition_text(),
                prop::option::of(disposition_text()),
                prop::option::of(
                    prop::sample::select(
                        &[
                            "text/plain",
                            "application/octet-stream",
                            "image/png; q=\"x\"",
                        ][..],
                    )
                    .prop_map(str::to_owned),
                ),
                prop::collection::vec(any::<u8>(), 0..100),
            )
                .prop_map(|(name, filename, content_type, data)| Part {
                    name,
                    filename,
                    content_type,
                    data,
                })
        }

        /// `bytes` with a few runs replaced by others, or cut short.
        fn spliced(bytes: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
            let splice = (
                any::<Index>(),
                any::<Index>(),
                prop::collection::vec(any::<u8>(), 0..8),
            );
            prop::collection::vec(splice, 0..3).prop_map(move |splices| {
                let mut bytes = bytes.clone();
                for (start, len, with) in splices {
                    let start = start.index(bytes.len() + 1);
                    let end = start + len.index(bytes.len() - start + 1);
                    bytes.splice(start..end, with);
                }
                bytes
            })
        }

        /// Content types: any bytes, the two forms with any parameters, and multipart
        /// with the boundary `XyZ`.
        fn content_type() -> impl Strategy<Value = Vec<u8>> {
            let essence = prop::sample::select(
                &[
                    "multipart/form-data",
                    "application/x-www-form-urlencoded",
                    "MULTIPART/FORM-DATA",
                ][..],
            );
            prop_oneof![
                field_bytes(0..60),
                (essence, field_bytes(0..40)).prop_map(|(essence, params)| {
                    [essence.as_bytes(), b"; boundary=", &params].concat()
                }),
                Just(b"multipart/form-data; boundary=XyZ".to_vec()),
            ]
        }

        /// Bodies: any bytes, and multipart bodies with the boundary `XyZ` spliced.
        fn body() -> impl Strategy<Value = Vec<u8>> {
            let multipart = prop::collection::vec(other_part(), 0..4)
                .prop_map(|parts| multipart_body("XyZ", &parts))
                .prop_flat_map(spliced);
            prop_oneof![prop::collection::vec(any::<u8>(), 0..200), multipart]
        }

        proptest! {
            #[test]
            fn no_body_or_content_type_makes_it_panic(
                content_type in content_type(),
                body in body(),
                name in ".{0,12}",
            ) {
                let _ = token_in(&content_type, body, &name);
            }

            /// Any fields, with the token's anywhere among them, each name and value
            /// percent-encoded in any way clients do.
            #[test]
            fn the_token_is_found_in_any_urlencoded_body(
                name in "[a-z_]{1,12}",
                token in ".{1,40}",
                others in prop::collection::vec((".{0,12}", ".{0,20}", 0_u8..4, any::<bool>()), 0..6),
                at in any::<Index>(),
                style in 0_u8..4,
            ) {
                let mut pairs: Vec<String> = others
                    .into_iter()
                    .map(|(other, value, style, empty)| {
                        let pair = format!(
                            "{}={}",
                            urlencode(&other_than(&name, other), style),
                            urlencode(&value, style)
                        );
                        if empty { pair + "&" } else { pair }
                    })
                    .collect();
                let ours = format!("{}={}", urlencode(&name, style), urlencode(&token, style));
                pairs.insert(at.index(pairs.len() + 1), ours);
                let body = pairs.join("&").into_bytes();
                let found = token_in(b"application/x-www-form-urlencoded", body, &name);
                prop_assert_eq!(found.expect("a well-formed body"), Some(token));
            }

            /// Any parts, files among them, with the token's anywhere, between any
            /// boundary the parts do not hold.
            #[test]
            fn the_token_is_found_in_any_multipart_body(
                name in "[a-z_]{1,12}",
                token in ".{1,40}",
                others in prop::collection::vec(other_part(), 0..5),
                at in any::<Index>(),
                boundary in "[0-9A-Za-z'()+_,./:=? -]{0,69}[0-9A-Za-z'()+_,./:=?-]",
            ) {
                let mut parts: Vec<Part> = others
                    .into_iter()
                    .map(|part| Part { name: other_than(&name, part.name), ..part })
                    .collect();
                let ours = Part {
                    name: name.clone(),
                    filename: None,
                    content_type: None,
                    data: token.clone().into_bytes(),
                };
                parts.insert(at.index(parts.len() + 1), ours);
                let mut boundary = boundary;
                while parts.iter().any(|part| {
                    part.data
                        .windows(boundary.len() + 2)
                        .any(|window| window[2..] == *boundary.as_bytes() && window[..2] == *b"--")
                }) {
                    boundary.push('x');
                }
                let content_type = format!("multipart/form-data; boundary=\"{boundary}\"");
                let body = multipart_body(&boundary, &parts);
                let found = token_in(content_type.as_bytes(), body, &name);
                prop_assert_eq!(found.expect("a well-formed body"), Some(token));
            }
        }
    }
}
