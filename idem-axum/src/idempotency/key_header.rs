//! Reading the `Idempotency-Key` request header.
//!
//! draft-ietf-httpapi-idempotency-key-header-07 makes the field an RFC 8941 Item whose
//! value is a String: `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`. Clients
//! written against Stripe send the value bare: `Idempotency-Key: 8e03978e-…`. Both are
//! read:
//!
//! - **quoted**: an sf-string — printable ASCII (space included) between double quotes,
//!   where `\"` and `\\` are the only escapes;
//! - **bare**: one or more token characters (RFC 9110 `tchar`, plus `:` and `/` as in an
//!   sf-token). Unlike an sf-token it may start with a digit, as most UUIDs do.
//!
//! Whitespace around the value is ignored. The key itself (after unquoting) is 1–255
//! characters. Anything else — a second `Idempotency-Key` field, a parameter or list
//! after the string, a bad escape, a control or non-ASCII byte — is refused, so a client
//! never gets a key it did not mean.

use std::fmt;

use http::{HeaderMap, HeaderName};

/// The request header that carries the key.
pub(crate) static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The longest key, in characters.
pub(crate) const MAX_LEN: usize = 255;

/// Why an `Idempotency-Key` header was refused; its `Display` is the detail the client
/// reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InvalidKey {
    Repeated,
    Length(usize),
    Unterminated,
    Escape(u8),
    Character(u8),
    AfterString,
}

impl fmt::Display for InvalidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid `Idempotency-Key`: ")?;
        match self {
            Self::Repeated => f.write_str("the field appears more than once"),
            Self::Length(len) => write!(f, "the key is {len} characters long, not 1 to {MAX_LEN}"),
            Self::Unterminated => f.write_str("the quoted string has no closing quote"),
            Self::Escape(byte) => write!(
                f,
                "`\\{}` is not an escape of a structured-field string (only `\\\"` and `\\\\` are)",
                char::from(*byte).escape_default()
            ),
            Self::Character(byte) => write!(
                f,
                "byte 0x{byte:02x} is not allowed (printable ASCII only; a bare key takes token characters, quote anything else)"
            ),
            Self::AfterString => {
                f.write_str("nothing may follow the quoted string (no parameters, no list)")
            }
        }
    }
}

/// The key in the header `name` of `headers`, unquoted: `Ok(None)` when there is none.
pub(crate) fn from_headers(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<String>, InvalidKey> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(InvalidKey::Repeated);
    }
    parse(value.as_bytes()).map(Some)
}

/// Parses one field value.
fn parse(value: &[u8]) -> Result<String, InvalidKey> {
    let value = value.trim_ascii();
    let key = match value.split_first() {
        Some((b'"', quoted)) => unquote(quoted)?,
        _ => bare(value)?,
    };
    if key.is_empty() || key.len() > MAX_LEN {
        return Err(InvalidKey::Length(key.len()));
    }
    Ok(key)
}

/// An sf-string after its opening quote (RFC 8941 §4.2.5).
fn unquote(quoted: &[u8]) -> Result<String, InvalidKey> {
    let mut key = String::with_capacity(quoted.len());
    let mut bytes = quoted.iter().copied();
    while let Some(byte) = bytes.next() {
        match byte {
            b'\\' => match bytes.next() {
                Some(escaped @ (b'"' | b'\\')) => key.push(char::from(escaped)),
                Some(other) => return Err(InvalidKey::Escape(other)),
                None => return Err(InvalidKey::Unterminated),
            },
            b'"' if bytes.next().is_none() => return Ok(key),
            b'"' => return Err(InvalidKey::AfterString),
            0x20..=0x7e => key.push(char::from(byte)),
            other => return Err(InvalidKey::Character(other)),
        }
    }
    Err(InvalidKey::Unterminated)
}

/// A bare key: token characters only.
fn bare(value: &[u8]) -> Result<String, InvalidKey> {
    match value.iter().find(|byte| !is_token_char(**byte)) {
        Some(bad) => Err(InvalidKey::Character(*bad)),
        // Only ASCII passed the check.
        None => Ok(value.iter().copied().map(char::from).collect()),
    }
}

/// RFC 9110 `tchar`, and the `:` and `/` an sf-token allows besides.
fn is_token_char(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: &[u8]) -> Result<String, InvalidKey> {
        parse(value)
    }

    #[test]
    fn quoted_and_bare_keys_are_read() {
        let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
        assert_eq!(key(format!("\"{uuid}\"").as_bytes()), Ok(uuid.to_owned()));
        assert_eq!(key(uuid.as_bytes()), Ok(uuid.to_owned()));
        assert_eq!(key(b"  \"a b\"\t"), Ok("a b".to_owned()));
        assert_eq!(
            key(br#""say \"hi\" \\ bye""#),
            Ok(r#"say "hi" \ bye"#.to_owned())
        );
        assert_eq!(key(b"urn:order/42"), Ok("urn:order/42".to_owned()));
    }

    #[test]
    fn lengths_are_bounded() {
        assert_eq!(key(b""), Err(InvalidKey::Length(0)));
        assert_eq!(key(b"\"\""), Err(InvalidKey::Length(0)));
        assert!(key("k".repeat(255).as_bytes()).is_ok());
        assert_eq!(
            key("k".repeat(256).as_bytes()),
            Err(InvalidKey::Length(256))
        );
        let quoted = format!("\"{}\"", "k".repeat(256));
        assert_eq!(key(quoted.as_bytes()), Err(InvalidKey::Length(256)));
    }

    #[test]
    fn anything_else_is_refused() {
        assert_eq!(key(b"\"open"), Err(InvalidKey::Unterminated));
        assert_eq!(key(b"\"ends in \\"), Err(InvalidKey::Unterminated));
        assert_eq!(key(br#""\n""#), Err(InvalidKey::Escape(b'n')));
        assert_eq!(key(b"\"a\";p=1"), Err(InvalidKey::AfterString));
        assert_eq!(key(b"\"a\", \"b\""), Err(InvalidKey::AfterString));
        assert_eq!(key(b"\"tab\there\""), Err(InvalidKey::Character(b'\t')));
        assert_eq!(
            key("\"caf\u{e9}\"".as_bytes()),
            Err(InvalidKey::Character(0xc3))
        );
        assert_eq!(key(b"two words"), Err(InvalidKey::Character(b' ')));
        assert_eq!(key(b"a,b"), Err(InvalidKey::Character(b',')));
        assert_eq!(key(b"a\"b"), Err(InvalidKey::Character(b'"')));
    }

    #[test]
    fn a_repeated_field_is_refused() {
        let mut headers = HeaderMap::new();
        assert_eq!(from_headers(&headers, &IDEMPOTENCY_KEY), Ok(None));
        headers.append(&IDEMPOTENCY_KEY, "a".parse().unwrap());
        assert!(from_headers(&headers, &IDEMPOTENCY_KEY).is_ok());
        headers.append(&IDEMPOTENCY_KEY, "a".parse().unwrap());
        assert_eq!(
            from_headers(&headers, &IDEMPOTENCY_KEY),
            Err(InvalidKey::Repeated)
        );
    }

    #[test]
    fn every_refusal_explains_itself() {
        let detail = InvalidKey::Length(256).to_string();
        assert!(detail.contains("1 to 255"), "{detail}");
        assert!(InvalidKey::Escape(b'\n').to_string().contains("\\\\n"));
    }

    mod properties {
        use http::{HeaderMap, HeaderValue};
        use proptest::prelude::*;
        use proptest::sample::Index;

        use super::*;

        /// Keys of `lengths` characters that may go bare: RFC 9110 `tchar`, `:` and `/`.
        fn bare_key(lengths: &str) -> impl Strategy<Value = String> + use<> {
            proptest::string::string_regex(&format!("[0-9A-Za-z!#$%&'*+.^_`|~:/-]{lengths}"))
                .expect("a regex")
        }

        /// The bytes a field value may hold.
        fn field_byte() -> impl Strategy<Value = u8> {
            prop_oneof![Just(b'\t'), 0x20_u8..=0x7e, 0x80_u8..=0xff]
        }

        /// Optional whitespace around a value.
        fn ows() -> impl Strategy<Value = String> {
            "[ \t]{0,3}"
        }

        /// `key` as a structured-field string.
        fn quoted(key: &str) -> String {
            let escaped = key.replace('\\', "\\\\").replace('"', "\\\"");
            format!("\"{escaped}\"")
        }

        fn is_bare(key: &str) -> bool {
            key.bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+.^_`|~:/-".contains(&byte))
        }

        /// `bytes` with a few bytes inserted, removed or replaced.
        fn mutated(bytes: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec((any::<Index>(), 0_u8..3, field_byte()), 0..4).prop_map(
                move |edits| {
                    let mut bytes = bytes.clone();
                    for (at, edit, byte) in edits {
                        let at = at.index(bytes.len() + 1);
                        match edit {
                            0 => bytes.insert(at, byte),
                            1 if at < bytes.len() => drop(bytes.remove(at)),
                            _ if at < bytes.len() => bytes[at] = byte,
                            _ => bytes.push(byte),
                        }
                    }
                    bytes
                },
            )
        }

        /// Field values: any, and keys in either form, cut or spliced.
        fn field_value() -> impl Strategy<Value = Vec<u8>> {
            let key = prop_oneof![bare_key("{0,260}"), "[ -~]{0,260}", "[\"\\\\a ]{0,8}",];
            let form =
                (key, any::<bool>(), ows(), ows()).prop_map(|(key, quote, before, after)| {
                    let key = if quote { quoted(&key) } else { key };
                    format!("{before}{key}{after}").into_bytes()
                });
            prop_oneof![
                prop::collection::vec(field_byte(), 0..300),
                form.prop_flat_map(mutated),
            ]
        }

        proptest! {
            #[test]
            fn no_bytes_make_it_panic(value in prop::collection::vec(any::<u8>(), 0..300)) {
                let _ = parse(&value);
            }

            #[test]
            fn every_printable_key_is_read_quoted_and_bare_alike(
                key in prop_oneof![bare_key("{1,255}"), "[ -~]{1,255}"],
                before in ows(),
                after in ows(),
            ) {
                let quoted = format!("{before}{}{after}", quoted(&key));
                prop_assert_eq!(parse(quoted.as_bytes()), Ok(key.clone()));
                if is_bare(&key) {
                    prop_assert_eq!(parse(format!("{before}{key}{after}").as_bytes()), Ok(key));
                }
            }

            #[test]
            fn keys_of_no_or_more_than_255_characters_are_refused(
                key in prop_oneof![Just(String::new()), "[ -~]{256,400}"],
                quote in any::<bool>(),
            ) {
                let value = if quote || !is_bare(&key) { quoted(&key) } else { key.clone() };
                prop_assert_eq!(parse(value.as_bytes()), Err(InvalidKey::Length(key.len())));
            }

            /// Whatever is accepted is a key of 1 to 255 printable characters, and the field
            /// held it in one of its two forms: the bare key or its one quoted spelling.
            #[test]
            fn only_a_key_in_one_of_its_forms_is_accepted(value in field_value()) {
                let mut headers = HeaderMap::new();
                let field = HeaderValue::from_bytes(&value).expect("a field value");
                headers.insert(&IDEMPOTENCY_KEY, field);
                let Ok(Some(key)) = from_headers(&headers, &IDEMPOTENCY_KEY) else {
                    return Ok(());
                };
                prop_assert!((1..=255).contains(&key.len()), "{key:?}");
                prop_assert!(key.bytes().all(|byte| (0x20..=0x7e).contains(&byte)), "{key:?}");
                // A field value holds no whitespace but spaces and tabs.
                let value = value.trim_ascii();
                prop_assert!(
                    (is_bare(&key) && value == key.as_bytes()) || value == quoted(&key).as_bytes(),
                    "{:?} read as {key:?}",
                    String::from_utf8_lossy(value)
                );
            }
        }
    }
}
