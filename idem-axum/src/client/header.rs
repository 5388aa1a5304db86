use http::HeaderName;

use super::{ClientId, ClientRequest, IdentifyClient, IdentifyError};

/// The client is the value of a request header, such as `X-User-Id` set by a gateway that
/// authenticated the user, or an API key.
///
/// A request without the header, or with it empty, is refused with 400.
///
/// ```
/// use idem_axum::client::ClientHeader;
/// let key = ClientHeader::new(http::HeaderName::from_static("x-user-id"));
/// ```
#[derive(Debug, Clone)]
pub struct ClientHeader {
    name: HeaderName,
}

impl ClientHeader {
    /// Reads the header `name`.
    pub fn new(name: HeaderName) -> Self {
        Self { name }
    }
}

impl IdentifyClient for ClientHeader {
    fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError> {
        match request.headers().get(&self.name) {
            Some(value) if !value.is_empty() => Ok(ClientId::new(value.as_bytes().to_vec())),
            _ => Err(IdentifyError::Missing(
                format!(
                    "the `{}` header identifies the client and is required",
                    self.name
                )
                .into(),
            )),
        }
    }
}
