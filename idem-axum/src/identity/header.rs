use http::HeaderName;

use super::{ClientId, ClientRequest, IdentifyClient, IdentifyError};

/// The client is the value of a request header, such as `X-User-Id` set by a gateway that
/// authenticated the user, or an API key.
///
/// A request without the header, or with it empty, is refused with 400.
///
/// ```
/// use idem_axum::identity::ClientHeader;
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

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The first line of the header is the client, unless it is empty; other lines,
        /// whatever they hold, are not read.
        #[test]
        fn the_first_line_is_the_client_whatever_its_bytes(
            lines in crate::field_lines::field_lines(39, 3),
        ) {
            let name = HeaderName::from_static("x-user-id");
            let mut request = http::Request::new(());
            for line in &lines {
                let value = HeaderValue::from_bytes(line).expect("a field value");
                request.headers_mut().append(&name, value);
            }
            let id = ClientHeader::new(name).identify(&ClientRequest::from_request(&request));
            let first = lines.first().filter(|first| !first.is_empty());
            let id = id.as_ref().map(ClientId::as_bytes);
            match first {
                Some(first) => prop_assert_eq!(id, Ok(first.as_slice())),
                None => prop_assert!(matches!(id, Err(IdentifyError::Missing(_)))),
            }
        }
    }
}
