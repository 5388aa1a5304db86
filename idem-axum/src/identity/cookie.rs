use std::borrow::Cow;

use http::header::COOKIE;

use super::{ClientId, ClientRequest, IdentifyClient, IdentifyError};

/// The client is the value of a cookie, such as an anonymous session id.
///
/// A request without the cookie, or with it empty, is refused with 400. Issue the cookie
/// before the guarded form is posted (when the form page is rendered).
///
/// ```
/// let key = idem_axum::identity::ClientCookie::new("session");
/// ```
#[derive(Debug, Clone)]
pub struct ClientCookie {
    name: Cow<'static, str>,
}

impl ClientCookie {
    /// Reads the cookie `name`.
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Self { name: name.into() }
    }
}

impl IdentifyClient for ClientCookie {
    fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError> {
        request
            .headers()
            .get_all(COOKIE)
            .iter()
            .filter_map(|header| header.to_str().ok())
            .flat_map(|header| header.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == self.name)
            .map(|(_, value)| value.trim_matches('"'))
            .filter(|value| !value.is_empty())
            .map(|value| ClientId::new(value.to_owned()))
            .ok_or_else(|| {
                IdentifyError::Missing(
                    format!(
                        "the `{}` cookie identifies the client and is required",
                        self.name
                    )
                    .into(),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_named_cookie_among_others() {
        let mut request = http::Request::new(());
        request
            .headers_mut()
            .append(COOKIE, "theme=dark; session=\"abc\"".parse().unwrap());
        let id = ClientCookie::new("session").identify(&ClientRequest::from_request(&request));
        assert_eq!(id.unwrap().as_bytes(), b"abc");
        let missing = ClientCookie::new("sess").identify(&ClientRequest::from_request(&request));
        assert!(matches!(missing, Err(IdentifyError::Missing(_))));
    }

    mod properties {
        use http::HeaderValue;
        use proptest::prelude::*;

        use super::*;

        /// The client a cookie named `name` tells for a request with `lines` of `Cookie`.
        fn identify(name: String, lines: &[Vec<u8>]) -> Result<ClientId, IdentifyError> {
            let mut request = http::Request::new(());
            for line in lines {
                let value = HeaderValue::from_bytes(line).expect("a field value");
                request.headers_mut().append(COOKIE, value);
            }
            ClientCookie::new(name).identify(&ClientRequest::from_request(&request))
        }

        /// A cookie value (RFC 6265 `cookie-octet`s).
        fn cookie_value() -> impl Strategy<Value = String> {
            "[!#-+\\--:<-\\[\\]-~]{1,40}"
        }

        proptest! {
            #[test]
            fn no_cookie_header_makes_it_panic(
                name in ".{0,10}",
                lines in crate::field_lines::field_lines(79, 4),
            ) {
                if let Ok(id) = identify(name, &lines) {
                    prop_assert!(!id.as_bytes().is_empty());
                }
            }

            /// The named cookie's value, quoted or not, among any others on any lines.
            #[test]
            fn the_named_cookie_is_found_among_any_others(
                name in "[a-z_]{1,20}",
                value in cookie_value(),
                quote in any::<bool>(),
                before in prop::collection::vec(("[A-Z0-9-]{1,20}", cookie_value()), 0..4),
                after in prop::collection::vec(("[A-Z0-9-]{1,20}", cookie_value()), 0..4),
                line_breaks in prop::collection::vec(any::<bool>(), 9),
            ) {
                let ours = if quote { format!("\"{value}\"") } else { value.clone() };
                let pairs: Vec<String> = before
                    .into_iter()
                    .chain([(name.clone(), ours)])
                    .chain(after)
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect();
                let mut lines = vec![Vec::new()];
                for (pair, new_line) in pairs.iter().zip(line_breaks) {
                    let line = lines.last_mut().expect("a line");
                    if !line.is_empty() {
                        line.extend_from_slice(b"; ");
                    }
                    line.extend_from_slice(pair.as_bytes());
                    if new_line {
                        lines.push(Vec::new());
                    }
                }
                lines.retain(|line| !line.is_empty());
                let id = identify(name, &lines).expect("the cookie");
                prop_assert_eq!(id.as_bytes(), value.as_bytes());
            }
        }
    }
}
