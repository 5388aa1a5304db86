use http::HeaderName;

use super::{ClientId, ClientKeyError, ClientRequest, KeyExtractor};

/// The client is the value of a request header, such as `X-User-Id` set by a gateway that
/// authenticated the user, or an API key.
///
/// A request without the header, or with it empty, is refused with 400.
///
/// ```
/// use idem_axum::client::HeaderKey;
/// let key = HeaderKey::new(http::HeaderName::from_static("x-user-id"));
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// Reads the header `name`.
    pub fn new(name: HeaderName) -> Self {
        Self { name }
    }
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, request: &ClientRequest<'_>) -> Result<ClientId, ClientKeyError> {
        match request.headers().get(&self.name) {
            Some(value) if !value.is_empty() => Ok(ClientId::new(value.as_bytes().to_vec())),
            _ => Err(ClientKeyError::Missing(
                format!(
                    "the `{}` header identifies the client and is required",
                    self.name
                )
                .into(),
            )),
        }
    }
}
