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
            Self::Multipart { boundary } => multipart_field(body, boundary, name)
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
}
