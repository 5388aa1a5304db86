use std::borrow::Cow;

use http::header::COOKIE;

use super::{ClientId, ClientRequest, IdentifyClient, IdentifyError};

/// The client is the value of a cookie, such as an anonymous session id.
///
/// A request without the cookie, or with it empty, is refused with 400. Issue the cookie
/// before the guarded form is posted (when the form page is rendered).
///
/// ```
/// let key = idem_axum::client::ClientCookie::new("session");
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
}
