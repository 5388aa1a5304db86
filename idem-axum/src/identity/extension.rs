use std::fmt;
use std::marker::PhantomData;

use super::{ClientId, ClientRequest, IdentifyClient, IdentifyError};

/// The client is a request extension of type `T` — typically the authenticated user that
/// your authentication layer inserts — written with its `Display`.
///
/// A request without the extension is refused with 400: it is not authenticated. Put the
/// authentication layer outside (before) idem's guards.
///
/// ```
/// #[derive(Clone)]
/// struct UserId(u64);
/// impl std::fmt::Display for UserId {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { self.0.fmt(f) }
/// }
///
/// let key = idem_axum::identity::ClientExtension::<UserId>::new();
/// ```
pub struct ClientExtension<T>(PhantomData<fn() -> T>);

impl<T> ClientExtension<T> {
    /// Reads the extension of type `T`.
    pub fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T> Default for ClientExtension<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for ClientExtension<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for ClientExtension<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientExtension<{}>", std::any::type_name::<T>())
    }
}

impl<T> IdentifyClient for ClientExtension<T>
where
    T: fmt::Display + Send + Sync + 'static,
{
    fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, IdentifyError> {
        request
            .extensions()
            .get::<T>()
            .map(|value| ClientId::new(value.to_string()))
            .ok_or_else(|| {
                IdentifyError::Missing(
                    format!(
                        "the request carries no `{}` identifying the client: it must be authenticated",
                        std::any::type_name::<T>()
                    )
                    .into(),
                )
            })
    }
}
